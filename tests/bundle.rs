//! SA bundles through the tool's pcap loop: ESP inside AH (RFC 2401 transport adjacency),
//! ESP tunnel then AH transport on the outer header (FreeS/WAN style), and the failures
//! `open` must report per packet.

use etherparse::{NetSlice, SlicedPacket};
use ipsec::bundle::{AnySa, Bundle, PacketError};
use ipsec::spec;
use ipsec::tool::{run, Direction, Summary};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use std::time::Duration;

const ESP_TUNNEL: &str = "proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 enc 'cbc(aes)' \
    0x000102030405060708090a0b0c0d0e0f auth-trunc 'hmac(sha1)' 0x0001020304050607080910111213141516171819 96";
const ESP_TRANSPORT: &str = "proto esp spi 0x1001 mode transport aead 'rfc4106(gcm(aes))' \
    0x000102030405060708090a0b0c0d0e0f10111213 128";
const AH_TRANSPORT: &str = "proto ah spi 0x2000 mode transport auth-trunc 'hmac(sha256)' \
    0x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f 128";
const AH_V6_TUNNEL: &str = "proto ah spi 0x2001 mode tunnel src 2001:db8::a dst 2001:db8::b auth 'hmac(md5)' \
    0x000102030405060708090a0b0c0d0e0f";

fn bundle(specs: &[&str]) -> Bundle {
    Bundle::new(
        specs
            .iter()
            .map(|s| {
                let p = spec::parse(s).unwrap();
                AnySa::new(&p.params, p.comp).unwrap()
            })
            .collect(),
    )
}

fn udp4(i: u8, len: usize) -> Vec<u8> {
    let p = etherparse::PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, i], 64).udp(1000, 2000 + i as u16);
    let payload: Vec<u8> = (0..len).map(|x| (x as u8).wrapping_mul(i)).collect();
    let mut out = Vec::new();
    p.write(&mut out, &payload).unwrap();
    out
}

fn udp6(i: u8, len: usize) -> Vec<u8> {
    let src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let mut dst = src;
    dst[15] = i;
    let b = etherparse::PacketBuilder::ipv6(src, dst, 9).udp(1000, 3000);
    let mut out = Vec::new();
    b.write(&mut out, &vec![i; len]).unwrap();
    out
}

fn pcap(packets: &[Vec<u8>]) -> Vec<u8> {
    let h = PcapHeader {
        datalink: DataLink::RAW,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), h).unwrap();
    for (i, p) in packets.iter().enumerate() {
        w.write_packet(&PcapPacket::new(Duration::from_secs(i as u64), p.len() as u32, p))
            .unwrap();
    }
    w.into_writer()
}

fn packets(pcap: &[u8]) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(pcap).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.to_vec());
    }
    v
}

fn go(dir: Direction, b: &mut Bundle, input: &[u8]) -> (Summary, Vec<u8>, Vec<(usize, String)>) {
    let mut out = Vec::new();
    let mut errs = Vec::new();
    let s = run(dir, b, input, &mut out, |i, e: &PacketError| {
        errs.push((i, e.to_string()))
    })
    .unwrap();
    (s, out, errs)
}

/// Protocol numbers from the outside in, as etherparse (an independent parser) sees them.
fn outer_protocol(p: &[u8]) -> u8 {
    match SlicedPacket::from_ip(p).unwrap().net.unwrap() {
        NetSlice::Ipv4(s) => s.header().protocol().0,
        NetSlice::Ipv6(s) => s.header().next_header().0,
    }
}

#[test]
fn esp_then_ah_round_trips() {
    let input: Vec<Vec<u8>> = (1..=6)
        .map(|i| {
            if i % 2 == 0 {
                udp6(i, 40 * i as usize)
            } else {
                udp4(i, 100)
            }
        })
        .collect();
    let mut tx = bundle(&[ESP_TRANSPORT, AH_TRANSPORT]);
    let (s, sealed, errs) = go(Direction::Seal, &mut tx, &pcap(&input));
    assert_eq!((s.written, s.rejected, errs.len()), (6, 0, 0));
    for p in packets(&sealed) {
        assert_eq!(outer_protocol(&p), 51, "AH outside");
        let ah_at = if p[0] >> 4 == 4 { 20 } else { 40 };
        assert_eq!(p[ah_at], 50, "ESP inside AH");
    }
    let mut rx = bundle(&[ESP_TRANSPORT, AH_TRANSPORT]);
    let (s, opened, errs) = go(Direction::Open, &mut rx, &sealed);
    assert_eq!((s.written, s.rejected), (6, 0), "{errs:?}");
    assert_eq!(packets(&opened), input);
}

#[test]
fn esp_tunnel_then_ah_on_the_outer_header() {
    let input: Vec<Vec<u8>> = vec![udp4(1, 10), udp6(2, 500)];
    let mut tx = bundle(&[ESP_TUNNEL, AH_TRANSPORT]);
    let (_, sealed, errs) = go(Direction::Seal, &mut tx, &pcap(&input));
    assert!(errs.is_empty(), "{errs:?}");
    for p in packets(&sealed) {
        let ip = etherparse::Ipv4HeaderSlice::from_slice(&p).unwrap();
        assert_eq!(
            (ip.source(), ip.destination(), ip.protocol().0),
            ([192, 0, 2, 1], [192, 0, 2, 2], 51)
        );
        assert_eq!(p[20], 50);
    }
    let mut rx = bundle(&[ESP_TUNNEL, AH_TRANSPORT]);
    let (_, opened, errs) = go(Direction::Open, &mut rx, &sealed);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(packets(&opened), input);
}

