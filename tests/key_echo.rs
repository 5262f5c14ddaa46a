//! No error path prints a key (issue #13, "Keys are echoed in error messages"): every way a
//! key can be mistyped, in every syntax that takes one (SPEC `--sa` and `--sa-file`, TOML
//! `key = ...` and `xfrm = "..."`, setkey `-E` / `-A`), through every program that reads it
//! (`ipsec seal/open/overhead/check-config [--json]/process`, `tunneld`). Each run must fail
//! (exit 2), say what is wrong, and show neither the key nor any 8 hex digits in a row of it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Key material that appears nowhere else: 32 hex digits (16 bytes, an AES-128 key).
const KEY: &str = "5a1b2c3d4e5f60718293a4b5c6d7e8f9";
/// A 20-byte HMAC-SHA1 key, also unique.
const AUTH_KEY: &str = "9e8d7c6b5a49382716f5e4d3c2b1a09f1e2d3c4b";

/// The ways a key gets mistyped, as (key text as written, what the message must say).
fn bad_keys() -> Vec<(String, &'static str)> {
    vec![
        // One digit missing: odd length.
        (format!("0x{}", &KEY[..31]), "odd number of hex digits (31)"),
        // A non-hex digit at position 10.
        (format!("0x{}x{}", &KEY[..9], &KEY[10..]), "not hex at digit 10"),
        // Valid hex, wrong length (8 bytes for AES).
        (format!("0x{}", &KEY[..16]), "got 8 bytes"),
        // Valid hex, too long (17 bytes).
        (format!("0x{KEY}aa"), "got 17 bytes"),
    ]
}

