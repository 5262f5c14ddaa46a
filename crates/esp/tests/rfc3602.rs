//! RFC 3602 section 4, cases #5 to #8: complete AES-CBC ESP packets (encryption only, no
//! authentication, default 1, 2, 3... padding), checked byte for byte in both directions.
//!
//! | case | mode      | key         | SPI    | seq | inner packet                                   |
//! |------|-----------|-------------|--------|-----|------------------------------------------------|
//! | #5   | transport | 90d382b4... | 0x4321 | 1   | ping 192.168.123.100 (64-byte ICMP echo)       |
//! | #6   | transport | 90d382b4... | 0x4321 | 8   | ping -p 77 -s 20 192.168.123.100 (28 bytes)    |
//! | #7   | tunnel    | 01234567... | 0x8765 | 2   | ping 192.168.123.200 (84-byte IPv4 packet)     |
//! | #8   | tunnel    | 01234567... | 0x8765 | 5   | ping -p ff -s 40 192.168.123.200 (68 bytes)    |
//!
//! In transport mode the RFC gives the IP header before and after encryption, so the whole
//! packet is compared. In tunnel mode our outer header is our own (identification = low 16
//! bits of the sequence number, TTL 64): everything from the SPI to the end is compared byte
//! for byte, and of the outer header everything except the identification and checksum (the
//! checksum must be valid).

use ipsec_core::ip::Ipv4Packet;
use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
use ipsec_core::{EncAlg, PacketBuf, SaParams};
use ipsec_esp::{EspSa, Opened};

const HEAD: usize = 128;
const TAIL: usize = 128;

/// Decodes hex written the way the RFC prints it, in groups separated by whitespace.
fn hx(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    hex::decode(s).expect("bad hex in a test vector")
}

const KEY_5_6: &str = "90d382b4 10eeba7a d938c46c ec1a82bf";
const KEY_7_8: &str = "01234567 89abcdef 01234567 89abcdef";

struct Case {
    name: &'static str,
    mode: Mode,
    key: &'static str,
    spi: u32,
    seq: u64,
    iv: &'static str,
    /// The packet handed to ESP: IP header and ICMP message (transport), or the whole inner
    /// IPv4 packet (tunnel).
    plaintext: &'static str,
    /// Transport mode: the IP header after encryption, as the RFC gives it. Tunnel mode: the
    /// outer header the RFC shows, where it is known (`None` otherwise).
    ip_after: Option<&'static str>,
    /// SPI, sequence number, IV and ciphertext.
    esp: &'static str,
    next_header: u8,
    pad_len: usize,
}

