//! `ipsec profile`: a user's client profiles for a remote-access connection of tunneld's
//! config, so that nobody retypes a proposal (docs/remote-access-clients.md):
//!
//! - an Apple `.mobileconfig` (a `com.apple.vpn.managed` payload of VPNType IKEv2 and the CA
//!   as a `com.apple.security.root` payload; macOS, iOS, iPadOS),
//! - a strongSwan `.sswan` (the strongSwan VPN client for Android; JSON),
//! - a PowerShell script for Windows' built-in client (`Import-Certificate` of the CA,
//!   `Add-VpnConnection -TunnelType Ikev2`, `Set-VpnConnectionIPsecConfiguration`).
//!
//! The algorithms are the connection's first IKE proposal and its first child's first ESP
//! proposal, each transform type's first algorithm the platform can express (the config's
//! order of preference); a type of which the platform can express none is an error that names
//! the platform, the proposal and what the platform takes. Every payload's UUID is derived
//! from the connection, the user and the payload, so a profile made again for the same user
//! replaces the installed one rather than adding a second.

use clap::{Args, ValueEnum};
use ipsec_config::connection::ConnectionConfig;
use ipsec_ike::alg::{parse_proposal, ProposalKind, ProposalSpec};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `ipsec profile`.
#[derive(Args)]
pub struct ProfileArgs {
    /// tunneld's config file (TOML, with the `[[connection]]`).
    pub config: PathBuf,
    /// The connection (default: the only one, or the one with `remote_addrs = ["%any"]`).
    #[arg(long = "conn", value_name = "NAME")]
    pub conn: Option<String>,
    /// The user: EAP user name, and the profile's name.
    #[arg(long, value_name = "NAME")]
    pub user: String,
    /// The client's IKE identity (its certificate's SAN with `--auth cert`; default: the user).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// The address clients connect to (default: the server's identity if it is a DNS name or
    /// an address, else the connection's local address).
    #[arg(long, value_name = "HOST")]
    pub server: Option<String>,
    /// How the client authenticates: `eap` (EAP-MSCHAPv2) or `cert` (default: `cert` for a
    /// connection whose `remote.auth` is pubkey, `eap` for one whose is eap-*).
    #[arg(long, value_enum)]
    pub auth: Option<ClientAuth>,
    /// The CA certificate the clients trust the server's certificate by (PEM or DER;
    /// default: the connection's first `remote.cacerts`).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// The user's certificate and key as PKCS#12 (`openssl pkcs12 -export`), put into the
    /// .mobileconfig and the .sswan for `--auth cert`.
    #[arg(long, value_name = "FILE")]
    pub p12: Option<PathBuf>,
    /// Which profile, written to standard output; default: all three, into --out-dir.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Where the three files USER.mobileconfig, USER.sswan and USER.ps1 go (none may exist).
    #[arg(long = "out-dir", value_name = "DIR", required_unless_present = "format")]
    pub out_dir: Option<PathBuf>,
}

/// How the client authenticates.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum ClientAuth {
    /// EAP (MSCHAPv2 with a user name and password); the server uses its certificate.
    Eap,
    /// A client certificate.
    Cert,
}

/// A profile's format.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Format {
    /// Apple `.mobileconfig` (XML property list).
    Mobileconfig,
    /// strongSwan for Android `.sswan` (JSON).
    Sswan,
    /// Windows PowerShell script.
    Ps1,
}

/// What the profiles are made from.
pub struct Profile {
    /// The connection's name.
    pub name: String,
    /// The user.
    pub user: String,
    /// The client's identity.
    pub local_id: String,
    /// The address clients connect to.
    pub server: String,
    /// The server's identity.
    pub remote_id: String,
    /// Client authentication.
    pub auth: ClientAuth,
    /// The CA certificate, DER.
    pub ca_der: Vec<u8>,
    /// The user's PKCS#12, if given.
    pub p12: Option<Vec<u8>>,
    /// Apple's `CertificateType` of the server's certificate (`RSA`, `ECDSA256`, ...), if
    /// its certificate could be read.
    pub cert_type: Option<&'static str>,
    /// The first IKE proposal, as written and parsed.
    pub ike: (String, ProposalSpec),
    /// The first ESP proposal, as written and parsed.
    pub esp: (String, ProposalSpec),
    /// IKE SA rekey, minutes.
    pub ike_minutes: u64,
    /// Child SA rekey, minutes.
    pub child_minutes: u64,
}

