//! Heap bytes a responder's `Endpoint` keeps per established IKE SA with one child (issue #36
//! item 6: memory per remote-access client), measured in memory without sockets: N
//! initiators (one `Endpoint`, one connection each, addresses of their own) handshake with
//! one responder; a counting allocator charges to the responder every allocation and free
//! made while the responder's methods run. Prints the bytes live in the responder after the
//! N handshakes, per SA, beside the same for a tenth of N (so fixed costs show).
//!
//! ```text
//! cargo run --release -p ipsec-ike --example ike-sa-memory -- [N]    # default 1000
//! ```
use ipsec_ike::*;
use rand_core::OsRng;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

#[path = "../../engine/examples/common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{charged, live};

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 1);

fn run(n: usize) -> (isize, usize) {
    let psk = "memory test key";
    let ike = "aes128gcm16-prfsha256-x25519";
    let mut server = Connection::new(
        "rw",
        IpAddr::V4(SERVER),
        None,
        Identity::from_str_config("gw.mem.test").unwrap(),
        None,
        Psk::new(psk.as_bytes()),
        ike,
    )
    .unwrap();
    server.encap = true;
    server
        .children
        .push(ChildConfig::new("net", "10.200.0.0/24", "10.201.0.0/16", "aes128gcm16").unwrap());
    let mut clients = Vec::new();
    for i in 0..n {
        let a = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 98, 16, 1)) + i as u32);
        let inner = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 201, 0, 1)) + i as u32);
        let mut c = Connection::new(
            &format!("c{i}"),
            IpAddr::V4(a),
            Some(IpAddr::V4(SERVER)),
            Identity::from_str_config(&format!("c{i}.mem.test")).unwrap(),
            Some(Identity::from_str_config("gw.mem.test").unwrap()),
            Psk::new(psk.as_bytes()),
            ike,
        )
        .unwrap();
        c.encap = true;
        c.children
            .push(ChildConfig::new("net", &format!("{inner}/32"), "10.200.0.0/24", "aes128gcm16").unwrap());
        clients.push(c);
    }
    let mut rng = OsRng;
    let mut r = charged(|| Endpoint::new(Config::new(vec![server])));
    let mut c = Endpoint::new(Config::new(clients));
    let base = live();
    let mut now = Duration::from_secs(1);
    for i in 0..n {
        c.initiate(now, &format!("c{i}"), &mut rng).unwrap();
    }
    let mut up = 0;
    for _ in 0..200 {
        now += Duration::from_millis(1);
        let mut moved = false;
        while let Some(tx) = c.poll_transmit() {
            moved = true;
            charged(|| {
                let _ = r.handle_datagram(now, tx.remote, tx.local, &tx.payload, &mut rng);
            });
        }
        loop {
            let tx = charged(|| r.poll_transmit());
            let Some(tx) = tx else { break };
            moved = true;
            let _ = c.handle_datagram(now, tx.remote, tx.local, &tx.payload, &mut rng);
            charged(|| drop(tx));
        }
        while charged(|| r.poll_event()).map(|e| charged(|| drop(e))).is_some() {}
        while let Some(e) = c.poll_event() {
            if matches!(e, Event::ChildUp(_)) {
                up += 1;
            }
        }
        if !moved && up == n {
            break;
        }
    }
    let _ = SocketAddr::new(IpAddr::V4(SERVER), 500);
    (live() - base, up)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(1000, |v| v.parse().expect("N: a number"));
    for k in [n / 10, n] {
        let (bytes, up) = run(k);
        println!(
            "{{\"ike_sas\":{k},\"up\":{up},\"responder_heap_bytes\":{bytes},\"per_sa\":{:.0}}}",
            bytes as f64 / k.max(1) as f64
        );
    }
}
