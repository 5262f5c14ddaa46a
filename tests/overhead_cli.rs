//! `ipsec overhead`: the binary's JSON and text output checked against packets sealed with the
//! same SPECs, and its errors. (The speedup model computes its wire bytes with the same
//! calculator; `src/model/wire.rs` has hand-derived known answers for the paper's setup.)

use ipsec::bundle::{AnySa, Bundle};
use ipsec::spec;
use ipsec_core::PacketBuf;
use serde_json::Value;
use std::process::{Command, Output};

const ESP_TUNNEL: &str = "proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 enc 'cbc(aes)' \
    0x000102030405060708090a0b0c0d0e0f auth-trunc 'hmac(sha1)' 0x0001020304050607080910111213141516171819 96";
const GCM_V6_TUNNEL: &str = "proto esp spi 0x1001 mode tunnel src 2001:db8::1 dst 2001:db8::2 \
    aead 'rfc4106(gcm(aes))' 0x000102030405060708090a0b0c0d0e0f10111213 128";
const GCM_TRANSPORT: &str = "proto esp spi 0x1002 mode transport aead 'rfc4106(gcm(aes))' \
    0x000102030405060708090a0b0c0d0e0f10111213 96";
const COMP: &str = "proto comp spi 2 mode transport comp deflate";
const DES3: &str = "proto esp spi 0x1003 mode transport enc 'cbc(des3_ede)' \
    0x000102030405060708090a0b0c0d0e0f0001020304050607";
const AH_SHA1: &str = "proto ah spi 0x2000 mode transport auth 'hmac(sha1)' 0x0001020304050607080910111213141516171819";
const AH_SHA384: &str = "proto ah spi 0x2001 mode transport auth 'hmac(sha384)' \
    0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f";

fn ipsec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipsec")).args(args).output().unwrap()
}

fn overhead_json(sas: &[&str], extra: &[&str]) -> Value {
    let mut args = vec!["overhead"];
    for s in sas {
        args.extend(["--sa", s]);
    }
    args.extend(extra);
    args.push("--json");
    let out = ipsec(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn n(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}")) as usize
}

/// Deterministic incompressible bytes.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as u8
        })
        .collect()
}

/// An inner packet of exactly `len` bytes: IPv4 or IPv6, TCP or UDP.
fn packet(v6: bool, tcp: bool, len: usize) -> Vec<u8> {
    let b = if v6 {
        let s = [
            0x20, 1, 0xd, 0xb8, 0x3c, 0x91, 0x5e, 0xa7, 0x12, 0xf4, 0x6b, 0x88, 0xd9, 0x27, 0x4e, 0xb1,
        ];
        let mut d = s;
        d[15] = 0x77;
        etherparse::PacketBuilder::ipv6(s, d, 64)
    } else {
        etherparse::PacketBuilder::ipv4([198, 51, 100, 17], [192, 88, 99, 201], 64)
    };
    let hl = if v6 { 40 } else { 20 } + if tcp { 20 } else { 8 };
    let mut out = Vec::new();
    if tcp {
        b.tcp(1, 2, 3, 4).write(&mut out, &noise(len - hl)).unwrap();
    } else {
        b.udp(1, 2).write(&mut out, &noise(len - hl)).unwrap();
    }
    assert_eq!(out.len(), len);
    out
}

fn bundle(sas: &[&str]) -> Bundle {
    Bundle::new(
        sas.iter()
            .map(|s| {
                let p = spec::parse(s).unwrap();
                AnySa::new(&p.params, p.comp).unwrap()
            })
            .collect(),
    )
}

fn sealed_len(b: &mut Bundle, pkt: &[u8]) -> usize {
    let mut raw = vec![0u8; 512 + pkt.len() + 512];
    raw[512..512 + pkt.len()].copy_from_slice(pkt);
    let mut buf = PacketBuf::new(&mut raw, 512, pkt.len()).unwrap();
    b.seal(&mut buf).unwrap();
    buf.len()
}

