//! `ipsec pki`: a small CA for a remote-access server — the CA (key and self-signed
//! certificate), the server's certificate with what every built-in IKEv2 client checks, and
//! client certificates (docs/remote-access-clients.md).
//!
//! - The server certificate (RFC 4945 5.1.3.12, RFC 5280 4.2.1.12): EKU serverAuth (Windows,
//!   Android's strongSwan) and ikeIntermediate 1.3.6.1.5.5.8.2.2 (macOS and iOS before 10.15
//!   and 13 ask for it); every name given as a dNSName SAN, an IP address both as an
//!   iPAddress SAN and as a dNSName (Windows matches an address only against dNSName: error
//!   13801 otherwise); CN = the first name.
//! - Client certificates: EKU clientAuth, a SAN rfc822Name (`--email`) or dNSName (`--dns`),
//!   CN = the name given.
//!
//! Keys are ECDSA P-256 (RFC 5480; the default), made and used by `ring`, or RSA-3072
//! (`--key-type rsa`), made by RustCrypto `rsa` (ring cannot make RSA keys) and used by `ring`;
//! certificates are built with the RustCrypto `x509-cert` types the IKE crate already reads
//! certificates with, DER-encoded and signed with ECDSA-SHA256 (RFC 5758 3.2) or RSA PKCS#1
//! v1.5 SHA-256 (RFC 4055 5), as the issuer's key is. Private keys are PKCS#8 PEM files of
//! mode 0600; no file is ever overwritten.

use clap::{Args, Subcommand};
use const_oid::db::{rfc4519, rfc5280, rfc5912};
use der::asn1::{BitString, Ia5String, OctetString, SetOfVec, Utf8StringRef};
use der::{Any, DecodePem, Encode, EncodePem};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{EcdsaKeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, RSA_PKCS1_SHA256};
use spki::{AlgorithmIdentifierOwned, ObjectIdentifier, SubjectPublicKeyInfoOwned};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};
use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, KeyUsages, SubjectAltName,
    SubjectKeyIdentifier,
};
use x509_cert::ext::Extension;
use x509_cert::name::{Name, RdnSequence, RelativeDistinguishedName};
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::{Time, Validity};
use x509_cert::{Certificate, TbsCertificate, Version};

/// ikeIntermediate (RFC 4945 5.1.3.12: id-kp 17 of the IPsec arc, 1.3.6.1.5.5.8.2.2), the EKU
/// older macOS and iOS releases ask of an IKEv2 server's certificate.
pub const ID_KP_IKE_INTERMEDIATE: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.8.2.2");

/// `ipsec pki`'s subcommands.
#[derive(Subcommand)]
pub enum PkiCmd {
    /// A CA: a new key and a self-signed certificate (CA:TRUE, keyCertSign and cRLSign).
    Ca(CaArgs),
    /// A server certificate for IKEv2 remote access, signed by the CA: EKU serverAuth and
    /// ikeIntermediate, the names as dNSName SANs, an IP address as both iPAddress and
    /// dNSName SAN.
    Server(ServerArgs),
    /// A client certificate, signed by the CA: EKU clientAuth, SAN email or DNS name.
    Client(ClientArgs),
}

/// The kind of key made.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum KeyType {
    /// ECDSA on P-256 (RFC 5480), signatures ECDSA-SHA256.
    Ecdsa,
    /// RSA, 3072 bits, signatures PKCS#1 v1.5 SHA-256.
    Rsa,
}

/// RSA keys' size in bits.
pub const RSA_BITS: usize = 3072;

/// Where the new key and certificate go, and for how long the certificate is valid.
#[derive(Args)]
pub struct OutArgs {
    /// The new key's type: ECDSA P-256 or RSA-3072.
    #[arg(long = "key-type", value_enum, default_value = "ecdsa")]
    pub key_type: KeyType,
    /// The certificate (PEM); must not exist.
    #[arg(long, value_name = "FILE")]
    pub cert: PathBuf,
    /// The private key (PKCS#8 PEM, written mode 0600); must not exist.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// Days the certificate is valid from now.
    #[arg(long, value_name = "N", default_value_t = 825, value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub days: u32,
    /// The organisation (O=) of the subject's name.
    #[arg(long, value_name = "NAME")]
    pub org: Option<String>,
}

/// The CA that signs a server or client certificate.
#[derive(Args)]
pub struct IssuerArgs {
    /// The CA's certificate (PEM), as `ipsec pki ca` wrote it.
    #[arg(long = "ca-cert", value_name = "FILE")]
    pub ca_cert: PathBuf,
    /// The CA's private key (PKCS#8 PEM, ECDSA P-256).
    #[arg(long = "ca-key", value_name = "FILE")]
    pub ca_key: PathBuf,
}

