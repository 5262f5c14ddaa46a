use super::*;

const K16: &str = "0x000102030405060708090a0b0c0d0e0f";
const K20: &str = "0x000102030405060708090a0b0c0d0e0f10111213";
const K32: &str = "0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f";

fn ok(text: &str) -> (Config, Vec<Warning>) {
    parse(text, &Options::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn err(text: &str) -> ConfigError {
    parse(text, &Options::default()).expect_err("should fail")
}

#[test]
fn tokenizer() {
    let s = statements("add 1 # c ; not a statement\n \"a b\" ;\nspdflush;").unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0][2].text, "a b");
    assert!(s[0][2].quoted);
    assert_eq!((s[0][2].line, s[1][0].line), (2, 3));
    assert_eq!(err("flush;\nadd 1.1.1.1\n").line, Some(2));
    assert_eq!(err("add \"x\n").line, Some(1));
}

#[test]
fn esp_ah_ipcomp_with_policies() {
    let text = format!(
        "flush;\nspdflush;\n\
         # A's SAs\n\
         add 192.0.2.1 192.0.2.2 ipcomp 0x4001 -m transport -C deflate ;\n\
         add 192.0.2.1 192.0.2.2 esp 0x1001 -m transport -r 64 -lh 3600 -ls 3000 -bh 100000 -bs 90000\n\
         \t-E aes-cbc {K16}\n\t-A hmac-sha256 {K32} ;\n\
         add 192.0.2.1 192.0.2.2 ah 0x2001 -A hmac-sha1 {K20} ;\n\
         add -4 192.0.2.2 192.0.2.1 esp 0x1002 -E 3des-cbc \"0123456789abcdefghijklmn\" -A hmac-md5 \"0123456789abcdef\";\n\
         spdadd 192.0.2.1[500] 192.0.2.2[500] udp -P out none ;\n\
         spdadd 192.0.2.1 192.0.2.2 any -P out ipsec\n  ipcomp/transport//use\n  esp/transport//require\n  ah/transport//require ;\n\
         spdadd 192.0.2.2/32 192.0.2.1/32 any -P in ipsec esp/transport//require;\n\
         spdadd 192.0.2.2 192.0.2.1 any -P fwd ipsec esp/transport//require;\n\
         spdadd 0.0.0.0/0 0.0.0.0/0 icmp 8,0 -P out prio def + 10 discard;\n"
    );
    let (c, warnings) = ok(&text);
    assert_eq!(c.sas.len(), 4);
    let names: Vec<_> = c.sas.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["comp-0x4001", "esp-0x1001", "ah-0x2001", "esp-0x1002"]);
    assert_eq!(c.lines.sas, [4, 5, 8, 9]);
    let comp = &c.sas[0];
    assert_eq!((comp.params.spi, comp.comp), (0x4001, Some(Algorithm::Deflate)));
    let esp = &c.sas[1].params;
    assert_eq!(esp.replay_window, 64);
    assert_eq!(esp.enc.as_ref().unwrap().alg, EncAlg::AesCbc);
    assert_eq!(esp.integ.as_ref().unwrap().icv_len, 16);
    assert_eq!(c.sas[1].lifetime.hard.seconds, Some(3600));
    assert_eq!(c.sas[1].lifetime.soft.bytes, Some(90000));
    assert_eq!(c.sas[2].params.integ.as_ref().unwrap().icv_len, 12);
    assert_eq!(c.sas[3].params.replay_window, 0);
    assert_eq!(
        c.sas[3].params.enc.as_ref().unwrap().key.as_slice(),
        b"0123456789abcdefghijklmn"
    );
    // prio def + 10 sorts first; fwd skipped.
    assert_eq!(c.policies.len(), 4);
    assert_eq!(c.policies[0].action, ActionConfig::Discard);
    assert_eq!(c.policies[0].selector.src_ports, PortRange::single(8));
    assert_eq!(c.lines.policies, [17, 10, 11, 15]);
    assert_eq!(c.policies[1].action, ActionConfig::Bypass);
    assert_eq!(c.policies[1].selector.proto, Some(17));
    assert_eq!(c.policies[1].selector.dst_ports, PortRange::single(500));
    assert_eq!(
        c.policies[2].action,
        ActionConfig::Protect(vec!["comp-0x4001".into(), "esp-0x1001".into(), "ah-0x2001".into()])
    );
    assert_eq!(c.policies[3].dir, Direction::In);
    assert_eq!(c.policies[3].action, ActionConfig::Protect(vec!["esp-0x1002".into()]));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].line, 16);
    c.build(std::time::Duration::ZERO).unwrap();
}

#[test]
fn tunnel_then_transport_uses_the_outer_endpoints() {
    let text = format!(
        "add 192.0.2.1 192.0.2.2 esp 0x100 -m tunnel -E aes-cbc {K16} -A hmac-sha1 {K20};\n\
         add 192.0.2.1 192.0.2.2 ah 0x200 -A hmac-sha1 {K20};\n\
         add 10.0.1.1 10.0.2.1 ah 0x300 -A hmac-sha1 {K20};\n\
         spdadd 10.0.1.0/24 10.0.2.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require ah/transport//require;\n"
    );
    let (c, _) = ok(&text);
    assert_eq!(
        c.policies[0].action,
        ActionConfig::Protect(vec!["esp-0x100".into(), "ah-0x200".into()])
    );
    assert_eq!(c.sas[0].params.mode, Mode::Tunnel);
}