const CASES: [Case; 4] = [
    Case {
        name: "#5 transport, ping 192.168.123.100",
        mode: Mode::Transport,
        key: KEY_5_6,
        spi: 0x4321,
        seq: 1,
        iv: "e96e8c08 ab465763 fd098d45 dd3ff893",
        plaintext: "45000054 08f20000 4001f9fe c0a87b03 c0a87b64
                    08000ebd a70a0000 8e9c083d b95b0700 08090a0b 0c0d0e0f 10111213 14151617
                    18191a1b 1c1d1e1f 20212223 24252627 28292a2b 2c2d2e2f 30313233 34353637",
        ip_after: Some("4500007c 08f20000 4032f9a5 c0a87b03 c0a87b64"),
        esp: "00004321 00000001
              e96e8c08 ab465763 fd098d45 dd3ff893
              f663c25d 325c18c6 a9453e19 4e120849 a4870b66 cc6b9965 330013b4 898dc856
              a4699e52 3a55db08 0b59ec3a 8e4b7e52 775b07d1 db34ed9c 538ab50c 551b874a
              a269add0 47ad2d59 13ac19b7 cfbad4a6",
        next_header: 1,
        pad_len: 14,
    },
    Case {
        name: "#6 transport, ping -p 77 -s 20 192.168.123.100",
        mode: Mode::Transport,
        key: KEY_5_6,
        spi: 0x4321,
        seq: 8,
        iv: "69d08df7 d203329d b093fc49 24e5bd80",
        plaintext: "45000030 08fe0000 4001fa16 c0a87b03 c0a87b64
                    0800b5e8 a80a0500 a69c083d 0b660e00 77777777 77777777 77777777",
        ip_after: Some("4500004c 08fe0000 4032f9c9 c0a87b03 c0a87b64"),
        esp: "00004321 00000008
              69d08df7 d203329d b093fc49 24e5bd80
              f5199588 1ec4e0c4 488987ce 742e8109 689bb379 d2d750c0 d915dca3 46a89f75",
        next_header: 1,
        pad_len: 2,
    },
    Case {
        name: "#7 tunnel, ping 192.168.123.200",
        mode: Mode::Tunnel,
        key: KEY_7_8,
        spi: 0x8765,
        seq: 2,
        iv: "f4e76524 4f6407ad f13dc138 0f673f37",
        plaintext: "45000054 09040000 4001f988 c0a87b03 c0a87bc8
                    08009f76 a90a0100 b49c083d 02a20400 08090a0b 0c0d0e0f 10111213 14151617
                    18191a1b 1c1d1e1f 20212223 24252627 28292a2b 2c2d2e2f 30313233 34353637",
        ip_after: Some("4500008c 09050000 4032f91e c0a87b03 c0a87bc8"),
        esp: "00008765 00000002
              f4e76524 4f6407ad f13dc138 0f673f37
              773b5241 a4c44922 5e4f3ce5 ed611b0c 237ca96c f74a9301 3c1b0ea1 a0cf70f8
              e4ecaec7 8ac53aad 7a0f022b 859243c6 47752e94 a859352b 8a4d4d2d ecd136e5
              c177f132 ad3fbfb2 201ac990 4c74ee0a 109e0ca1 e4dfe9d5 a100b842 f1c22f0d",
        next_header: 4,
        pad_len: 10,
    },
    Case {
        name: "#8 tunnel, ping -p ff -s 40 192.168.123.200",
        mode: Mode::Tunnel,
        key: KEY_7_8,
        spi: 0x8765,
        seq: 5,
        iv: "85d47224 b5f3dd5d 2101d4ea 8dffab22",
        plaintext: "45000044 090c0000 4001f990 c0a87b03 c0a87bc8
                    0800d63c aa0a0200 c69c083d a3de0300 ffffffff ffffffff ffffffff ffffffff
                    ffffffff ffffffff ffffffff ffffffff",
        ip_after: None,
        esp: "00008765 00000005
              85d47224 b5f3dd5d 2101d4ea 8dffab22
              15b92683 819596a8 047232cc 00f7048f e45318e1 1f8a0f62 ede3c3fc 61203bb5
              0f980a08 c9843fd3 a1b06d5c 07ff9639 b7eb7dfb 3512e5de 435e7207 ed971ef3
              d2726d9b 5ef6affc 6d17a0de cbb13892",
        next_header: 4,
        pad_len: 10,
    },
];

/// Both tunnel cases run between 192.168.123.3 and 192.168.123.200, the inner packet's own
/// addresses.
fn tunnel() -> Tunnel {
    Tunnel {
        src: "192.168.123.3".parse().unwrap(),
        dst: "192.168.123.200".parse().unwrap(),
    }
}

fn sa(c: &Case, seq: u64) -> EspSa {
    let mut p = SaParams::new(Proto::Esp, c.spi);
    p.mode = c.mode;
    if c.mode == Mode::Tunnel {
        p.tunnel = Some(tunnel());
    }
    p.enc = Some(Keyed::new(EncAlg::AesCbc, &hx(c.key), 0));
    p.integ = None; // digest_null: the RFC's packets carry no ICV
    p.initial_seq = seq;
    let mut sa = EspSa::new(&p).unwrap_or_else(|e| panic!("{}: SA refused: {e:?}", c.name));
    sa.set_fixed_iv_for_testing(&hx(c.iv)).unwrap();
    sa
}

/// The IPv4 header the ESP packet travels in, for `open`: the RFC's where it gives one,
/// else one built here (tunnel case #8; only its protocol and length matter to `open`).
fn wire_header(c: &Case) -> Vec<u8> {
    if let Some(h) = c.ip_after {
        return hx(h);
    }
    let esp_len = hx(c.esp).len();
    let mut h = hx("45000000 00000000 40320000 c0a87b03 c0a87bc8");
    h[2..4].copy_from_slice(&((20 + esp_len) as u16).to_be_bytes());
    h[4..6].copy_from_slice(&(c.seq as u16).to_be_bytes());
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h
}

fn seal(c: &Case) -> Vec<u8> {
    let pt = hx(c.plaintext);
    let mut raw = vec![0u8; HEAD + pt.len() + TAIL];
    raw[HEAD..HEAD + pt.len()].copy_from_slice(&pt);
    let mut buf = PacketBuf::new(&mut raw, HEAD, pt.len()).unwrap();
    let mut sa = sa(c, c.seq);
    let seq = sa
        .seal(&mut buf)
        .unwrap_or_else(|e| panic!("{}: seal failed: {e:?}", c.name));
    assert_eq!(seq, c.seq, "{}: sequence number used", c.name);
    buf.packet().to_vec()
}