/// `ipsec pki ca`.
#[derive(Args)]
pub struct CaArgs {
    /// The CA's common name (CN=).
    #[arg(long, value_name = "NAME")]
    pub cn: String,
    #[command(flatten)]
    pub out: OutArgs,
}

/// `ipsec pki server`.
#[derive(Args)]
pub struct ServerArgs {
    /// The server's name as clients are told to reach it: an FQDN or an IP address; repeat
    /// for several (the first is also the CN and the IKE identity to use).
    #[arg(long = "name", value_name = "NAME", required = true)]
    pub names: Vec<String>,
    #[command(flatten)]
    pub issuer: IssuerArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

/// `ipsec pki client`.
#[derive(Args)]
pub struct ClientArgs {
    /// The client's common name (CN=), e.g. the user's name.
    #[arg(long, value_name = "NAME")]
    pub cn: String,
    /// The client's identity as an email address (SAN rfc822Name; IKE ID_RFC822_ADDR).
    #[arg(long, value_name = "ADDR", conflicts_with = "dns", required_unless_present = "dns")]
    pub email: Option<String>,
    /// The client's identity as a DNS name (SAN dNSName; IKE ID_FQDN).
    #[arg(long, value_name = "NAME")]
    pub dns: Option<String>,
    #[command(flatten)]
    pub issuer: IssuerArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

/// What went wrong, said in full.
type Result<T> = std::result::Result<T, String>;

/// Runs `ipsec pki ...`.
pub fn run(cmd: &PkiCmd) -> ExitCode {
    let r = match cmd {
        PkiCmd::Ca(a) => make_ca(a),
        PkiCmd::Server(a) => make_server(a),
        PkiCmd::Client(a) => make_client(a),
    };
    match r {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ipsec pki: {e}");
            ExitCode::from(1)
        }
    }
}

/// A key pair and its PKCS#8 document.
struct Key {
    pkcs8: zeroize::Zeroizing<Vec<u8>>,
    pair: Pair,
}

enum Pair {
    Ec(EcdsaKeyPair),
    Rsa(RsaKeyPair),
}

impl Key {
    fn generate(t: KeyType, rng: &SystemRandom) -> Result<Key> {
        match t {
            KeyType::Ecdsa => {
                let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, rng)
                    .map_err(|_| "generating an ECDSA P-256 key failed".to_string())?;
                Key::from_pkcs8(doc.as_ref().to_vec(), rng)
            }
            KeyType::Rsa => {
                use rsa::pkcs8::EncodePrivateKey;
                let k = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, RSA_BITS)
                    .map_err(|e| format!("generating an RSA-{RSA_BITS} key failed: {e}"))?;
                let doc = k.to_pkcs8_der().map_err(|e| format!("RSA key: {e}"))?;
                Key::from_pkcs8(doc.as_bytes().to_vec(), rng)
            }
        }
    }

    /// An ECDSA P-256 or RSA key from PKCS#8.
    fn from_pkcs8(pkcs8: Vec<u8>, rng: &SystemRandom) -> Result<Key> {
        let pkcs8 = zeroize::Zeroizing::new(pkcs8);
        let pair = match EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, rng) {
            Ok(p) => Pair::Ec(p),
            Err(ec) => match RsaKeyPair::from_pkcs8(&pkcs8) {
                Ok(p) => Pair::Rsa(p),
                Err(rsa) => return Err(format!("neither an ECDSA P-256 ({ec}) nor an RSA ({rsa}) PKCS#8 key")),
            },
        };
        Ok(Key { pkcs8, pair })
    }

    fn name(&self) -> String {
        match &self.pair {
            Pair::Ec(_) => "ECDSA P-256".into(),
            Pair::Rsa(k) => format!("RSA-{}", k.public().modulus_len() * 8),
        }
    }

    /// The public key's bits: an uncompressed point, or the RSAPublicKey DER.
    fn public_bytes(&self) -> &[u8] {
        match &self.pair {
            Pair::Ec(k) => k.public_key().as_ref(),
            Pair::Rsa(k) => k.public_key().as_ref(),
        }
    }

    /// The SubjectPublicKeyInfo (RFC 5480 2: id-ecPublicKey with the named curve; RFC 3279
    /// 2.3.1: rsaEncryption with NULL parameters).
    fn spki(&self) -> Result<SubjectPublicKeyInfoOwned> {
        let algorithm = match &self.pair {
            Pair::Ec(_) => AlgorithmIdentifierOwned {
                oid: rfc5912::ID_EC_PUBLIC_KEY,
                parameters: Some(Any::from(&rfc5912::SECP_256_R_1)),
            },
            Pair::Rsa(_) => AlgorithmIdentifierOwned {
                oid: rfc5912::RSA_ENCRYPTION,
                parameters: Some(Any::null()),
            },
        };
        Ok(SubjectPublicKeyInfoOwned {
            algorithm,
            subject_public_key: BitString::from_bytes(self.public_bytes()).map_err(der_err)?,
        })
    }

    /// The signature algorithm it signs certificates with (RFC 5758 3.2, RFC 4055 5).
    fn signature_algorithm(&self) -> AlgorithmIdentifierOwned {
        match &self.pair {
            Pair::Ec(_) => AlgorithmIdentifierOwned {
                oid: rfc5912::ECDSA_WITH_SHA_256,
                parameters: None,
            },
            Pair::Rsa(_) => AlgorithmIdentifierOwned {
                oid: rfc5912::SHA_256_WITH_RSA_ENCRYPTION,
                parameters: Some(Any::null()),
            },
        }
    }

    fn sign(&self, rng: &SystemRandom, msg: &[u8]) -> Result<Vec<u8>> {
        let failed = |_| "signing the certificate failed".to_string();
        match &self.pair {
            Pair::Ec(k) => Ok(k.sign(rng, msg).map_err(failed)?.as_ref().to_vec()),
            Pair::Rsa(k) => {
                let mut sig = vec![0u8; k.public().modulus_len()];
                k.sign(&RSA_PKCS1_SHA256, rng, msg, &mut sig).map_err(failed)?;
                Ok(sig)
            }
        }
    }

    /// RFC 5280 4.2.1.2 (1): the SHA-1 of the public key's bits.
    fn key_id(&self) -> Vec<u8> {
        ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, self.public_bytes())
            .as_ref()
            .to_vec()
    }
}

