//! `ipsec seal` then `ipsec open` with IPComp SAs, through the binary: a capture mixing
//! compressible, incompressible and too-small packets comes back byte-identical, in transport
//! and tunnel mode, with DEFLATE and LZF, alone and under ESP. The packets the sender left
//! uncompressed (RFC 3173 section 2.2: the plain packet in transport mode, IP-in-IP between the
//! SA's endpoints in tunnel mode) must be taken by the receiving IPComp SA, and only those.

use etherparse::{NetSlice, PacketBuilder, SlicedPacket};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{read_pcap, write_pcap};

const ESP_TRANSPORT: &str = "proto esp spi 0x1001 mode transport aead 'rfc4106(gcm(aes))' \
    0x000102030405060708090a0b0c0d0e0f10111213 128";
const ESP_TUNNEL: &str = "proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 enc 'cbc(aes)' \
    0x000102030405060708090a0b0c0d0e0f auth-trunc 'hmac(sha1)' 0x0001020304050607080910111213141516171819 96";
/// IP protocol number of IPComp (RFC 3173).
const IPCOMP: u8 = 108;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipsec-comp-open-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Text: compresses with any algorithm.
fn text(len: usize) -> Vec<u8> {
    let t = b"It was the best of times, it was the worst of times, it was the age of wisdom. ";
    t.iter().cycle().take(len).copied().collect()
}

/// Bytes of a xorshift64 generator: do not compress.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn udp4(payload: &[u8], last: u8) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, last], 64)
        .udp(1000, 2000)
        .write(&mut out, payload)
        .unwrap();
    out
}

fn tcp6(payload: &[u8], last: u8) -> Vec<u8> {
    let src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let mut dst = src;
    dst[15] = last;
    let mut out = Vec::new();
    PacketBuilder::ipv6(src, dst, 9)
        .tcp(4000, 80, 7, 1000)
        .write(&mut out, payload)
        .unwrap();
    out
}

/// The capture: which packets compress is known from how they were made.
fn capture() -> Vec<(Vec<u8>, bool)> {
    vec![
        (udp4(&text(1400), 1), true),
        (udp4(&noise(1400, 1), 2), false),
        (tcp6(&text(900), 3), true),
        (tcp6(&noise(1200, 2), 4), false),
        (udp4(&text(30), 5), false), // below the minimum size worth compressing
        (udp4(&noise(300, 3), 6), false),
        (tcp6(&text(3000), 7), true),
    ]
}

/// Runs `ipsec <verb> --sa ... --in <input> --out <output>`: (exit code, stderr).
fn ipsec(verb: &str, sas: &[&str], input: &Path, output: &Path) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ipsec"));
    c.arg(verb);
    for s in sas {
        c.args(["--sa", s]);
    }
    c.arg("--in").arg(input).arg("--out").arg(output);
    let out = c.output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The outer header's protocol and addresses, as etherparse (an independent parser) reads it.
fn outer(p: &[u8]) -> (u8, String, String) {
    match SlicedPacket::from_ip(p).unwrap().net.unwrap() {
        NetSlice::Ipv4(s) => {
            let h = s.header();
            (
                h.protocol().0,
                h.source_addr().to_string(),
                h.destination_addr().to_string(),
            )
        }
        NetSlice::Ipv6(s) => {
            let h = s.header();
            (
                h.next_header().0,
                h.source_addr().to_string(),
                h.destination_addr().to_string(),
            )
        }
    }
}

/// Seals the capture with `sas` and opens it with the same SAs: every packet comes back
/// byte-identical. Returns the sealed packets.
fn round_trip(name: &str, sas: &[&str]) -> Vec<Vec<u8>> {
    let d = temp_dir(name);
    let (input, sealed, opened) = (d.join("in.pcap"), d.join("sealed.pcap"), d.join("opened.pcap"));
    let packets: Vec<Vec<u8>> = capture().into_iter().map(|(p, _)| p).collect();
    write_pcap(&input, &packets);
    let (code, err) = ipsec("seal", sas, &input, &sealed);
    assert_eq!(code, 0, "{name}: seal: {err}");
    let (code, err) = ipsec("open", sas, &sealed, &opened);
    assert_eq!(code, 0, "{name}: open: {err}");
    assert!(err.contains("7 read, 7 written, 0 rejected"), "{name}: {err}");
    let back = read_pcap(&opened);
    assert_eq!(back.len(), packets.len(), "{name}");
    for (i, (b, p)) in back.iter().zip(&packets).enumerate() {
        assert!(
            b == p,
            "{name}: packet {} differs: {} bytes back, {} sent",
            i + 1,
            b.len(),
            p.len()
        );
    }
    let out = read_pcap(&sealed);
    let _ = std::fs::remove_dir_all(&d);
    out
}

