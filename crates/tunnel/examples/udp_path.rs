//! The ESP-in-UDP path of tunneld in one process, for counting what it costs per packet
//! (`perf stat -e instructions:u`, docs/performance.md "The route travels with the packet"):
//! host A seals inner packets read from a fake TUN device (AES-128-GCM tunnel mode) and
//! sends them with its ESP-in-UDP socket on the loopback (127.0.0.1) to host B (127.0.0.2),
//! which reads them from its socket, opens them and writes them to its fake TUN device. One
//! thread, batches of 32, UDP GSO and GRO as the daemon uses them; only the public loop
//! API (`Tunnel::outbound_batch`, `Tunnel::inbound_batch`) that every tunneld version has,
//! so one source builds against the code before and after a change.
//!
//! ```text
//! udp_path PACKETS [LEN]    # LEN: inner packet length, default 1400
//! ```
//!
//! Prints one line: packets sent, received, and the instructions are for perf to count.
//! Run it with N and 2N packets: (instructions(2N) - instructions(N)) / N is the cost of one
//! packet, without the setup.

use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel as Ends};
use ipsec_core::AeadAlg;
use ipsec_engine::{Action, Direction, Engine, Policy, SaConfig, Selector};
use ipsec_tunnel::dev::udp::EncapSocket;
use ipsec_tunnel::{Batch, TunIo, TunPort, Tunnel, BATCH};
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A TUN device that takes what is written and counts it.
#[derive(Default)]
struct Sink(AtomicU64);

impl TunIo for Sink {
    fn recv(&self, _: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
    fn send(&self, _: &[u8]) -> io::Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn engine(dir: Direction, src: IpAddr, dst: IpAddr) -> Engine {
    let mut p = SaParams::new(Proto::Esp, 0x0dd0_0001);
    p.mode = Mode::Tunnel;
    p.tunnel = Some(Ends { src, dst });
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x42; 20], 16));
    p.replay_window = 1024;
    let mut e = Engine::new();
    let id = e
        .add_sa(SaConfig::new("esp", p, None), Duration::ZERO)
        .expect("the SA installs");
    e.add_policy(Policy {
        dir,
        selector: Selector::default(),
        action: Action::Protect(vec![id]),
    })
    .expect("the policy installs");
    e
}

/// An inner IPv4 UDP packet of `len` bytes, 10.100.0.1 -> 10.100.0.2, numbered `n`.
fn inner(len: usize, n: u32) -> Vec<u8> {
    let mut p = vec![0u8; len.max(32)];
    p[..20].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 100, 0, 1, 10, 100, 0, 2]);
    let l = p.len() as u16;
    p[2..4].copy_from_slice(&l.to_be_bytes());
    let sum = ipsec_core::ip::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20..28].copy_from_slice(&[0x13, 0x88, 0x13, 0x89, 0, 0, 0, 0]);
    p[24..26].copy_from_slice(&(l - 20).to_be_bytes());
    p[28..32].copy_from_slice(&n.to_be_bytes());
    p
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let len: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1400);
    let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
    let base = 20_000 + (std::process::id() % 20_000) as u16;
    let (pa, pb) = (base, base + 1);
    let wait = Duration::from_millis(200);
    let tx = EncapSocket::open_group(a, pa, &[b], pb, 1, wait).expect("A's socket");
    let rx = EncapSocket::open_group(b, pb, &[a], pa, 1, wait).expect("B's socket");
    let host_a = Tunnel::new(engine(Direction::Out, a, b), vec![b]);
    let host_b = Tunnel::new(engine(Direction::In, a, b), vec![a]);
    let tun = Sink::default();
    let mut port = TunPort::new(&tun);
    let packets: Vec<Vec<u8>> = (0..BATCH as u32).map(|n| inner(len, n)).collect();
    let (mut out, mut inb) = (Batch::new(), Batch::new());
    let (mut sent, mut got) = (0u64, 0u64);
    let t0 = Instant::now();
    while sent < count {
        let n = (count - sent).min(BATCH as u64) as usize;
        for (i, p) in packets[..n].iter().enumerate() {
            out.recv_area(i)[..p.len()].copy_from_slice(p);
            out.set(i, p.len(), Default::default(), None);
        }
        host_a.outbound_batch(&mut out, n, &tx[0]);
        sent += n as u64;
        // Take everything that arrived (the loopback delivers at once; a full socket
        // buffer drops, which the count shows).
        loop {
            let k = ipsec_tunnel::UnderlayRx::recv_batch(&rx[0], &mut inb).expect("B reads");
            if k == 0 {
                break;
            }
            host_b.inbound_batch(&mut inb, k, &rx[0], &mut port);
            if tun.0.load(Ordering::Relaxed) >= sent {
                break;
            }
        }
    }
    got += tun.0.load(Ordering::Relaxed);
    println!(
        "udp_path: {sent} packets of {len} bytes sent, {got} written to B's TUN device, {:.2} s",
        t0.elapsed().as_secs_f64()
    );
}