fn der_err(e: der::Error) -> String {
    format!("DER: {e}")
}

/// A name of an organisation (if any) and a common name, most significant first.
fn name(org: Option<&str>, cn: &str) -> Result<Name> {
    let rdn = |oid: ObjectIdentifier, v: &str| -> Result<RelativeDistinguishedName> {
        let value = Any::from(Utf8StringRef::new(v).map_err(der_err)?);
        let set = SetOfVec::try_from(vec![AttributeTypeAndValue { oid, value }]).map_err(der_err)?;
        Ok(RelativeDistinguishedName(set))
    };
    let mut rdns = Vec::new();
    if let Some(o) = org {
        rdns.push(rdn(rfc4519::O, o)?);
    }
    rdns.push(rdn(rfc4519::CN, cn)?);
    Ok(RdnSequence(rdns))
}

fn extension<T: Encode>(oid: ObjectIdentifier, critical: bool, value: &T) -> Result<Extension> {
    Ok(Extension {
        extn_id: oid,
        critical,
        extn_value: OctetString::new(value.to_der().map_err(der_err)?).map_err(der_err)?,
    })
}

/// What a certificate is for.
struct Profile {
    subject: Name,
    ca: bool,
    eku: Vec<ObjectIdentifier>,
    sans: Vec<GeneralName>,
    days: u32,
}

