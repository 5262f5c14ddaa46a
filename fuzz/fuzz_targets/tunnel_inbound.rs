//! tunneld's receive handling as a function: arbitrary bytes as one datagram read from the
//! underlay, through `ipsec_tunnel::Tunnel::inbound` with the engine of the example host-b
//! config (ESP tunnel + IPComp) and a fake TUN device. Every datagram is forwarded or counted
//! as a drop; never a panic.
#![no_main]
use ipsec_tunnel::dataplane::{PacketBuffer, TunIo, Tunnel};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// A TUN device that only counts what is written.
struct CountingTun(std::sync::atomic::AtomicU64);

impl TunIo for CountingTun {
    fn recv(&self, _: &mut [u8]) -> std::io::Result<Option<usize>> {
        Ok(None)
    }
    fn send(&self, packet: &[u8]) -> std::io::Result<()> {
        assert!(packet.len() <= ipsec_core::ip::MAX_PACKET + 40);
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

struct State {
    tunnel: Tunnel,
    tun: CountingTun,
    buf: std::sync::Mutex<PacketBuffer>,
}

fn state() -> &'static State {
    static S: OnceLock<State> = OnceLock::new();
    S.get_or_init(|| {
        let text = include_str!("../../examples/config/host-b.toml");
        let loaded = ipsec::config::parse(text, ipsec::config::Format::Toml).expect("example config parses");
        let engine = loaded
            .config
            .build(std::time::Duration::ZERO)
            .expect("example config builds");
        State {
            tunnel: Tunnel::new(engine, vec!["192.0.2.1".parse().unwrap()]),
            tun: CountingTun(Default::default()),
            buf: std::sync::Mutex::new(PacketBuffer::new()),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() > ipsec_core::ip::MAX_PACKET {
        return;
    }
    let s = state();
    let mut buf = s.buf.lock().unwrap();
    let len = buf.load(data);
    let _ = s.tunnel.inbound(&mut buf, len, &s.tun);
});