#[test]
fn unique_reqid_and_ambiguity() {
    let sas = format!(
        "add 192.0.2.1 192.0.2.2 esp 0x100 -u 7 -E aes-cbc {K16} -A hmac-sha1 {K20};\n\
         add 192.0.2.1 192.0.2.2 esp 0x101 -u 8 -E aes-cbc {K16} -A hmac-sha1 {K20};\n"
    );
    let (c, _) = ok(&format!(
        "{sas}spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//unique:8;\n"
    ));
    assert_eq!(c.policies[0].action, ActionConfig::Protect(vec!["esp-0x101".into()]));
    let e = err(&format!(
        "{sas}spdadd 192.0.2.1 192.0.2.2 any -P out ipsec\n esp/transport//require;\n"
    ));
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.to_string().contains("matches 2 SAs (line 1, line 2)"), "{e}");
    let e = err(&format!(
        "{sas}spdadd 192.0.2.2 192.0.2.1 any -P out ipsec esp/transport//require;\n"
    ));
    assert!(matches!(e.kind, ErrorKind::Unresolved(_)), "{e}");
    assert_eq!(e.line, Some(3));
}

#[test]
fn errors_name_the_line() {
    let e = err(&format!(
        "flush;\n\nadd 192.0.2.1 192.0.2.2 esp 1\n -E aes-cbc 0x0011\n -A hmac-sha1 {K20};\n"
    ));
    assert_eq!(e.line, Some(4), "{e}");
    assert!(matches!(
        e.kind,
        ErrorKind::Sa(ipsec_core::Error::KeyLength { got: 2, .. })
    ));
    assert_eq!(e.item, Some(Item::Sa("esp-0x1".into())));
    let e = err(&format!(
        "add 192.0.2.1 192.0.2.2 esp 1 -E aes-cbc {K16}\n -A keyed-md5 0x00;\n"
    ));
    assert_eq!(e.line, Some(2));
    assert!(matches!(e.kind, ErrorKind::Unsupported(_)), "{e}");
    let e = err(&format!("\nadd 192.0.2.1 192.0.2.2 esp 1 -E twofish {K16};\n"));
    assert!(matches!(e.kind, ErrorKind::UnknownAlgorithm { kind: "enc", .. }));
    assert_eq!(e.line, Some(2));
    let e = err(&format!(
        "add 192.0.2.1 192.0.2.2 esp 1 -r 4 -E aes-cbc {K16} -A hmac-sha1 {K20};"
    ));
    assert!(e.to_string().contains("KAME"), "{e}");
    let e = err("add 192.0.2.1 192.0.2.2 ah 1 -C deflate;");
    assert!(e.to_string().contains("ah SA needs -A"), "{e}");
    let e = err("add 192.0.2.1 192.0.2.2 ipcomp 0x10000 -C deflate;");
    assert!(e.to_string().contains("16 bits"), "{e}");
    let e = err("add host.example 192.0.2.2 ipcomp 1 -C deflate;");
    assert!(e.to_string().contains("numeric"), "{e}");
    let e = err(
        "spdflush;\nspdadd 10.0.0.0/8 10.0.0.0/8 any -P out none;\nspdadd 10.0.0.0/8 10.0.0.0/8 any -P out\n entrust;",
    );
    assert_eq!(e.line, Some(4));
    assert_eq!(e.item, Some(Item::Policy { index: 2, name: None }));
    let e = err("spdadd 10.0.0.0/8 10.0.0.0/8 any -P out ipsec esp/tunnel//require;");
    assert!(e.to_string().contains("endpoints"), "{e}");
    let e = err("spdadd 10.0.0.0/8 2001:db8::/32 any -P out none;");
    assert!(e.to_string().contains("different IP versions"), "{e}");
    let e = err("spdadd 10.0.0.0/8[80] 10.0.0.0/8 any -P out none;");
    assert!(e.to_string().contains("ports need proto"), "{e}");
    let e = err("delete 192.0.2.1 192.0.2.2 esp 1;");
    assert!(matches!(e.kind, ErrorKind::Unsupported(_)));
}

#[test]
fn priorities_and_options() {
    let mk = |p: &str| {
        let (c, _) = ok(&format!(
            "spdadd 10.0.0.1 10.0.0.2 any -P out none;\nspdadd 10.0.0.1 10.0.0.2 any -P out {p} discard;\n"
        ));
        c.lines.policies
    };
    assert_eq!(mk("prio 1"), [2, 1]);
    assert_eq!(mk("prio -1"), [1, 2]);
    assert_eq!(mk("prio high"), [2, 1]);
    assert_eq!(mk("prio low - 5"), [1, 2]);
    assert_eq!(mk("priority def +3"), [2, 1]);
    assert_eq!(mk(""), [1, 2]);
    let (c, _) = parse(
        &format!("add 192.0.2.1 192.0.2.2 ah 1 -A hmac-sha256 {K32};"),
        &Options { sha256_icv_bits: 96 },
    )
    .unwrap();
    assert_eq!(c.sas[0].params.integ.as_ref().unwrap().icv_len, 12);
    let (c, w) = ok(
        "add 2001:db8::1 2001:db8::2 esp 5 -m any -f random-pad -E null -A hmac-md5 \"0123456789abcdef\";\nflush ah;\n",
    );
    assert_eq!(c.sas.len(), 1);
    assert_eq!(c.sas[0].params.enc.as_ref().unwrap().alg, EncAlg::Null);
    assert_eq!(w.len(), 1);
    let (c, _) = ok(&format!(
        "add 192.0.2.1 192.0.2.2 esp 5 -E aes-gcm-16 {K20};\nflush esp;\n"
    ));
    assert!(c.sas.is_empty());
}
