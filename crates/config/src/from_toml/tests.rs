use super::*;

const K16: &str = "0x000102030405060708090a0b0c0d0e0f";
const K20: &str = "0x000102030405060708090a0b0c0d0e0f10111213";

fn err(text: &str) -> ConfigError {
    parse(text).expect_err("should fail")
}

fn esp(extra: &str) -> String {
    format!(
        "[[sa]]\nname = \"e\"\nproto = \"esp\"\nspi = 0x1000\nenc = {{ alg = \"cbc(aes)\", key = \"{K16}\" }}\nauth = {{ alg = \"hmac(sha1)\", key = \"{K20}\" }}\n{extra}"
    )
}

#[test]
fn minimal_sa_and_policy() {
    let c = parse(&format!(
        "{}\n[[policy]]\ndir = \"out\"\nproto = \"tcp\"\ndst_port = \"1-1023\"\naction = \"protect\"\nbundle = [\"e\"]\n",
        esp("")
    ))
    .unwrap();
    assert_eq!(c.sas.len(), 1);
    let p = &c.sas[0].params;
    assert_eq!(
        (p.spi, p.replay_window, p.esn),
        (0x1000, ipsec_core::sa::DEFAULT_REPLAY_WINDOW, false)
    );
    assert_eq!(p.integ.as_ref().unwrap().icv_len, 12);
    assert_eq!(c.lines.sas, [1]);
    assert_eq!(c.lines.policies, [8]);
    let pol = &c.policies[0];
    assert_eq!(pol.selector.proto, Some(6));
    assert_eq!(pol.selector.dst_ports, PortRange { lo: 1, hi: 1023 });
    assert_eq!(pol.action, ActionConfig::Protect(vec!["e".into()]));
    c.build(std::time::Duration::ZERO).unwrap();
}

/// An IPComp SA with LZF beside DEFLATE: each under its own CPI (RFC 3173 3.3), both
/// found by the SAD; a CPI shared with the SA, the same algorithm twice, or an ESP SA
/// with an alternative are refused.
#[test]
fn an_alternative_algorithm_has_a_cpi_of_its_own() {
    let comp = |alt: &str| {
        format!(
            "[[sa]]\nname = \"c\"\nproto = \"comp\"\nspi = 0x4001\ncomp = \"deflate\"\nadaptive = \"model\"\n{alt}\n"
        )
    };
    let c = parse(&comp("alternative = { comp = \"lzf\", cpi = 0xf001 }")).unwrap();
    let a = c.sas[0].adaptive.alternative.unwrap();
    assert_eq!((a.algorithm, a.cpi), (Algorithm::Lzf, 0xf001));
    assert_eq!(c.sas[0].spis().collect::<Vec<_>>(), [0x4001, 0xf001]);
    let mut sad = ipsec_engine::Sad::new();
    let id = sad.install(c.sas[0].clone(), std::time::Duration::ZERO).unwrap();
    let any: IpAddr = "192.0.2.1".parse().unwrap();
    assert_eq!(sad.lookup(108, 0x4001, any), Some(id));
    assert_eq!(sad.lookup(108, 0xf001, any), Some(id));
    let e = err(&comp("alternative = { comp = \"lzf\", cpi = 0x4001 }"));
    assert!(e.to_string().contains("CPI of its own"), "{e}");
    let e = err(&comp("alternative = { comp = \"deflate\", cpi = 2 }"));
    assert!(e.to_string().contains("own algorithm"), "{e}");
    let e = err(&comp("alternative = { comp = \"zstd\", cpi = 0xf001 }"));
    assert!(e.to_string().contains("unknown comp algorithm"), "{e}");
    let e = err(&comp("alternative = { comp = \"lzf\", cpi = 0x1f001 }"));
    assert!(e.to_string().contains("16 bits"), "{e}");
    let e = err(&esp("alternative = { comp = \"lzf\", cpi = 0xf001 }"));
    assert!(e.to_string().contains("belong to proto = \"comp\""), "{e}");
    // The same in the xfrm words.
    let s = spec::parse("proto comp spi 0x4001 comp deflate adaptive model alternative lzf 0xf001").unwrap();
    assert_eq!(s.adaptive.alternative, Some(a));
}

