//! `ipsec open` on IPComp packets that decompress to another IPComp header: a packet whose
//! payload decompresses to itself (an LZF "quine") used to be opened forever; nested IPComp
//! must be refused (RFC 3173 section 2: a datagram is compressed once) and `open` must end.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LZF_SA: &str = "proto comp spi 61440 mode transport comp lzf";
const DEFLATE_SA: &str = "proto comp spi 2 mode transport comp deflate";

/// The IPComp header for next header `nh` and CPI `cpi` (RFC 3173 section 2.2).
fn ipcomp_header(nh: u8, cpi: u16) -> [u8; 4] {
    let c = cpi.to_be_bytes();
    [nh, 0, c[0], c[1]]
}

/// An IPv4 header (no options, correct checksum) for `payload` of protocol `proto`.
fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
    h[2..4].copy_from_slice(&total.to_be_bytes());
    let sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let folded = (folded & 0xffff) + (folded >> 16);
    h[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// LZF with literal runs only (`000LLLLL` + L+1 bytes): a valid stream for any input.
fn lzf_literals(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for run in data.chunks(32) {
        out.push((run.len() - 1) as u8);
        out.extend_from_slice(run);
    }
    out
}

/// DEFLATE with one final stored block (RFC 1951 section 3.2.4): valid for up to 65535 bytes.
fn deflate_stored(data: &[u8]) -> Vec<u8> {
    let n = data.len() as u16;
    let mut out = vec![0x01];
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(!n).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// An LZF stream C that decompresses to `H ++ C`, H being the IPComp header (next header
/// 108, CPI 61440): literal `(H, 14)` x3 + copy 5 at offset 15, literal `(0x60, 14, 14)` x5 +
/// copy 5 at offset 15. The copies (`0x60 0x0e`) reproduce their own bytes.
fn lzf_quine() -> Vec<u8> {
    let h = ipcomp_header(108, 61440);
    let mut c = vec![14u8];
    for _ in 0..3 {
        c.extend_from_slice(&h);
        c.push(14);
    }
    c.extend_from_slice(&[0x60, 14, 14]);
    for _ in 0..5 {
        c.extend_from_slice(&[0x60, 14, 14]);
    }
    c.extend_from_slice(&[0x60, 14]);
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipsec-nested-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs `ipsec open --sa <sa>` on one packet with a deadline; returns (exit code, stderr).
fn open(name: &str, sa: &str, packet: &[u8]) -> (i32, String) {
    let input = tmp(&format!("{name}.pcap"));
    let h = PcapHeader {
        datalink: DataLink::RAW,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(&input).unwrap(), h).unwrap();
    w.write_packet(&PcapPacket::new(Duration::ZERO, packet.len() as u32, packet))
        .unwrap();
    drop(w);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipsec"))
        .args(["open", "--sa", sa, "--in"])
        .arg(&input)
        .arg("--out")
        .arg(tmp(&format!("{name}.out.pcap")))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("`ipsec open` on {name} did not finish within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_lzf_quine_really_decompresses_to_itself() {
    // Checked with the crate's own decoder: the packet is what the test claims it is.
    let c = lzf_quine();
    let mut out = vec![0u8; 1000];
    let n = ipsec::ipcomp::lzf::decompress(&c, &mut out).unwrap();
    let mut want = ipcomp_header(108, 61440).to_vec();
    want.extend_from_slice(&c);
    assert_eq!(&out[..n], &want[..]);
}

#[test]
fn an_lzf_quine_is_refused_and_open_terminates() {
    let mut payload = ipcomp_header(108, 61440).to_vec();
    payload.extend_from_slice(&lzf_quine());
    let (code, err) = open("quine", LZF_SA, &ipv4(108, &payload));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("packet 1") && err.contains("IPComp inside IPComp"),
        "{err}"
    );
    assert!(err.contains("0 written, 1 rejected"), "{err}");
}

#[test]
fn ipcomp_nested_in_ipcomp_is_refused_lzf_and_deflate() {
    let udp = [0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, b'q', b'u', b'i', b'n'];
    for (name, sa, cpi, compress) in [
        ("lzf", LZF_SA, 61440u16, lzf_literals as fn(&[u8]) -> Vec<u8>),
        ("deflate", DEFLATE_SA, 2, deflate_stored),
    ] {
        // Inner: IPComp over UDP. Outer: IPComp over the inner IPComp header and data.
        let mut inner = ipcomp_header(17, cpi).to_vec();
        inner.extend_from_slice(&compress(&udp));
        let mut outer = ipcomp_header(108, cpi).to_vec();
        outer.extend_from_slice(&compress(&inner));
        let (code, err) = open(name, sa, &ipv4(108, &outer));
        assert_eq!(code, 1, "{name}: {err}");
        assert!(err.contains("IPComp inside IPComp"), "{name}: {err}");

        // The same inner layer alone opens: what is refused is only the nesting.
        let (code, err) = open(&format!("{name}-single"), sa, &ipv4(108, &inner));
        assert_eq!(code, 0, "{name}: {err}");
    }
}
