//! `tunneld` without privileges: the example configs of examples/tunnel/ carry packets
//! between two in-memory hosts through the daemon's core, and the binary's errors.
//! (scripts/ci/netns-test.sh runs the real thing, as root, in two network namespaces.)

use ipsec::config;
use ipsec_tunnel::{Outcome, PacketBuffer, TunIo, Tunnel, UnderlayTx};
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// Remembers the one packet written to it.
#[derive(Default)]
struct Catch(Mutex<Vec<(Vec<u8>, Option<IpAddr>)>>);

impl Catch {
    fn take(&self) -> (Vec<u8>, Option<IpAddr>) {
        let mut v = self.0.lock().unwrap();
        assert_eq!(v.len(), 1, "one packet out");
        v.pop().unwrap()
    }
}

impl TunIo for Catch {
    fn recv(&self, _: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
    fn send(&self, packet: &[u8]) -> io::Result<()> {
        self.0.lock().unwrap().push((packet.to_vec(), None));
        Ok(())
    }
}

impl UnderlayTx for Catch {
    fn send_to(&self, packet: &[u8], route: &ipsec_engine::Route) -> io::Result<()> {
        let dst = route.to;
        self.0.lock().unwrap().push((packet.to_vec(), Some(dst)));
        Ok(())
    }
}

fn host(file: &str) -> Tunnel {
    let loaded = config::load(Path::new(file), None).unwrap();
    let t = loaded.config.tunnel.clone().expect("a [tunnel] table");
    assert_eq!(t.tun.as_deref(), Some("ipsec0"));
    Tunnel::new(loaded.config.build(Duration::ZERO).unwrap(), t.peers)
}

fn ping(v6: bool, from_a: bool, len: usize) -> Vec<u8> {
    let payload = vec![b'x'; len];
    let mut out = Vec::new();
    let (a, b) = (1u8, 2u8);
    let (s, d) = if from_a { (a, b) } else { (b, a) };
    if v6 {
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&[0xfd, 0, 1, 0]);
        let mut dst = src;
        src[15] = s;
        dst[15] = d;
        etherparse::PacketBuilder::ipv6(src, dst, 64)
            .icmpv6_echo_request(1, 1)
            .write(&mut out, &payload)
            .unwrap();
    } else {
        etherparse::PacketBuilder::ipv4([10, 100, 0, s], [10, 100, 0, d], 64)
            .icmpv4_echo_request(1, 1)
            .write(&mut out, &payload)
            .unwrap();
    }
    out
}

/// `inner` from `from`'s TUN to `to`'s TUN; returns the wire packet.
fn carry(from: &Tunnel, to: &Tunnel, inner: &[u8], peer: impl Into<IpAddr>) -> Vec<u8> {
    let (wire, tun) = (Catch::default(), Catch::default());
    let mut pkt = PacketBuffer::new();
    let n = pkt.load(inner);
    assert_eq!(from.outbound(&mut pkt, n, &wire), Outcome::Forwarded);
    let (sealed, dst) = wire.take();
    assert_eq!(dst, Some(peer.into()));
    let n = pkt.load(&sealed);
    assert_eq!(to.inbound(&mut pkt, n, &tun), Outcome::Forwarded);
    assert_eq!(tun.take().0, inner);
    sealed
}

#[test]
fn example_configs_carry_packets_between_the_two_hosts() {
    let (ua, ub): (Ipv4Addr, Ipv4Addr) = ("10.99.0.1".parse().unwrap(), "10.99.0.2".parse().unwrap());
    for (variant, wire_proto) in [("esp", 50u8), ("comp-esp", 50), ("esp-ah", 51), ("udp", 50)] {
        let a = host(&format!("examples/tunnel/{variant}-a.toml"));
        let b = host(&format!("examples/tunnel/{variant}-b.toml"));
        for v6 in [false, true] {
            for len in [16, 1000] {
                let w = carry(&a, &b, &ping(v6, true, len), ub);
                assert_eq!((w[9], &w[12..20]), (wire_proto, &[10, 99, 0, 1, 10, 99, 0, 2][..]));
                let w = carry(&b, &a, &ping(v6, false, len), ua);
                assert_eq!((w[9], &w[12..20]), (wire_proto, &[10, 99, 0, 2, 10, 99, 0, 1][..]));
            }
        }
        let (ra, _) = a.tick();
        let (rb, _) = b.tick();
        for r in [&ra, &rb] {
            assert_eq!(
                (r.daemon.underlay_tx_packets, r.daemon.tun_tx_packets),
                (4, 4),
                "{variant}"
            );
            assert_eq!(r.daemon.engine_in_drops + r.daemon.engine_out_drops, 0, "{variant}");
        }
        if variant == "comp-esp" {
            let comp = ra.engine.sas.iter().find(|s| s.name == "comp-ab").unwrap();
            assert_eq!(
                (comp.outbound.packets, comp.outbound.not_compressed),
                (4, 2),
                "the 1000-byte pings shrink"
            );
        }
    }
}