#[test]
fn spi_0_and_esn_without_a_window_are_refused() {
    // RFC 4303 2.1: SPI 0 MUST NOT be sent (in UDP it is RFC 3948's non-ESP marker).
    let e = err(&esp("").replace("spi = 0x1000", "spi = 0"));
    assert!(e.to_string().contains("SPI 0 is reserved"), "{e}");
    let e = err(&format!(
        "[[sa]]\nname = \"x\"\nxfrm = \"proto esp spi 0 aead 'rfc4106(gcm(aes))' {K20} 128\"\n"
    ));
    assert!(e.to_string().contains("SPI 0 is reserved"), "{e}");
    // ESN with replay_window = 0 (Linux refuses it too).
    let e = err(&esp("esn = true\nreplay_window = 0\n"));
    assert!(e.to_string().contains("ESN needs a replay window"), "{e}");
    parse(&esp("esn = true\n")).unwrap();
    parse(&esp("replay_window = 0\n")).unwrap();
}

#[test]
fn tunnel_encap_port_0_is_refused() {
    let t = |extra: &str| format!("[tunnel]\nlocal = \"10.0.0.1\"\nencap = \"espinudp\"\npeer = \"10.0.0.2\"\n{extra}");
    let e = err(&t("encap_sport = 0\n"));
    assert_eq!(e.line, Some(5), "{e}");
    assert!(e.to_string().contains("encap_sport 0 is not a port"), "{e}");
    let e = err(&t("encap_dport = 0\n"));
    assert!(e.to_string().contains("encap_dport 0 is not a port"), "{e}");
    let c = parse(&t("encap_sport = 4501\n")).unwrap();
    assert_eq!(c.tunnel.unwrap().udp_encap, Some((4501, 4500)));
}

#[test]
fn syntax_error_names_its_line() {
    let e = err("[[sa]]\nname = \"a\"\nspi = 0x10\nproto = esp\n");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(matches!(e.kind, ErrorKind::Syntax(_)));
}

#[test]
fn unknown_field_names_its_line() {
    let e = err(&esp("replay = 32\n"));
    assert_eq!(e.line, Some(7), "{e}");
    assert!(e.to_string().contains("unknown field `replay`"), "{e}");
}

#[test]
fn bad_key_length_names_the_key_line() {
    let text = esp("").replace(K16, "0x0011");
    let e = err(&text);
    assert_eq!(e.line, Some(5), "{e}");
    assert!(
        matches!(e.kind, ErrorKind::Sa(ipsec_core::Error::KeyLength { got: 2, .. })),
        "{e}"
    );
    assert_eq!(e.item, Some(Item::Sa("e".into())));
}

#[test]
fn unknown_algorithm_and_bad_trunc() {
    let e = err(&esp("").replace("hmac(sha1)", "hmac(sha3)"));
    assert_eq!(e.line, Some(6));
    assert!(
        matches!(e.kind, ErrorKind::UnknownAlgorithm { kind: "auth", .. }),
        "{e}"
    );
    let text = format!(
        "[[sa]]\nname = \"e\"\nproto = \"ah\"\nspi = 1\n[sa.auth]\nalg = \"hmac(sha1)\"\nkey = \"{K20}\"\ntrunc = 100\n"
    );
    let e = err(&text);
    assert_eq!(e.line, Some(8), "{e}");
    assert!(matches!(
        e.kind,
        ErrorKind::Sa(ipsec_core::Error::IcvLength { bits: 100, .. })
    ));
}

#[test]
fn sa_level_errors_name_the_sa_header() {
    // Tunnel mode without endpoints: found by SaParams::validate, reported at [[sa]].
    let e = err(&format!("# comment\n\n{}", esp("mode = \"tunnel\"\n")));
    assert_eq!(e.line, Some(3), "{e}");
    let e = err(&esp("replay_window = 48\n"));
    assert_eq!(e.line, Some(7));
    assert!(matches!(e.kind, ErrorKind::Sa(ipsec_core::Error::ReplayWindowSize(48))));
}