fn bin(name: &str) -> &'static str {
    match name {
        "tunneld" => env!("CARGO_BIN_EXE_tunneld"),
        _ => env!("CARGO_BIN_EXE_ipsec"),
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipsec-key-echo-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs a program; returns (exit code, stdout + stderr).
fn run(program: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin(program)).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Fails if `output` shows any 8 hex digits in a row of `key` (whatever the case).
fn assert_no_key(output: &str, key: &str, what: &str) {
    let out = output.to_lowercase();
    let digits: String = key
        .trim_start_matches("0x")
        .chars()
        .filter(char::is_ascii_hexdigit)
        .collect::<String>()
        .to_lowercase();
    for w in 0..digits.len().saturating_sub(7) {
        let piece = &digits[w..w + 8];
        assert!(
            !out.contains(piece),
            "{what}: output shows key digits {piece}:\n{output}"
        );
    }
}

/// Runs a case that must fail with exit 2, saying `says`, without showing `key`.
fn check(program: &str, args: &[&str], key: &str, says: &str, what: &str) {
    let (code, out) = run(program, args);
    assert_eq!(code, 2, "{what}: {out}");
    assert!(out.contains(says), "{what}: expected `{says}` in:\n{out}");
    assert_no_key(&out, key, what);
    assert_no_key(&out, AUTH_KEY, what);
}

fn spec(enc_key: &str) -> String {
    format!("proto esp spi 0x1000 mode tunnel src 192.0.2.1 dst 192.0.2.2 enc 'cbc(aes)' {enc_key} auth-trunc 'hmac(sha1)' 0x{AUTH_KEY} 96")
}

#[test]
fn spec_keys_on_the_command_line_and_in_sa_files() {
    let pcap = tmp("none.pcap");
    std::fs::write(&pcap, b"").unwrap();
    let pcap = pcap.to_str().unwrap();
    for (i, (key, says)) in bad_keys().into_iter().enumerate() {
        let s = spec(&key);
        for cmd in ["seal", "open"] {
            check(
                "ipsec",
                &[cmd, "--sa", &s, "--in", pcap],
                &key,
                says,
                &format!("{cmd} --sa {key}"),
            );
        }
        check(
            "ipsec",
            &["overhead", "--link-mtu", "1500", "--sa", &s],
            &key,
            says,
            &format!("overhead --sa {key}"),
        );
        let file = tmp(&format!("sa-{i}.txt"));
        std::fs::write(&file, format!("# a comment\n\n{s}\n")).unwrap();
        let f = file.to_str().unwrap();
        check(
            "ipsec",
            &["seal", "--sa-file", f, "--in", pcap],
            &key,
            says,
            "seal --sa-file",
        );
        // The message names the file and line of the SPEC.
        let (_, out) = run("ipsec", &["seal", "--sa-file", f, "--in", pcap]);
        assert!(out.contains(&format!("{f}:3: ")), "{out}");
        check(
            "ipsec",
            &["overhead", "--link-mtu", "1500", "--sa-file", f],
            &key,
            says,
            "overhead --sa-file",
        );
    }
    // A key split by a space: the second half is an unexpected word, not shown.
    let split = format!("0x{} {}", &KEY[..16], &KEY[16..]);
    let s = spec(&split);
    check(
        "ipsec",
        &["seal", "--sa", &s, "--in", pcap],
        KEY,
        "unexpected word",
        "split key",
    );
    // A key where the algorithm name belongs.
    let s = format!("proto esp spi 1 enc 0x{KEY} auth 'hmac(sha1)' 0x{AUTH_KEY}");
    check(
        "ipsec",
        &["seal", "--sa", &s, "--in", pcap],
        KEY,
        "unknown enc algorithm",
        "key as alg",
    );
    // A key where the ICV length belongs (auth-trunc without its length, key given twice).
    let s = format!("proto ah spi 1 auth-trunc 'hmac(sha1)' 0x{AUTH_KEY} 0x{AUTH_KEY}");
    check(
        "ipsec",
        &["seal", "--sa", &s, "--in", pcap],
        AUTH_KEY,
        "bad ICV length",
        "key as ICV",
    );
}

/// Runs check-config (text and --json), process and tunneld on a config file.
fn check_config_everywhere(path: &Path, key: &str, says: &str) {
    let p = path.to_str().unwrap();
    let what = format!("{p} ({key})");
    check("ipsec", &["check-config", p], key, says, &what);
    check("ipsec", &["check-config", "--json", p], key, says, &what);
    // The JSON goes to stdout and is valid JSON.
    let out = Command::new(bin("ipsec"))
        .args(["check-config", "--json", p])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    let pcap = tmp("in.pcap");
    std::fs::write(&pcap, b"").unwrap();
    check(
        "ipsec",
        &["process", "--config", p, "--dir", "out", "--in", pcap.to_str().unwrap()],
        key,
        says,
        &what,
    );
    check("tunneld", &["--config", p], key, says, &what);
}

#[test]
fn toml_keys_and_xfrm_strings() {
    for (i, (key, says)) in bad_keys().into_iter().enumerate() {
        let table = tmp(&format!("key-{i}.toml"));
        std::fs::write(
            &table,
            format!(
                "[[sa]]\nname = \"a\"\nproto = \"esp\"\nspi = 0x1000\nenc = {{ alg = \"cbc(aes)\", key = \"{key}\" }}\n\
                 auth = {{ alg = \"hmac(sha1)\", key = \"0x{AUTH_KEY}\" }}\n"
            ),
        )
        .unwrap();
        check_config_everywhere(&table, &key, says);
        let xfrm = tmp(&format!("xfrm-{i}.toml"));
        std::fs::write(&xfrm, format!("[[sa]]\nname = \"x\"\nxfrm = \"{}\"\n", spec(&key))).unwrap();
        check_config_everywhere(&xfrm, &key, says);
    }
    // The auth key mistyped too.
    let t = tmp("auth.toml");
    std::fs::write(
        &t,
        format!(
            "[[sa]]\nname = \"h\"\nproto = \"ah\"\nspi = 1\nauth = {{ alg = \"hmac(sha1)\", key = \"0x{}\" }}\n",
            &AUTH_KEY[..39]
        ),
    )
    .unwrap();
    check_config_everywhere(&t, AUTH_KEY, "odd number of hex digits (39)");
    // A key written as a TOML integer (no quotes): the parser's message would show it.
    for (n, digits) in [("int-small", &KEY[..14]), ("int-large", KEY)] {
        let t = tmp(&format!("{n}.toml"));
        std::fs::write(
            &t,
            format!(
                "[[sa]]\nname = \"a\"\nproto = \"esp\"\nspi = 1\nenc = {{ alg = \"cbc(aes)\", key = 0x{digits} }}\n"
            ),
        )
        .unwrap();
        let (code, out) = run("ipsec", &["check-config", "--json", t.to_str().unwrap()]);
        assert_eq!(code, 2, "{out}");
        assert_no_key(&out, digits, n);
        // Shown in decimal, the number would not match the hex: check that too.
        if let Ok(v) = u64::from_str_radix(digits, 16) {
            assert!(!out.contains(&v.to_string()), "{n}: key shown in decimal:\n{out}");
        }
    }
}

#[test]
fn setkey_keys() {
    let add =
        |e: &str, a: &str| format!("add 192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel -E aes-cbc {e} -A hmac-sha1 {a};\n");
    for (i, (key, says)) in bad_keys().into_iter().enumerate() {
        let f = tmp(&format!("e-{i}.conf"));
        std::fs::write(&f, add(&key, &format!("0x{AUTH_KEY}"))).unwrap();
        check_config_everywhere(&f, &key, says);
        let f = tmp(&format!("a-{i}.conf"));
        // The same mistakes in the -A key (lengths differ: only the hex ones carry over).
        let akey = key.replace(&KEY[..31], &AUTH_KEY[..31]);
        std::fs::write(&f, add(&format!("0x{KEY}"), &akey)).unwrap();
        let (code, out) = run("ipsec", &["check-config", "--json", f.to_str().unwrap()]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("-A key") || out.contains("hmac(sha1)"), "{out}");
        assert_no_key(&out, &akey, "-A");
        assert_no_key(&out, KEY, "-A");
    }
    // Missing 0x.
    let f = tmp("no-0x.conf");
    std::fs::write(&f, add(KEY, &format!("0x{AUTH_KEY}"))).unwrap();
    check_config_everywhere(&f, KEY, "-E key: expected 0x-prefixed hex");
    let f = tmp("no-0x-a.conf");
    std::fs::write(&f, add(&format!("0x{KEY}"), AUTH_KEY)).unwrap();
    check_config_everywhere(&f, AUTH_KEY, "-A key: expected 0x-prefixed hex");
    // Key material after a complete key (a split key's second half): an unexpected word,
    // not shown.
    let f = tmp("split.conf");
    std::fs::write(
        &f,
        add(&format!("0x{KEY} {}", &AUTH_KEY[..16]), &format!("0x{AUTH_KEY}")),
    )
    .unwrap();
    check_config_everywhere(&f, KEY, "not shown");
    // A key where the algorithm belongs.
    let f = tmp("alg.conf");
    std::fs::write(&f, format!("add 192.0.2.1 192.0.2.2 esp 1 -E 0x{KEY};\n")).unwrap();
    check_config_everywhere(&f, KEY, "unknown enc algorithm");
}