type Result<T> = std::result::Result<T, String>;

/// Runs `ipsec profile`.
pub fn run(a: &ProfileArgs) -> ExitCode {
    match run_inner(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ipsec profile: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(a: &ProfileArgs) -> Result<()> {
    let p = from_args(a)?;
    if let (ClientAuth::Cert, None) = (p.auth, &p.p12) {
        eprintln!(
            "ipsec profile: note: no --p12: the user's certificate must be installed on the device apart from the profile"
        );
    }
    let make = |f: Format| -> Result<String> {
        match f {
            Format::Mobileconfig => mobileconfig(&p),
            Format::Sswan => sswan(&p),
            Format::Ps1 => powershell(&p),
        }
    };
    if let Some(f) = a.format {
        print!("{}", make(f)?);
        return Ok(());
    }
    let dir = a.out_dir.as_ref().ok_or("give --out-dir or --format")?;
    // Everything made before anything is written: an error leaves no partial set.
    let files = [
        ("mobileconfig", make(Format::Mobileconfig)?),
        ("sswan", make(Format::Sswan)?),
        ("ps1", make(Format::Ps1)?),
    ];
    let safe: String = p
        .user
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "@._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    for (ext, text) in files {
        let path = dir.join(format!("{safe}.{ext}"));
        write_new(&path, text.as_bytes())?;
        println!("{}", path.display());
    }
    Ok(())
}

fn write_new(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // A profile may hold the user's PKCS#12: readable by its owner only.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(data).map_err(|e| format!("{}: {e}", path.display()))
}

/// The raw `remote.auth` of connection `name` in the TOML text (the typed config keeps only
/// psk/pubkey; EAP methods are read from here).
fn raw_remote_auth(text: &str, name: &str) -> Option<String> {
    let v: toml::Value = toml::from_str(text).ok()?;
    let conns = v.get("connection")?.as_array()?;
    let c = conns
        .iter()
        .find(|c| c.get("name").and_then(|n| n.as_str()) == Some(name))?;
    Some(c.get("remote")?.get("auth")?.as_str()?.to_string())
}

fn read_cert_der(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.starts_with(b"-----BEGIN") {
        let (label, der) = pem_rfc7468::decode_vec(&bytes).map_err(|e| format!("{}: not PEM: {e}", path.display()))?;
        if label != "CERTIFICATE" {
            return Err(format!("{}: a `{label}` PEM block, not a CERTIFICATE", path.display()));
        }
        Ok(der)
    } else {
        Ok(bytes)
    }
}

/// Builds the [`Profile`] from the config and the arguments.
pub fn from_args(a: &ProfileArgs) -> Result<Profile> {
    let file = a.config.display().to_string();
    let text = std::fs::read_to_string(&a.config).map_err(|e| format!("{file}: {e}"))?;
    let loaded = ipsec_config::load(&a.config, Some(ipsec_config::Format::Toml)).map_err(|e| e.in_file(&file))?;
    let conns = &loaded.config.connections;
    let conn: &ConnectionConfig = match &a.conn {
        Some(n) => conns
            .iter()
            .find(|c| &c.name == n)
            .ok_or_else(|| format!("{file} has no connection `{n}`"))?,
        None => match conns.as_slice() {
            [] => return Err(format!("{file} has no [[connection]]")),
            [c] => c,
            _ => {
                let any: Vec<_> = conns.iter().filter(|c| c.remote_addr.is_none()).collect();
                match any.as_slice() {
                    [c] => c,
                    _ => {
                        return Err(format!(
                            "{file} has several connections: name one with --conn ({})",
                            conns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
                        ))
                    }
                }
            }
        },
    };
    let auth = match a.auth {
        Some(x) => x,
        None if conn.remote.pubkey => ClientAuth::Cert,
        None => match raw_remote_auth(&text, &conn.name) {
            Some(m) if m.starts_with("eap") => ClientAuth::Eap,
            m => {
                return Err(format!(
                    "connection `{}` authenticates clients by {}: the built-in clients' profiles here use a certificate or EAP (give --auth)",
                    conn.name,
                    m.as_deref().unwrap_or("psk")
                ))
            }
        },
    };
    let ca_path = match &a.ca {
        Some(p) => p.clone(),
        None => {
            let p = conn.remote.cacerts.first().ok_or_else(|| {
                format!(
                    "connection `{}` names no remote.cacerts: give the CA certificate with --ca",
                    conn.name
                )
            })?;
            if p.is_relative() && !p.exists() {
                a.config.parent().unwrap_or(Path::new(".")).join(p)
            } else {
                p.clone()
            }
        }
    };
    let ca_der = read_cert_der(&ca_path)?;
    let cert_type = conn
        .local
        .certs
        .first()
        .map(|p| {
            if p.is_relative() && !p.exists() {
                a.config.parent().unwrap_or(Path::new(".")).join(p)
            } else {
                p.clone()
            }
        })
        .and_then(|p| read_cert_der(&p).ok())
        .and_then(|d| apple_cert_type(&d));
    let p12 = match &a.p12 {
        Some(p) => Some(std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => None,
    };
    let remote_id = conn.local.id.clone().unwrap_or_else(|| conn.local_addr.to_string());
    let server = match &a.server {
        Some(s) => s.clone(),
        None if looks_like_host(&remote_id) => remote_id.clone(),
        None => conn.local_addr.to_string(),
    };
    let first = |v: &[String], kind: ProposalKind, what: &str| -> Result<(String, ProposalSpec)> {
        let s = v
            .first()
            .ok_or_else(|| format!("connection `{}` has no {what} proposal", conn.name))?;
        let spec = parse_proposal(s, kind).map_err(|e| format!("{what} proposal `{s}`: {e}"))?;
        Ok((s.clone(), spec))
    };
    let child = conn
        .children
        .first()
        .ok_or_else(|| format!("connection `{}` has no child", conn.name))?;
    Ok(Profile {
        name: conn.name.clone(),
        user: a.user.clone(),
        local_id: a.id.clone().unwrap_or_else(|| a.user.clone()),
        server,
        remote_id,
        auth,
        ca_der,
        p12,
        cert_type,
        ike: first(&conn.proposals, ProposalKind::Ike, "IKE")?,
        esp: first(&child.esp_proposals, ProposalKind::Esp, "ESP")?,
        ike_minutes: conn.rekey_time.map_or(1440, |d| d.as_secs() / 60),
        child_minutes: child.lifetimes.rekey_time.as_secs() / 60,
    })
}

fn looks_like_host(id: &str) -> bool {
    id.parse::<std::net::IpAddr>().is_ok()
        || (id.contains('.') && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'))
}

// ---- the platforms' names for our algorithms ---------------------------------------------

/// A platform's names for one transform type: (our strongSwan name, theirs).
type Table = &'static [(&'static str, &'static str)];

/// Apple `EncryptionAlgorithm` (IKE and child SA).
pub const APPLE_ENCR: Table = &[
    ("aes128", "AES-128"),
    ("aes256", "AES-256"),
    ("aes128gcm16", "AES-128-GCM"),
    ("aes256gcm16", "AES-256-GCM"),
    ("chacha20poly1305", "ChaCha20Poly1305"),
    ("3des", "3DES"),
];
/// Apple `IntegrityAlgorithm` (with an AEAD IKE SA: the PRF).
pub const APPLE_INTEG: Table = &[
    ("sha256", "SHA2-256"),
    ("sha384", "SHA2-384"),
    ("sha512", "SHA2-512"),
    ("sha1", "SHA1-96"),
];
/// The PRFs, for an AEAD IKE proposal (Apple takes its `IntegrityAlgorithm` as the PRF).
pub const APPLE_PRF: Table = &[
    ("prfsha256", "SHA2-256"),
    ("prfsha384", "SHA2-384"),
    ("prfsha512", "SHA2-512"),
    ("prfsha1", "SHA1-160"),
];
/// Apple `DiffieHellmanGroup` (an integer: the IANA number).
pub const APPLE_DH: Table = &[
    ("modp2048", "14"),
    ("ecp256", "19"),
    ("ecp384", "20"),
    ("x25519", "31"),
    ("modp1024", "2"),
];
/// Windows `EncryptionMethod` (IKE SA).
pub const WIN_IKE_ENCR: Table = &[
    ("aes128", "AES128"),
    ("aes256", "AES256"),
    ("aes128gcm16", "GCMAES128"),
    ("aes256gcm16", "GCMAES256"),
    ("3des", "DES3"),
];
/// Windows `IntegrityCheckMethod` (IKE SA; with an AEAD: the PRF's hash).
pub const WIN_IKE_INTEG: Table = &[("sha256", "SHA256"), ("sha384", "SHA384"), ("sha1", "SHA196")];
/// The PRFs of an AEAD IKE proposal, as Windows' `IntegrityCheckMethod`.
pub const WIN_IKE_PRF: Table = &[("prfsha256", "SHA256"), ("prfsha384", "SHA384"), ("prfsha1", "SHA196")];
/// Windows `DHGroup` (IKE SA).
pub const WIN_DH: Table = &[
    ("ecp256", "ECP256"),
    ("ecp384", "ECP384"),
    ("modp2048", "Group14"),
    ("modp1024", "Group2"),
];
/// Windows `CipherTransformConstants` (ESP).
pub const WIN_ESP_ENCR: Table = &[
    ("aes128", "AES128"),
    ("aes256", "AES256"),
    ("aes128gcm16", "GCMAES128"),
    ("aes256gcm16", "GCMAES256"),
    ("3des", "DES3"),
];
/// Windows `AuthenticationTransformConstants` (ESP integrity; with AES-GCM: the GCM constant).
pub const WIN_ESP_INTEG: Table = &[("sha256", "SHA256128"), ("sha1", "SHA196")];
/// Windows `PfsGroup` (ESP key exchange in rekeys).
pub const WIN_PFS: Table = &[
    ("ecp256", "ECP256"),
    ("ecp384", "ECP384"),
    ("modp2048", "PFS2048"),
    ("modp1024", "PFS2"),
];

/// The first of `ours` (strongSwan names, in the config's order) that `table` maps.
fn pick(platform: &str, what: &str, proposal: &str, ours: &[&'static str], table: Table) -> Result<&'static str> {
    for o in ours {
        if let Some((_, theirs)) = table.iter().find(|(n, _)| n == o) {
            return Ok(theirs);
        }
    }
    Err(format!(
        "{platform} cannot express the {what} of proposal `{proposal}` ({}): it takes {}",
        ours.join(", "),
        table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    ))
}

fn names<T: Copy>(v: &[T], f: impl Fn(T) -> &'static str) -> Vec<&'static str> {
    v.iter().map(|x| f(*x)).collect()
}

/// The algorithms of one SA as a platform names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suite {
    /// The encryption algorithm.
    pub encr: &'static str,
    /// The integrity algorithm (for an AEAD IKE SA: the PRF), if the platform wants one.
    pub integ: Option<&'static str>,
    /// The key exchange (IKE) or PFS group (ESP); None: none.
    pub dh: Option<&'static str>,
    /// Whether the encryption is an AEAD.
    pub aead: bool,
}

/// The IKE and ESP suites for Apple.
pub fn apple_suites(p: &Profile) -> Result<(Suite, Suite)> {
    let (ike_text, ike) = &p.ike;
    let (esp_text, esp) = &p.esp;
    let ike_encr = names(&ike.encr, |e| e.name());
    let aead = ike.encr.first().is_some_and(|e| e.is_aead());
    let ike_integ = if aead {
        pick("Apple", "PRF", ike_text, &names(&ike.prf, |x| x.name()), APPLE_PRF)?
    } else {
        pick(
            "Apple",
            "integrity",
            ike_text,
            &names(&ike.integ, |x| x.name()),
            APPLE_INTEG,
        )?
    };
    let ike_suite = Suite {
        encr: pick("Apple", "encryption", ike_text, &ike_encr, APPLE_ENCR)?,
        integ: Some(ike_integ),
        dh: Some(pick(
            "Apple",
            "key exchange",
            ike_text,
            &names(&ike.dh, |x| x.name()),
            APPLE_DH,
        )?),
        aead,
    };
    let esp_aead = esp.encr.first().is_some_and(|e| e.is_aead());
    let esp_suite = Suite {
        encr: pick(
            "Apple",
            "encryption",
            esp_text,
            &names(&esp.encr, |e| e.name()),
            APPLE_ENCR,
        )?,
        integ: if esp_aead {
            None
        } else {
            Some(pick(
                "Apple",
                "integrity",
                esp_text,
                &names(&esp.integ, |x| x.name()),
                APPLE_INTEG,
            )?)
        },
        dh: if esp.dh.is_empty() {
            None
        } else {
            Some(pick(
                "Apple",
                "key exchange",
                esp_text,
                &names(&esp.dh, |x| x.name()),
                APPLE_DH,
            )?)
        },
        aead: esp_aead,
    };
    Ok((ike_suite, esp_suite))
}

/// The IKE and ESP suites for Windows.
pub fn windows_suites(p: &Profile) -> Result<(Suite, Suite)> {
    let (ike_text, ike) = &p.ike;
    let (esp_text, esp) = &p.esp;
    let aead = ike.encr.first().is_some_and(|e| e.is_aead());
    let ike_suite = Suite {
        encr: pick(
            "Windows",
            "encryption",
            ike_text,
            &names(&ike.encr, |e| e.name()),
            WIN_IKE_ENCR,
        )?,
        integ: Some(if aead {
            pick("Windows", "PRF", ike_text, &names(&ike.prf, |x| x.name()), WIN_IKE_PRF)?
        } else {
            pick(
                "Windows",
                "integrity",
                ike_text,
                &names(&ike.integ, |x| x.name()),
                WIN_IKE_INTEG,
            )?
        }),
        dh: Some(pick(
            "Windows",
            "key exchange",
            ike_text,
            &names(&ike.dh, |x| x.name()),
            WIN_DH,
        )?),
        aead,
    };
    let encr = pick(
        "Windows",
        "encryption",
        esp_text,
        &names(&esp.encr, |e| e.name()),
        WIN_ESP_ENCR,
    )?;
    let esp_aead = encr.starts_with("GCM");
    let esp_suite = Suite {
        encr,
        // AES-GCM in ESP: Windows wants the same GCM constant as the authentication transform.
        integ: Some(if esp_aead {
            encr
        } else {
            pick(
                "Windows",
                "integrity",
                esp_text,
                &names(&esp.integ, |x| x.name()),
                WIN_ESP_INTEG,
            )?
        }),
        dh: if esp.dh.is_empty() {
            None
        } else {
            Some(pick(
                "Windows",
                "PFS group",
                esp_text,
                &names(&esp.dh, |x| x.name()),
                WIN_PFS,
            )?)
        },
        aead: esp_aead,
    };
    Ok((ike_suite, esp_suite))
}

// ---- encodings ----------------------------------------------------------------------------

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A UUID made from the connection, the user and what it names (SHA-256, version and variant
/// bits of RFC 9562 version 8): the same inputs give the same UUID.
pub fn stable_uuid(p: &Profile, what: &str) -> String {
    let input = format!("ipsec-profile\0{}\0{}\0{}\0{what}", p.name, p.user, p.server);
    let d = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&d.as_ref()[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02X}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A property list value.
enum Pl {
    S(String),
    I(u64),
    B(bool),
    D(Vec<u8>),
    Dict(Vec<(&'static str, Pl)>),
    Arr(Vec<Pl>),
}

fn plist(v: &Pl, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    match v {
        Pl::S(s) => {
            let _ = writeln!(out, "{pad}<string>{}</string>", xml(s));
        }
        Pl::I(i) => {
            let _ = writeln!(out, "{pad}<integer>{i}</integer>");
        }
        Pl::B(b) => {
            let _ = writeln!(out, "{pad}<{}/>", if *b { "true" } else { "false" });
        }
        Pl::D(d) => {
            let _ = writeln!(out, "{pad}<data>{}</data>", base64(d));
        }
        Pl::Dict(kv) => {
            let _ = writeln!(out, "{pad}<dict>");
            for (k, v) in kv {
                let _ = writeln!(out, "{pad}  <key>{}</key>", xml(k));
                plist(v, depth + 1, out);
            }
            let _ = writeln!(out, "{pad}</dict>");
        }
        Pl::Arr(a) => {
            let _ = writeln!(out, "{pad}<array>");
            for v in a {
                plist(v, depth + 1, out);
            }
            let _ = writeln!(out, "{pad}</array>");
        }
    }
}

fn sa_params(s: &Suite, minutes: u64) -> Pl {
    let mut kv = vec![("EncryptionAlgorithm", Pl::S(s.encr.into()))];
    if let Some(i) = s.integ {
        kv.push(("IntegrityAlgorithm", Pl::S(i.into())));
    }
    if let Some(d) = s.dh {
        kv.push(("DiffieHellmanGroup", Pl::I(d.parse().unwrap_or(14))));
    }
    // Apple takes 10 minutes to 24 hours.
    kv.push(("LifeTimeInMinutes", Pl::I(minutes.clamp(10, 1440))));
    Pl::Dict(kv)
}

/// The Apple `.mobileconfig`.
pub fn mobileconfig(p: &Profile) -> Result<String> {
    let (ike, esp) = apple_suites(p)?;
    let ident = format!("org.ipsec-rs.{}.{}", p.name, p.user);
    let mut ikev2 = vec![
        ("RemoteAddress", Pl::S(p.server.clone())),
        ("RemoteIdentifier", Pl::S(p.remote_id.clone())),
        ("LocalIdentifier", Pl::S(p.local_id.clone())),
        ("ServerCertificateIssuerCommonName", Pl::S(String::new())),
        ("DeadPeerDetectionRate", Pl::S("Medium".into())),
        ("DisableMOBIKE", Pl::I(0)),
        ("DisableRedirect", Pl::I(1)),
        ("EnablePFS", Pl::I(u64::from(esp.dh.is_some()))),
        ("IKESecurityAssociationParameters", sa_params(&ike, p.ike_minutes)),
        ("ChildSecurityAssociationParameters", sa_params(&esp, p.child_minutes)),
    ];
    // The issuer's CN is only known from the CA certificate: taken out when not readable.
    match ca_common_name(&p.ca_der) {
        Some(cn) => ikev2[3].1 = Pl::S(cn),
        None => {
            ikev2.remove(3);
        }
    }
    // The type of the certificates the IKE SA is authenticated with (Apple: RSA by default).
    if let Some(t) = p.cert_type {
        ikev2.push(("CertificateType", Pl::S(t.into())));
    }
    let cert_uuid = stable_uuid(p, "p12");
    match p.auth {
        ClientAuth::Eap => {
            ikev2.push(("AuthenticationMethod", Pl::S("None".into())));
            ikev2.push(("ExtendedAuthEnabled", Pl::I(1)));
            ikev2.push(("AuthName", Pl::S(p.user.clone())));
        }
        ClientAuth::Cert => {
            ikev2.push(("AuthenticationMethod", Pl::S("Certificate".into())));
            ikev2.push(("ExtendedAuthEnabled", Pl::I(0)));
            if p.p12.is_some() {
                ikev2.push(("PayloadCertificateUUID", Pl::S(cert_uuid.clone())));
            }
        }
    }
    let vpn = Pl::Dict(vec![
        ("IKEv2", Pl::Dict(ikev2)),
        ("PayloadDescription", Pl::S(format!("IKEv2 VPN {}", p.name))),
        ("PayloadDisplayName", Pl::S(format!("VPN {}", p.name))),
        ("PayloadIdentifier", Pl::S(format!("{ident}.vpn"))),
        ("PayloadType", Pl::S("com.apple.vpn.managed".into())),
        ("PayloadUUID", Pl::S(stable_uuid(p, "vpn"))),
        ("PayloadVersion", Pl::I(1)),
        ("UserDefinedName", Pl::S(p.name.clone())),
        ("VPNType", Pl::S("IKEv2".into())),
    ]);
    let ca = Pl::Dict(vec![
        ("PayloadCertificateFileName", Pl::S(format!("{}-ca.cer", p.name))),
        ("PayloadContent", Pl::D(p.ca_der.clone())),
        ("PayloadDisplayName", Pl::S(format!("{} CA", p.name))),
        ("PayloadIdentifier", Pl::S(format!("{ident}.ca"))),
        ("PayloadType", Pl::S("com.apple.security.root".into())),
        ("PayloadUUID", Pl::S(stable_uuid(p, "ca"))),
        ("PayloadVersion", Pl::I(1)),
    ]);
    let mut content = vec![vpn, ca];
    if let (ClientAuth::Cert, Some(p12)) = (p.auth, &p.p12) {
        content.push(Pl::Dict(vec![
            ("PayloadCertificateFileName", Pl::S(format!("{}.p12", p.user))),
            ("PayloadContent", Pl::D(p12.clone())),
            ("PayloadDisplayName", Pl::S(format!("{} certificate", p.user))),
            ("PayloadIdentifier", Pl::S(format!("{ident}.p12"))),
            ("PayloadType", Pl::S("com.apple.security.pkcs12".into())),
            ("PayloadUUID", Pl::S(cert_uuid)),
            ("PayloadVersion", Pl::I(1)),
        ]));
    }
    let top = Pl::Dict(vec![
        ("PayloadContent", Pl::Arr(content)),
        ("PayloadDisplayName", Pl::S(format!("VPN {} ({})", p.name, p.user))),
        ("PayloadIdentifier", Pl::S(ident)),
        ("PayloadRemovalDisallowed", Pl::B(false)),
        ("PayloadType", Pl::S("Configuration".into())),
        ("PayloadUUID", Pl::S(stable_uuid(p, "profile"))),
        ("PayloadVersion", Pl::I(1)),
    ]);
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n<plist version=\"1.0\">\n",
    );
    plist(&top, 0, &mut out);
    out.push_str("</plist>\n");
    Ok(out)
}

/// Apple's `CertificateType` for a certificate's key: RSA, or ECDSA by curve.
fn apple_cert_type(der: &[u8]) -> Option<&'static str> {
    use const_oid::db::rfc5912;
    use der::Decode;
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    let alg = &cert.tbs_certificate.subject_public_key_info.algorithm;
    if alg.oid == rfc5912::RSA_ENCRYPTION {
        return Some("RSA");
    }
    if alg.oid != rfc5912::ID_EC_PUBLIC_KEY {
        return None;
    }
    let curve = alg
        .parameters
        .as_ref()?
        .decode_as::<const_oid::ObjectIdentifier>()
        .ok()?;
    match curve {
        c if c == rfc5912::SECP_256_R_1 => Some("ECDSA256"),
        c if c == rfc5912::SECP_384_R_1 => Some("ECDSA384"),
        c if c == rfc5912::SECP_521_R_1 => Some("ECDSA521"),
        _ => None,
    }
}

/// The CA certificate's subject CN, if it has one.
fn ca_common_name(der: &[u8]) -> Option<String> {
    use der::Decode;
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    for rdn in cert.tbs_certificate.subject.0.iter() {
        for atv in rdn.0.iter() {
            if atv.oid == const_oid::db::rfc4519::CN {
                return atv
                    .value
                    .decode_as::<der::asn1::Utf8StringRef>()
                    .ok()
                    .map(|s| s.to_string())
                    .or_else(|| {
                        atv.value
                            .decode_as::<der::asn1::PrintableStringRef>()
                            .ok()
                            .map(|s| s.to_string())
                    });
            }
        }
    }
    None
}

/// The strongSwan `.sswan` (JSON; the strongSwan VPN client's profile format).
pub fn sswan(p: &Profile) -> Result<String> {
    let mut remote = serde_json::json!({
        "addr": p.server,
        "id": p.remote_id,
        "cert": base64(&p.ca_der),
    });
    remote["certreq"] = serde_json::Value::Bool(true);
    let mut local = serde_json::json!({ "id": p.local_id });
    let kind = match p.auth {
        ClientAuth::Eap => {
            local["eap_id"] = serde_json::Value::String(p.user.clone());
            "ikev2-eap"
        }
        ClientAuth::Cert => {
            if let Some(p12) = &p.p12 {
                local["p12"] = serde_json::Value::String(base64(p12));
            }
            "ikev2-cert"
        }
    };
    let v = serde_json::json!({
        "uuid": stable_uuid(p, "sswan").to_lowercase(),
        "name": format!("{} ({})", p.name, p.user),
        "type": kind,
        "remote": remote,
        "local": local,
        "ike-proposal": p.ike.0,
        "esp-proposal": p.esp.0,
    });
    serde_json::to_string_pretty(&v)
        .map(|s| s + "\n")
        .map_err(|e| e.to_string())
}

fn ps_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The PowerShell script for Windows' built-in client.
pub fn powershell(p: &Profile) -> Result<String> {
    let (ike, esp) = windows_suites(p)?;
    let name = ps_quote(&p.name);
    let method = match p.auth {
        ClientAuth::Eap => "Eap",
        ClientAuth::Cert => "MachineCertificate",
    };
    let pem =
        pem_rfc7468::encode_string("CERTIFICATE", pem_rfc7468::LineEnding::LF, &p.ca_der).map_err(|e| e.to_string())?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# IKEv2 VPN `{}` for {}, made by `ipsec profile` from tunneld's config.",
        p.name, p.user
    );
    let _ = writeln!(
        s,
        "# Run as Administrator (the CA goes into the machine's trusted roots)."
    );
    if p.auth == ClientAuth::Cert {
        let _ = writeln!(
            s,
            "# The client certificate ({}) must be in Cert:\\LocalMachine\\My (Import-PfxCertificate).",
            p.local_id
        );
    }
    let _ = writeln!(s, "$ErrorActionPreference = 'Stop'");
    // A here-string: `@'` ends its line, `'@` starts one.
    let _ = writeln!(s, "$ca = @'\n{}\n'@", pem.trim_end());
    let _ = writeln!(
        s,
        "$caFile = Join-Path $env:TEMP {}",
        ps_quote(&format!("{}-ca.cer", p.name))
    );
    let _ = writeln!(s, "Set-Content -Path $caFile -Value $ca -Encoding ascii");
    let _ = writeln!(
        s,
        "Import-Certificate -FilePath $caFile -CertStoreLocation Cert:\\LocalMachine\\Root | Out-Null"
    );
    let _ = writeln!(
        s,
        "Add-VpnConnection -Name {name} -ServerAddress {} -TunnelType Ikev2 -AuthenticationMethod {method} -EncryptionLevel Required{} -Force",
        ps_quote(&p.server),
        if p.auth == ClientAuth::Eap { " -RememberCredential" } else { "" }
    );
    let _ = writeln!(
        s,
        "Set-VpnConnectionIPsecConfiguration -ConnectionName {name} -EncryptionMethod {} -IntegrityCheckMethod {} -DHGroup {} -CipherTransformConstants {} -AuthenticationTransformConstants {} -PfsGroup {} -Force",
        ike.encr,
        ike.integ.unwrap_or("SHA256"),
        ike.dh.unwrap_or("None"),
        esp.encr,
        esp.integ.unwrap_or("None"),
        esp.dh.unwrap_or("None"),
    );
    let _ = writeln!(
        s,
        "Write-Host \"VPN connection '{}' added\"",
        p.name.replace(['"', '`', '$'], "_")
    );
    Ok(s)
}