#[test]
fn xfrm_words_and_conflicts() {
    let text = format!(
        "[[sa]]\nname = \"x\"\nxfrm = \"proto esp spi 7 mode transport aead 'rfc4106(gcm(aes))' {K20} 96\"\nlifetime = {{ hard = {{ packets = 10 }} }}\n"
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.sas[0].params.aead.as_ref().unwrap().icv_len, 12);
    assert_eq!(c.sas[0].lifetime.hard.packets, Some(10));
    let e = err(&format!("{text}spi = 9\n"));
    assert_eq!(e.line, Some(5));
    let e = err("[[sa]]\nname = \"x\"\nxfrm = \"proto esp spi 7 enc 'cbc(aes)' 0x00\"\n");
    assert_eq!(e.line, Some(3));
    assert!(e.to_string().contains("16, 24 or 32"), "{e}");
}

#[test]
fn encap_table() {
    let c = parse(&esp("encap = { type = \"espinudp\", sport = 4500, dport = 4501 }\n")).unwrap();
    assert_eq!(
        c.sas[0].encap,
        Some(ipsec_engine::UdpEncap {
            sport: 4500,
            dport: 4501,
            oa: None
        })
    );
    // Ports default to 4500; an original address is kept, 0.0.0.0 is none.
    let c = parse(&esp("encap = { type = \"espinudp\", oa = \"10.0.0.7\" }\n")).unwrap();
    let e = c.sas[0].encap.unwrap();
    assert_eq!(
        (e.sport, e.dport, e.oa),
        (4500, 4500, Some("10.0.0.7".parse().unwrap()))
    );
    let c = parse(&esp("[sa.encap]\ntype = \"espinudp\"\noa = \"0.0.0.0\"\n")).unwrap();
    assert_eq!(c.sas[0].encap.unwrap().oa, None);
    assert_eq!(parse(&esp("")).unwrap().sas[0].encap, None);
    // The xfrm words carry it too.
    let text = format!(
        "[[sa]]\nname = \"x\"\nxfrm = \"proto esp spi 7 aead 'rfc4106(gcm(aes))' {K20} 96 encap espinudp 4500 4500 0.0.0.0\"\n"
    );
    assert_eq!(parse(&text).unwrap().sas[0].encap, Some(ipsec_engine::UdpEncap::NAT_T));
}

#[test]
fn encap_errors_name_their_line() {
    let e = err(&esp(
        "encap = { type = \"espinudp\", sport = 4500, dport = 4500, nat = true }\n",
    ));
    assert_eq!(e.line, Some(7), "{e}");
    assert!(e.to_string().contains("unknown field `nat`"), "{e}");
    let e = err(&esp("[sa.encap]\ntype = \"espinudp-nonike\"\n"));
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.to_string().contains("not implemented; use espinudp"), "{e}");
    let e = err(&esp("[sa.encap]\ntype = \"espinudp\"\nsport = 4500\ndport = 0\n"));
    assert_eq!(e.line, Some(10), "{e}");
    assert!(e.to_string().contains("destination port 0 is not a port"), "{e}");
    let e = err(&esp("encap = { type = \"espinudp\", sport = 70000 }\n"));
    assert!(e.to_string().contains("source port 70000 is not a port"), "{e}");
    let e = err(&esp("encap = { type = \"espinudp\", oa = \"10.0.0\" }\n"));
    assert!(e.to_string().contains("bad encap oa (original) address"), "{e}");
    let e = err(&esp("encap = { sport = 4500 }\n"));
    assert!(e.to_string().contains("missing field `type`"), "{e}");
    let e = err(&format!(
        "[[sa]]\nname = \"a\"\nproto = \"ah\"\nspi = 1\nauth = {{ alg = \"hmac(sha1)\", key = \"{K20}\" }}\nencap = {{ type = \"espinudp\" }}\n"
    ));
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.to_string().contains("belongs to ESP SAs"), "{e}");
    let e = err(&format!(
        "[[sa]]\nname = \"x\"\nxfrm = \"proto esp spi 7 aead 'rfc4106(gcm(aes))' {K20} 96\"\nencap = {{ type = \"espinudp\" }}\n"
    ));
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.to_string().contains("`encap` cannot be used with `xfrm`"), "{e}");
}

