//! `ipsec pki` checked by OpenSSL, which nobody here wrote: the chain verifies (for the TLS
//! server and client purposes, which read the same EKUs the VPN clients do), and
//! `openssl x509` shows the EKUs, SANs, key usages and names each kind of certificate must
//! have. Skipped (with a note) where `openssl` is not installed.

mod common;
use common::{fresh_dir, ipsec_in as ipsec, ok, pki_server};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn openssl(args: &[&str], dir: &Path) -> Output {
    Command::new("openssl").args(args).current_dir(dir).output().unwrap()
}

fn have_openssl() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn tempdir(tag: &str) -> PathBuf {
    fresh_dir("ipsec-pki", tag)
}

/// The lines under an `openssl x509 -ext NAME` heading, split at ", ".
fn ext(text: &str, heading: &str) -> Vec<String> {
    let mut lines = text.lines();
    let Some(_) = lines.by_ref().find(|l| l.trim_start().starts_with(heading)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for l in lines.take_while(|l| l.starts_with("    ")) {
        out.extend(l.trim().split(", ").map(str::to_string));
    }
    out
}

fn show(cert: &str, dir: &Path) -> String {
    ok(openssl(
        &[
            "x509",
            "-in",
            cert,
            "-noout",
            "-subject",
            "-nameopt",
            "RFC2253",
            "-ext",
            "basicConstraints,keyUsage,extendedKeyUsage,subjectAltName",
        ],
        dir,
    ))
}

fn ca(dir: &Path, cn: &str, cert: &str, key: &str) {
    ok(ipsec(
        &[
            "pki", "ca", "--cn", cn, "--org", "Example", "--cert", cert, "--key", key, "--days", "3650",
        ],
        dir,
    ));
}

#[test]
fn openssl_verifies_the_chain_and_sees_what_the_clients_check() {
    assert!(
        have_openssl(),
        "openssl is needed to check `ipsec pki`'s output (Debian package openssl)"
    );
    let d = tempdir("chain");
    ca(&d, "Test VPN CA", "ca.pem", "ca.key");
    let issuer = ["--ca-cert", "ca.pem", "--ca-key", "ca.key"];
    let mut server = vec!["pki", "server", "--name", "vpn.example.org", "--name", "192.0.2.1"];
    server.extend(["--name", "2001:db8::1", "--cert", "server.pem", "--key", "server.key"]);
    server.extend(issuer);
    ok(ipsec(&server, &d));
    let mut alice = vec!["pki", "client", "--cn", "alice", "--email", "alice@example.org"];
    alice.extend(["--cert", "alice.pem", "--key", "alice.key"]);
    alice.extend(issuer);
    ok(ipsec(&alice, &d));
    let mut bob = vec!["pki", "client", "--cn", "bob", "--dns", "bob.example.org"];
    bob.extend(["--cert", "bob.pem", "--key", "bob.key", "--days", "30"]);
    bob.extend(issuer);
    ok(ipsec(&bob, &d));

    // The chain, for the purposes whose EKUs the certificates carry (and not the other).
    for (cert, purpose) in [
        ("server.pem", "sslserver"),
        ("alice.pem", "sslclient"),
        ("bob.pem", "sslclient"),
    ] {
        let out = ok(openssl(&["verify", "-CAfile", "ca.pem", "-purpose", purpose, cert], &d));
        assert_eq!(out.trim(), format!("{cert}: OK"));
    }
    let wrong = openssl(
        &["verify", "-CAfile", "ca.pem", "-purpose", "sslclient", "server.pem"],
        &d,
    );
    assert!(!wrong.status.success(), "a server certificate passed as a client's");
    // Another CA does not vouch for them.
    ca(&d, "Other CA", "other.pem", "other.key");
    assert!(!openssl(&["verify", "-CAfile", "other.pem", "server.pem"], &d)
        .status
        .success());

    let s = show("server.pem", &d);
    assert!(s.contains("subject=CN=vpn.example.org\n"), "{s}");
    assert_eq!(ext(&s, "X509v3 Basic Constraints"), ["CA:FALSE"]);
    assert_eq!(ext(&s, "X509v3 Key Usage"), ["Digital Signature"]);
    assert_eq!(
        ext(&s, "X509v3 Extended Key Usage"),
        ["TLS Web Server Authentication", "1.3.6.1.5.5.8.2.2"]
    );
    assert_eq!(
        ext(&s, "X509v3 Subject Alternative Name"),
        [
            "DNS:vpn.example.org",
            "IP Address:192.0.2.1",
            "DNS:192.0.2.1",
            "IP Address:2001:DB8:0:0:0:0:0:1",
            "DNS:2001:db8::1"
        ]
    );
    let a = show("alice.pem", &d);
    assert!(a.contains("subject=CN=alice\n"), "{a}");
    assert_eq!(ext(&a, "X509v3 Extended Key Usage"), ["TLS Web Client Authentication"]);
    assert_eq!(ext(&a, "X509v3 Subject Alternative Name"), ["email:alice@example.org"]);
    let b = show("bob.pem", &d);
    assert_eq!(ext(&b, "X509v3 Subject Alternative Name"), ["DNS:bob.example.org"]);
    let c = show("ca.pem", &d);
    assert!(c.contains("subject=CN=Test VPN CA,O=Example"), "{c}");
    assert_eq!(ext(&c, "X509v3 Basic Constraints"), ["CA:TRUE"]);
    assert_eq!(ext(&c, "X509v3 Key Usage"), ["Certificate Sign", "CRL Sign"]);
    assert!(ext(&c, "X509v3 Extended Key Usage").is_empty());

    // ECDSA P-256 keys that match their certificates; private keys mode 0600.
    for (cert, key) in [
        ("ca.pem", "ca.key"),
        ("server.pem", "server.key"),
        ("alice.pem", "alice.key"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join(key)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
        let from_key = ok(openssl(&["pkey", "-in", key, "-pubout"], &d));
        let from_cert = ok(openssl(&["x509", "-in", cert, "-noout", "-pubkey"], &d));
        assert_eq!(from_key, from_cert, "{key} is not {cert}'s");
        let text = ok(openssl(&["pkey", "-in", key, "-noout", "-text"], &d));
        assert!(text.contains("ASN1 OID: prime256v1"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn nothing_is_overwritten_and_a_wrong_ca_key_is_refused() {
    let d = tempdir("refuse");
    ca(&d, "CA one", "ca.pem", "ca.key");
    ca(&d, "CA two", "ca2.pem", "ca2.key");
    let before = std::fs::read(d.join("ca.pem")).unwrap();
    let again = ipsec(&["pki", "ca", "--cn", "x", "--cert", "ca.pem", "--key", "new.key"], &d);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    assert_eq!(std::fs::read(d.join("ca.pem")).unwrap(), before);
    assert!(!d.join("new.key").exists());
    let mismatched = [
        "pki",
        "server",
        "--name",
        "vpn.example.org",
        "--ca-cert",
        "ca.pem",
        "--ca-key",
        "ca2.key",
        "--cert",
        "s.pem",
        "--key",
        "s.key",
    ];
    let o = ipsec(&mismatched, &d);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not the key of"));
    assert!(!d.join("s.pem").exists() && !d.join("s.key").exists());
    // A leaf certificate cannot sign.
    let leaf = [
        "pki",
        "server",
        "--name",
        "vpn.example.org",
        "--ca-cert",
        "ca.pem",
        "--ca-key",
        "ca.key",
        "--cert",
        "s.pem",
        "--key",
        "s.key",
    ];
    ok(ipsec(&leaf, &d));
    let o = ipsec(
        &[
            "pki",
            "client",
            "--cn",
            "x",
            "--dns",
            "x.example",
            "--ca-cert",
            "s.pem",
            "--ca-key",
            "s.key",
            "--cert",
            "x.pem",
            "--key",
            "x.key",
        ],
        &d,
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a CA certificate"),
        "{o:?}"
    );
    let bad_name = ipsec(
        &[
            "pki",
            "server",
            "--name",
            "bad name!",
            "--ca-cert",
            "ca.pem",
            "--ca-key",
            "ca.key",
            "--cert",
            "b.pem",
            "--key",
            "b.key",
        ],
        &d,
    );
    assert!(!bad_name.status.success());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_rsa_3072_ca_signs_with_pkcs1_sha256() {
    assert!(
        have_openssl(),
        "openssl is needed to check `ipsec pki`'s output (Debian package openssl)"
    );
    // One RSA key only (the CA's): making one takes seconds.
    let d = tempdir("rsa");
    ok(ipsec(
        &[
            "pki",
            "ca",
            "--cn",
            "RSA CA",
            "--key-type",
            "rsa",
            "--cert",
            "ca.pem",
            "--key",
            "ca.key",
        ],
        &d,
    ));
    pki_server(&d, "vpn.example.org");
    let out = ok(openssl(
        &["verify", "-CAfile", "ca.pem", "-purpose", "sslserver", "server.pem"],
        &d,
    ));
    assert_eq!(out.trim(), "server.pem: OK");
    let ca = ok(openssl(&["x509", "-in", "ca.pem", "-noout", "-text"], &d));
    assert!(ca.contains("Public Key Algorithm: rsaEncryption"), "{ca}");
    assert!(ca.contains("Public-Key: (3072 bit)"), "{ca}");
    let s = ok(openssl(&["x509", "-in", "server.pem", "-noout", "-text"], &d));
    assert!(s.contains("Signature Algorithm: sha256WithRSAEncryption"), "{s}");
    assert!(s.contains("Public Key Algorithm: id-ecPublicKey"), "{s}");
    let key = ok(openssl(&["pkey", "-in", "ca.key", "-noout", "-text"], &d));
    assert!(key.contains("Private-Key: (3072 bit"), "{key}");
    let _ = std::fs::remove_dir_all(&d);
}