/// Signs a certificate for `subject_key` as `profile` says, by `issuer` (None: self-signed).
fn issue(
    rng: &SystemRandom,
    profile: Profile,
    subject_key: &Key,
    issuer: Option<(&Name, &Key)>,
) -> Result<Certificate> {
    let issuer_name = issuer.map_or_else(|| profile.subject.clone(), |(n, _)| n.clone());
    let issuer_key = issuer.map_or(subject_key, |(_, k)| k);
    let mut serial = [0u8; 16];
    rng.fill(&mut serial).map_err(|_| "no randomness".to_string())?;
    serial[0] = (serial[0] & 0x7f) | 0x40; // positive, 16 bytes, never 0 (RFC 5280 4.1.2.2)
    let now = SystemTime::now();
    let time = |t: SystemTime| Time::try_from(t).map_err(der_err);
    let validity = Validity {
        // A few minutes back: a client whose clock is a little behind still takes it.
        not_before: time(now - Duration::from_secs(300))?,
        not_after: time(now + Duration::from_secs(u64::from(profile.days) * 86_400))?,
    };
    let usage = match (profile.ca, &subject_key.pair) {
        (true, _) => KeyUsages::KeyCertSign | KeyUsages::CRLSign,
        (false, Pair::Ec(_)) => KeyUsages::DigitalSignature.into(),
        // What TLS servers' RSA certificates carry; some clients look for it.
        (false, Pair::Rsa(_)) => KeyUsages::DigitalSignature | KeyUsages::KeyEncipherment,
    };
    let mut exts = vec![
        extension(
            rfc5280::ID_CE_BASIC_CONSTRAINTS,
            true,
            &BasicConstraints {
                ca: profile.ca,
                path_len_constraint: None,
            },
        )?,
        extension(rfc5280::ID_CE_KEY_USAGE, true, &KeyUsage(usage))?,
        extension(
            rfc5280::ID_CE_SUBJECT_KEY_IDENTIFIER,
            false,
            &SubjectKeyIdentifier(OctetString::new(subject_key.key_id()).map_err(der_err)?),
        )?,
    ];
    if issuer.is_some() {
        exts.push(extension(
            rfc5280::ID_CE_AUTHORITY_KEY_IDENTIFIER,
            false,
            &AuthorityKeyIdentifier {
                key_identifier: Some(OctetString::new(issuer_key.key_id()).map_err(der_err)?),
                authority_cert_issuer: None,
                authority_cert_serial_number: None,
            },
        )?);
    }
    if !profile.eku.is_empty() {
        exts.push(extension(
            rfc5280::ID_CE_EXT_KEY_USAGE,
            false,
            &ExtendedKeyUsage(profile.eku),
        )?);
    }
    if !profile.sans.is_empty() {
        exts.push(extension(
            rfc5280::ID_CE_SUBJECT_ALT_NAME,
            false,
            &SubjectAltName(profile.sans),
        )?);
    }
    let signature = issuer_key.signature_algorithm();
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: SerialNumber::new(&serial).map_err(der_err)?,
        signature: signature.clone(),
        issuer: issuer_name,
        validity,
        subject: profile.subject,
        subject_public_key_info: subject_key.spki()?,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(exts),
    };
    let tbs_der = tbs.to_der().map_err(der_err)?;
    let sig = issuer_key.sign(rng, &tbs_der)?;
    Ok(Certificate {
        tbs_certificate: tbs,
        signature_algorithm: signature,
        signature: BitString::from_bytes(&sig).map_err(der_err)?,
    })
}

/// Writes `data` to a new file `path` with `mode` (never over an existing one).
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(data).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes the key (0600) and the certificate (0644), the key first; neither may exist.
fn write_pair(out: &OutArgs, key: &Key, cert: &Certificate) -> Result<()> {
    for p in [&out.key, &out.cert] {
        if p.exists() {
            return Err(format!("{} exists: not overwritten", p.display()));
        }
    }
    let key_pem = pem_rfc7468::encode_string("PRIVATE KEY", pem_rfc7468::LineEnding::LF, &key.pkcs8)
        .map_err(|e| format!("PEM: {e}"))?;
    let key_pem = zeroize::Zeroizing::new(key_pem);
    let cert_pem = cert.to_pem(der::pem::LineEnding::LF).map_err(der_err)?;
    write_new(&out.key, key_pem.as_bytes(), 0o600)?;
    write_new(&out.cert, cert_pem.as_bytes(), 0o644)
}

/// The CA's name and key, the key checked to be the certificate's.
fn load_issuer(a: &IssuerArgs, rng: &SystemRandom) -> Result<(Name, Key)> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let cert = Certificate::from_pem(read(&a.ca_cert)?.as_bytes())
        .map_err(|e| format!("{}: not a PEM certificate: {e}", a.ca_cert.display()))?;
    let text = zeroize::Zeroizing::new(read(&a.ca_key)?);
    let (label, der) =
        pem_rfc7468::decode_vec(text.as_bytes()).map_err(|e| format!("{}: not a PEM key: {e}", a.ca_key.display()))?;
    if label != "PRIVATE KEY" {
        return Err(format!(
            "{}: a `{label}` PEM block: give the PKCS#8 key (`PRIVATE KEY`) `ipsec pki ca` wrote",
            a.ca_key.display()
        ));
    }
    let key = Key::from_pkcs8(der, rng).map_err(|e| format!("{}: {e}", a.ca_key.display()))?;
    let spki = &cert.tbs_certificate.subject_public_key_info;
    if spki.subject_public_key.raw_bytes() != key.public_bytes() {
        return Err(format!(
            "{} is not the key of {}",
            a.ca_key.display(),
            a.ca_cert.display()
        ));
    }
    let is_ca = cert
        .tbs_certificate
        .get::<BasicConstraints>()
        .map_err(der_err)?
        .is_some_and(|(_, bc)| bc.ca);
    if !is_ca {
        return Err(format!("{} is not a CA certificate (no CA:TRUE)", a.ca_cert.display()));
    }
    Ok((cert.tbs_certificate.subject, key))
}

