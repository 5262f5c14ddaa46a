//! Helpers shared by the integration tests.
#![allow(dead_code)]

use ipsec_ah::{AhSa, Opened};
use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
use ipsec_core::{Error, IntegAlg, PacketBuf, SaParams};

/// The integrity algorithms AH can use.
pub const ALGS: [IntegAlg; 5] = [
    IntegAlg::HmacMd5,
    IntegAlg::HmacSha1,
    IntegAlg::HmacSha256,
    IntegAlg::HmacSha384,
    IntegAlg::HmacSha512,
];

pub const HEADROOM: usize = 160;

pub fn key(alg: IntegAlg) -> Vec<u8> {
    let n = match alg {
        IntegAlg::HmacMd5 => 16,
        IntegAlg::HmacSha1 => 20,
        IntegAlg::HmacSha256 => 32,
        IntegAlg::HmacSha384 => 48,
        _ => 64,
    };
    (0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(3)).collect()
}

pub fn params(alg: IntegAlg, key: &[u8], tunnel: Option<(&str, &str)>) -> SaParams {
    let mut p = SaParams::new(Proto::Ah, 0x1000);
    p.integ = Some(Keyed::new(alg, key, alg.default_icv_len()));
    if let Some((s, d)) = tunnel {
        p.mode = Mode::Tunnel;
        p.tunnel = Some(Tunnel {
            src: s.parse().unwrap(),
            dst: d.parse().unwrap(),
        });
    }
    p
}

pub fn sa(alg: IntegAlg, tunnel: Option<(&str, &str)>) -> AhSa {
    AhSa::new(&params(alg, &key(alg), tunnel)).unwrap()
}

/// Seals `pkt` and returns the result.
pub fn seal(sa: &mut AhSa, pkt: &[u8]) -> Result<Vec<u8>, Error> {
    let mut raw = vec![0u8; HEADROOM + pkt.len() + 16];
    raw[HEADROOM..HEADROOM + pkt.len()].copy_from_slice(pkt);
    let mut b = PacketBuf::new(&mut raw, HEADROOM, pkt.len())?;
    sa.seal(&mut b)?;
    Ok(b.packet().to_vec())
}

/// Opens `pkt`; on failure also checks that the buffer was left exactly as it was.
pub fn open(sa: &mut AhSa, pkt: &[u8]) -> Result<(Opened, Vec<u8>), Error> {
    let mut raw = vec![0u8; pkt.len() + 32];
    raw[16..16 + pkt.len()].copy_from_slice(pkt);
    let before = raw.clone();
    let mut b = PacketBuf::new(&mut raw, 16, pkt.len())?;
    match sa.open(&mut b) {
        Ok(o) => Ok((o, b.packet().to_vec())),
        Err(e) => {
            assert_eq!(
                (b.head(), b.len()),
                (16, pkt.len()),
                "failed open changed the packet bounds"
            );
            assert_eq!(raw, before, "failed open ({e:?}) changed the buffer");
            Err(e)
        }
    }
}

/// IPv4 UDP packet (checksum filled), optionally with options (a multiple of 4 bytes).
pub fn udp4(options: &[u8], payload: &[u8]) -> Vec<u8> {
    let hl = 20 + options.len();
    let total = hl + 8 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x40 | (hl / 4) as u8;
    p[1] = 0xb8;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[4..6].copy_from_slice(&0x4242u16.to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[192, 0, 2, 1]);
    p[16..20].copy_from_slice(&[192, 0, 2, 2]);
    p[20..hl].copy_from_slice(options);
    p[hl..hl + 2].copy_from_slice(&1234u16.to_be_bytes());
    p[hl + 2..hl + 4].copy_from_slice(&5678u16.to_be_bytes());
    p[hl + 4..hl + 6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[hl + 8..].copy_from_slice(payload);
    ipsec_core::ip::fix_length(&mut p).unwrap();
    p
}

/// IPv6 packet with the given extension headers (kind, bytes incl. next-header/len octets,
/// whose Next Header octets are filled in here) and a UDP payload.
pub fn udp6(ext: &[(u8, Vec<u8>)], payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x6b, 0x81, 0x23, 0x45, 0, 0, 0, 64];
    p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    let mut nh_at = 6;
    for (kind, bytes) in ext {
        p[nh_at] = *kind;
        nh_at = p.len();
        p.extend_from_slice(bytes);
    }
    p[nh_at] = 17;
    p.extend_from_slice(&1234u16.to_be_bytes());
    p.extend_from_slice(&5678u16.to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    ipsec_core::ip::fix_length(&mut p).unwrap();
    p
}
