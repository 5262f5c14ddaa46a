//! Configuration files end to end: TOML and setkey(8) errors that name the right line, the
//! setkey example importing to the same SAs and policies as the TOML one, `ipsec
//! check-config` on good and bad files, and two engines built from TOML passing packets
//! through an IPComp + ESP + AH bundle.

use ipsec::config::{self, setkey, ActionConfig, Config, ErrorKind, Format, Item};
use ipsec::core::ip::proto;
use ipsec::core::PacketBuf;
use ipsec::engine::{DropReason, Dropped, Engine, Verdict};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config").join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(example(name)).unwrap()
}

fn load(name: &str) -> Config {
    config::load(&example(name), None)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .config
}

/// The 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("`{needle}` not found"))
        + 1
}

fn toml_err(text: &str) -> config::ConfigError {
    match config::parse(text, Format::Toml) {
        Err(e) => e,
        Ok(l) => l.config.build(Duration::ZERO).expect_err("should fail"),
    }
}

fn setkey_err(text: &str) -> config::ConfigError {
    match setkey::parse(text, &setkey::Options::default()) {
        Err(e) => e,
        Ok((c, _)) => c.build(Duration::ZERO).expect_err("should fail"),
    }
}

#[test]
fn examples_are_valid_and_detected() {
    for (name, format) in [
        ("host-a.toml", Format::Toml),
        ("host-b.toml", Format::Toml),
        ("setkey.conf", Format::Setkey),
    ] {
        let l = config::load(&example(name), None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(l.format, format, "{name}");
        assert!(l.warnings.is_empty(), "{name}: {:?}", l.warnings);
        let e = l.config.build(Duration::ZERO).unwrap();
        assert_eq!((e.sad().len(), e.spd().policies().len()), (6, 4), "{name}");
    }
    // By content when the extension says nothing.
    assert_eq!(
        Format::detect(Path::new("x"), "# c\nadd 1 2 esp 1 -E null;"),
        Format::Setkey
    );
    assert_eq!(Format::detect(Path::new("x"), "[[sa]]\nname = \"a\""), Format::Toml);
}

#[test]
fn setkey_conf_imports_to_the_same_sas_and_policies_as_the_toml() {
    let toml = load("host-a.toml");
    let sk = load("setkey.conf");
    assert_eq!(toml.sas.len(), sk.sas.len());
    for (t, s) in toml.sas.iter().zip(&sk.sas) {
        assert_eq!(t.params, s.params, "{} vs {}", t.name, s.name);
        assert_eq!(t.comp, s.comp, "{} vs {}", t.name, s.name);
        assert_eq!(t.lifetime, s.lifetime, "{} vs {}", t.name, s.name);
    }
    // Policies: same directions, selectors and actions, with bundles compared SA by SA.
    let params = |c: &Config, n: &str| {
        c.sas
            .iter()
            .find(|s| s.name == n)
            .map(|s| (s.params.clone(), s.comp))
            .unwrap()
    };
    assert_eq!(toml.policies.len(), sk.policies.len());
    for (t, s) in toml.policies.iter().zip(&sk.policies) {
        assert_eq!((t.dir, t.selector), (s.dir, s.selector));
        match (&t.action, &s.action) {
            (ActionConfig::Protect(a), ActionConfig::Protect(b)) => {
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(b) {
                    assert_eq!(params(&toml, x), params(&sk, y), "{x} vs {y}");
                }
            }
            (a, b) => assert_eq!(a, b),
        }
    }
    // And both build to engines that interoperate: TOML-built A seals, B (TOML) opens, and a
    // setkey-built A does the same.
    for a in [&toml, &sk] {
        let mut a = a.build(Duration::ZERO).unwrap();
        let mut b = load("host-b.toml").build(Duration::ZERO).unwrap();
        let pkt = udp("192.0.2.1", "192.0.2.2", 7, 9, 600);
        let (r, wire) = run(&pkt, |buf| a.outbound(buf, Duration::ZERO));
        assert_eq!(r, Ok(Verdict::Protected(3)));
        let (r, inner) = run(&wire, |buf| b.inbound(buf, Duration::ZERO));
        assert_eq!(r, Ok(Verdict::Protected(3)));
        assert_eq!(inner, pkt);
    }
}

#[test]
fn toml_errors_name_the_right_line() {
    let good = read("host-a.toml");

    // Syntax: an unterminated string.
    let bad = good.replacen("name = \"esp-ba\"", "name = \"esp-ba", 1);
    let e = toml_err(&bad);
    assert_eq!(e.line, Some(line_of(&good, "name = \"esp-ba\"")), "{e}");
    assert!(matches!(e.kind, ErrorKind::Syntax(_)), "{e}");

    // An unknown field.
    let bad = good.replacen("spi = 0x1002\n", "spi = 0x1002\nwindow = 64\n", 1);
    let e = toml_err(&bad);
    assert_eq!(e.line, Some(line_of(&good, "spi = 0x1002") + 1), "{e}");
    assert!(e.to_string().contains("unknown field `window`"), "{e}");

    // A key of the wrong length: the line of that key, the SA named.
    let bad = good.replacen("0x606162636465666768696a6b6c6d6e6f", "0x6061626364", 1);
    let e = toml_err(&bad);
    assert_eq!(
        e.line,
        Some(line_of(&good, "0x606162636465666768696a6b6c6d6e6f")),
        "{e}"
    );
    assert_eq!(e.item, Some(Item::Sa("esp-ba".into())));
    assert!(e.to_string().contains("16, 24 or 32 bytes, got 5"), "{e}");

    // An unknown algorithm.
    let bad = good.replacen("hmac(sha256)", "hmac(sha224)", 1);
    let e = toml_err(&bad);
    assert_eq!(e.line, Some(line_of(&good, "hmac(sha256)")), "{e}");
    assert!(
        matches!(e.kind, ErrorKind::UnknownAlgorithm { kind: "auth", .. }),
        "{e}"
    );

    // A bad key inside the xfrm words: the xfrm line.
    let bad = good.replacen("'hmac(sha1)' 0x4041", "'hmac(sha1)' 0x41", 1);
    let e = toml_err(&bad);
    assert_eq!(e.line, Some(line_of(&good, "'hmac(sha1)' 0x4041")), "{e}");
    assert_eq!(e.item, Some(Item::Sa("ah-ab".into())));

    // A bundle naming an SA that does not exist.
    let bad = good.replacen("[\"comp-ba\", \"esp-ba\", \"ah-ba\"]", "[\"comp-ba\", \"esp-ab2\"]", 1);
    let e = toml_err(&bad);
    assert_eq!(
        e.line,
        Some(line_of(&good, "[\"comp-ba\", \"esp-ba\", \"ah-ba\"]")),
        "{e}"
    );
    assert_eq!(e.kind, ErrorKind::UnknownSa("esp-ab2".into()));

    // Found only when the engine is built: a bundle out of seal order (the policy's line),
    // and two SAs with the same protocol, SPI and destination (the second SA's line).
    let bad = good.replacen("[\"comp-ab\", \"esp-ab\", \"ah-ab\"]", "[\"ah-ab\", \"esp-ab\"]", 1);
    let e = toml_err(&bad);
    assert_eq!(e.line, Some(line_of(&good, "name = \"a-to-b\"") - 1), "{e}");
    assert!(matches!(e.kind, ErrorKind::Install(_)), "{e}");
    assert_eq!(
        e.item,
        Some(Item::Policy {
            index: 3,
            name: Some("a-to-b".into())
        })
    );
    let bad = good.replacen(
        "spi = 0x4002",
        "spi = 0x4001\ndst = \"192.0.2.2\"\nsrc = \"192.0.2.1\"",
        1,
    );
    let bad = bad.replacen("src = \"192.0.2.2\"\ndst = \"192.0.2.1\"\ncomp", "comp", 1);
    let e = toml_err(&bad);
    assert_eq!(e.line, Some(line_of(&good, "name = \"comp-ba\"") - 1), "{e}");
    assert!(
        e.to_string()
            .contains("same protocol, SPI and destination as SA `comp-ab`"),
        "{e}"
    );
}

#[test]
fn setkey_errors_name_the_right_line() {
    let good = read("setkey.conf");

    let bad = good.replacen("-A hmac-sha1 0x4041", "-A keyed-sha1 0x4041", 1);
    let e = setkey_err(&bad);
    assert_eq!(e.line, Some(line_of(&good, "-A hmac-sha1 0x4041")), "{e}");
    assert!(matches!(e.kind, ErrorKind::Unsupported(_)), "{e}");
    assert_eq!(e.item, Some(Item::Sa("ah-0x2001".into())));

    let bad = good.replacen("-E aes-cbc 0x6061", "-E aes-cbc 0x61", 1);
    let e = setkey_err(&bad);
    assert_eq!(e.line, Some(line_of(&good, "-E aes-cbc 0x6061")), "{e}");

    // A missing `;` runs two statements together: the error is where the second begins.
    let bad = good.replacen("-m transport -C deflate -R;", "-m transport -C deflate -R", 1);
    let e = setkey_err(&bad);
    assert_eq!(
        e.line,
        Some(line_of(&good, "add 192.0.2.1 192.0.2.2 esp 0x1001")),
        "{e}"
    );

    // Remove the A->B AH SA: the policy's ah request has nothing to resolve to.
    let start = good.find("add 192.0.2.1 192.0.2.2 ah 0x2001").unwrap();
    let end = start + good[start..].find(';').unwrap() + 1;
    let bad = format!("{}{}", &good[..start], &good[end..]);
    let e = setkey_err(&bad);
    let req_line = line_of(&good, "-P out ipsec") + 3;
    assert_eq!(e.line, Some(req_line - 1), "{e}"); // one line fewer above it now
    assert!(matches!(e.kind, ErrorKind::Unresolved(_)), "{e}");
    assert!(e.to_string().contains("ah/transport//require"), "{e}");
}

fn ipsec(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ipsec")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_config_on_good_files() {
    let (code, out, err) = ipsec(&["check-config", example("host-a.toml").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("valid toml config: 6 SAs, 4 policies"), "{out}");
    assert!(
        out.contains("esp-ab (line 22): esp spi 0x1001 transport 192.0.2.1 -> 192.0.2.2"),
        "{out}"
    );
    assert!(out.contains("auth     hmac(sha256), 256-bit key, 128-bit ICV"), "{out}");
    assert!(
        out.contains("lifetime soft 3000 s, 900000000 bytes; hard 3600 s, 1000000000 bytes"),
        "{out}"
    );
    assert!(out.contains("protect comp-ab, esp-ab, ah-ab"), "{out}");
    // Policies in match order: out ones first, the IKE bypass before the protect.
    let bypass = out
        .find("out 1 192.0.2.1/32 192.0.2.2/32 udp   500   500   bypass")
        .expect(&out);
    // `#` is the policy's number in the file (the third), as error messages give it.
    let protect = out.find("out 3 192.0.2.1/32 192.0.2.2/32 any").expect(&out);
    assert!(bypass < protect);
    assert!(!out.contains("101112131415"), "keys must not be printed:\n{out}");

    let (code, out, err) = ipsec(&["check-config", "--json", example("setkey.conf").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["format"], "setkey");
    assert_eq!(v["sas"].as_array().unwrap().len(), 6);
    assert_eq!(v["sas"][1]["name"], "esp-0x1001");
    assert_eq!(v["sas"][1]["auth"]["icv_bits"], 128);
    assert_eq!(v["sas"][1]["lifetime"]["hard"]["seconds"], 3600);
    assert_eq!(
        v["policies"][1]["bundle"],
        serde_json::json!(["comp-0x4001", "esp-0x1001", "ah-0x2001"])
    );
    assert!(!out.contains("101112131415"));

    // A setkey file without a telling extension, named by --format; --sha256-96.
    let p = tmp("host-a.setkey-text", &read("setkey.conf"));
    let (code, out, _) = ipsec(&["check-config", "--format", "setkey", "--sha256-96", p.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("hmac(sha256), 256-bit key, 96-bit ICV"), "{out}");
}

#[test]
fn check_config_on_bad_files() {
    let good = read("host-a.toml");
    let bad = good.replacen("0x101112131415161718191a1b1c1d1e1f", "0x1011", 1);
    let p = tmp("bad-key.toml", &bad);
    let (code, out, err) = ipsec(&["check-config", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(out.is_empty(), "{out}");
    let line = line_of(&good, "0x101112131415161718191a1b1c1d1e1f");
    assert!(
        err.contains(&format!(
            "bad-key.toml:{line}: SA `esp-ab`: key for cbc(aes) must be 16, 24 or 32 bytes, got 2 bytes"
        )),
        "{err}"
    );

    let (code, out, _) = ipsec(&["check-config", "--json", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["line"], line);

    let p = tmp("bad.conf", "flush;\nadd 192.0.2.1 192.0.2.2 esp 0x10\n  -E aes-cbc 0x00112233445566778899aabbccddeeff\n  -A hmac-sha1 0x0011;\n");
    let (code, _, err) = ipsec(&["check-config", p.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.conf:4: SA `esp-0x10`: key for hmac(sha1) must be 20 bytes"),
        "{err}"
    );

    let (code, _, err) = ipsec(&["check-config", "/nonexistent/ipsec.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/ipsec.toml"), "{err}");
}

const HEAD: usize = 256;

/// Runs `f` on a buffer holding `pkt` with room around it; returns the result and the packet.
fn run(pkt: &[u8], f: impl FnOnce(&mut PacketBuf) -> Result<Verdict, Dropped>) -> (Result<Verdict, Dropped>, Vec<u8>) {
    let mut raw = vec![0u8; HEAD + pkt.len() + 65536];
    raw[HEAD..HEAD + pkt.len()].copy_from_slice(pkt);
    let mut buf = PacketBuf::new(&mut raw, HEAD, pkt.len()).unwrap();
    let r = f(&mut buf);
    (r, buf.packet().to_vec())
}

fn payload(len: usize) -> Vec<u8> {
    b"GET /index.html HTTP/1.1\r\nHost: example.org\r\n"
        .iter()
        .cycle()
        .take(len)
        .copied()
        .collect()
}

fn builder(src: &str, dst: &str) -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
    match (src.parse().unwrap(), dst.parse().unwrap()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => etherparse::PacketBuilder::ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => etherparse::PacketBuilder::ipv6(s.octets(), d.octets(), 64),
        _ => panic!("mixed families"),
    }
}

fn udp(src: &str, dst: &str, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    builder(src, dst)
        .udp(sport, dport)
        .write(&mut out, &payload(len))
        .unwrap();
    out
}

fn tcp(src: &str, dst: &str, sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    builder(src, dst)
        .tcp(sport, dport, 1, 1000)
        .write(&mut out, &payload(len))
        .unwrap();
    out
}

/// The protocol of an IPv4 packet's header.
fn v4_proto(p: &[u8]) -> u8 {
    p[9]
}

fn engines() -> (Engine, Engine) {
    let a = load("host-a.toml").build(Duration::ZERO).unwrap();
    let b = load("host-b.toml").build(Duration::ZERO).unwrap();
    (a, b)
}

#[test]
fn two_hosts_from_toml_pass_packets_through_ipcomp_esp_ah() {
    let (mut a, mut b) = engines();
    let now = Duration::from_secs(1);
    for (i, len) in [200usize, 1000, 1400].into_iter().enumerate() {
        // A -> B.
        let pkt = tcp("192.0.2.1", "192.0.2.2", 40000, 80, len);
        let (r, wire) = run(&pkt, |buf| a.outbound(buf, now));
        assert_eq!(r, Ok(Verdict::Protected(3)), "len {len}");
        assert_eq!(v4_proto(&wire), proto::AH, "AH is outermost");
        assert!(wire.len() < pkt.len(), "compressible text shrinks even with ESP and AH");
        let (r, inner) = run(&wire, |buf| b.inbound(buf, now));
        assert_eq!(r, Ok(Verdict::Protected(3)), "len {len}");
        assert_eq!(inner, pkt);
        // A replay of the same wire packet is refused.
        let (r, _) = run(&wire, |buf| b.inbound(buf, now));
        assert_eq!(r.unwrap_err().reason, DropReason::Replay);

        // B -> A, with B's outbound policy and A's inbound one.
        let pkt = tcp("192.0.2.2", "192.0.2.1", 80, 40000, len + i);
        let (r, wire) = run(&pkt, |buf| b.outbound(buf, now));
        assert_eq!(r, Ok(Verdict::Protected(3)));
        let (r, inner) = run(&wire, |buf| a.inbound(buf, now));
        assert_eq!(r, Ok(Verdict::Protected(3)));
        assert_eq!(inner, pkt);
    }

    // A packet too short to compress still goes through ESP and AH (IPComp may be skipped).
    let pkt = udp("192.0.2.1", "192.0.2.2", 1, 2, 10);
    let (r, wire) = run(&pkt, |buf| a.outbound(buf, now));
    assert_eq!(r, Ok(Verdict::Protected(2)));
    let (r, inner) = run(&wire, |buf| b.inbound(buf, now));
    assert_eq!(r, Ok(Verdict::Protected(2)));
    assert_eq!(inner, pkt);

    // IKE passes in the clear both ways; B accepts it unprotected.
    let ike = udp("192.0.2.1", "192.0.2.2", 500, 500, 300);
    let (r, wire) = run(&ike, |buf| a.outbound(buf, now));
    assert_eq!((r, &wire), (Ok(Verdict::Bypass), &ike));
    assert_eq!(run(&wire, |buf| b.inbound(buf, now)).0, Ok(Verdict::Bypass));

    // Clear traffic that should have been protected is refused by B's inbound policy, and
    // traffic to a third host matches no policy at A.
    let (r, _) = run(&tcp("192.0.2.1", "192.0.2.2", 1, 80, 100), |buf| b.inbound(buf, now));
    assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);
    let (r, _) = run(&tcp("192.0.2.1", "192.0.2.3", 1, 80, 100), |buf| a.outbound(buf, now));
    assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);

    // Counters at B: three good packets per size plus the short one on each inbound SA.
    let snap = b.snapshot(now);
    let esp_ab = snap.sas.iter().find(|s| s.name == "esp-ab").unwrap();
    assert_eq!(esp_ab.inbound.packets, 4);
    let ah_ab = snap.sas.iter().find(|s| s.name == "ah-ab").unwrap();
    assert_eq!(ah_ab.inbound.drops.replay, 3);
}

#[test]
fn ipv6_tunnel_gateways_with_aead_ports_and_lifetimes() {
    const GCM: &str = "0x000102030405060708090a0b0c0d0e0f10111213";
    let sas = format!(
        r#"
[[sa]]
name = "esp-ab"
proto = "esp"
spi = 0x5001
mode = "tunnel"
src = "2001:db8::a"
dst = "2001:db8::b"
aead = {{ alg = "rfc4106(gcm(aes))", key = "{GCM}", icv = 96 }}
esn = true
replay_window = 1024
lifetime = {{ hard = {{ packets = 3 }} }}

[[sa]]
name = "esp-ba"
xfrm = "proto esp spi 0x5002 mode tunnel src 2001:db8::b dst 2001:db8::a aead 'rfc4106(gcm(aes))' {GCM} 128 flag esn"
"#
    );
    let policies = |out_src: &str, out_dst: &str, ports: &str, out_sa: &str, in_sa: &str| {
        format!(
            r#"
[[policy]]
dir = "out"
src = "{out_src}"
dst = "{out_dst}"
proto = "tcp"
{ports}
action = "protect"
bundle = ["{out_sa}"]

[[policy]]
dir = "out"
src = "{out_src}"
dst = "{out_dst}"
action = "discard"

[[policy]]
dir = "in"
src = "{out_dst}"
dst = "{out_src}"
proto = 6
action = "protect"
bundle = ["{in_sa}"]
"#
        )
    };
    let a_text = format!(
        "{sas}{}",
        policies(
            "2001:db8:a::/48",
            "2001:db8:b::/48",
            "dst_port = \"80-443\"",
            "esp-ab",
            "esp-ba"
        )
    );
    let b_text = format!(
        "{sas}{}",
        policies(
            "2001:db8:b::/48",
            "2001:db8:a::/48",
            "src_port = \"80-443\"",
            "esp-ba",
            "esp-ab"
        )
    );
    let a_cfg = config::parse(&a_text, Format::Toml).unwrap().config;
    assert!(a_cfg.sas[0].params.esn);
    assert_eq!(a_cfg.sas[0].params.aead.as_ref().unwrap().icv_len, 12);
    let mut a = a_cfg.build(Duration::ZERO).unwrap();
    let mut b = config::parse(&b_text, Format::Toml)
        .unwrap()
        .config
        .build(Duration::ZERO)
        .unwrap();
    let now = Duration::ZERO;

    for n in 0..3 {
        let pkt = tcp("2001:db8:a::10", "2001:db8:b::20", 5000 + n, 443, 500);
        let (r, wire) = run(&pkt, |buf| a.outbound(buf, now));
        assert_eq!(r, Ok(Verdict::Protected(1)));
        assert_eq!(wire[6], proto::ESP, "outer IPv6 next header");
        assert_eq!(
            &wire[8..24],
            &"2001:db8::a".parse::<std::net::Ipv6Addr>().unwrap().octets()
        );
        let (r, inner) = run(&wire, |buf| b.inbound(buf, now));
        assert_eq!(r, Ok(Verdict::Protected(1)));
        assert_eq!(inner, pkt);
    }
    // The hard packet limit (3) from the TOML lifetime stops the SA.
    let (r, _) = run(&tcp("2001:db8:a::10", "2001:db8:b::20", 1, 443, 100), |buf| {
        a.outbound(buf, now)
    });
    assert_eq!(r.unwrap_err().reason, DropReason::Expired);
    // Port 22 is outside 80-443: the discard policy after it matches.
    let (r, _) = run(&tcp("2001:db8:a::10", "2001:db8:b::20", 1, 22, 100), |buf| {
        a.outbound(buf, now)
    });
    assert_eq!(r.unwrap_err().reason, DropReason::PolicyDiscard);
    // The replies (from ports 80-443 at B) use the SA given in xfrm words.
    let pkt = tcp("2001:db8:b::20", "2001:db8:a::10", 443, 5000, 700);
    let (r, wire) = run(&pkt, |buf| b.outbound(buf, now));
    assert_eq!(r, Ok(Verdict::Protected(1)));
    let (r, inner) = run(&wire, |buf| a.inbound(buf, now));
    assert_eq!(r, Ok(Verdict::Protected(1)));
    assert_eq!(inner, pkt);
}

#[test]
fn check_config_prints_the_tunnel_table() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tunnel/esp-a.toml");
    let run = |json: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_ipsec"));
        c.arg("check-config").arg(&file);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(false);
    assert!(text.contains("\ntunneld settings (line 14):\n"), "{text}");
    assert!(text.contains("  tun   ipsec0\n"), "{text}");
    assert!(
        text.contains("  mtu   default (largest inner packet that fits 1500 bytes)\n"),
        "{text}"
    );
    assert!(text.contains("  local 10.99.0.1\n  peer  10.99.0.2\n"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&run(true)).unwrap();
    assert_eq!(v["tunnel"]["peer"], "10.99.0.2");
    assert_eq!(v["tunnel"]["mtu"], serde_json::Value::Null);
    // A file without the table prints none.
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config/host-a.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ipsec"))
        .arg("check-config")
        .arg(host)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("tunneld settings"));
    // Several peers and a local address of each IP version.
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tunnel/peers-a.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ipsec"))
        .arg("check-config")
        .arg(&peers)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  local 10.99.0.1, fd00:98::1\n  peers 10.99.0.2, fd00:98::3\n"),
        "{text}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ipsec"))
        .arg("check-config")
        .arg(&peers)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tunnel"]["peers"], serde_json::json!(["10.99.0.2", "fd00:98::3"]));
}

/// `ipsec check-config` names each weak algorithm a connection accepts (the `windows`
/// proposal keyword: 3DES, SHA-1, MODP-1024) on a warning line, and in `--json`; the
/// defaults have none.
#[test]
fn check_config_names_weak_algorithms() {
    let rw = |props: &str| {
        format!(
            "[[connection]]\nname = \"rw\"\nlocal_addrs = [\"192.0.2.1\"]\nremote_addrs = [\"%any\"]\n\
             proposals = {props}\nlocal = {{ id = \"gw.example\", auth = \"psk\" }}\n\
             remote = {{ id = \"client.example\" }}\n\n[[connection.children]]\nname = \"net\"\n\
             local_ts = [\"10.1.0.0/16\"]\nesp_proposals = {props}\n"
        )
    };
    let p = tmp("rw-windows.toml", &rw("[\"default\", \"windows\"]"));
    let (code, _, err) = ipsec(&["check-config", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for alg in ["3des", "sha1", "prfsha1", "modp1024"] {
        assert!(
            err.contains(&format!(
                "rw-windows.toml:1: warning: connection `rw` IKE: weak algorithm `{alg}` accepted"
            )),
            "{alg}: {err}"
        );
    }
    for alg in ["3des", "sha1"] {
        assert!(
            err.contains(&format!(
                "connection `rw` child `net` ESP: weak algorithm `{alg}` accepted"
            )),
            "{alg}: {err}"
        );
    }
    assert_eq!(err.matches("weak algorithm").count(), 6, "{err}");
    let (code, out, _) = ipsec(&["check-config", "--json", p.to_str().unwrap()]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["weak_algorithms"].as_array().unwrap().len(), 6);
    let p = tmp("rw-default.toml", &rw("[\"default\"]"));
    let (code, _, err) = ipsec(&["check-config", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("weak algorithm"), "{err}");
}
