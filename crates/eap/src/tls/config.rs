//! The TLS configurations of both roles, built once (from the connection's certificates and
//! CAs) and shared by every exchange: rustls with the `ring` provider, TLS 1.2 and 1.3.
//!
//! The server requires a client certificate and verifies it against the configured CAs
//! (and their CRLs) with rustls's `WebPkiClientVerifier` (RFC 5216 §5.3: the peer's
//! certificate is checked against the trusted roots; RFC 9190 §5.3 the same for 1.3). No
//! session resumption and no TLS 1.3 tickets: every exchange is a full handshake (RFC 9190
//! §2.1.2 makes resumption optional).
//!
//! Sans-IO: rustls asks a [`WallClock`] for the time to check certificate validity, and the
//! caller sets it ([`WallClock::set`], done for each message by [`super::Server::handle`]);
//! no clock known (0) fails the handshake rather than skipping the check.

use super::fragment::DEFAULT_FRAGMENT_SIZE;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

/// The wall-clock time rustls checks certificates with: seconds since 1970, set by the
/// caller (0: unknown, and then every certificate check fails).
#[derive(Debug, Default)]
pub struct WallClock(AtomicU64);

impl WallClock {
    /// Sets the time (seconds since 1970).
    pub fn set(&self, unix: u64) {
        self.0.store(unix, Ordering::Relaxed);
    }
}

impl rustls::time_provider::TimeProvider for WallClock {
    fn current_time(&self) -> Option<UnixTime> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            s => Some(UnixTime::since_unix_epoch(Duration::from_secs(s))),
        }
    }
}

/// Which TLS versions are offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Versions {
    /// TLS 1.2 and 1.3 (the higher one the peer offers is taken).
    #[default]
    Both,
    /// TLS 1.2 only (RFC 5216).
    Tls12,
    /// TLS 1.3 only (RFC 9190).
    Tls13,
}

impl Versions {
    fn list(self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static BOTH: [&rustls::SupportedProtocolVersion; 2] = [&rustls::version::TLS13, &rustls::version::TLS12];
        static V12: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS12];
        static V13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            Versions::Both => &BOTH,
            Versions::Tls12 => &V12,
            Versions::Tls13 => &V13,
        }
    }
}

/// What is wrong with a configuration (a certificate or key rustls refuses, no CA).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EAP-TLS configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err(e: impl fmt::Display) -> ConfigError {
    ConfigError(e.to_string())
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(cas: &[Vec<u8>]) -> Result<Arc<RootCertStore>, ConfigError> {
    if cas.is_empty() {
        return Err(ConfigError("no CA certificate to verify the other side with".into()));
    }
    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots.add(CertificateDer::from(ca.clone())).map_err(err)?;
    }
    Ok(Arc::new(roots))
}

fn chain(certs: &[Vec<u8>]) -> Vec<CertificateDer<'static>> {
    certs.iter().map(|c| CertificateDer::from(c.clone())).collect()
}

/// The authenticator's configuration (what a connection with `remote.auth = "eap-tls"`
/// holds).
#[derive(Clone)]
pub struct ServerConfig {
    pub(crate) tls: Arc<rustls::ServerConfig>,
    pub(crate) clock: Arc<WallClock>,
    /// TLS data per EAP-TLS fragment we send.
    pub fragment_size: usize,
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("tls::ServerConfig")
            .field("fragment_size", &self.fragment_size)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// Our certificate chain (DER, ours first), its private key, the CAs (DER) the client's
    /// certificate must chain to and their CRLs (DER).
    pub fn new(
        certs: &[Vec<u8>],
        key: PrivateKeyDer<'static>,
        cas: &[Vec<u8>],
        crls: &[Vec<u8>],
        versions: Versions,
    ) -> Result<ServerConfig, ConfigError> {
        let provider = provider();
        let crls = crls
            .iter()
            .map(|c| CertificateRevocationListDer::from(c.clone()))
            .collect::<Vec<_>>();
        let verifier = WebPkiClientVerifier::builder_with_provider(roots(cas)?, provider.clone())
            .with_crls(crls)
            .build()
            .map_err(err)?;
        let clock = Arc::new(WallClock::default());
        let mut tls = rustls::ServerConfig::builder_with_details(provider, clock.clone())
            .with_protocol_versions(versions.list())
            .map_err(err)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain(certs), key)
            .map_err(err)?;
        tls.send_tls13_tickets = 0;
        tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        Ok(ServerConfig {
            tls: Arc::new(tls),
            clock,
            fragment_size: DEFAULT_FRAGMENT_SIZE,
        })
    }

    /// The same with another fragment size (TLS data per EAP-TLS packet we send).
    pub fn with_fragment_size(mut self, size: usize) -> ServerConfig {
        self.fragment_size = size;
        self
    }
}

/// The peer's (client's) configuration.
#[derive(Clone)]
pub struct PeerConfig {
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) clock: Arc<WallClock>,
    pub(crate) server_name: ServerName<'static>,
    /// TLS data per EAP-TLS fragment we send.
    pub fragment_size: usize,
}

impl fmt::Debug for PeerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("tls::PeerConfig")
            .field("server_name", &self.server_name)
            .field("fragment_size", &self.fragment_size)
            .finish_non_exhaustive()
    }
}

impl PeerConfig {
    /// Our certificate chain and key, the CAs the server's certificate must chain to, and
    /// the name (DNS name or address) the server's certificate must carry.
    pub fn new(
        certs: &[Vec<u8>],
        key: PrivateKeyDer<'static>,
        cas: &[Vec<u8>],
        server_name: &str,
        versions: Versions,
    ) -> Result<PeerConfig, ConfigError> {
        let provider = provider();
        let clock = Arc::new(WallClock::default());
        let server_name = ServerName::try_from(server_name.to_string()).map_err(err)?;
        let tls = rustls::ClientConfig::builder_with_details(provider, clock.clone())
            .with_protocol_versions(versions.list())
            .map_err(err)?
            .with_root_certificates(roots(cas)?)
            .with_client_auth_cert(chain(certs), key)
            .map_err(err)?;
        Ok(PeerConfig {
            tls: Arc::new(tls),
            clock,
            server_name,
            fragment_size: DEFAULT_FRAGMENT_SIZE,
        })
    }

    /// The same with another fragment size.
    pub fn with_fragment_size(mut self, size: usize) -> PeerConfig {
        self.fragment_size = size;
        self
    }
}
