//! The IP header a socket took off, put back: a kernel UDP socket hands over the ESP payload
//! of an ESP-in-UDP datagram (RFC 3948) and an IPv6 raw socket the payload after the IPv6
//! header (RFC 3542 3), but the engine opens whole IP packets (transport mode rewrites the
//! outer header). [`rebuild_header`] writes the header in front of the payload, with the
//! fields AH's ICV covers as they were sent, from the addresses the socket knows.

use ipsec_core::ip::checksum;
use std::fmt;
use std::net::IpAddr;

/// The IPv4 header put in front of a received ESP-in-UDP payload.
pub const UDP_IPV4_HEADER: usize = 20;
/// The IPv6 header put in front of a payload received on an IPv6 socket (RFC 8200 3).
pub const IPV6_HEADER: usize = 40;
/// The hop limit (TTL) written into a rebuilt header: the real one is gone, and it is a
/// mutable field that neither ESP nor AH protects (RFC 4302 3.3.3.1).
const HOPS: u8 = 64;

/// The length of the header [`rebuild_header`] writes for addresses of `a`'s family.
pub fn header_len(a: IpAddr) -> usize {
    match a {
        IpAddr::V4(_) => UDP_IPV4_HEADER,
        IpAddr::V6(_) => IPV6_HEADER,
    }
}

/// Why an IP header could not be put in front of a received payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebuildError {
    /// The source and destination are of different families.
    MixedFamilies,
    /// The area holds fewer than the header and the payload.
    NoRoom {
        /// The payload's length.
        len: usize,
        /// The area's length.
        room: usize,
    },
    /// The payload is longer than the header's length field can say (IPv4: 65535 bytes in
    /// all; IPv6: a 65535-byte payload, no jumbograms).
    TooLong {
        /// The payload's length.
        len: usize,
        /// The longest payload the header can carry.
        max: usize,
    },
}

impl fmt::Display for RebuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RebuildError::MixedFamilies => f.write_str("source and destination of different IP versions"),
            RebuildError::NoRoom { len, room } => {
                write!(f, "no room for the header and a {len}-byte payload in {room} bytes")
            }
            RebuildError::TooLong { len, max } => {
                write!(f, "a {len}-byte payload is over the {max} bytes an IP header can carry")
            }
        }
    }
}

impl std::error::Error for RebuildError {}

