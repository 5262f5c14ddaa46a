//! `ipsec profile`: the three profiles of a user, made from a config, read back by parsers
//! nobody here wrote — the .mobileconfig by Python's plistlib (skipped with a note where
//! python3 is missing), the .sswan by serde_json — and the PowerShell script's parameters;
//! every value asserted is derived from the config the test writes (no golden file).

mod common;
use common::{fresh_dir, ipsec_in as ipsec, ok, pki_server};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tempdir(tag: &str) -> PathBuf {
    fresh_dir("ipsec-profile", tag)
}

/// A CA and a server certificate by `ipsec pki`, and a config with a road-warrior connection
/// of these proposals.
fn setup(tag: &str, ike: &str, esp: &str) -> PathBuf {
    let d = tempdir(tag);
    ok(ipsec(
        &[
            "pki",
            "ca",
            "--cn",
            "Profile Test CA",
            "--cert",
            "ca.pem",
            "--key",
            "ca.key",
        ],
        &d,
    ));
    pki_server(&d, "vpn.example.org");
    let conf = format!(
        r#"[[connection]]
name = "office"
local_addrs = ["192.0.2.1"]
remote_addrs = ["%any"]
proposals = ["{ike}", "aes128-sha256-modp2048"]
rekey_time = "2h"
local = {{ id = "vpn.example.org", auth = "pubkey", certs = ["server.pem"] }}
remote = {{ auth = "pubkey", cacerts = ["ca.pem"] }}

[[connection.children]]
name = "all"
local_ts = ["0.0.0.0/0"]
esp_proposals = ["{esp}", "aes128gcm16"]
rekey_time = "30m"
"#
    );
    std::fs::write(d.join("vpn.toml"), conf).unwrap();
    d
}

