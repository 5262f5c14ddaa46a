//! Many simultaneous IKEv2 clients on `ipsec-ike` (issue #36 item 6), like strongSwan's
//! load-tester plugin (which Debian does not ship): `--count` clients, each from an address of
//! its own (`--first`, then the next addresses: put them on the interface first), started at
//! `--rate` per second against one responder, each IKE_SA_INIT + IKE_AUTH with one child whose
//! remote selector is `--remote-ts`. All are held up for `--hold` seconds (answering DPD and
//! rekeys), then deleted. Prints one JSON line: how many came up, setups per second over the
//! ramp, the spread of the per-client setup time, how many got a virtual address, and how many
//! were still up at the end of the hold. Exit status 0 when every client came up and stayed up
//! (and, with `--vips`, got an address).
//!
//! ```text
//! ike-clients --first 10.98.16.1 --count 1000 --remote 10.98.0.1 \
//!   [--auth psk|eap] [--psk SECRET] [--eap-id 'user{i}'] [--password SECRET] [--cacert FILE] \
//!   [--vips] [--remote-id ID] [--id-suffix .load.test] [--inner-first 10.201.0.1] \
//!   [--remote-ts 10.200.0.0/24] [--ike PROPOSAL] [--esp PROPOSAL] [--rate 200] [--hold 10] [--wait epoll|spin] \
//!   [--timeout 60]
//! ```
//! `--auth psk` (the default): a pre-shared key (`--psk`) both ways. `--auth eap`: each client
//! is an EAP-MSCHAPv2 client (RFC 7296 2.16) with the EAP identity `--eap-id` (`{i}` is
//! replaced by the client's number, 0 and up: a user per client; without it one shared user)
//! and `--password`, and checks the server's certificate signature against the CA of
//! `--cacert` (PEM or DER; `--remote-id` is the identity the certificate must carry).
//! `--vips`: each client asks for a virtual IPv4 address (a CFG_REQUEST, swanctl's
//! `vips = 0.0.0.0`) and its child's local selector is that address; without it the local
//! selector is the client's own inner address (`--inner-first` and on, a /32 each).
//! Binds UDP 500 and 4500 on each client address (2 sockets per client: raise `ulimit -n`),
//! one `Endpoint` with one connection per client. It sleeps in `epoll_wait` on all of them until
//! one is readable, the next client is due or the endpoint's `poll_timeout` comes, and reads
//! only the sockets that are ready, so the clients held idle cost it next to nothing and it
//! takes no CPU from the data plane being measured beside it. `--wait spin` is the earlier
//! loop, kept for comparison: every socket read without blocking in turn, a 200 µs sleep when
//! none had anything (about 2,000 system calls per pass at 1,000 clients, most of a core while
//! they are held). Its CPU time is printed either way.
use ipsec_ike::*;
use rand_core::OsRng;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use rustix::buffer::spare_capacity;
use rustix::event::{epoll, Timespec};

mod common;

fn usage(msg: &str) -> ! {
    common::usage("ike-clients", msg)
}

fn arg(args: &[String], k: &str) -> Option<String> {
    common::arg("ike-clients", args, k)
}

use common::spread;

fn v4(s: &str, what: &str) -> Ipv4Addr {
    s.parse()
        .unwrap_or_else(|_| usage(&format!("--{what}: an IPv4 address")))
}

/// The `i`-th address after `first`.
fn nth(first: Ipv4Addr, i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(first).wrapping_add(i as u32))
}

/// CPU seconds this process used (user + system), from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // the fields after the command name in parentheses: utime and stime are the 12th and 13th
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// How the generator waits for its sockets: `epoll_wait` on all of them (the default), or the
/// earlier spin (`--wait spin`): every socket read in turn, 200 µs asleep after an empty pass.
struct Waiter {
    epoll: Option<std::os::fd::OwnedFd>,
    events: Vec<epoll::Event>,
    /// the sockets to read after the last wait
    ready: Vec<usize>,
    all: usize,
}