fn ia5(s: &str, what: &str) -> Result<Ia5String> {
    Ia5String::new(s).map_err(|_| format!("{what} `{s}` is not ASCII"))
}

fn check_dns(s: &str) -> Result<()> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'*')
        });
    if ok {
        Ok(())
    } else {
        Err(format!("`{s}` is neither an IP address nor a DNS name"))
    }
}

fn make_ca(a: &CaArgs) -> Result<String> {
    let rng = SystemRandom::new();
    let key = Key::generate(a.out.key_type, &rng)?;
    let profile = Profile {
        subject: name(a.out.org.as_deref(), &a.cn)?,
        ca: true,
        eku: Vec::new(),
        sans: Vec::new(),
        days: a.out.days,
    };
    let subject = profile.subject.to_string();
    let cert = issue(&rng, profile, &key, None)?;
    write_pair(&a.out, &key, &cert)?;
    Ok(format!(
        "CA `{subject}` ({}, {} days): {} and {} (mode 0600)",
        key.name(),
        a.out.days,
        a.out.cert.display(),
        a.out.key.display()
    ))
}

/// The server certificate's SANs: each name as dNSName; an address also as iPAddress.
pub fn server_sans(names: &[String]) -> Result<Vec<GeneralName>> {
    let mut sans = Vec::new();
    for n in names {
        match n.parse::<IpAddr>() {
            Ok(ip) => {
                let bytes = match ip {
                    IpAddr::V4(v) => v.octets().to_vec(),
                    IpAddr::V6(v) => v.octets().to_vec(),
                };
                sans.push(GeneralName::IpAddress(OctetString::new(bytes).map_err(der_err)?));
                // Windows compares an address it was told to connect to with dNSName SANs only.
                sans.push(GeneralName::DnsName(ia5(&ip.to_string(), "name")?));
            }
            Err(_) => {
                check_dns(n)?;
                sans.push(GeneralName::DnsName(ia5(n, "name")?));
            }
        }
    }
    Ok(sans)
}

fn make_server(a: &ServerArgs) -> Result<String> {
    let rng = SystemRandom::new();
    let (issuer, ca_key) = load_issuer(&a.issuer, &rng)?;
    let key = Key::generate(a.out.key_type, &rng)?;
    let profile = Profile {
        subject: name(a.out.org.as_deref(), &a.names[0])?,
        ca: false,
        eku: vec![rfc5280::ID_KP_SERVER_AUTH, ID_KP_IKE_INTERMEDIATE],
        sans: server_sans(&a.names)?,
        days: a.out.days,
    };
    let cert = issue(&rng, profile, &key, Some((&issuer, &ca_key)))?;
    write_pair(&a.out, &key, &cert)?;
    Ok(format!(
        "server certificate for {} (EKU serverAuth, ikeIntermediate; {}, {} days): {} and {} (mode 0600)",
        a.names.join(", "),
        key.name(),
        a.out.days,
        a.out.cert.display(),
        a.out.key.display()
    ))
}

fn make_client(a: &ClientArgs) -> Result<String> {
    let rng = SystemRandom::new();
    let (issuer, ca_key) = load_issuer(&a.issuer, &rng)?;
    let (san, id) = match (&a.email, &a.dns) {
        (Some(e), _) => {
            if e.split('@').count() != 2 || e.starts_with('@') || e.ends_with('@') {
                return Err(format!("--email `{e}` is not user@domain"));
            }
            (GeneralName::Rfc822Name(ia5(e, "--email")?), e.clone())
        }
        (None, Some(d)) => {
            check_dns(d)?;
            (GeneralName::DnsName(ia5(d, "--dns")?), d.clone())
        }
        (None, None) => return Err("give --email or --dns: the client's IKE identity".into()),
    };
    let key = Key::generate(a.out.key_type, &rng)?;
    let profile = Profile {
        subject: name(a.out.org.as_deref(), &a.cn)?,
        ca: false,
        eku: vec![rfc5280::ID_KP_CLIENT_AUTH],
        sans: vec![san],
        days: a.out.days,
    };
    let cert = issue(&rng, profile, &key, Some((&issuer, &ca_key)))?;
    write_pair(&a.out, &key, &cert)?;
    Ok(format!(
        "client certificate for {id} (EKU clientAuth; {}, {} days): {} and {} (mode 0600)",
        key.name(),
        a.out.days,
        a.out.cert.display(),
        a.out.key.display()
    ))
}