#[test]
fn ah_tunnel_over_esp_transport_v6() {
    let input = vec![udp6(3, 64), udp4(4, 64)];
    let mut tx = bundle(&[ESP_TRANSPORT, AH_V6_TUNNEL]);
    let (_, sealed, errs) = go(Direction::Seal, &mut tx, &pcap(&input));
    assert!(errs.is_empty(), "{errs:?}");
    let mut rx = bundle(&[ESP_TRANSPORT, AH_V6_TUNNEL]);
    let (_, opened, errs) = go(Direction::Open, &mut rx, &sealed);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(packets(&opened), input);
}

#[test]
fn open_reports_each_bad_packet_and_keeps_going() {
    let input: Vec<Vec<u8>> = (1..=5).map(|i| udp4(i, 60)).collect();
    let mut tx = bundle(&[ESP_TRANSPORT, AH_TRANSPORT]);
    let (_, sealed, _) = go(Direction::Seal, &mut tx, &pcap(&input));
    let mut pk = packets(&sealed);
    let n = pk[1].len();
    pk[1][n - 1] ^= 1; // payload bit: AH ICV fails
    pk[3] = pk[2].clone(); // replay of packet 3
    pk.push(udp4(9, 10)); // not IPsec at all
    let mut rx = bundle(&[ESP_TRANSPORT, AH_TRANSPORT]);
    let (s, opened, errs) = go(Direction::Open, &mut rx, &pcap(&pk));
    assert_eq!((s.read, s.written, s.rejected), (6, 3, 3));
    assert_eq!(
        errs,
        vec![
            (2, "bad ICV".to_string()),
            (4, "replayed sequence number".to_string()),
            (6, "unexpected protocol 17".to_string())
        ]
    );
    assert_eq!(
        packets(&opened),
        vec![input[0].clone(), input[2].clone(), input[4].clone()]
    );
    // An SA list without the packet's SPI.
    let mut other = bundle(&[ESP_TUNNEL]);
    let (_, _, errs) = go(Direction::Open, &mut other, &sealed);
    assert_eq!(errs[0], (1, "unknown SPI 0x00002000".to_string()));
}

const COMP_DEFLATE: &str = "proto comp spi 2 mode transport comp deflate";

fn text_udp4(len: usize) -> Vec<u8> {
    let text = b"It was the best of times, it was the worst of times, it was the age of wisdom. ";
    let payload: Vec<u8> = text.iter().cycle().take(len).copied().collect();
    let mut out = Vec::new();
    etherparse::PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(1, 2)
        .write(&mut out, &payload)
        .unwrap();
    out
}

#[test]
fn comp_esp_ah_bundle_round_trips_and_compresses() {
    let input = vec![text_udp4(1400), udp6(7, 1000), text_udp4(40)];
    let mut tx = bundle(&[COMP_DEFLATE, ESP_TRANSPORT, AH_TRANSPORT]);
    let (_, sealed, errs) = go(Direction::Seal, &mut tx, &pcap(&input));
    assert!(errs.is_empty(), "{errs:?}");
    let mut plain_tx = bundle(&[ESP_TRANSPORT, AH_TRANSPORT]);
    let (_, sealed_plain, _) = go(Direction::Seal, &mut plain_tx, &pcap(&input));
    let (with, without) = (packets(&sealed), packets(&sealed_plain));
    assert!(
        with[0].len() + 1000 < without[0].len(),
        "text compresses: {} vs {}",
        with[0].len(),
        without[0].len()
    );
    // The IPv6 payload is one repeated byte: it compresses too. The 40-byte one is below
    // the 90-byte minimum and goes uncompressed, so it is exactly as long as without IPComp.
    assert!(with[1].len() < without[1].len());
    assert_eq!(with[2].len(), without[2].len());
    let mut rx = bundle(&[COMP_DEFLATE, ESP_TRANSPORT, AH_TRANSPORT]);
    let (s, opened, errs) = go(Direction::Open, &mut rx, &sealed);
    assert_eq!(s.rejected, 0, "{errs:?}");
    assert_eq!(packets(&opened), input);
}

#[test]
fn every_compressor_round_trips_in_a_tunnel_bundle() {
    for alg in ["deflate", "lzs", "lzf"] {
        let cpi = match alg {
            "deflate" => 2,
            "lzs" => 3,
            _ => 61440,
        };
        let comp = format!("proto comp spi {cpi} mode transport comp {alg}");
        let input = vec![text_udp4(3000), udp4(3, 500)];
        let mut tx = bundle(&[&comp, ESP_TUNNEL]);
        let (_, sealed, errs) = go(Direction::Seal, &mut tx, &pcap(&input));
        assert!(errs.is_empty(), "{alg}: {errs:?}");
        let mut rx = bundle(&[&comp, ESP_TUNNEL]);
        let (_, opened, errs) = go(Direction::Open, &mut rx, &sealed);
        assert!(errs.is_empty(), "{alg}: {errs:?}");
        assert_eq!(packets(&opened), input, "{alg}");
    }
}