fn check_seal(c: &Case) {
    let out = seal(c);
    let esp = hx(c.esp);
    assert!(out.len() > 20, "{}: output too short", c.name);
    assert_eq!(
        hex::encode(&out[20..]),
        hex::encode(&esp),
        "{}: ESP (SPI to the end)",
        c.name
    );
    let hdr = &out[..20];
    match c.mode {
        Mode::Transport => {
            let want = hx(c.ip_after.unwrap());
            assert_eq!(hex::encode(hdr), hex::encode(want), "{}: IP header", c.name);
        }
        Mode::Tunnel => {
            let p = Ipv4Packet::new_unchecked(hdr);
            assert!(p.verify_checksum(), "{}: outer header checksum", c.name);
            assert_eq!(
                p.ident(),
                c.seq as u16,
                "{}: outer identification (ours: low bits of seq)",
                c.name
            );
            let want = wire_header(c);
            // All but the identification (4..6) and the checksum (10..12).
            for (range, what) in [
                (0..4, "version/IHL, TOS, length"),
                (6..10, "flags, TTL, protocol"),
                (12..20, "addresses"),
            ] {
                assert_eq!(
                    hex::encode(&hdr[range.clone()]),
                    hex::encode(&want[range]),
                    "{}: outer header {what}",
                    c.name
                );
            }
        }
    }
}

fn check_open(c: &Case) {
    let mut pkt = wire_header(c);
    pkt.extend_from_slice(&hx(c.esp));
    let mut raw = vec![0u8; HEAD + pkt.len() + TAIL];
    raw[HEAD..HEAD + pkt.len()].copy_from_slice(&pkt);
    let mut buf = PacketBuf::new(&mut raw, HEAD, pkt.len()).unwrap();
    // A fresh receiving SA: its window accepts the RFC's sequence number as a first packet.
    let mut sa = sa(c, 1);
    let opened = sa
        .open(&mut buf)
        .unwrap_or_else(|e| panic!("{}: open failed: {e:?}", c.name));
    assert_eq!(
        opened,
        Opened {
            seq: c.seq,
            next_header: c.next_header,
            pad_len: c.pad_len,
            newest: true,
        },
        "{}",
        c.name
    );
    assert_eq!(
        hex::encode(buf.packet()),
        hex::encode(hx(c.plaintext)),
        "{}: decapsulated packet",
        c.name
    );
}

#[test]
fn case5_transport_seal() {
    check_seal(&CASES[0]);
}

#[test]
fn case5_transport_open() {
    check_open(&CASES[0]);
}

#[test]
fn case6_transport_seal() {
    check_seal(&CASES[1]);
}

#[test]
fn case6_transport_open() {
    check_open(&CASES[1]);
}

#[test]
fn case7_tunnel_seal() {
    check_seal(&CASES[2]);
}

#[test]
fn case7_tunnel_open() {
    check_open(&CASES[2]);
}

#[test]
fn case8_tunnel_seal() {
    check_seal(&CASES[3]);
}

#[test]
fn case8_tunnel_open() {
    check_open(&CASES[3]);
}

/// The vectors are consistent with themselves: lengths, and the RFC's own IP headers carry
/// valid checksums (a guard against transcription slips in this file).
#[test]
fn vectors_are_consistent() {
    for c in &CASES {
        let pt = hx(c.plaintext);
        let esp = hx(c.esp);
        assert_eq!(hx(c.iv), esp[8..24], "{}: IV inside the ESP packet", c.name);
        assert_eq!(esp[..4], c.spi.to_be_bytes(), "{}: SPI", c.name);
        assert_eq!(esp[4..8], (c.seq as u32).to_be_bytes(), "{}: sequence number", c.name);
        let protected = if c.mode == Mode::Transport {
            pt.len() - 20
        } else {
            pt.len()
        };
        assert_eq!(esp.len(), 8 + 16 + protected + c.pad_len + 2, "{}: ESP length", c.name);
        assert!(
            Ipv4Packet::new_checked(&pt[..]).unwrap().verify_checksum(),
            "{}",
            c.name
        );
        let w = wire_header(c);
        assert!(Ipv4Packet::new_unchecked(&w[..]).verify_checksum(), "{}", c.name);
        assert_eq!(
            usize::from(u16::from_be_bytes([w[2], w[3]])),
            20 + esp.len(),
            "{}",
            c.name
        );
    }
}
