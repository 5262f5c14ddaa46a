//! ESP in UDP (RFC 3948) as an SA property (issue #11), end to end through the binaries:
//! `ipsec seal` / `ipsec open` with `encap espinudp SPORT DPORT OADDR` (outer headers checked
//! with etherparse, round trips, keepalives and IKE datagrams dropped and counted, plain ESP
//! refused, the transport-mode checksum fix-up after a NAT), `ipsec check-config` showing it,
//! and tunneld refusing SAs that disagree about it.

use etherparse::{Ipv4HeaderSlice, Ipv6Header, PacketBuilder, TcpHeader, UdpHeader};
use std::path::PathBuf;

mod common;
use common::{read_pcap, run, write_pcap};

const IPSEC: &str = env!("CARGO_BIN_EXE_ipsec");
const TUNNELD: &str = env!("CARGO_BIN_EXE_tunneld");
const GCM: &str = "aead 'rfc4106(gcm(aes))' 0x0102030405060708090a0b0c0d0e0f1011121314 128";
const CBC: &str = "enc 'cbc(aes)' 0x000102030405060708090a0b0c0d0e0f auth-trunc 'hmac(sha1)' 0x0001020304050607080900010203040506070809 96";

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipsec-espinudp-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn udp4(src: [u8; 4], dst: [u8; 4], len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4(src, dst, 64)
        .udp(40000, 40001)
        .write(&mut out, &vec![0x5a; len])
        .unwrap();
    out
}

fn udp6(len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let a = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let b = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    PacketBuilder::ipv6(a, b, 64)
        .udp(40000, 40001)
        .write(&mut out, &vec![0x3c; len])
        .unwrap();
    out
}

fn tcp4(src: [u8; 4], dst: [u8; 4], len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4(src, dst, 64)
        .tcp(40002, 40003, 0x01020304, 4096)
        .write(&mut out, &vec![0x77; len])
        .unwrap();
    out
}

/// `ipsec VERB --sa SA... --in IN --out OUT`; returns (exit code, output packets, stderr).
fn tool(verb: &str, sas: &[&str], input: &[Vec<u8>], tag: &str) -> (i32, Vec<Vec<u8>>, String) {
    let (i, o) = (
        tmp(&format!("{tag}-{verb}-in.pcap")),
        tmp(&format!("{tag}-{verb}-out.pcap")),
    );
    write_pcap(&i, input);
    let mut args = vec![verb];
    for s in sas {
        args.extend(["--sa", s]);
    }
    let (is, os) = (i.display().to_string(), o.display().to_string());
    args.extend(["--in", &is, "--out", &os]);
    let (code, _, err) = run(IPSEC, &args);
    let out = if o.exists() { read_pcap(&o) } else { Vec::new() };
    (code, out, err)
}

#[test]
fn ipv4_tunnel_packets_go_in_udp_with_a_zero_checksum_and_come_back() {
    let sa = format!(
        "proto esp spi 0x1000 mode tunnel src 203.0.113.1 dst 203.0.113.2 {GCM} encap espinudp 4500 4501 0.0.0.0"
    );
    let plain = vec![
        udp4([192, 0, 2, 1], [198, 51, 100, 2], 0),
        udp4([192, 0, 2, 1], [198, 51, 100, 2], 1000),
    ];
    let (code, sealed, err) = tool("seal", &[&sa], &plain, "v4");
    assert_eq!(code, 0, "{err}");
    for (p, w) in plain.iter().zip(&sealed) {
        let ip = Ipv4HeaderSlice::from_slice(w).unwrap();
        assert_eq!(ip.protocol(), etherparse::IpNumber::UDP);
        assert_eq!(usize::from(ip.total_len()), w.len());
        assert_eq!(ip.header_checksum(), ip.to_header().calc_header_checksum());
        let (u, esp) = UdpHeader::from_slice(&w[20..]).unwrap();
        assert_eq!((u.source_port, u.destination_port), (4500, 4501));
        assert_eq!(
            (usize::from(u.length), u.checksum),
            (w.len() - 20, 0),
            "RFC 3948 2.1: zero over IPv4"
        );
        // ESP: SPI, sequence number, 8-byte IV, the inner packet and at least 2 + 16 bytes.
        assert_eq!(&esp[..4], &0x1000u32.to_be_bytes());
        assert!(esp.len() >= 8 + 8 + p.len() + 18);
    }
    let (code, opened, err) = tool("open", &[&sa], &sealed, "v4");
    assert_eq!(code, 0, "{err}");
    assert_eq!(opened, plain);
    assert!(err.contains("2 read, 2 written, 0 rejected"), "{err}");
    // The same SA without encap does not take them; nor does one with another port.
    let raw = sa.replace(" encap espinudp 4500 4501 0.0.0.0", "");
    let (code, out, err) = tool("open", &[&raw], &sealed, "v4-raw");
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(err.contains("packet 1: unexpected protocol 17"), "{err}");
    let (code, _, err) = tool("open", &[&sa.replace("4500 4501", "4500 4500")], &sealed, "v4-port");
    assert_eq!(code, 1);
    assert!(
        err.contains("UDP to port 4501: no SA with `encap espinudp` on it"),
        "{err}"
    );
}