#[test]
fn policy_errors() {
    let base = esp("");
    let e = err(&format!(
        "{base}\n[[policy]]\ndir = \"out\"\naction = \"protect\"\nbundle = [\"e\",\n  \"nope\"]\n"
    ));
    assert_eq!(e.line, Some(12), "{e}");
    assert_eq!(e.kind, ErrorKind::UnknownSa("nope".into()));
    assert_eq!(e.item, Some(Item::Policy { index: 1, name: None }));
    let e = err(&format!("{base}\n[[policy]]\ndir = \"fwd\"\naction = \"bypass\"\n"));
    assert_eq!(e.line, Some(9));
    let e = err(&format!(
        "{base}\n[[policy]]\ndir = \"out\"\ndst_port = 80\naction = \"bypass\"\n"
    ));
    assert_eq!(e.line, Some(10));
    assert!(e.to_string().contains("ports need proto"), "{e}");
    let e = err(&format!(
        "{base}\n[[policy]]\ndir = \"out\"\nproto = \"tcp\"\ndst_port = 70000\naction = \"bypass\"\n"
    ));
    assert_eq!(e.line, Some(11));
    let e = err(&format!(
        "{base}\n[[policy]]\ndir = \"out\"\nsrc = \"10.0.0.0/33\"\naction = \"bypass\"\n"
    ));
    assert_eq!(e.line, Some(10));
    let e = err(&format!(
        "{base}\n[[policy]]\ndir = \"out\"\naction = \"bypass\"\nbundle = [\"e\"]\n"
    ));
    assert_eq!(e.line, Some(11));
}

#[test]
fn duplicate_names() {
    let e = err(&format!("{}\n{}", esp(""), esp("").replace("0x1000", "0x1001")));
    assert_eq!(e.line, Some(9), "{e}");
    assert!(e.to_string().contains("line 1"), "{e}");
}

#[test]
fn comp_defaults_to_the_well_known_cpi() {
    let c = parse("[[sa]]\nname = \"c\"\nproto = \"comp\"\ncomp = \"lzs\"\n").unwrap();
    assert_eq!(c.sas[0].params.spi, 3);
    let e = err("[[sa]]\nname = \"c\"\nproto = \"comp\"\nspi = 0x10000\ncomp = \"deflate\"\n");
    assert_eq!(e.line, Some(4));
    let e = err("[[sa]]\nname = \"c\"\nproto = \"comp\"\ncomp = \"zstd\"\n");
    assert!(matches!(e.kind, ErrorKind::UnknownAlgorithm { kind: "comp", .. }));
    assert_eq!(e.line, Some(4));
}

#[test]
fn lifetime_soft_above_hard() {
    let e = err(&esp("\n[sa.lifetime]\nsoft = { bytes = 10 }\nhard = { bytes = 5 }\n"));
    assert_eq!(e.line, Some(8), "{e}");
}

#[test]
fn mss_clamp_setting() {
    use crate::MssClampSetting as M;
    let get =
        |v: &str| parse(&format!("{}\n[tunnel]\nmss_clamp = {v}\n", esp(""))).map(|c| c.tunnel.unwrap().mss_clamp);
    assert_eq!(get("\"auto\"").unwrap(), Some(M::Auto));
    assert_eq!(get("\"off\"").unwrap(), Some(M::Off));
    assert_eq!(get("1360").unwrap(), Some(M::Mss(1360)));
    assert_eq!(
        parse(&format!("{}\n[tunnel]\n", esp("")))
            .unwrap()
            .tunnel
            .unwrap()
            .mss_clamp,
        None
    );
    for bad in ["87", "65496", "-1", "\"on\"", "true"] {
        let e = get(bad).unwrap_err();
        assert_eq!(e.line, Some(9), "{bad}: {e}");
        assert!(e.to_string().contains("mss_clamp"), "{bad}: {e}");
    }
}