impl Waiter {
    fn new(sockets: &[UdpSocket], spin: bool) -> Self {
        let epoll = (!spin).then(|| {
            let fd = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create");
            for (k, s) in sockets.iter().enumerate() {
                epoll::add(&fd, s, epoll::EventData::new_u64(k as u64), epoll::EventFlags::IN).expect("epoll_ctl");
            }
            fd
        });
        Waiter {
            epoll,
            events: Vec::with_capacity(1024),
            ready: (0..sockets.len()).collect(),
            all: sockets.len(),
        }
    }

    /// Sleeps until a socket is readable or `timeout` has passed (epoll), or 200 µs when the
    /// last pass read nothing (spin); then `ready` names the sockets to read.
    fn wait(&mut self, timeout: Duration, got: bool) {
        let Some(fd) = &self.epoll else {
            if !got {
                std::thread::sleep(Duration::from_micros(200));
            }
            return;
        };
        let timeout = timeout.min(Duration::from_millis(100));
        let ts = Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        self.events.clear();
        self.ready.clear();
        // EINTR and the like: nothing ready this time, the loop comes back
        if epoll::wait(fd, spare_capacity(&mut self.events), Some(&ts)).is_ok() {
            self.ready.extend(
                self.events
                    .iter()
                    .map(|e| e.data.u64() as usize)
                    .filter(|&k| k < self.all),
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let req = |k: &str| arg(&args, k).unwrap_or_else(|| usage(&format!("--{k} is required")));
    let first = v4(&req("first"), "first");
    let remote: IpAddr = req("remote")
        .parse()
        .unwrap_or_else(|_| usage("--remote: an IP address"));
    let count: usize = req("count").parse().unwrap_or_else(|_| usage("--count: a number"));
    if count == 0 || count > 60_000 {
        usage("--count: 1 to 60000");
    }
    let rate: f64 = arg(&args, "rate").map_or(200.0, |v| v.parse().unwrap_or_else(|_| usage("--rate")));
    let hold = Duration::from_secs_f64(arg(&args, "hold").map_or(10.0, |v| v.parse().unwrap_or(10.0)));
    let timeout = Duration::from_secs(arg(&args, "timeout").map_or(60, |v| v.parse().unwrap_or(60)));
    let spin = match arg(&args, "wait").as_deref() {
        None | Some("epoll") => false,
        Some("spin") => true,
        Some(_) => usage("--wait: epoll or spin"),
    };
    let inner_first = v4(&arg(&args, "inner-first").unwrap_or("10.201.0.1".into()), "inner-first");
    let suffix = arg(&args, "id-suffix").unwrap_or(".load.test".into());
    let id = |s: &str| Identity::from_str_config(s).unwrap_or_else(|e| usage(&e.to_string()));
    let remote_id = arg(&args, "remote-id").map(|s| id(&s));
    let eap = match arg(&args, "auth").as_deref() {
        None | Some("psk") => false,
        Some("eap") => true,
        Some(_) => usage("--auth: psk or eap"),
    };
    // PSK: the key both ways. EAP: the key is a placeholder replaced below (the client signs
    // nothing and checks the server's signature), the server's CA for the check.
    let psk = if eap { String::new() } else { req("psk") };
    let (eap_id, password, trust) = if eap {
        let pem = std::fs::read(req("cacert")).unwrap_or_else(|e| usage(&format!("--cacert: {e}")));
        let mut t = TrustStore::new();
        for c in Certificate::parse_pem_or_der(&pem).unwrap_or_else(|e| usage(&format!("--cacert: {e}"))) {
            t.add_ca(c).unwrap_or_else(|e| usage(&format!("--cacert: {e}")));
        }
        if remote_id.is_none() {
            usage("--auth eap needs --remote-id (the identity in the server's certificate)");
        }
        (
            arg(&args, "eap-id").unwrap_or("user{i}".into()),
            req("password"),
            Some(std::sync::Arc::new(t)),
        )
    } else {
        (String::new(), String::new(), None)
    };
    let vips = common::flag(&args, "vips");
    let ike = arg(&args, "ike").unwrap_or("aes128gcm16-prfsha256-x25519".into());
    let esp = arg(&args, "esp").unwrap_or("aes128gcm16".into());
    let remote_ts = arg(&args, "remote-ts").unwrap_or_default();

    let mut conns = Vec::with_capacity(count);
    for i in 0..count {
        let local = nth(first, i);
        let mut conn = Connection::new(
            &format!("c{i}"),
            IpAddr::V4(local),
            Some(remote),
            id(&format!("c{i}{suffix}")),
            remote_id.clone(),
            Psk::new(psk.as_bytes()),
            &ike,
        )
        .unwrap_or_else(|e| usage(&format!("--ike: {e}")));
        conn.encap = true;
        if let Some(trust) = &trust {
            conn.local_auth = LocalAuth::Eap {
                identity: eap_id.replace("{i}", &i.to_string()).into_bytes(),
                password: Psk::new(password.as_bytes()),
            };
            conn.remote_auth = RemoteAuth::Pubkey { trust: trust.clone() };
        }
        // with a virtual address the local selector is dynamic (empty): the address leased
        let local_ts = if vips {
            conn.vips = vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED)];
            String::new()
        } else {
            format!("{}/32", nth(inner_first, i))
        };
        conn.children.push(
            ChildConfig::new("net", &local_ts, &remote_ts, &esp).unwrap_or_else(|e| usage(&format!("child: {e}"))),
        );
        conns.push(conn);
    }
    let cfg = Config::new(conns);
    // two sockets per client address; datagrams go out of the one their source names
    let mut sockets: Vec<UdpSocket> = Vec::with_capacity(2 * count);
    let mut by_addr: HashMap<SocketAddr, usize> = HashMap::with_capacity(2 * count);
    for i in 0..count {
        for port in [cfg.ike_port, cfg.natt_port] {
            let a = SocketAddr::new(IpAddr::V4(nth(first, i)), port);
            let s = UdpSocket::bind(a)
                .unwrap_or_else(|e| usage(&format!("bind {a}: {e} (addresses on the interface? ulimit -n?)")));
            s.set_nonblocking(true).expect("non-blocking socket");
            by_addr.insert(a, sockets.len());
            sockets.push(s);
        }
    }
    let mut ep = Endpoint::new(cfg);
    let start = Instant::now();
    let now = || start.elapsed();
    // the certificates' validity is checked against the wall clock, given to the sans-IO core
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ep.set_unix_time(now(), unix);
    let mut rng = OsRng;
    let mut buf = vec![0u8; 65536];
    let mut began: Vec<Option<Duration>> = vec![None; count];
    let mut up_at: Vec<Option<Duration>> = vec![None; count];
    let mut up_now = vec![false; count];
    let mut vip: Vec<Option<IpAddr>> = vec![None; count];
    let mut downs = 0usize;
    let index = |name: &str| name.strip_prefix('c').and_then(|n| n.parse::<usize>().ok());
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let mut started = 0usize;
    let cpu0 = cpu_seconds();
    let mut hold_from: Option<Duration> = None;
    let mut waiter = Waiter::new(&sockets, spin);
    loop {
        let t = now();
        // start the next clients on schedule
        while started < count && t >= interval * started as u32 {
            let name = format!("c{started}");
            began[started] = Some(t);
            if let Err(e) = ep.initiate(t, &name, &mut rng) {
                eprintln!("ike-clients: {name}: {e}");
            }
            started += 1;
        }
        let mut got = false;
        for &k in &waiter.ready {
            let s = &sockets[k];
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                got = true;
                let local = s.local_addr().expect("bound socket");
                let _ = ep.handle_datagram(now(), local, from, &buf[..n], &mut rng);
            }
        }
        if ep.poll_timeout().is_some_and(|d| d <= now()) {
            ep.handle_timeout(now(), &mut rng);
        }
        while let Some(e) = ep.poll_event() {
            match e {
                Event::ChildUp(c) => {
                    if let Some(i) = index(&c.conn) {
                        if up_at[i].is_none() {
                            up_at[i] = Some(now());
                        }
                        up_now[i] = true;
                    }
                }
                Event::VirtualIp { conn, addresses, .. } => {
                    if let Some(i) = index(&conn) {
                        vip[i] = addresses.first().copied();
                    }
                }
                Event::IkeDown { conn, .. } => {
                    if let Some(i) = index(&conn) {
                        if up_now[i] {
                            downs += 1;
                        }
                        up_now[i] = false;
                    }
                }
                _ => {}
            }
        }
        while let Some(tx) = ep.poll_transmit() {
            if let Some(&k) = by_addr.get(&tx.local) {
                let _ = sockets[k].send_to(&tx.payload, tx.remote);
            }
        }
        let t = now();
        let all_up = started == count && up_at.iter().all(Option::is_some);
        if hold_from.is_none() && (all_up || (started == count && t > interval * count as u32 + timeout)) {
            hold_from = Some(t);
        }
        if hold_from.is_some_and(|h| t >= h + hold) {
            break;
        }
        // asleep until the next thing due: a datagram, the next client's start, the endpoint's
        // timer, the end of the ramp's timeout or of the hold
        let mut due = ep.poll_timeout().unwrap_or(t + Duration::from_secs(1));
        if started < count {
            due = due.min(interval * started as u32);
        } else if hold_from.is_none() {
            due = due.min(interval * count as u32 + timeout);
        }
        if let Some(h) = hold_from {
            due = due.min(h + hold);
        }
        waiter.wait(due.saturating_sub(now()), got);
    }
    let held = up_now.iter().filter(|u| **u).count();
    let got_vip = vip.iter().flatten().count();
    let distinct_vips = vip.iter().flatten().collect::<std::collections::HashSet<_>>().len();
    // delete every IKE SA, give the deletes a moment to go out and be answered
    for i in 0..count {
        let _ = ep.terminate(now(), &format!("c{i}"), &mut rng);
    }
    let bye = now();
    let mut got = true;
    while now() - bye < Duration::from_secs(2) && ep.ike_sa_count() > 0 {
        waiter.wait(Duration::from_millis(1), got);
        got = false;
        for &k in &waiter.ready {
            let s = &sockets[k];
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                got = true;
                let local = s.local_addr().expect("bound socket");
                let _ = ep.handle_datagram(now(), local, from, &buf[..n], &mut rng);
            }
        }
        if ep.poll_timeout().is_some_and(|d| d <= now()) {
            ep.handle_timeout(now(), &mut rng);
        }
        while ep.poll_event().is_some() {}
        while let Some(tx) = ep.poll_transmit() {
            if let Some(&k) = by_addr.get(&tx.local) {
                let _ = sockets[k].send_to(&tx.payload, tx.remote);
            }
        }
    }
    let mut setup_ms: Vec<f64> = (0..count)
        .filter_map(|i| Some((up_at[i]? - began[i]?).as_secs_f64() * 1e3))
        .collect();
    let ok = setup_ms.len();
    let ramp = up_at.iter().flatten().max().copied().unwrap_or_default();
    println!(
        "{{\"clients\":{count},\"up\":{ok},\"held\":{held},\"auth\":\"{}\",\"vips\":{got_vip},\"distinct_vips\":{distinct_vips},\"lost_during_hold\":{downs},\"ramp_seconds\":{:.3},\"setups_per_second\":{:.1},\"setup_ms\":{},\"generator_cpu_seconds\":{:.2}}}",
        if eap { "eap-mschapv2" } else { "psk" },
        ramp.as_secs_f64(),
        ok as f64 / ramp.as_secs_f64().max(1e-9),
        spread(&mut setup_ms),
        cpu_seconds() - cpu0
    );
    let vips_ok = !vips || (got_vip == count && distinct_vips == count);
    std::process::exit(if ok == count && held == count && vips_ok { 0 } else { 1 });
}