fn have_python_plistlib() -> bool {
    Command::new("python3")
        .args(["-c", "import plistlib, ssl"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn plist_json(file: &Path, pem: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/plist_to_json.py");
    let o = Command::new("python3").arg(script).arg(file).arg(pem).output().unwrap();
    serde_json::from_slice(&ok(o).into_bytes()).unwrap()
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<_> = s.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

/// Every PayloadUUID in a parsed profile.
fn uuids(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "PayloadUUID" {
                    out.push(x.as_str().unwrap().to_string());
                }
                uuids(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| uuids(x, out)),
        _ => {}
    }
}

#[test]
fn the_three_profiles_carry_the_config() {
    let d = setup("three", "aes256gcm16-prfsha384-ecp384", "aes256gcm16-ecp384");
    let out = ok(ipsec(
        &[
            "profile",
            "vpn.toml",
            "--user",
            "alice",
            "--id",
            "alice@example.org",
            "--out-dir",
            ".",
        ],
        &d,
    ));
    assert_eq!(out.lines().count(), 3, "{out}");
    for ext in ["mobileconfig", "sswan", "ps1"] {
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(d.join(format!("alice.{ext}"))).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600, "{ext}");
    }
    // Made again: nothing is overwritten.
    let again = ipsec(&["profile", "vpn.toml", "--user", "alice", "--out-dir", "."], &d);
    assert!(!again.status.success());

    // .sswan
    let s: Value = serde_json::from_slice(&std::fs::read(d.join("alice.sswan")).unwrap()).unwrap();
    assert_eq!(s["type"], "ikev2-cert");
    assert_eq!(s["remote"]["addr"], "vpn.example.org");
    assert_eq!(s["remote"]["id"], "vpn.example.org");
    assert_eq!(s["local"]["id"], "alice@example.org");
    assert_eq!(s["ike-proposal"], "aes256gcm16-prfsha384-ecp384");
    assert_eq!(s["esp-proposal"], "aes256gcm16-ecp384");
    assert!(is_uuid(s["uuid"].as_str().unwrap()));
    assert!(s["remote"]["cert"].as_str().unwrap().starts_with("MII"));

    // PowerShell
    let ps = std::fs::read_to_string(d.join("alice.ps1")).unwrap();
    let add = ps.lines().find(|l| l.starts_with("Add-VpnConnection ")).unwrap();
    for p in [
        "-Name 'office'",
        "-ServerAddress 'vpn.example.org'",
        "-TunnelType Ikev2",
        "-AuthenticationMethod MachineCertificate",
    ] {
        assert!(add.contains(p), "{p} not in {add}");
    }
    let set = ps
        .lines()
        .find(|l| l.starts_with("Set-VpnConnectionIPsecConfiguration "))
        .unwrap();
    for p in [
        "-ConnectionName 'office'",
        "-EncryptionMethod GCMAES256",
        "-IntegrityCheckMethod SHA384",
        "-DHGroup ECP384",
        "-CipherTransformConstants GCMAES256",
        "-AuthenticationTransformConstants GCMAES256",
        "-PfsGroup ECP384",
    ] {
        assert!(set.contains(p), "{p} not in {set}");
    }
    assert!(ps.contains("Import-Certificate -FilePath $caFile -CertStoreLocation Cert:\\LocalMachine\\Root"));
    // The here-string holds the CA's PEM, closed at the start of a line.
    assert!(ps.contains("$ca = @'\n-----BEGIN CERTIFICATE-----\n"));
    assert!(ps.contains("\n-----END CERTIFICATE-----\n'@\n"));

    // .mobileconfig, read by plistlib
    assert!(
        have_python_plistlib(),
        "python3 (with its standard plistlib) is needed to read the .mobileconfig"
    );
    let m = plist_json(&d.join("alice.mobileconfig"), &d.join("ca.pem"));
    assert_eq!(m["PayloadType"], "Configuration");
    assert_eq!(m["PayloadVersion"], 1);
    let content = m["PayloadContent"].as_array().unwrap();
    let vpn = content
        .iter()
        .find(|p| p["PayloadType"] == "com.apple.vpn.managed")
        .unwrap();
    assert_eq!(vpn["VPNType"], "IKEv2");
    let ike = &vpn["IKEv2"];
    assert_eq!(ike["RemoteAddress"], "vpn.example.org");
    assert_eq!(ike["RemoteIdentifier"], "vpn.example.org");
    assert_eq!(ike["LocalIdentifier"], "alice@example.org");
    assert_eq!(ike["AuthenticationMethod"], "Certificate");
    assert_eq!(ike["ExtendedAuthEnabled"], 0);
    assert_eq!(ike["ServerCertificateIssuerCommonName"], "Profile Test CA");
    // `ipsec pki` made the server an ECDSA P-256 key (Apple's default would be RSA).
    assert_eq!(ike["CertificateType"], "ECDSA256");
    let sa = &ike["IKESecurityAssociationParameters"];
    assert_eq!(sa["EncryptionAlgorithm"], "AES-256-GCM");
    assert_eq!(sa["IntegrityAlgorithm"], "SHA2-384");
    assert_eq!(sa["DiffieHellmanGroup"], 20);
    assert_eq!(sa["LifeTimeInMinutes"], 120);
    let child = &ike["ChildSecurityAssociationParameters"];
    assert_eq!(child["EncryptionAlgorithm"], "AES-256-GCM");
    assert_eq!(child["DiffieHellmanGroup"], 20);
    assert_eq!(child["LifeTimeInMinutes"], 30);
    assert_eq!(ike["EnablePFS"], 1);
    let ca = content
        .iter()
        .find(|p| p["PayloadType"] == "com.apple.security.root")
        .unwrap();
    assert_eq!(ca["PayloadContent"], m["_pem_der"]);
    let mut ids = Vec::new();
    uuids(&m, &mut ids);
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|u| is_uuid(u)), "{ids:?}");
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3, "{ids:?}");

    // Stable per user: the same UUIDs for alice again, others for bob.
    let again = ok(ipsec(
        &["profile", "vpn.toml", "--user", "alice", "--format", "mobileconfig"],
        &d,
    ));
    std::fs::write(d.join("again.mobileconfig"), again).unwrap();
    let mut ids2 = Vec::new();
    uuids(&plist_json(&d.join("again.mobileconfig"), &d.join("ca.pem")), &mut ids2);
    assert_eq!(ids, ids2);
    let bob = ok(ipsec(
        &["profile", "vpn.toml", "--user", "bob", "--format", "mobileconfig"],
        &d,
    ));
    std::fs::write(d.join("bob.mobileconfig"), bob).unwrap();
    let mut ids3 = Vec::new();
    uuids(&plist_json(&d.join("bob.mobileconfig"), &d.join("ca.pem")), &mut ids3);
    assert!(ids3.iter().all(|u| !ids.contains(u)));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn eap_profiles_ask_for_a_user_name_and_password() {
    let d = setup("eap", "aes128-sha256-x25519-ecp256", "aes128-sha256");
    let ps = ok(ipsec(
        &[
            "profile", "vpn.toml", "--user", "carol", "--auth", "eap", "--format", "ps1",
        ],
        &d,
    ));
    assert!(ps.contains("-AuthenticationMethod Eap"));
    // x25519 first in the config, which Windows cannot do: the next group it can.
    for p in [
        "-EncryptionMethod AES128",
        "-IntegrityCheckMethod SHA256",
        "-DHGroup ECP256",
    ] {
        assert!(ps.contains(p), "{p}");
    }
    assert!(ps.contains("-CipherTransformConstants AES128 -AuthenticationTransformConstants SHA256128 -PfsGroup None"));
    let s: Value = serde_json::from_str(&ok(ipsec(
        &[
            "profile", "vpn.toml", "--user", "carol", "--auth", "eap", "--format", "sswan",
        ],
        &d,
    )))
    .unwrap();
    assert_eq!(s["type"], "ikev2-eap");
    assert_eq!(s["local"]["eap_id"], "carol");
    if !have_python_plistlib() {
        return;
    }
    let text = ok(ipsec(
        &[
            "profile",
            "vpn.toml",
            "--user",
            "carol",
            "--auth",
            "eap",
            "--format",
            "mobileconfig",
        ],
        &d,
    ));
    std::fs::write(d.join("carol.mobileconfig"), text).unwrap();
    let m = plist_json(&d.join("carol.mobileconfig"), &d.join("ca.pem"));
    let ike = &m["PayloadContent"][0]["IKEv2"];
    assert_eq!(ike["AuthenticationMethod"], "None");
    assert_eq!(ike["ExtendedAuthEnabled"], 1);
    assert_eq!(ike["AuthName"], "carol");
    let sa = &ike["IKESecurityAssociationParameters"];
    // Apple does Curve25519: the config's first group.
    assert_eq!(
        (
            &sa["EncryptionAlgorithm"],
            &sa["IntegrityAlgorithm"],
            &sa["DiffieHellmanGroup"]
        ),
        (&Value::from("AES-128"), &Value::from("SHA2-256"), &Value::from(31))
    );
    let child = &ike["ChildSecurityAssociationParameters"];
    assert_eq!(child["IntegrityAlgorithm"], "SHA2-256");
    assert!(child.get("DiffieHellmanGroup").is_none());
    assert_eq!(ike["EnablePFS"], 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_proposal_a_platform_cannot_express_is_an_error_naming_it() {
    let d = setup("inexpressible", "aes256-sha512-x25519", "chacha20poly1305");
    // Apple takes HMAC-SHA-512, Curve25519 and ChaCha20-Poly1305 ...
    ok(ipsec(
        &["profile", "vpn.toml", "--user", "dave", "--format", "mobileconfig"],
        &d,
    ));
    ok(ipsec(
        &["profile", "vpn.toml", "--user", "dave", "--format", "sswan"],
        &d,
    ));
    // ... Windows neither.
    let o = ipsec(&["profile", "vpn.toml", "--user", "dave", "--format", "ps1"], &d);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("Windows cannot express the integrity of proposal `aes256-sha512-x25519`"),
        "{e}"
    );
    // All three at once: nothing is written.
    let o = ipsec(&["profile", "vpn.toml", "--user", "dave", "--out-dir", "."], &d);
    assert!(!o.status.success());
    assert!(!d.join("dave.mobileconfig").exists());
    let _ = std::fs::remove_dir_all(&d);
}