/// `area[h..h + len]` is a payload of IP protocol `proto` received from `src` for `dst`,
/// `h` = [`header_len`]`(dst)`. Writes the IP header it came with into `area[..h]` and
/// returns the whole packet's length: IPv4 with its checksum (RFC 791; DF set, TTL 64);
/// IPv6 (RFC 8200 3) with the fields AH's ICV covers as they were sent (RFC 4302 3.3.3.1:
/// version, payload length, next header, source, destination) and the mutable ones, which
/// AH zeroes for its ICV anyway, as zero (traffic class, flow label) or 64 (hop limit).
/// The payload must follow the fixed header directly: extension headers the kernel
/// processed before it are not put back (AH over them would not verify).
pub fn rebuild_header(area: &mut [u8], len: usize, proto: u8, src: IpAddr, dst: IpAddr) -> Result<usize, RebuildError> {
    let h = header_len(dst);
    let room = area.len();
    if room < h || len > room - h {
        return Err(RebuildError::NoRoom { len, room });
    }
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let max = usize::from(u16::MAX) - h;
            if len > max {
                return Err(RebuildError::TooLong { len, max });
            }
            let total = h + len;
            let hdr = &mut area[..h];
            hdr.copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, HOPS, proto, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            hdr[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            hdr[12..16].copy_from_slice(&s.octets());
            hdr[16..20].copy_from_slice(&d.octets());
            let sum = checksum(hdr);
            hdr[10..12].copy_from_slice(&sum.to_be_bytes());
            Ok(total)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let max = usize::from(u16::MAX);
            if len > max {
                return Err(RebuildError::TooLong { len, max });
            }
            let hdr = &mut area[..h];
            hdr[..4].copy_from_slice(&[0x60, 0, 0, 0]);
            hdr[4..6].copy_from_slice(&(len as u16).to_be_bytes());
            hdr[6] = proto;
            hdr[7] = HOPS;
            hdr[8..24].copy_from_slice(&s.octets());
            hdr[24..40].copy_from_slice(&d.octets());
            Ok(h + len)
        }
        _ => Err(RebuildError::MixedFamilies),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::from(a)
    }

    pub(crate) fn v6(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn rebuilding_refuses_bad_lengths_with_typed_errors() {
        let (a, b) = (v6("fd00::1"), v6("fd00::2"));
        let mut area = vec![0u8; 100];
        assert_eq!(rebuild_header(&mut area, 60, 51, a, b), Ok(100));
        assert_eq!(
            rebuild_header(&mut area, 61, 51, a, b),
            Err(RebuildError::NoRoom { len: 61, room: 100 })
        );
        assert_eq!(
            rebuild_header(&mut area, usize::MAX, 51, a, b),
            Err(RebuildError::NoRoom {
                len: usize::MAX,
                room: 100
            })
        );
        assert_eq!(
            rebuild_header(&mut area[..39], 0, 50, a, b),
            Err(RebuildError::NoRoom { len: 0, room: 39 })
        );
        assert_eq!(
            rebuild_header(&mut area, 10, 50, v4([1, 1, 1, 1]), b),
            Err(RebuildError::MixedFamilies)
        );
        let mut big = vec![0u8; 70_000];
        assert_eq!(
            rebuild_header(&mut big, 65_536, 50, a, b),
            Err(RebuildError::TooLong {
                len: 65_536,
                max: 65_535
            })
        );
        assert_eq!(rebuild_header(&mut big, 65_535, 50, a, b), Ok(65_575));
        let (c, d) = (v4([10, 0, 0, 1]), v4([10, 0, 0, 2]));
        assert_eq!(
            rebuild_header(&mut big, 65_516, 50, c, d),
            Err(RebuildError::TooLong {
                len: 65_516,
                max: 65_515
            })
        );
        assert_eq!(rebuild_header(&mut big, 65_515, 50, c, d), Ok(65_535));
        assert!(RebuildError::NoRoom { len: 1, room: 0 }.to_string().contains("no room"));
    }

    /// What an IPv6 raw socket does to an AH packet (the kernel strips the IPv6 header;
    /// on the way the network changed the mutable fields) and the rebuilt header undoes:
    /// AH's ICV still verifies and the packet opens (RFC 4302 3.3.3.1). A wrong address in
    /// the rebuilt header fails the ICV, so the check can fail.
    #[test]
    fn an_ah_protected_ipv6_packet_stripped_and_rebuilt_still_opens() {
        use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
        use ipsec_core::{AeadAlg, IntegAlg, PacketBuf};
        use ipsec_engine::{Action, Direction, Engine, Policy, SaConfig, Selector, Verdict};
        use std::time::Duration;
        let (a, b) = (v6("fd00:99::1"), v6("fd00:99::2"));
        let sas = || {
            let mut esp = SaParams::new(Proto::Esp, 0x601);
            esp.mode = Mode::Tunnel;
            esp.tunnel = Some(Tunnel { src: a, dst: b });
            esp.aead = Some(Keyed::new(AeadAlg::AesGcm, &[7; 20], 16));
            let mut ah = SaParams::new(Proto::Ah, 0x602);
            ah.tunnel = Some(Tunnel { src: a, dst: b });
            ah.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[9; 32], 16));
            [SaConfig::new("esp", esp, None), SaConfig::new("ah", ah, None)]
        };
        let engine = |dir| {
            let mut e = Engine::new();
            let ids = sas().map(|c| e.add_sa(c, Duration::ZERO).unwrap()).to_vec();
            e.add_policy(Policy {
                dir,
                selector: Selector::default(),
                action: Action::Protect(ids),
            })
            .unwrap();
            e
        };
        let (mut tx, mut rx) = (engine(Direction::Out), engine(Direction::In));
        let mut inner = Vec::new();
        etherparse::PacketBuilder::ipv4([10, 100, 0, 1], [10, 100, 0, 2], 64)
            .udp(1000, 2000)
            .write(&mut inner, &[0x5a; 300])
            .unwrap();
        let mut raw = vec![0u8; 4096];
        let mut buf = PacketBuf::new(&mut raw, 512, inner.len()).unwrap();
        buf.packet_mut().copy_from_slice(&inner);
        assert_eq!(tx.outbound(&mut buf, Duration::ZERO), Ok(Verdict::Protected(2)));
        let mut wire = buf.packet().to_vec();
        assert_eq!((wire[0] >> 4, wire[6]), (6, 51), "IPv6 with AH outermost");
        // On the way: traffic class, flow label and hop limit change (mutable fields).
        wire[0] = 0x6f;
        wire[1..4].copy_from_slice(&[0xab, 0xcd, 0xef]);
        wire[7] = 3;
        let open = |src: IpAddr, rx: &mut Engine| {
            // The raw socket's view: the payload after the IPv6 header, in the receive area.
            let mut area = vec![0u8; 512 + 4096];
            let payload = &wire[IPV6_HEADER..];
            area[512 + IPV6_HEADER..512 + IPV6_HEADER + payload.len()].copy_from_slice(payload);
            let total = rebuild_header(&mut area[512..], payload.len(), 51, src, b).unwrap();
            assert_eq!(total, wire.len());
            let mut buf = PacketBuf::new(&mut area, 512, total).unwrap();
            let v = rx.inbound(&mut buf, Duration::ZERO);
            (v, buf.packet().to_vec())
        };
        // A wrong source first (a failed ICV does not move the replay window), then right.
        let (v, _) = open(v6("fd00:99::7"), &mut rx);
        let e = v.unwrap_err();
        assert_eq!(e.reason, ipsec_engine::DropReason::BadIcv, "{e}");
        assert_eq!(open(a, &mut rx), (Ok(Verdict::Protected(2)), inner.clone()));
    }

    /// What the ESP-in-UDP socket used to do (a header rebuilt in front of the payload, the
    /// whole packet opened) and what it does now (the payload opened where it lies, with the
    /// datagram's addresses as data, [`ipsec_engine::Arrival::datagram`]) give the TUN device
    /// the same bytes and the SA the same counts: tunnel and transport mode, IPv4 and IPv6.
    #[test]
    fn the_datagram_path_opens_to_what_the_rebuilt_header_did() {
        use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
        use ipsec_core::{AeadAlg, PacketBuf};
        use ipsec_engine::udp_encap::Ports;
        use ipsec_engine::{Action, Arrival, Direction, Engine, Framing, Policy, SaConfig, Selector, Verdict};
        use std::time::Duration;
        for (a, b) in [
            (v4([192, 0, 2, 1]), v4([192, 0, 2, 2])),
            (v6("fd00:99::1"), v6("fd00:99::2")),
        ] {
            for mode in [Mode::Tunnel, Mode::Transport] {
                let engine = |dir| {
                    let mut esp = SaParams::new(Proto::Esp, 0x801);
                    esp.mode = mode;
                    esp.tunnel = (mode == Mode::Tunnel).then_some(Tunnel { src: a, dst: b });
                    esp.aead = Some(Keyed::new(AeadAlg::AesGcm, &[7; 20], 16));
                    let mut e = Engine::new();
                    let id = e.add_sa(SaConfig::new("esp", esp, None), Duration::ZERO).unwrap();
                    e.add_policy(Policy {
                        dir,
                        selector: Selector::default(),
                        action: Action::Protect(vec![id]),
                    })
                    .unwrap();
                    e
                };
                let (sender, old, new) = (engine(Direction::Out), engine(Direction::In), engine(Direction::In));
                // Transport mode: the packet is between the endpoints themselves.
                let (s, d) = match (mode, a) {
                    (Mode::Tunnel, _) => (v4([10, 100, 0, 1]), v4([10, 100, 0, 2])),
                    _ => (a, b),
                };
                let mut inner = Vec::new();
                let builder = match (s, d) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => etherparse::PacketBuilder::ipv4(s.octets(), d.octets(), 64),
                    (IpAddr::V6(s), IpAddr::V6(d)) => etherparse::PacketBuilder::ipv6(s.octets(), d.octets(), 64),
                    _ => unreachable!(),
                };
                builder.udp(1000, 2000).write(&mut inner, &[0x5a; 300]).unwrap();
                let mut raw = vec![0u8; 4096];
                let mut buf = PacketBuf::new(&mut raw, 512, inner.len()).unwrap();
                buf.packet_mut().copy_from_slice(&inner);
                let mut v = [Ok(Verdict::Bypass)];
                let mut r = [None];
                let plane = sender.data_plane();
                let mut w = ipsec_engine::Worker::new().unwrap();
                let bufs = std::slice::from_mut(&mut buf);
                plane.outbound_batch_routed(&mut w, bufs, &mut v, &mut r, Framing::Udp, Duration::ZERO);
                assert_eq!(v[0], Ok(Verdict::Protected(1)));
                let payload = buf.packet().to_vec();
                let ports = Ports {
                    sport: 4500,
                    dport: 4500,
                };
                let what = format!("{a} {mode:?}");
                // Before: the header rebuilt in front of the payload, the whole packet opened.
                let mut area = vec![0u8; 512 + 4096];
                let h = header_len(b);
                area[512 + h..512 + h + payload.len()].copy_from_slice(&payload);
                let total = rebuild_header(&mut area[512..], payload.len(), 50, a, b).unwrap();
                let mut before = PacketBuf::new(&mut area, 512, total).unwrap();
                let mut arr = [Arrival::in_udp(ports)];
                let plane = old.data_plane();
                plane.inbound_batch_arrivals(
                    &mut w,
                    std::slice::from_mut(&mut before),
                    &mut v,
                    &mut arr,
                    Duration::ZERO,
                );
                assert_eq!(v[0], Ok(Verdict::Protected(1)), "{what}");
                let was = before.packet().to_vec();
                // Now: the payload where the socket put it, its addresses beside it.
                let mut area = vec![0u8; 512 + 4096];
                area[512..512 + payload.len()].copy_from_slice(&payload);
                let mut now = PacketBuf::new(&mut area, 512, payload.len()).unwrap();
                let mut arr2 = [Arrival::in_datagram(ports, a, b)];
                let plane = new.data_plane();
                plane.inbound_batch_arrivals(
                    &mut w,
                    std::slice::from_mut(&mut now),
                    &mut v,
                    &mut arr2,
                    Duration::ZERO,
                );
                assert_eq!(v[0], Ok(Verdict::Protected(1)), "{what}");
                assert_eq!(now.packet(), &was[..], "{what}: the TUN device gets the same bytes");
                if mode == Mode::Tunnel {
                    assert_eq!(was, inner);
                }
                assert_eq!(
                    (arr2[0].sa, arr2[0].newest, arr2[0].outer),
                    (arr[0].sa, arr[0].newest, arr[0].outer)
                );
                let count = |e: &Engine| e.snapshot(Duration::ZERO).sas[0].inbound;
                assert_eq!(count(&new), count(&old), "{what}: counted alike");
            }
        }
    }
}