fn tunneld(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tunneld")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tunneld_reports_bad_configs_and_setup_errors() {
    let dir = std::env::temp_dir().join(format!("tunneld-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let base = std::fs::read_to_string("examples/tunnel/esp-a.toml").unwrap();

    let v6 = write(
        "v6.toml",
        &base.replace("peer = \"10.99.0.2\"", "peer = \"2001:db8::2\""),
    );
    let (code, err) = tunneld(&["--config", &v6]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{v6}:17:")) && err.contains("local needs an IPv6 address"),
        "{err}"
    );
    // An IPv6 underlay, but the SAs tunnel to the IPv4 peer.
    let v6 = write(
        "v6b.toml",
        &base
            .replace("peer = \"10.99.0.2\"", "peer = \"2001:db8::2\"")
            .replace("local = \"10.99.0.1\"", "local = [\"10.99.0.1\", \"2001:db8::1\"]"),
    );
    let (code, err) = tunneld(&["--config", &v6]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("tunnels to 10.99.0.2, not to the peer 2001:db8::2"),
        "{err}"
    );
    // The command line's peers and local addresses replace the table's, checked alike.
    let esp_a = "examples/tunnel/esp-a.toml";
    let (code, err) = tunneld(&["--config", esp_a, "--peer", "10.99.0.9"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not to the peer 10.99.0.9"), "{err}");
    let (code, err) = tunneld(&["--config", esp_a, "--local", "fd00::1", "--local", "fd00::2"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at most one IPv4 and one IPv6"), "{err}");
    let (code, err) = tunneld(&[
        "--config",
        esp_a,
        "--peer",
        "10.99.0.2",
        "--peer",
        "10.99.0.3",
        "--tun",
        "no/slash",
    ]);
    assert_eq!(code, 1, "two peers pass the checks: {err}");

    let unknown = write("unknown.toml", &format!("{base}\n[tunnel.extra]\n"));
    let (code, err) = tunneld(&["--config", &unknown]);
    assert_eq!(code, 2, "{err}");

    let (code, err) = tunneld(&["--config", "examples/tunnel/esp-a.toml", "--log", "loud"]);
    assert_eq!((code, err.contains("bad log level")), (2, true), "{err}");

    // A name the kernel would refuse or truncate: nothing is created.
    let (code, err) = tunneld(&["--config", "examples/tunnel/esp-a.toml", "--tun", "no/slash"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("creating TUN device no/slash"), "{err}");

    let (code, err) = tunneld(&["--config", &dir.join("missing.toml").display().to_string()]);
    assert_eq!(code, 2, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The IPv6-underlay pairs (raw ESP and ESP in UDP) carry both inner families with IPv6 outer
/// headers; host A of the peers example reaches B over IPv4 and C over IPv6, each only with
/// its own SAs.
#[test]
fn ipv6_and_several_peer_examples_carry_packets() {
    let (a6, b6): (IpAddr, IpAddr) = ("fd00:99::1".parse().unwrap(), "fd00:99::2".parse().unwrap());
    let octets = |a: IpAddr| match a {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(_) => unreachable!(),
    };
    for variant in ["v6", "udp6"] {
        let a = host(&format!("examples/tunnel/{variant}-a.toml"));
        let b = host(&format!("examples/tunnel/{variant}-b.toml"));
        for v6 in [false, true] {
            let w = carry(&a, &b, &ping(v6, true, 1000), b6);
            assert_eq!((w[0] >> 4, w[6]), (6, 50), "{variant}: IPv6 and ESP");
            assert_eq!(&w[8..40], &[octets(a6), octets(b6)].concat()[..]);
            carry(&b, &a, &ping(v6, false, 16), a6);
        }
    }
    let a = host("examples/tunnel/peers-a.toml");
    let b = host("examples/tunnel/peers-b.toml");
    let c = host("examples/tunnel/peers-c.toml");
    let udp = |src: [u8; 4], dst: [u8; 4]| {
        let mut out = Vec::new();
        etherparse::PacketBuilder::ipv4(src, dst, 64)
            .udp(1000, 2000)
            .write(&mut out, &[7; 100])
            .unwrap();
        out
    };
    let to_b = carry(
        &a,
        &b,
        &udp([10, 100, 1, 1], [10, 100, 2, 1]),
        Ipv4Addr::new(10, 99, 0, 2),
    );
    assert_eq!(to_b[0] >> 4, 4);
    let to_c = carry(
        &a,
        &c,
        &udp([10, 100, 1, 1], [10, 100, 3, 1]),
        "fd00:98::3".parse::<IpAddr>().unwrap(),
    );
    assert_eq!(to_c[0] >> 4, 6);
    carry(
        &b,
        &a,
        &udp([10, 100, 2, 1], [10, 100, 1, 1]),
        Ipv4Addr::new(10, 99, 0, 1),
    );
    carry(
        &c,
        &a,
        &udp([10, 100, 3, 1], [10, 100, 1, 1]),
        "fd00:98::1".parse::<IpAddr>().unwrap(),
    );
    // B cannot open what A sealed for C, and the other way round.
    let tun = Catch::default();
    for (to, wire) in [(&b, &to_c), (&c, &to_b)] {
        let mut pkt = PacketBuffer::new();
        let n = pkt.load(wire);
        assert!(matches!(to.inbound(&mut pkt, n, &tun), Outcome::Engine(_)));
    }
    assert_eq!(a.peers().len(), 2);
}