#[test]
fn json_figures_match_sealed_packets() {
    let cases: &[(&[&str], bool, usize)] = &[
        (&[ESP_TUNNEL], false, 1500),
        (&[ESP_TUNNEL], true, 1280),
        (&[GCM_V6_TUNNEL], false, 1500),
        (&[GCM_TRANSPORT], true, 1280),
        (&[AH_SHA384], true, 1500),
        (&[ESP_TUNNEL, AH_SHA384], true, 1400),
        (&[COMP, DES3, AH_SHA1], true, 1280),
        (&[COMP, GCM_TRANSPORT, AH_SHA1], false, 576),
    ];
    for &(sas, v6, mtu) in cases {
        let ver = if v6 { "6" } else { "4" };
        let j = overhead_json(sas, &["--link-mtu", &mtu.to_string(), "--inner", ver]);
        let max = n(&j, "max_inner_mtu");
        assert_eq!(n(&j, "inner_len"), max);
        assert_eq!(n(&j, "link_mtu"), mtu);
        let mut b = bundle(sas);
        let fits = sealed_len(&mut b, &packet(v6, false, max));
        assert!(fits <= mtu, "{sas:?} {mtu}: {max} seals to {fits}");
        assert_eq!(n(&j, "overhead_bytes"), fits - max, "{sas:?}");
        assert_eq!(n(&j, "sealed_len"), fits);
        assert_eq!(j["fits_link_mtu"], Value::Bool(true));
        let over = sealed_len(&mut b, &packet(v6, false, max + 1));
        assert!(over > mtu, "{sas:?} {mtu}: {} seals to {over}", max + 1);
        // The breakdown adds up, per SA and in total.
        let sum: u64 = j["breakdown"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(sum as usize, fits - max);
        let per: usize = j["sas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| n(s, "overhead_bytes"))
            .sum();
        assert_eq!(per, fits - max);
        assert_eq!(j["sas"].as_array().unwrap().len(), sas.len());
        assert_eq!(n(j["sas"].as_array().unwrap().last().unwrap(), "len_after"), fits);

        // A given size.
        let j = overhead_json(
            sas,
            &["--link-mtu", &mtu.to_string(), "--inner", ver, "--inner-len", "777"],
        );
        let s = sealed_len(&mut b, &packet(v6, false, 777));
        assert_eq!((n(&j, "inner_len"), n(&j, "sealed_len")), (777, s));
        assert_eq!(n(&j, "overhead_bytes"), s - 777);
        assert_eq!(n(&j, "max_inner_mtu"), max);
    }
}

/// Fragments of a sealed packet, counted by walking it (this test's own routine): every
/// fragment repeats the first `unfrag` bytes (plus an 8-byte Fragment header for IPv6).
fn count_fragments(sealed: usize, unfrag: usize, v6: bool, mtu: usize) -> (usize, usize) {
    if sealed <= mtu {
        return (1, sealed);
    }
    let head = unfrag + if v6 { 8 } else { 0 };
    let (mut left, mut packets, mut wire) = (sealed - unfrag, 0, 0);
    while left > 0 {
        let room = mtu - head;
        let take = if left <= room { left } else { room / 8 * 8 };
        left -= take;
        packets += 1;
        wire += head + take;
    }
    (packets, wire)
}

#[test]
fn json_payload_figures() {
    for (sas, v6, tcp, mtu) in [
        (&[ESP_TUNNEL][..], false, true, 1500),
        (&[GCM_TRANSPORT][..], true, false, 1280),
        (&[COMP, DES3, AH_SHA1][..], true, true, 1280),
    ] {
        for payload in [0usize, 1, 1024, 4096, 64512] {
            let mtu_s = mtu.to_string();
            let p = payload.to_string();
            let upper = if tcp { "tcp" } else { "udp" };
            let ver = if v6 { "6" } else { "4" };
            let j = overhead_json(
                sas,
                &["--link-mtu", &mtu_s, "--payload", &p, "--upper", upper, "--inner", ver],
            );
            let pj = &j["payload"];
            assert_eq!((n(pj, "bytes"), pj["upper"].as_str()), (payload, Some(upper)));
            let hl = if v6 { 40 } else { 20 } + if tcp { 20 } else { 8 };
            let mut b = bundle(sas);

            // One packet, fragmented after sealing.
            let f = &pj["fragmented"];
            let sealed = sealed_len(&mut b, &packet(v6, tcp, hl + payload));
            assert_eq!(n(f, "sealed_len"), sealed, "{sas:?} {payload}");
            let outer_v6 = n(&j, "outer_version") == 6;
            let unfrag = if outer_v6 { 40 } else { 20 };
            let (packets, wire) = count_fragments(sealed, unfrag, outer_v6, mtu);
            assert_eq!(
                (n(f, "packets"), n(f, "wire_bytes")),
                (packets, wire),
                "{sas:?} {payload}"
            );

            // Segments sized to the path MTU: seal each one.
            let s = &pj["segmented"];
            let per = n(s, "segment_payload");
            assert_eq!(per, n(&j, "max_inner_mtu") - hl);
            let (mut left, mut packets, mut wire) = (payload, 0, 0);
            loop {
                let take = left.min(per);
                let l = sealed_len(&mut b, &packet(v6, tcp, hl + take));
                assert!(l <= mtu);
                wire += l;
                packets += 1;
                left -= take;
                if left == 0 {
                    break;
                }
            }
            assert_eq!(
                (n(s, "packets"), n(s, "wire_bytes")),
                (packets, wire),
                "{sas:?} {payload}"
            );
        }
    }
}

#[test]
fn udp_encap_and_defaults() {
    let plain = overhead_json(&[GCM_V6_TUNNEL], &["--link-mtu", "1500"]);
    let nat = overhead_json(&[GCM_V6_TUNNEL], &["--link-mtu", "1500", "--udp-encap"]);
    assert_eq!(n(&nat, "max_inner_mtu") + 8, n(&plain, "max_inner_mtu"));
    assert_eq!(n(&nat["breakdown"], "udp_encap"), 8);
    // An SA with `encap espinudp` counts the UDP header without the flag.
    let sa_encap = format!("{GCM_V6_TUNNEL} encap espinudp 4500 4500 ::");
    let by_sa = overhead_json(&[&sa_encap], &["--link-mtu", "1500"]);
    assert_eq!(n(&by_sa, "max_inner_mtu"), n(&nat, "max_inner_mtu"));
    assert_eq!(n(&by_sa["breakdown"], "udp_encap"), 8);
    // No --inner: a tunnel SA says nothing about the inner version, so IPv4.
    assert_eq!(n(&plain, "inner_version"), 4);
    // A transport SA with IPv6 addresses: IPv6 inner packets.
    let v6 = "proto esp spi 9 mode transport src 2001:db8::1 dst 2001:db8::2 aead 'rfc4106(gcm(aes))' \
              0x000102030405060708090a0b0c0d0e0f10111213 128";
    assert_eq!(n(&overhead_json(&[v6], &["--link-mtu", "1500"]), "inner_version"), 6);
    // IPv4 options in front of a transport-mode ESP header.
    let j = overhead_json(&[GCM_TRANSPORT], &["--link-mtu", "1500", "--inner-header-len", "24"]);
    assert_eq!(n(&j, "inner_header_len"), 24);
}

#[test]
fn text_output() {
    let out = ipsec(&[
        "overhead",
        "--sa",
        ESP_TUNNEL,
        "--sa",
        AH_SHA1,
        "--link-mtu",
        "1500",
        "--payload",
        "4096",
    ]);
    assert!(out.status.success());
    let t = String::from_utf8(out.stdout).unwrap();
    let j = overhead_json(&[ESP_TUNNEL, AH_SHA1], &["--link-mtu", "1500"]);
    assert!(
        t.contains(&format!("max inner MTU: {} bytes", n(&j, "max_inner_mtu"))),
        "{t}"
    );
    for row in [
        "outer IP header",
        "AH header with ICV",
        "ESP padding",
        "ESP ICV",
        "by SA: esp",
        "segments sized",
    ] {
        assert!(t.contains(row), "{row} missing in\n{t}");
    }
}

#[test]
fn errors_exit_2_with_a_message() {
    let bad = ipsec(&[
        "overhead",
        "--sa",
        "proto esp spi 1 enc 'cbc(aes)' 0x00",
        "--link-mtu",
        "1500",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    let e = String::from_utf8_lossy(&bad.stderr);
    assert!(e.contains("--sa #1") && e.contains("16, 24 or 32"), "{e}");

    let small = ipsec(&["overhead", "--sa", ESP_TUNNEL, "--link-mtu", "80"]);
    assert_eq!(small.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&small.stderr).contains("too small"));

    let hdr = ipsec(&[
        "overhead",
        "--sa",
        ESP_TUNNEL,
        "--link-mtu",
        "1500",
        "--inner-header-len",
        "21",
    ]);
    assert_eq!(hdr.status.code(), Some(2));
    let short = ipsec(&[
        "overhead",
        "--sa",
        ESP_TUNNEL,
        "--link-mtu",
        "1500",
        "--inner-len",
        "10",
    ]);
    assert_eq!(short.status.code(), Some(2));
}

/// A payload beyond one IP packet still has segments; one packet cannot carry it.
#[test]
fn payload_beyond_one_ip_packet() {
    let j = overhead_json(&[ESP_TUNNEL], &["--link-mtu", "1500", "--payload", "1000000"]);
    let p = &j["payload"];
    assert_eq!(
        n(&p["segmented"], "packets"),
        1_000_000usize.div_ceil(n(&p["segmented"], "segment_payload"))
    );
    assert!(p["fragmented"].is_null());
    assert!(p["fragmented_error"].as_str().unwrap().contains("exceeds"));
    let out = ipsec(&[
        "overhead",
        "--sa",
        ESP_TUNNEL,
        "--link-mtu",
        "1500",
        "--payload",
        "1000000",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("impossible"));
}