#[test]
fn ipv6_transport_packets_get_a_real_udp_checksum() {
    let sa = format!("proto esp spi 0x2000 mode transport {CBC} encap espinudp 4500 4500 ::");
    let plain = vec![udp6(0), udp6(13), udp6(1200)];
    let (code, sealed, err) = tool("seal", &[&sa], &plain, "v6");
    assert_eq!(code, 0, "{err}");
    for w in &sealed {
        let (ip, rest) = Ipv6Header::from_slice(w).unwrap();
        assert_eq!(ip.next_header, etherparse::IpNumber::UDP);
        assert_eq!(usize::from(ip.payload_length), rest.len());
        let (u, body) = UdpHeader::from_slice(rest).unwrap();
        assert_ne!(u.checksum, 0, "RFC 8200 8.1: no zero checksum over IPv6");
        assert_eq!(u.checksum, u.calc_checksum_ipv6(&ip, body).unwrap());
        assert_eq!(&body[..4], &0x2000u32.to_be_bytes());
    }
    let (code, opened, err) = tool("open", &[&sa], &sealed, "v6");
    assert_eq!(code, 0, "{err}");
    assert_eq!(opened, plain);
    // A zero checksum over IPv6 and a wrong one are refused, with the reason.
    let mut bad = sealed.clone();
    bad[0][46..48].copy_from_slice(&[0, 0]);
    bad[1][46] ^= 0x10;
    let (code, out, err) = tool("open", &[&sa], &bad, "v6-bad");
    assert_eq!((code, out.len()), (1, 1), "{err}");
    assert!(
        err.contains("packet 1: zero UDP checksum over IPv6 (RFC 8200 8.1)"),
        "{err}"
    );
    assert!(err.contains("packet 2: bad UDP checksum"), "{err}");
}

#[test]
fn keepalives_and_ike_are_dropped_and_counted_plain_esp_is_refused() {
    let sa = format!(
        "proto esp spi 0x1000 mode tunnel src 203.0.113.1 dst 203.0.113.2 {GCM} encap espinudp 4500 4500 0.0.0.0"
    );
    let inner = udp4([192, 0, 2, 1], [198, 51, 100, 2], 40);
    let (_, sealed, _) = tool("seal", &[&sa], &[inner.clone(), inner.clone()], "ka");
    let datagram = |payload: &[u8]| {
        let mut out = Vec::new();
        PacketBuilder::ipv4([203, 0, 113, 1], [203, 0, 113, 2], 64)
            .udp(4500, 4500)
            .write(&mut out, payload)
            .unwrap();
        out
    };
    let keepalive = datagram(&[0xff]);
    let ike = datagram(&[0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99]);
    let (code, out, err) = tool(
        "open",
        &[&sa],
        &[keepalive.clone(), sealed[0].clone(), ike, keepalive, sealed[1].clone()],
        "ka",
    );
    assert_eq!(code, 0, "keepalives are not errors: {err}");
    assert_eq!(out, vec![inner.clone(), inner.clone()]);
    assert!(
        err.contains("5 read, 2 written, 0 rejected; dropped 2 NAT-keepalives and 1 non-ESP (IKE) datagrams"),
        "{err}"
    );
    // A runt is an error; so is plain ESP for an SA that uses ESP in UDP.
    let runt = datagram(&[1, 2, 3]);
    let raw_sa = sa.replace(" encap espinudp 4500 4500 0.0.0.0", "");
    let (_, plain_esp, _) = tool("seal", &[&raw_sa], &[inner], "ka-raw");
    let (code, out, err) = tool("open", &[&sa], &[runt, plain_esp[0].clone()], "ka-bad");
    assert_eq!((code, out.len()), (1, 0), "{err}");
    assert!(err.contains("packet 1: UDP payload too short for ESP"), "{err}");
    assert!(
        err.contains("packet 2: plain ESP for SPI 0x00001000, whose SA uses ESP in UDP"),
        "{err}"
    );
}