#[test]
fn lone_ipcomp_sa_takes_what_was_sent_uncompressed() {
    let compresses: Vec<bool> = capture().into_iter().map(|(_, c)| c).collect();
    for alg in ["deflate", "lzf"] {
        let cpi = if alg == "deflate" { 2 } else { 61440 };
        // Transport mode: an uncompressed packet is the plain packet.
        let sa = format!("proto comp spi {cpi} mode transport comp {alg}");
        let sealed = round_trip(&format!("transport-{alg}"), &[&sa]);
        let input = capture();
        for (i, (p, c)) in sealed.iter().zip(&compresses).enumerate() {
            assert_eq!(outer(p).0 == IPCOMP, *c, "{alg} transport packet {i}");
            if !c {
                assert_eq!(*p, input[i].0, "{alg} transport packet {i} sent as it was");
            }
        }
        // Tunnel mode, IPv4 and IPv6 endpoints: an uncompressed packet is IP-in-IP between them.
        for (src, dst) in [("192.0.2.1", "192.0.2.2"), ("2001:db8::a", "2001:db8::b")] {
            let sa = format!("proto comp spi {cpi} mode tunnel src {src} dst {dst} comp {alg}");
            let sealed = round_trip(&format!("tunnel-{alg}-{src}"), &[&sa]);
            for (i, (p, c)) in sealed.iter().zip(&compresses).enumerate() {
                let (next, s, d) = outer(p);
                assert_eq!((s.as_str(), d.as_str()), (src, dst), "{alg} tunnel packet {i}");
                let plain = if input[i].0[0] >> 4 == 4 { 4 } else { 41 };
                assert_eq!(next, if *c { IPCOMP } else { plain }, "{alg} tunnel packet {i}");
            }
        }
    }
}

#[test]
fn ipcomp_under_esp_takes_what_was_sent_uncompressed() {
    // Tunnel-mode IPComp inside transport-mode ESP: after ESP, an uncompressed packet is
    // IP-in-IP between the IPComp SA's endpoints, whose outer header must go too.
    let comp_tunnel = "proto comp spi 61440 mode tunnel src 192.0.2.1 dst 192.0.2.2 comp lzf";
    round_trip("tunnel-esp", &[comp_tunnel, ESP_TRANSPORT]);
    // Transport-mode IPComp inside tunnel-mode ESP.
    round_trip(
        "transport-esp",
        &["proto comp spi 2 mode transport comp deflate", ESP_TUNNEL],
    );
}

#[test]
fn only_ipcomp_may_be_missing() {
    let d = temp_dir("reject");
    let packets: Vec<Vec<u8>> = capture().into_iter().map(|(p, _)| p).collect();
    let (input, sealed, opened) = (d.join("in.pcap"), d.join("sealed.pcap"), d.join("opened.pcap"));
    write_pcap(&input, &packets);
    // Plain packets opened with IPComp + ESP: ESP's header is missing, so every one is rejected.
    let comp = "proto comp spi 2 mode transport comp deflate";
    let (code, err) = ipsec("open", &[comp, ESP_TRANSPORT], &input, &opened);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("7 read, 0 written, 7 rejected"), "{err}");
    // IP-in-IP between other endpoints is not the tunnel-mode IPComp SA's: only the packets
    // that were compressed (found by their CPI) are opened.
    let sender = "proto comp spi 2 mode tunnel src 192.0.2.9 dst 192.0.2.2 comp deflate";
    let receiver = "proto comp spi 2 mode tunnel src 192.0.2.1 dst 192.0.2.2 comp deflate";
    assert_eq!(ipsec("seal", &[sender], &input, &sealed).0, 0);
    let (code, err) = ipsec("open", &[receiver], &sealed, &opened);
    let uncompressed = capture().iter().filter(|(_, c)| !c).count();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "7 read, {} written, {uncompressed} rejected",
            7 - uncompressed
        )),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