#[test]
fn tunnel_table() {
    assert_eq!(parse(&esp("")).unwrap().tunnel, None);
    let c = parse(&format!(
        "{}\n[tunnel]\ntun = \"ipsec0\"\nmtu = 1400\nlocal = \"10.99.0.1\"\npeer = \"10.99.0.2\"\nworkers = 3\noffload = false\naf_packet = false\nqdisc_bypass = true\n",
        esp("")
    ))
    .unwrap();
    let t = c.tunnel.unwrap();
    assert_eq!(t.tun.as_deref(), Some("ipsec0"));
    assert_eq!(t.mtu, Some(1400));
    assert_eq!(t.local, vec![ip("10.99.0.1")]);
    assert_eq!(t.peers, vec![ip("10.99.0.2")]);
    assert_eq!(t.line, Some(8));
    assert_eq!(
        (t.workers, t.offload, t.af_packet, t.qdisc_bypass),
        (Some(3), Some(false), Some(false), Some(true))
    );
    // Every field is optional; the table may come first.
    let c = parse(&format!("[tunnel]\n\n{}", esp(""))).unwrap();
    let t = c.tunnel.unwrap();
    assert_eq!(t.line, Some(1));
    assert_eq!((t.workers, t.offload), (None, None));
    assert!(t.local.is_empty() && t.peers.is_empty());
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn tunnel_table_takes_ipv6_and_several_peers() {
    let t = |body: &str| parse(&format!("{}\n[tunnel]\n{body}\n", esp(""))).map(|c| c.tunnel.unwrap());
    let v6 = t("local = \"fd00:99::1\"\npeer = \"fd00:99::2\"").unwrap();
    assert_eq!((v6.local, v6.peers), (vec![ip("fd00:99::1")], vec![ip("fd00:99::2")]));
    let many = t("local = [\"10.99.0.1\", \"fd00:99::1\"]\npeers = [\"10.99.0.2\", \"10.99.0.3\", \"fd00:99::4\"]\nencap = \"espinudp\"")
        .unwrap();
    assert_eq!(many.local, vec![ip("10.99.0.1"), ip("fd00:99::1")]);
    assert_eq!(many.peers, vec![ip("10.99.0.2"), ip("10.99.0.3"), ip("fd00:99::4")]);
    assert_eq!(many.udp_encap, Some((4500, 4500)));
    // No peers: any destination, as before.
    assert!(t("local = \"10.99.0.1\"").unwrap().peers.is_empty());
}

#[test]
fn tunnel_underlay_errors_say_what_to_change() {
    let t = |body: &str| err(&format!("{}\n[tunnel]\n{body}\n", esp("")));
    let cases = [
        ("peer = \"10.99.0.2\"\npeers = [\"10.99.0.3\"]", 10, "either peer"),
        (
            "peers = [\"10.99.0.2\", \"10.99.0.2\"]",
            9,
            "peer 10.99.0.2 is given twice",
        ),
        ("peers = [\"10.99.0.2\", \"10.0.0\"]", 9, "bad peer address `10.0.0`"),
        ("peer = \"fd00:99::2\"", 9, "local needs an IPv6 address"),
        (
            "local = \"10.99.0.1\"\npeer = \"fd00:99::2\"",
            10,
            "local needs an IPv6 address",
        ),
        (
            "local = [\"10.99.0.1\", \"10.99.0.5\"]",
            9,
            "at most one IPv4 and one IPv6",
        ),
        ("local = [\"10.99.0.1\", 7]", 9, "not integer"),
        ("local = \"x\"", 9, "bad local address `x`"),
        ("peer = \"224.0.0.1\"", 9, "not a unicast address"),
        (
            "peers = [\"10.99.0.2\"]\nencap = \"espinudp\"",
            9,
            "needs a local IPv4 address",
        ),
        (
            "local = \"10.99.0.1\"\nencap = \"espinudp\"",
            9,
            "ESP in UDP needs a peer",
        ),
    ];
    for (body, line, want) in cases {
        let e = t(body);
        assert!(e.to_string().contains(want), "{body}: {e}");
        assert_eq!(e.line, Some(line), "{body}: {e}");
    }
}

#[test]
fn tunnel_table_errors_name_their_line() {
    let t = |body: &str| err(&format!("{}\n[tunnel]\n{body}\n", esp("")));
    let e = t("tun = \"a-name-far-too-long\"");
    assert_eq!(e.line, Some(9), "{e}");
    assert!(e.to_string().contains("bad TUN name"), "{e}");
    let e = t("workers = 0");
    assert!(e.to_string().contains("workers 0 is not in 1-256"), "{e}");
    let e = t("mtu = 40");
    assert!(e.to_string().contains("mtu 40 is not in 68-65535"), "{e}");
    let e = t("local = \"10.0.0\"");
    assert!(e.to_string().contains("bad local address"), "{e}");
    let e = t("\n\nremote = \"10.0.0.1\"");
    assert_eq!(e.line, Some(11), "{e}");
    assert!(e.to_string().contains("unknown field `remote`"), "{e}");
}
