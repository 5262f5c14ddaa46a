//! A small IKEv2 handshake load generator on `ipsec-ike` (issue #39 item 9): N handshakes
//! one after another against a responder (tunneld), each IKE_SA_INIT + IKE_AUTH with its
//! child, then a Delete of the IKE SA; prints how long each IKE_SA_INIT took to be answered,
//! how long until the child was up, and handshakes per second, as one JSON line.
//!
//! ```text
//! ike-load --local 10.99.1.1 --remote 10.99.2.1 --psk SECRET [--local-id ID] [--remote-id ID] \
//!   [--local-ts 10.100.1.0/24] [--remote-ts 10.100.2.0/24] [--ike PROPOSAL] [--esp PROPOSAL] \
//!   [--count 50] [--timeout SECS]
//! ```
//! Binds UDP 500 and 4500 on `--local` (run it in a namespace of its own). Exit status 0 when
//! every handshake came up.
use ipsec_ike::*;
use rand_core::OsRng;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

mod common;

fn usage(msg: &str) -> ! {
    common::usage("ike-load", msg)
}

fn arg(args: &[String], k: &str) -> Option<String> {
    common::arg("ike-load", args, k)
}

use common::spread;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let req = |k: &str| arg(&args, k).unwrap_or_else(|| usage(&format!("--{k} is required")));
    let local: IpAddr = req("local").parse().unwrap_or_else(|_| usage("--local: an IP address"));
    let remote: IpAddr = req("remote")
        .parse()
        .unwrap_or_else(|_| usage("--remote: an IP address"));
    let id = |s: String| Identity::from_str_config(&s).unwrap_or_else(|e| usage(&e.to_string()));
    let count: usize = arg(&args, "count").map_or(50, |v| v.parse().unwrap_or_else(|_| usage("--count")));
    let timeout = Duration::from_secs(arg(&args, "timeout").map_or(120, |v| v.parse().unwrap_or(120)));
    let mut conn = Connection::new(
        "load",
        local,
        Some(remote),
        id(arg(&args, "local-id").unwrap_or(local.to_string())),
        Some(id(arg(&args, "remote-id").unwrap_or(remote.to_string()))),
        Psk::new(req("psk").as_bytes()),
        &arg(&args, "ike").unwrap_or("aes128gcm16-prfsha256-x25519".into()),
    )
    .unwrap_or_else(|e| usage(&format!("--ike: {e}")));
    conn.encap = true;
    conn.children.push(
        ChildConfig::new(
            "net",
            &arg(&args, "local-ts").unwrap_or_default(),
            &arg(&args, "remote-ts").unwrap_or_default(),
            &arg(&args, "esp").unwrap_or("aes128gcm16".into()),
        )
        .unwrap_or_else(|e| usage(&format!("child: {e}"))),
    );
    let cfg = Config::new(vec![conn]);
    let bind = |port: u16| {
        let s = UdpSocket::bind(SocketAddr::new(local, port))
            .unwrap_or_else(|e| usage(&format!("bind {local}:{port}: {e}")));
        s.set_nonblocking(true).unwrap();
        s
    };
    let sockets = [bind(cfg.ike_port), bind(cfg.natt_port)];
    let mut ep = Endpoint::new(cfg.clone());
    let start = Instant::now();
    let now = || start.elapsed();
    let mut rng = OsRng;
    let mut buf = vec![0u8; 65536];
    let (mut init_ms, mut up_ms) = (Vec::new(), Vec::new());
    let mut failed = 0usize;
    let t0 = now();
    for _ in 0..count {
        let begin = now();
        if ep.initiate(begin, "load", &mut rng).is_err() {
            failed += 1;
            continue;
        }
        // The first datagram back on port 500 is the IKE_SA_INIT answer.
        let mut init_at = None;
        let mut up = false;
        let mut down = false;
        while !down && now() - begin < timeout {
            let mut got = false;
            for (k, s) in sockets.iter().enumerate() {
                while let Ok((n, from)) = s.recv_from(&mut buf) {
                    got = true;
                    if k == 0 && init_at.is_none() {
                        init_at = Some(now());
                    }
                    let _ = ep.handle_datagram(now(), s.local_addr().unwrap(), from, &buf[..n], &mut rng);
                }
            }
            if ep.poll_timeout().is_some_and(|d| d <= now()) {
                ep.handle_timeout(now(), &mut rng);
            }
            while let Some(e) = ep.poll_event() {
                match e {
                    Event::ChildUp(_) if !up => {
                        up = true;
                        up_ms.push((now() - begin).as_secs_f64() * 1e3);
                        let _ = ep.terminate(now(), "load", &mut rng);
                    }
                    Event::IkeDown { .. } => down = true,
                    _ => {}
                }
            }
            while let Some(tx) = ep.poll_transmit() {
                let s = &sockets[usize::from(tx.local.port() == cfg.natt_port)];
                let _ = s.send_to(&tx.payload, tx.remote);
            }
            if !got {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        if let Some(t) = init_at {
            init_ms.push((t - begin).as_secs_f64() * 1e3);
        }
        if !up {
            failed += 1;
        }
    }
    let total = (now() - t0).as_secs_f64();
    let ok = count - failed;
    println!(
        "{{\"handshakes\":{count},\"up\":{ok},\"seconds\":{total:.3},\"per_second\":{:.1},\"ike_sa_init_ms\":{},\"child_up_ms\":{}}}",
        ok as f64 / total,
        spread(&mut init_ms),
        spread(&mut up_ms)
    );
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