/// RFC 3948 3.1.2: a transport-mode peer at 10.0.0.7 behind a NAT seals a TCP segment whose
/// checksum covers 10.0.0.7; the NAT rewrites the source to 203.0.113.9 (the UDP checksum is
/// 0, so only the IP header changes). Opened with OADDR 10.0.0.7, the TCP checksum is right
/// for the new source; opened without, it is left as it was (and wrong).
#[test]
fn transport_mode_checksums_follow_the_nat_with_the_original_address() {
    let sa = |oa: &str| format!("proto esp spi 0x3000 mode transport {GCM} encap espinudp 4500 4500 {oa}");
    let (oa, nat, dst) = ([10, 0, 0, 7], [203, 0, 113, 9], [198, 51, 100, 2]);
    let inner = vec![tcp4(oa, dst, 100), udp4(oa, dst, 30)];
    let (code, mut sealed, err) = tool("seal", &[&sa("0.0.0.0")], &inner, "oa");
    assert_eq!(code, 0, "{err}");
    for w in &mut sealed {
        w[12..16].copy_from_slice(&nat);
        w[10..12].copy_from_slice(&[0, 0]);
        let c = Ipv4HeaderSlice::from_slice(w)
            .unwrap()
            .to_header()
            .calc_header_checksum();
        w[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let checks = |pkts: &[Vec<u8>]| -> Vec<bool> {
        pkts.iter()
            .map(|p| {
                let ip = Ipv4HeaderSlice::from_slice(p).unwrap();
                assert_eq!(ip.source(), nat, "the source stays the NAT's");
                let body = &p[20..];
                if ip.protocol() == etherparse::IpNumber::TCP {
                    let (t, data) = TcpHeader::from_slice(body).unwrap();
                    t.checksum == t.calc_checksum_ipv4_raw(nat, dst, data).unwrap()
                } else {
                    let (u, data) = UdpHeader::from_slice(body).unwrap();
                    u.checksum == u.calc_checksum_ipv4_raw(nat, dst, data).unwrap()
                }
            })
            .collect()
    };
    let (code, fixed, err) = tool("open", &[&sa("10.0.0.7")], &sealed, "oa-fixed");
    assert_eq!(code, 0, "{err}");
    assert_eq!(checks(&fixed), [true, true], "fixed up with OADDR");
    // Apart from the checksums (and the NATed source), the packets are what was sealed.
    let blank = |p: &[u8]| {
        let mut p = p.to_vec();
        let at = if p[9] == 6 { 36 } else { 26 };
        for i in [10, 11, 12, 13, 14, 15, at, at + 1] {
            p[i] = 0;
        }
        p
    };
    for (f, i) in fixed.iter().zip(&inner) {
        assert_eq!(blank(f), blank(i));
    }
    let (code, left, err) = tool("open", &[&sa("0.0.0.0")], &sealed, "oa-none");
    assert_eq!(code, 0, "{err}");
    assert_eq!(checks(&left), [false, false], "no OADDR: no fix-up");
}

#[test]
fn bundles_and_bad_words_are_refused_before_any_packet() {
    let esp = format!("proto esp spi 0x1000 {GCM} encap espinudp 4500 4500 0.0.0.0");
    let ah = "proto ah spi 0x1001 auth 'hmac(sha1)' 0x0001020304050607080900010203040506070809";
    let (code, _, err) = tool("seal", &[&esp, ah], &[udp4([1, 1, 1, 1], [2, 2, 2, 2], 1)], "bundle");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--sa #1: an SA with `encap espinudp` must be the last of the bundle"),
        "{err}"
    );
    // ESP in UDP as the outermost SA of a bundle is fine.
    let comp = "proto comp spi 3 comp deflate";
    let plain = vec![udp4([1, 1, 1, 1], [2, 2, 2, 2], 300)];
    let (code, sealed, err) = tool("seal", &[comp, &esp], &plain, "bundle-ok");
    assert_eq!(code, 0, "{err}");
    assert_eq!(sealed[0][9], 17);
    let (code, opened, err) = tool("open", &[comp, &esp], &sealed, "bundle-ok");
    assert_eq!((code, opened), (0, plain), "{err}");
    let (code, _, err) = tool("seal", &[&esp.replace("espinudp", "espinudp-nonike")], &[], "nonike");
    assert_eq!(code, 2);
    assert!(
        err.contains("encap type \"espinudp-nonike\": not implemented; use espinudp"),
        "{err}"
    );
}

#[test]
fn check_config_shows_the_encap() {
    let p = tmp("show.toml");
    std::fs::write(
        &p,
        "[[sa]]\nname = \"e\"\nproto = \"esp\"\nspi = 0x10\naead = { alg = \"rfc4106(gcm(aes))\", key = \"0x0102030405060708090a0b0c0d0e0f1011121314\" }\nencap = { type = \"espinudp\", sport = 4500, dport = 4501, oa = \"10.0.0.7\" }\n",
    )
    .unwrap();
    let f = p.display().to_string();
    let (code, out, err) = run(IPSEC, &["check-config", &f]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("encap    espinudp (RFC 3948), UDP 4500 -> 4501, original address 10.0.0.7"),
        "{out}"
    );
    let (code, out, err) = run(IPSEC, &["check-config", "--json", &f]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["sas"][0]["encap"],
        serde_json::json!({"sport": 4500, "dport": 4501, "oa": "10.0.0.7"})
    );
}

/// tunneld's config: SAs that mix raw ESP and ESP in UDP, or whose ports disagree with
/// `[tunnel] encap`, stop it at start (exit 2) with the line and the SA named.
#[test]
fn tunneld_refuses_sas_that_disagree_about_encap() {
    let base = std::fs::read_to_string("examples/tunnel/udp-a.toml").unwrap();
    let with_sa_encap = base.replace(
        "icv = 128 }\n",
        "icv = 128 }\nencap = { type = \"espinudp\", sport = 4500, dport = 4500 }\n",
    );
    assert_eq!(with_sa_encap.matches("encap = {").count(), 2);
    let mix = tmp("mix.toml");
    std::fs::write(
        &mix,
        with_sa_encap.replacen("encap = { type = \"espinudp\", sport = 4500, dport = 4500 }\n", "", 1),
    )
    .unwrap();
    let (code, _, err) = run(TUNNELD, &["--config", &mix.display().to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("SA `esp-ab`: no `encap`, but SA `esp-ba`"), "{err}");
    let conflict = tmp("conflict.toml");
    std::fs::write(
        &conflict,
        with_sa_encap.replace("# encap_sport = 4500", "encap_sport = 4600"),
    )
    .unwrap();
    let f = conflict.display().to_string();
    let (code, _, err) = run(TUNNELD, &["--config", &f]);
    assert_eq!(code, 2, "{err}");
    // The error names the `encap = "espinudp"` line of [tunnel].
    let line = 1 + base
        .lines()
        .position(|l| l.starts_with("encap = \"espinudp\""))
        .unwrap();
    assert!(
        err.contains(&format!("{f}:{line}:")) && err.contains("encap_sport 4600"),
        "{err}"
    );
    // The example with the SAs' encap instead of [tunnel] encap is accepted by check-config.
    let sa_only = tmp("sa-only.toml");
    std::fs::write(&sa_only, with_sa_encap.replace("encap = \"espinudp\"", "# encap")).unwrap();
    let (code, out, err) = run(IPSEC, &["check-config", &sa_only.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("encap    espinudp").count(), 2, "{out}");
}
