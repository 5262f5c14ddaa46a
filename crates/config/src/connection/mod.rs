//! IKEv2 connections in the TOML config (`[[connection]]`), in the words of strongSwan's
//! swanctl.conf so that a gateway's connection can be copied across, and the pre-shared keys
//! they use from a separate secrets file ([`Secrets`]).
//!
//! ```toml
//! [[connection]]
//! name = "site-b"                       # swanctl: connections { site-b { ... } }
//! local_addrs = ["192.0.2.1"]           # this host's IKE address (one; IPv4 or IPv6)
//! remote_addrs = ["198.51.100.2"]       # the peer's (one; "%any" to accept any as responder)
//! proposals = ["aes128gcm16-prfsha256-x25519", "aes256-sha256-ecp384"]   # default: DEFAULT_IKE_PROPOSALS
//! # proposals = ["default", "windows"]  # keywords: the defaults, and the Windows client's weak set
//! encap = true                          # ESP in UDP on port 4500, NAT or not: tunneld always does (`false` is accepted and ignored)
//! dpd_delay = 30                        # seconds between liveness checks; 0 = off (default 0)
//! dpd_timeout = "60s"                   # give a liveness check up after this (default: when its retransmissions run out)
//! dpd_action = "restart"                # clear | restart | trap: when the peer is found dead (default clear)
//! close_action = "none"                 # none | restart | trap: when the peer deletes the IKE SA (default none)
//! rekey_time = "4h"                     # rekey the IKE SA (default 4h; 0 = never; "90s", "20m", "1h", "1d" or seconds)
//! rand_time = "24m"                     # start that rekey up to this much earlier, at random (default rekey_time / 10)
//! fragmentation = "yes"                 # IKE fragmentation, RFC 7383: yes (default) | accept | force | no (see below)
//! fragment_size = 1280                  # largest IP datagram of an IKE fragment (default 1280, 256 at least; 0 = default)
//! mobike = true                         # MOBIKE, RFC 4555: clients keep their SA when their address changes (default true; docs/ike-mobike.md)
//! local = { id = "site-a.example", auth = "psk" }    # id default: local address
//! remote = { id = "site-b.example", auth = "psk" }   # id default: remote address
//! # or certificates (auth = "pubkey"; docs/ike-certs.md):
//! # local = { id = "C=CH, O=Example, CN=a", auth = "pubkey", certs = ["a.pem", "intermediate.pem"] }
//! # remote = { id = "C=CH, O=Example, CN=*", auth = "pubkey", cacerts = ["ca.pem"], crls = ["ca.crl"] }
//! # or EAP for road-warrior clients (RFC 7296 2.16; docs/ike-eap.md): the server signs, the
//! # client runs EAP-MSCHAPv2 with a user of the secrets file's [[eap]]:
//! # server: local = { auth = "pubkey", certs = [...] }, remote = { auth = "eap-mschapv2", eap_id = "%any" }
//! # client: local = { auth = "eap-mschapv2", eap_id = "alice" }, remote = { auth = "pubkey", cacerts = [...] }
//! # or the server passes EAP to a RADIUS server ([`crate::radius`]: `[radius]` in this file,
//! # its secret in the secrets file): remote = { auth = "eap-radius", eap_id = "%any" }
//! # send_cert = "always"              # always | ifasked | never (default always)
//! # send_certreq = true                # CERTREQ for remote.cacerts (default true)
//!
//! [[connection.children]]              # swanctl: children { net { ... } }
//! name = "net"
//! local_ts = ["10.1.0.0/16"]            # default: the local address (swanctl's "dynamic")
//! remote_ts = ["10.2.0.0/16"]
//! esp_proposals = ["aes128gcm16-esn", "aes128gcm16"]   # default: DEFAULT_ESP_PROPOSALS ("default", "windows" too)
//! start_action = "start"                # start | trap | none (default none: wait for the peer)
//! rekey_time = "1h"                     # rekey the child (default 1h; 0 = never)
//! life_time = "66m"                     # delete it if not rekeyed by then (default rekey_time + 10 %)
//! rand_time = "6m"                      # start the rekey up to this much earlier (default life_time - rekey_time)
//! rekey_bytes = 0                       # rekey after so many bytes either way (0 = off; also rekey_packets)
//! life_bytes = 0                        # hard limits (0 = off; default rekey_* + 10 %; also life_packets)
//! ```
//!
//! `fragmentation` is swanctl's: `yes` announces IKE fragmentation in IKE_SA_INIT, accepts
//! fragments and, when the peer announced it too, sends encrypted messages larger than
//! `fragment_size` (an IP datagram's size, as strongSwan's `charon.fragment_size`) in
//! fragments; `no` does none of it. `accept` and `force` are taken as `yes`: strongSwan's
//! `accept` never fragments its own messages (here a peer that announced support may get
//! fragments), and `force` differs from `yes` only for IKEv1.
//!
//! A connection may have several `[[connection.children]]`: the first is negotiated in
//! IKE_AUTH, the others with CREATE_CHILD_SA (their `start_action`, a trap, or `ipsec ike
//! initiate CONN/CHILD`).
//!
//! Pre-shared keys are never in this file: they live in a secrets file given with
//! `[tunnel] secrets = "PATH"` (or `tunneld --secrets`), which must be a regular file of mode
//! 0600 or stricter ([`Secrets::load`] refuses anything else):
//!
//! ```toml
//! [[ike]]                               # swanctl: secrets { ike-site-b { ... } }
//! id = ["site-a.example", "site-b.example"]   # the identities the key is for (either side)
//! secret = "0x<hex>"                    # or the key's bytes as a string
//!
//! [[eap]]                               # swanctl: secrets { eap-alice { id = alice, secret = ... } }
//! id = "alice"                          # the EAP identity (EAP-MSCHAPv2 user)
//! secret = "password"                   # never logged; kept as its NT hash by the server
//!
//! [[private]]                           # swanctl: secrets { private-a { file = ... } }
//! file = "private/a.key"                # PEM (PKCS#8, PKCS#1, SEC1), mode 0600; relative to this file
//! ```
//!
//! A `pubkey` connection's key is the `[[private]]` key whose public key is its certificate's.
//!
//! Everything is checked here, the proposals, selectors and identities by `ipsec-ike`'s own
//! parsers; [`ConnectionConfig::to_ike`] turns a connection and its key into the IKE
//! implementation's configuration.

mod auth;
mod child;
mod secrets;
pub use auth::{describe, AuthConfig};
use auth::{is_wildcard, AuthToml};
pub use child::ChildConfig;
use child::{child_lifetimes, ChildToml};
pub use secrets::{EapSecret, EapUsers, Psk, RadiusSecret, Secrets};

use crate::values::Span;
use std::net::IpAddr;

/// What a child SA does when its connection is loaded (swanctl's `start_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartAction {
    /// Wait for the peer to initiate.
    #[default]
    None,
    /// Initiate at once (and again after the peer goes away).
    Start,
    /// Install a trap: the first packet that matches the child's selectors starts it.
    Trap,
}

/// One IKEv2 connection (swanctl's `connections` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionConfig {
    /// Its name, unique in the file.
    pub name: String,
    /// 1-based line of its `[[connection]]` header.
    pub line: usize,
    /// This host's IKE address.
    pub local_addr: IpAddr,
    /// The peer's IKE address; None: any (responder only).
    pub remote_addr: Option<IpAddr>,
    /// IKE proposals in strongSwan's words, in order of preference.
    pub proposals: Vec<String>,
    /// ESP in UDP even without a NAT, as written; tunneld encapsulates always
    /// ([`ConnectionConfig::to_ike`] sets the IKE connection's `encap`).
    pub encap: bool,
    /// Seconds between liveness checks; 0 = off.
    pub dpd_delay: u64,
    /// This host's identity.
    pub local: AuthConfig,
    /// The identity the peer must prove.
    pub remote: AuthConfig,
    /// Give an unanswered liveness check up after this long.
    pub dpd_timeout: Option<std::time::Duration>,
    /// When the peer is found dead.
    pub dpd_action: ipsec_ike::DeadAction,
    /// When the peer deletes the IKE SA.
    pub close_action: ipsec_ike::DeadAction,
    /// Rekey the IKE SA after this long (None: never).
    pub rekey_time: Option<std::time::Duration>,
    /// Start the IKE rekey up to this much earlier, at random.
    pub rand_time: std::time::Duration,
    /// IKE fragmentation (RFC 7383; swanctl's `fragmentation`, `accept` and `force` as `yes`).
    pub fragmentation: bool,
    /// The largest IP datagram of an IKE fragment (default 1280).
    pub fragment_size: u16,
    /// MOBIKE (RFC 4555; swanctl's `mobike`, default yes).
    pub mobike: bool,
    /// EAP-only authentication as server (RFC 5998; `eap_only`, default no): see
    /// `ipsec_ike::Connection::eap_only`.
    pub eap_only: bool,
    /// The child SAs.
    pub children: Vec<ChildConfig>,
    /// When we send our certificates (swanctl `send_cert`: always, ifasked, never).
    pub send_cert: ipsec_ike::SendCert,
    /// Send CERTREQ for remote.cacerts (swanctl `send_certreq`, default yes).
    pub send_certreq: bool,
    /// The pools a peer's virtual address comes from ([`crate::pools`]; swanctl `pools`).
    pub pools: Vec<String>,
    /// Virtual addresses we ask for as a client (swanctl `vips`; `0.0.0.0`, `::`: any).
    pub vips: Vec<IpAddr>,
    /// Another IKE SA of the same identity (swanctl `unique`: no, never, keep, replace).
    pub unique: ipsec_ike::Unique,
    /// Which side starts rekeys as a responder (`rekey_by`: auto, both, client).
    pub rekey_by: ipsec_ike::RekeyBy,
}

/// `[[connection]]` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectionToml {
    name: String,
    local_addrs: Vec<String>,
    #[serde(default)]
    remote_addrs: Vec<String>,
    #[serde(default)]
    proposals: Vec<String>,
    #[serde(default)]
    encap: bool,
    #[serde(default)]
    dpd_delay: u64,
    rekey_time: Option<Span>,
    rand_time: Option<Span>,
    dpd_timeout: Option<Span>,
    dpd_action: Option<String>,
    close_action: Option<String>,
    fragmentation: Option<String>,
    fragment_size: Option<u16>,
    mobike: Option<bool>,
    #[serde(default)]
    eap_only: bool,
    #[serde(default)]
    local: AuthToml,
    #[serde(default)]
    remote: AuthToml,
    #[serde(default)]
    children: Vec<ChildToml>,
    send_cert: Option<String>,
    send_certreq: Option<bool>,
    #[serde(default)]
    pools: Vec<String>,
    #[serde(default)]
    vips: Vec<String>,
    unique: Option<String>,
    rekey_by: Option<String>,
}

fn one_addr(v: &[String], what: &str, any_ok: bool) -> Result<Option<IpAddr>, String> {
    match v {
        [] if any_ok => Ok(None),
        [a] if any_ok && (a == "%any" || a == "%any4" || a == "%any6") => Ok(None),
        [a] => a
            .parse()
            .map(Some)
            .map_err(|_| format!("{what}: `{a}` is not an IP address (host names are not resolved)")),
        [] => Err(format!("{what}: one address is needed")),
        _ => Err(format!("{what}: one address only (several are not supported yet)")),
    }
}

/// Checks a proposal list and expands its keywords: `default` (the defaults) and `windows`
/// (what the built-in Windows client offers, with its weak algorithms: [`WINDOWS_IKE_PROPOSALS`],
/// [`WINDOWS_ESP_PROPOSALS`]), each where it stands in the list; an empty list is `default`.
fn proposals(v: Vec<String>, what: &str, kind: ipsec_ike::alg::ProposalKind) -> Result<Vec<String>, String> {
    let (defaults, windows) = match kind {
        ipsec_ike::alg::ProposalKind::Ike => (&DEFAULT_IKE_PROPOSALS[..], &WINDOWS_IKE_PROPOSALS[..]),
        _ => (&DEFAULT_ESP_PROPOSALS[..], &WINDOWS_ESP_PROPOSALS[..]),
    };
    if v.is_empty() {
        return Ok(defaults.iter().map(|p| p.to_string()).collect());
    }
    let mut out = Vec::new();
    for p in v {
        match p.as_str() {
            "default" => out.extend(defaults.iter().map(|p| p.to_string())),
            "windows" => out.extend(windows.iter().map(|p| p.to_string())),
            _ => {
                ipsec_ike::alg::parse_proposal(&p, kind).map_err(|e| format!("{what}: `{p}`: {e}"))?;
                out.push(p);
            }
        }
    }
    if out.len() > ipsec_ike::limits::MAX_PROPOSALS {
        return Err(format!(
            "{what}: {} proposals, at most {}",
            out.len(),
            ipsec_ike::limits::MAX_PROPOSALS
        ));
    }
    Ok(out)
}

fn selectors(v: Vec<String>) -> Result<Vec<String>, String> {
    for t in &v {
        ipsec_ike::config::parse_ts_list(t).map_err(|e| format!("traffic selector `{t}`: {e}"))?;
    }
    Ok(v)
}

impl ConnectionToml {
    /// Checks and converts; `line` is the line of its `[[connection]]` header.
    pub(crate) fn into_config(self, line: usize) -> Result<ConnectionConfig, String> {
        let name = self.name;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
            return Err(format!(
                "connection `{name}`: a name of letters, digits, `-`, `_` and `.`"
            ));
        }
        let at = |m: String| format!("connection `{name}`: {m}");
        let local_addr = one_addr(&self.local_addrs, "local_addrs", false)
            .map_err(at)?
            .expect("required");
        let remote_addr = one_addr(&self.remote_addrs, "remote_addrs", true).map_err(at)?;
        if remote_addr.is_some_and(|r| r.is_ipv4() != local_addr.is_ipv4()) {
            return Err(at("local_addrs and remote_addrs are of different IP versions".into()));
        }
        let local = AuthConfig::from_toml(self.local, "local").map_err(at)?;
        let remote = AuthConfig::from_toml(self.remote, "remote").map_err(at)?;
        let send_cert = match self.send_cert.as_deref() {
            None | Some("always") => ipsec_ike::SendCert::Always,
            Some("ifasked") => ipsec_ike::SendCert::IfAsked,
            Some("never") => ipsec_ike::SendCert::Never,
            Some(o) => return Err(at(format!("send_cert = \"{o}\": always, ifasked or never"))),
        };
        let mut children = Vec::new();
        for c in self.children {
            let lifetimes = child_lifetimes(&c);
            let cname = c.name;
            if cname.is_empty() || children.iter().any(|x: &ChildConfig| x.name == cname) {
                return Err(at(format!("child `{cname}`: a unique, non-empty name is needed")));
            }
            let start_action = match c.start_action.as_deref() {
                None | Some("none") => StartAction::None,
                Some("start") => StartAction::Start,
                Some("trap") => StartAction::Trap,
                Some(o) => return Err(at(format!("child `{cname}`: start_action `{o}` (start, trap or none)"))),
            };
            let lifetimes = lifetimes.map_err(|e| at(format!("child `{cname}`: {e}")))?;
            children.push(ChildConfig {
                lifetimes,
                local_ts: selectors(c.local_ts).map_err(|e| at(format!("child `{cname}`: {e}")))?,
                remote_ts: selectors(c.remote_ts).map_err(|e| at(format!("child `{cname}`: {e}")))?,
                esp_proposals: proposals(c.esp_proposals, "esp_proposals", ipsec_ike::alg::ProposalKind::Esp)
                    .map_err(|e| at(format!("child `{cname}`: {e}")))?,
                start_action,
                name: cname,
            });
        }
        let dead_action = |v: &Option<String>, what: &str| match v.as_deref() {
            None | Some("clear") | Some("none") => Ok(ipsec_ike::DeadAction::Clear),
            Some("restart") => Ok(ipsec_ike::DeadAction::Restart),
            Some("trap") => Ok(ipsec_ike::DeadAction::Trap),
            Some(o) => Err(at(format!("{what} = \"{o}\": clear (or none), restart or trap"))),
        };
        let dpd_action = dead_action(&self.dpd_action, "dpd_action")?;
        let close_action = dead_action(&self.close_action, "close_action")?;
        if remote_addr.is_none()
            && (dpd_action != ipsec_ike::DeadAction::Clear || close_action != ipsec_ike::DeadAction::Clear)
        {
            return Err(at(
                "dpd_action or close_action restart/trap needs a remote address to initiate to".into(),
            ));
        }
        let dpd_timeout = self
            .dpd_timeout
            .as_ref()
            .map(|s| s.get("dpd_timeout"))
            .transpose()
            .map_err(at)?
            .filter(|d| !d.is_zero());
        let ike_rekey = match &self.rekey_time {
            None => Some(std::time::Duration::from_secs(4 * 3600)),
            Some(s) => Some(s.get("rekey_time").map_err(at)?).filter(|d| !d.is_zero()),
        };
        let ike_rand = match &self.rand_time {
            Some(s) => s.get("rand_time").map_err(at)?,
            None => ike_rekey.map_or(std::time::Duration::ZERO, |d| d / 10),
        };
        let fragmentation = match self.fragmentation.as_deref() {
            None | Some("yes") | Some("accept") | Some("force") => true,
            Some("no") => false,
            Some(o) => return Err(at(format!("fragmentation = \"{o}\": yes, accept, force or no"))),
        };
        let fragment_size = match self.fragment_size {
            None | Some(0) => 1280,
            Some(n) if n < ipsec_ike::limits::MIN_FRAGMENT_SIZE => {
                return Err(at(format!(
                    "fragment_size = {n}: at least {} (the IP datagram of a fragment)",
                    ipsec_ike::limits::MIN_FRAGMENT_SIZE
                )))
            }
            Some(n) => n,
        };
        if children.is_empty() {
            return Err(at(
                "no [[connection.children]]: a connection carries at least one child SA".into(),
            ));
        }
        if remote_addr.is_none() && children.iter().any(|c| c.start_action != StartAction::None) {
            return Err(at(
                "start_action start or trap needs a remote address to initiate to".into()
            ));
        }
        let unique = match self.unique.as_deref() {
            None | Some("no") => ipsec_ike::Unique::No,
            Some("never") => ipsec_ike::Unique::Never,
            Some("keep") => ipsec_ike::Unique::Keep,
            Some("replace") => ipsec_ike::Unique::Replace,
            Some(o) => return Err(at(format!("unique = \"{o}\": no, never, keep or replace"))),
        };
        let rekey_by = match self.rekey_by.as_deref() {
            None | Some("auto") => ipsec_ike::RekeyBy::Auto,
            Some("both") => ipsec_ike::RekeyBy::Both,
            Some("client") => ipsec_ike::RekeyBy::Client,
            Some(o) => return Err(at(format!("rekey_by = \"{o}\": auto, both or client"))),
        };
        let mut vips = Vec::new();
        for v in &self.vips {
            vips.push(
                v.parse::<IpAddr>()
                    .map_err(|_| at(format!("vips: `{v}` is not an IP address (0.0.0.0 or :: for any)")))?,
            );
        }
        if vips.len() > 2 {
            return Err(at("vips: one IPv4 and one IPv6 address at most".into()));
        }
        Ok(ConnectionConfig {
            pools: self.pools,
            vips,
            unique,
            rekey_by,
            proposals: proposals(self.proposals, "proposals", ipsec_ike::alg::ProposalKind::Ike).map_err(at)?,
            name,
            line,
            local_addr,
            remote_addr,
            encap: self.encap,
            dpd_delay: self.dpd_delay,
            rekey_time: ike_rekey,
            rand_time: ike_rand,
            fragmentation,
            fragment_size,
            mobike: self.mobike.unwrap_or(true),
            eap_only: self.eap_only,
            dpd_timeout,
            dpd_action,
            close_action,
            local,
            remote,
            children,
            send_cert,
            send_certreq: self.send_certreq.unwrap_or(true),
        })
    }
}

/// The IKE proposals used when a connection names none (strongSwan's `default` keyword
/// stands for these too): AEAD first, then AES-CBC with HMAC-SHA2, each with every group.
pub const DEFAULT_IKE_PROPOSALS: [&str; 2] = [
    "aes128gcm16-aes256gcm16-prfsha256-prfsha384-prfsha512-x25519-ecp256-ecp384-modp2048",
    "aes128-aes256-sha256-sha384-sha512-x25519-ecp256-ecp384-modp2048",
];

/// The ESP proposals used when a child names none (or says `default`).
pub const DEFAULT_ESP_PROPOSALS: [&str; 2] = ["aes128gcm16-aes256gcm16-chacha20poly1305", "aes128-aes256-sha256"];

/// The `windows` keyword of `proposals`: what the built-in IKEv2 client of Windows 10/11
/// offers by default (3DES or AES-CBC-256, SHA-1 or SHA2-256, MODP-1024; MODP-2048 with
/// `NegotiateDH2048_AES256`), the stronger combinations first: we choose by our order
/// (docs/ike.md "Built-in clients"). Weak (3DES, SHA-1, MODP-1024): `ipsec check-config`
/// names each.
pub const WINDOWS_IKE_PROPOSALS: [&str; 3] = [
    "aes256-aes192-aes128-sha256-modp2048-modp1024",
    "aes256-aes192-aes128-sha1-modp2048-modp1024",
    "3des-sha256-sha1-modp2048-modp1024",
];

/// The `windows` keyword of `esp_proposals`: the Windows client's ESP (AES-CBC or 3DES with
/// HMAC-SHA1-96 only).
pub const WINDOWS_ESP_PROPOSALS: [&str; 2] = ["aes256-aes192-aes128-sha256-sha1", "3des-sha1"];

impl ConnectionConfig {
    /// This host's identity as written (the local address when none is configured).
    pub fn local_id(&self) -> String {
        self.local.id.clone().unwrap_or_else(|| self.local_addr.to_string())
    }

    /// The EAP-TLS server's configuration (`remote.auth = "eap-tls"`): our certificate chain
    /// and key (those IKE signs with), the CAs of `remote.cacerts` the clients' certificates
    /// must chain to and the CRLs of `remote.crls`; TLS 1.2 and 1.3.
    fn eap_tls_config(
        &self,
        (certs, key): &(Vec<ipsec_ike::pki::Certificate>, &crate::credentials::LoadedKey),
    ) -> Result<ipsec_ike::ipsec_eap::tls::ServerConfig, String> {
        let chain: Vec<Vec<u8>> = certs.iter().map(|c| c.der().to_vec()).collect();
        let cas: Vec<Vec<u8>> = crate::credentials::load_certs(&self.remote.cacerts)?
            .iter()
            .map(|c| c.der().to_vec())
            .collect();
        let mut crls = Vec::new();
        for p in &self.remote.crls {
            let bytes = crate::credentials::read_public(p)?;
            crls.extend(ipsec_ike::pki::crl_ders(&bytes).map_err(|e| format!("{}: {e}", p.display()))?);
        }
        ipsec_ike::ipsec_eap::tls::ServerConfig::new(
            &chain,
            key.key.to_key_der(),
            &cas,
            &crls,
            ipsec_ike::ipsec_eap::tls::Versions::Both,
        )
        .map_err(|e| e.to_string())
    }

    /// The IKE implementation's configuration of this connection, with its pre-shared key
    /// from `secrets` (the entry naming both identities, or one of them; the remote address
    /// stands for an unset remote identity). The first child is negotiated in IKE_AUTH, the
    /// others with CREATE_CHILD_SA.
    pub fn to_ike(&self, secrets: &Secrets) -> Result<ipsec_ike::Connection, String> {
        self.to_ike_with(secrets, None)
    }

    /// [`ConnectionConfig::to_ike`] with the config's `[radius]` server, which a connection
    /// with `remote.auth = "eap-radius"` needs (and the secrets file's `[radius] secret`).
    pub fn to_ike_with(
        &self,
        secrets: &Secrets,
        radius: Option<&crate::radius::RadiusConfig>,
    ) -> Result<ipsec_ike::Connection, String> {
        let at = |m: String| format!("connection `{}` (line {}): {m}", self.name, self.line);
        let local_id = self.local_id();
        let remote_id = self
            .remote
            .id
            .clone()
            .or_else(|| self.remote_addr.map(|a| a.to_string()))
            .unwrap_or_default();
        let psk = || {
            secrets
                .psk_for(&local_id, &remote_id)
                .map(|p| ipsec_ike::Psk::new(&p.secret))
                .ok_or_else(|| {
                    at(format!(
                        "no pre-shared key in the secrets file for `{local_id}` and `{remote_id}`"
                    ))
                })
        };
        let id = |s: &str| ipsec_ike::Identity::from_str_config(s).map_err(|e| at(format!("identity `{s}`: {e}")));
        let (remote_exact, remote_match) = match self.remote.id.as_deref() {
            None => (None, None),
            Some(r) if is_wildcard(r) => (
                None,
                Some(ipsec_ike::pki::IdPattern::from_str_config(r).map_err(|e| at(format!("remote.id `{r}`: {e}")))?),
            ),
            Some(r) => (Some(id(r)?), None),
        };
        let placeholder = ipsec_ike::Psk::new(b"-");
        let mut c = ipsec_ike::Connection::new(
            &self.name,
            self.local_addr,
            self.remote_addr,
            id(&local_id)?,
            remote_exact,
            placeholder,
            &self.proposals.join(","),
        )
        .map_err(|e| at(format!("proposals: {e}")))?;
        c.remote_id_match = remote_match;
        // Our certificate (then intermediates) and its private key from the secrets file.
        let our_certs_and_key = || {
            let certs = crate::credentials::load_certs(&self.local.certs).map_err(at)?;
            let ours = certs
                .first()
                .ok_or_else(|| at("local.certs holds no certificate".into()))?;
            let key = secrets
                .keys
                .iter()
                .find(|k| k.key.public_key_matches(ours))
                .ok_or_else(|| {
                    at(format!(
                        "no private key in the secrets file's [[private]] files for the certificate `{}`",
                        ours.subject()
                    ))
                })?;
            Ok::<_, String>((certs, key))
        };
        c.local_auth = if self.local.eap {
            let user = self.local.eap_id.clone().unwrap_or_default();
            let secret = secrets
                .eap_for(&user)
                .ok_or_else(|| at(format!("no [[eap]] secret in the secrets file for `{user}`")))?;
            ipsec_ike::LocalAuth::Eap {
                identity: user.into_bytes(),
                password: ipsec_ike::Psk::new(secret.secret.as_bytes()),
            }
        } else if self.local.pubkey {
            let (certs, key) = our_certs_and_key()?;
            let signer = ipsec_ike::pki::RingSigner::new(key.key.clone())
                .map_err(|e| at(format!("{}: {e}", key.path.display())))?;
            ipsec_ike::LocalAuth::Pubkey {
                signer: std::sync::Arc::new(signer),
                certs,
                send_cert: self.send_cert,
            }
        } else {
            ipsec_ike::LocalAuth::Psk(psk()?)
        };
        c.remote_auth = if self.remote.radius {
            let server = radius.ok_or_else(|| at("remote.auth = \"eap-radius\" needs a [radius] server".into()))?;
            let secret = secrets
                .radius
                .as_ref()
                .ok_or_else(|| at("remote.auth = \"eap-radius\": no [radius] secret in the secrets file".into()))?;
            ipsec_ike::RemoteAuth::Eap {
                backend: ipsec_ike::ipsec_eap::server::Backend::Radius(server.client(secret.0.as_bytes())),
                creds: std::sync::Arc::new(EapUsers::from_secrets(secrets)),
            }
        } else if self.remote.eap {
            let backend = if self.remote.eap_tls {
                // The TLS server proves itself with the certificate IKE signs with.
                if !self.local.pubkey {
                    return Err(at(
                        "remote.auth = \"eap-tls\" needs local.auth = \"pubkey\" (the server's certificate)".into(),
                    ));
                }
                ipsec_ike::ipsec_eap::server::Backend::Tls(self.eap_tls_config(&our_certs_and_key()?).map_err(at)?)
            } else {
                ipsec_ike::ipsec_eap::server::Backend::Local
            };
            ipsec_ike::RemoteAuth::Eap {
                backend,
                creds: std::sync::Arc::new(EapUsers::from_secrets(secrets)),
            }
        } else if self.remote.pubkey {
            let trust = crate::credentials::load_trust(&self.remote.cacerts, &self.remote.crls).map_err(at)?;
            ipsec_ike::RemoteAuth::Pubkey {
                trust: std::sync::Arc::new(trust),
            }
        } else {
            ipsec_ike::RemoteAuth::Psk(psk()?)
        };
        c.send_certreq = self.send_certreq;
        // tunneld's data plane is ESP in UDP (its ESP-in-UDP sockets on 4500): it always
        // asks for encapsulation as strongSwan's `encap = yes` does (a NAT_DETECTION_SOURCE_IP
        // that cannot match, so both sides move to the NAT-T ports after IKE_SA_INIT, RFC 7296
        // 2.23), NAT or not; `encap = false` cannot turn that off.
        c.encap = true;
        c.dpd_delay = (self.dpd_delay > 0).then(|| std::time::Duration::from_secs(self.dpd_delay));
        c.rekey_time = self.rekey_time;
        c.dpd_timeout = self.dpd_timeout;
        c.dpd_action = self.dpd_action;
        c.close_action = self.close_action;
        c.rand_time = Some(self.rand_time);
        c.fragmentation = self.fragmentation;
        c.fragment_size = self.fragment_size;
        c.mobike = self.mobike;
        c.eap_only = self.eap_only;
        c.pools = self.pools.clone();
        c.vips = self.vips.clone();
        c.unique = self.unique;
        c.rekey_by = self.rekey_by;
        for ch in &self.children {
            let mut cc = ipsec_ike::ChildConfig::new(
                &ch.name,
                &ch.local_ts.join(","),
                &ch.remote_ts.join(","),
                &ch.esp_proposals.join(","),
            )
            .map_err(|e| at(format!("child `{}`: {e}", ch.name)))?;
            cc.start_action = match ch.start_action {
                StartAction::None => ipsec_ike::StartAction::None,
                StartAction::Start => ipsec_ike::StartAction::Start,
                StartAction::Trap => ipsec_ike::StartAction::Trap,
            };
            cc.lifetimes = ch.lifetimes;
            if c.children.is_empty() {
                c.start_action = cc.start_action;
            }
            c.children.push(cc);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secrets_parse_match_and_never_show_the_key() {
        let s = Secrets::parse(
            "[[ike]]\nid = [\"a.example\", \"b.example\"]\nsecret = \"0x0102\"\n\
             [[ike]]\nid = \"c.example\"\nsecret = \"text key\"\n[[ike]]\nsecret = \"catch-all\"\n",
        )
        .unwrap();
        assert_eq!(&s.psk_for("a.example", "b.example").unwrap().secret[..], &[1, 2]);
        assert_eq!(&s.psk_for("b.example", "a.example").unwrap().secret[..], &[1, 2]);
        assert_eq!(&s.psk_for("x", "c.example").unwrap().secret[..], b"text key");
        assert_eq!(&s.psk_for("x", "y").unwrap().secret[..], b"catch-all");
        assert!(!format!("{s:?}").contains("text key") && !format!("{s:?}").contains("catch"));
        let e = Secrets::parse("[[ike]]\nsecret = \"0xzz-hush\"\n").unwrap_err();
        assert!(e.contains("line 1") && !e.contains("hush"), "{e}");
        let e = Secrets::parse("[[ike]]\nsecret = 12345678\n").unwrap_err();
        assert!(!e.contains("12345678"), "{e}");
        let e = Secrets::parse("[[ike]]\nsecret = \"hush\"\nextra = 1\n").unwrap_err();
        assert!(!e.contains("hush"), "{e}");
    }

    #[test]
    fn a_secrets_file_others_can_read_or_a_link_is_refused() {
        let dir = std::env::temp_dir().join(format!("ipsec-secrets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("secrets.toml");
        std::fs::write(&p, "[[ike]]\nsecret = \"k\"\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Secrets::load(&p).unwrap_err();
        assert!(e.contains("0644") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Secrets::load(&p).unwrap().psks.len(), 1);
        let link = dir.join("link.toml");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(Secrets::load(&link).is_err());
        assert!(Secrets::load(&dir).is_err(), "a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod toml_tests {
    use crate::connection::StartAction;

    const GOOD: &str = r#"
[[connection]]
name = "site-b"
local_addrs = ["192.0.2.1"]
remote_addrs = ["198.51.100.2"]
proposals = ["aes128gcm16-prfsha256-x25519"]
encap = true
dpd_delay = 30
local = { id = "site-a.example", auth = "psk" }
remote = { id = "site-b.example" }

[[connection.children]]
name = "net"
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16", "10.3.0.0/16[tcp/443]"]
esp_proposals = ["aes128gcm16-esn"]
start_action = "trap"
"#;

    /// `ipsec check-config` names the proposals that are not post-quantum (#37); ML-KEM
    /// alone, or as an additional exchange that cannot be NONE, is.
    #[test]
    fn proposals_that_are_not_post_quantum_are_named() {
        let c = crate::from_toml::parse(GOOD).unwrap();
        let n = c.not_post_quantum();
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(n[0]
            .message
            .contains("`aes128gcm16-prfsha256-x25519` is not post-quantum"));
        assert_eq!(n[0].line, 2);
        let pq = GOOD
            .replace(
                "[\"aes128gcm16-prfsha256-x25519\"]",
                "[\"aes256gcm16-prfsha384-x25519-ke1_mlkem768\", \"aes256gcm16-prfsha384-mlkem1024\", \
                 \"aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none\"]",
            )
            .replace(
                "[\"aes128gcm16-esn\"]",
                "[\"aes128gcm16-esn\", \"aes128gcm16-ecp256-esn\"]",
            );
        let n = crate::from_toml::parse(&pq).unwrap().not_post_quantum();
        let m: Vec<&str> = n.iter().map(|w| w.message.as_str()).collect();
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].contains("`aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none`"),
            "NONE allowed: {m:?}"
        );
        assert!(
            m[1].contains("child `net`: ESP proposal `aes128gcm16-ecp256-esn`"),
            "{m:?}"
        );
    }

    /// `proposals = ["default", "windows"]`: the Windows client's own proposals (as charon
    /// logs them from Windows 10/11: 3DES or AES-CBC-256, SHA-1 or SHA2-256, MODP-1024) get
    /// its strongest one; one from a client with `NegotiateDH2048_AES256` gets a default;
    /// `ipsec check-config` names each weak algorithm once. Without the keyword, nothing
    /// weak is accepted.
    #[test]
    fn the_windows_keyword() {
        use ipsec_ike::alg::{parse_proposal, DhGroup, Encr, Integ, ProposalKind::*};
        use ipsec_ike::sa::{choose_esp, choose_ike, Proposal};
        let conf = GOOD
            .replace("[\"aes128gcm16-prfsha256-x25519\"]", "[\"default\", \"windows\"]")
            .replace("[\"aes128gcm16-esn\"]", "[\"windows\"]");
        let c = crate::from_toml::parse(&conf).unwrap();
        let conn = &c.connections[0];
        assert_eq!(conn.proposals.len(), 2 + super::WINDOWS_IKE_PROPOSALS.len());
        assert_eq!(conn.children[0].esp_proposals, super::WINDOWS_ESP_PROPOSALS);
        let ours: Vec<_> = conn.proposals.iter().map(|p| parse_proposal(p, Ike).unwrap()).collect();
        let offer = |props: &[&str], kind| -> Vec<Proposal> {
            props
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let spec = parse_proposal(p, kind).unwrap();
                    let proto = if kind == Ike { 1 } else { 3 };
                    let spi: &[u8] = if kind == Ike { &[] } else { &[1, 2, 3, 4] };
                    Proposal::from_spec(i as u8 + 1, proto, spi, &spec, kind == Ike)
                })
                .collect()
        };
        let windows = offer(
            &[
                "3des-sha1-modp1024",
                "aes256-sha1-modp1024",
                "3des-sha256-modp1024",
                "aes256-sha256-modp1024",
            ],
            Ike,
        );
        let (num, s) = choose_ike(&windows, &ours).unwrap();
        assert_eq!(
            (num, s.encr, s.integ, s.dh),
            (4, Encr::AesCbc256, Some(Integ::HmacSha256_128), DhGroup::Modp1024)
        );
        let dh2048 = offer(&["3des-sha1-modp1024", "aes256-sha256-modp2048"], Ike);
        assert_eq!(choose_ike(&dh2048, &ours).unwrap().0, 2);
        let ours_esp: Vec<_> = super::WINDOWS_ESP_PROPOSALS
            .iter()
            .map(|p| parse_proposal(p, Esp).unwrap())
            .collect();
        let (num, _, s) = choose_esp(&offer(&["3des-sha1", "aes256-sha1"], Esp), &ours_esp).unwrap();
        assert_eq!((num, s.encr, s.integ), (2, Encr::AesCbc256, Some(Integ::HmacSha1_96)));
        // Not accepted by the defaults.
        let defaults: Vec<_> = super::DEFAULT_IKE_PROPOSALS
            .iter()
            .map(|p| parse_proposal(p, Ike).unwrap())
            .collect();
        assert_eq!(choose_ike(&windows, &defaults), None);
        // check-config: each weak algorithm once per connection / child.
        let w = c.weak_algorithms();
        let m: Vec<&str> = w.iter().map(|w| w.message.as_str()).collect();
        assert_eq!(m.len(), 6, "{m:?}");
        for (i, a) in ["modp1024", "sha1", "prfsha1", "3des"].iter().enumerate() {
            assert!(
                m[i].starts_with("connection `site-b` IKE: weak algorithm `")
                    && m.iter().take(4).any(|x| x.contains(&format!("`{a}`"))),
                "{m:?}"
            );
        }
        assert!(m[4].contains("child `net` ESP: weak algorithm `sha1`"), "{m:?}");
        assert!(m[5].contains("child `net` ESP: weak algorithm `3des`"), "{m:?}");
        assert!(crate::from_toml::parse(GOOD).unwrap().weak_algorithms().is_empty());
        // An unknown keyword is an unknown algorithm.
        let bad = GOOD.replace("[\"aes128gcm16-esn\"]", "[\"macos\"]");
        assert!(crate::from_toml::parse(&bad).is_err());
    }

    #[test]
    fn a_swanctl_like_connection_parses() {
        let c = crate::from_toml::parse(GOOD).unwrap();
        let [conn] = &c.connections[..] else {
            panic!("{:?}", c.connections)
        };
        assert_eq!((conn.name.as_str(), conn.line), ("site-b", 2));
        assert_eq!(conn.remote_addr, Some("198.51.100.2".parse().unwrap()));
        assert!(conn.encap && conn.dpd_delay == 30);
        assert_eq!(conn.local.id.as_deref(), Some("site-a.example"));
        let ch = &conn.children[0];
        assert_eq!((ch.remote_ts.len(), ch.start_action), (2, StartAction::Trap));
        assert_eq!(ch.remote_ts[1], "10.3.0.0/16[tcp/443]");
        // Defaults: the "default" proposal keyword, no DPD, wait for the peer.
        let min = "[[connection]]\nname = \"m\"\nlocal_addrs = [\"fd00::1\"]\nremote_addrs = [\"%any\"]\n\
                   [[connection.children]]\nname = \"c\"\n";
        let c = crate::from_toml::parse(min).unwrap();
        let conn = &c.connections[0];
        assert_eq!((conn.proposals.len(), conn.dpd_delay, conn.remote_addr), (2, 0, None));
        assert_eq!(conn.children[0].esp_proposals[0], super::DEFAULT_ESP_PROPOSALS[0]);
        for p in super::DEFAULT_IKE_PROPOSALS {
            ipsec_ike::alg::parse_proposal(p, ipsec_ike::alg::ProposalKind::Ike).unwrap();
        }
        for p in super::DEFAULT_ESP_PROPOSALS {
            ipsec_ike::alg::parse_proposal(p, ipsec_ike::alg::ProposalKind::Esp).unwrap();
        }
        assert_eq!(conn.children[0].start_action, StartAction::None);
    }

    /// EAP (#36): `auth = "eap-mschapv2"` on either side with the secrets file's `[[eap]]`
    /// users; the password never in Debug or an error; the client needs eap_id and its
    /// secret; `eap-radius` is the server's only (the client runs the method).
    #[test]
    fn eap_mschapv2_connections_and_eap_secrets() {
        let secrets = super::Secrets::parse(
            "[[ike]]\nsecret = \"k\"\n[[eap]]\nid = \"alice\"\nsecret = \"hush-hush\"\n\
             [[eap]]\nid = \"bob\"\nsecret = \"other\"\n",
        )
        .unwrap();
        assert_eq!(secrets.eap.len(), 2);
        assert!(!format!("{secrets:?}").contains("hush-hush"));
        let dup = super::Secrets::parse("[[eap]]\nid = \"a\"\nsecret = \"x1\"\n[[eap]]\nid = \"a\"\nsecret = \"x2\"\n")
            .unwrap_err();
        assert!(dup.contains("line 4") && !dup.contains("x2"), "{dup}");
        // The server: EAP for the peer, the users as NT hashes.
        let server = GOOD.replace(
            "remote = { id = \"site-b.example\" }",
            "remote = { auth = \"eap-mschapv2\", eap_id = \"%any\" }",
        );
        let c = crate::from_toml::parse(&server).unwrap();
        let ike = c.connections[0].to_ike(&secrets).unwrap();
        let ipsec_ike::RemoteAuth::Eap { creds, .. } = &ike.remote_auth else {
            panic!("{:?}", ike.remote_auth)
        };
        assert!(creds.nt_hash(b"alice").is_some() && creds.nt_hash(b"carol").is_none());
        assert!(super::describe(&c.connections[0].remote, false).contains("EAP-MSCHAPv2"));
        // The client: eap_id and its [[eap]] secret.
        let client = GOOD.replace(
            "local = { id = \"site-a.example\", auth = \"psk\" }",
            "local = { auth = \"eap-mschapv2\", eap_id = \"alice\" }",
        );
        let c = crate::from_toml::parse(&client).unwrap();
        let ike = c.connections[0].to_ike(&secrets).unwrap();
        assert!(matches!(&ike.local_auth, ipsec_ike::LocalAuth::Eap { identity, .. } if identity == b"alice"));
        assert!(!format!("{:?}", ike.local_auth).contains("hush"));
        let none = super::Secrets::parse("[[ike]]\nsecret = \"k\"\n").unwrap();
        let e = c.connections[0].to_ike(&none).unwrap_err();
        assert!(e.contains("no [[eap]] secret") && e.contains("alice"), "{e}");
        // Refusals.
        for (line, want) in [
            ("local = { auth = \"eap-mschapv2\" }", "needs local.eap_id"),
            ("local = { auth = \"psk\", eap_id = \"x\" }", "eap_id needs"),
            ("local = { auth = \"eap-tls\" }", "EAP-TLS client is not supported"),
            (
                "local = { auth = \"eap-radius\", eap_id = \"x\" }",
                "is the server's remote.auth",
            ),
        ] {
            let t = GOOD.replace("local = { id = \"site-a.example\", auth = \"psk\" }", line);
            let e = crate::from_toml::parse(&t).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    /// `remote.auth = "eap-tls"` (#36): the clients' CAs required, the server's certificate
    /// too (the TLS server is the IKE responder's certificate).
    #[test]
    fn eap_tls_connections() {
        let server = GOOD.replace(
            "remote = { id = \"site-b.example\" }",
            "remote = { auth = \"eap-tls\", eap_id = \"%any\", cacerts = [\"/nonexistent/ca.pem\"] }",
        );
        let c = crate::from_toml::parse(&server).unwrap();
        let r = &c.connections[0].remote;
        assert!(r.eap && r.eap_tls && !r.pubkey);
        assert!(
            super::describe(r, false).contains("EAP-TLS"),
            "{}",
            super::describe(r, false)
        );
        // Our side signs with a pre-shared key here: there is no certificate for TLS.
        let secrets = super::Secrets::parse("[[ike]]\nsecret = \"k\"\n").unwrap();
        let e = c.connections[0].to_ike(&secrets).unwrap_err();
        assert!(e.contains("needs local.auth = \"pubkey\""), "{e}");
        let no_ca = GOOD.replace(
            "remote = { id = \"site-b.example\" }",
            "remote = { auth = \"eap-tls\" }",
        );
        let e = crate::from_toml::parse(&no_ca).unwrap_err().to_string();
        assert!(e.contains("needs remote.cacerts"), "{e}");
    }

    /// EAP-RADIUS (#36): `remote.auth = "eap-radius"` with a `[radius]` server, its secret
    /// from the secrets file's `[radius]` (never in Debug or an error); a connection with no
    /// server is named; a secret in the config is refused.
    #[test]
    fn eap_radius_connections_need_a_server_and_its_secret() {
        let server = GOOD.replace(
            "remote = { id = \"site-b.example\" }",
            "remote = { auth = \"eap-radius\", eap_id = \"%any\" }",
        );
        let e = crate::from_toml::parse(&server).unwrap_err().to_string();
        assert!(e.contains("`site-b`") && e.contains("no [radius] server"), "{e}");
        let with = format!("[radius]\naddress = \"10.1.0.5\"\nnas_identifier = \"gw\"\n{server}");
        let c = crate::from_toml::parse(&with).unwrap();
        let r = c.radius.as_ref().unwrap();
        assert_eq!(r.address, "10.1.0.5:1812".parse().unwrap());
        assert_eq!((r.nas_identifier.as_str(), r.retransmit_tries), ("gw", 3));
        assert!(c.connections[0].remote.radius);
        let secrets = super::Secrets::parse("[[ike]]\nsecret = \"k\"\n[radius]\nsecret = \"radius-hush\"\n").unwrap();
        assert!(!format!("{secrets:?}").contains("radius-hush"));
        let ike = c.connections[0].to_ike_with(&secrets, c.radius.as_ref()).unwrap();
        let ipsec_ike::RemoteAuth::Eap {
            backend: ipsec_ike::ipsec_eap::server::Backend::Radius(client),
            ..
        } = &ike.remote_auth
        else {
            panic!("{:?}", ike.remote_auth)
        };
        assert_eq!(&client.secret[..], b"radius-hush");
        assert_eq!(client.nas_identifier, b"gw");
        assert!(!format!("{:?}", ike.remote_auth).contains("hush"));
        assert!(super::describe(&c.connections[0].remote, false).contains("[radius]"));
        let none = super::Secrets::parse("[[ike]]\nsecret = \"k\"\n").unwrap();
        let e = c.connections[0].to_ike_with(&none, c.radius.as_ref()).unwrap_err();
        assert!(e.contains("no [radius] secret"), "{e}");
        let e = c.connections[0].to_ike(&secrets).unwrap_err();
        assert!(e.contains("needs a [radius] server"), "{e}");
        for (radius, want) in [
            (
                "address = \"10.1.0.5\"\nsecret = \"s3cr3t\"",
                "belongs in the secrets file",
            ),
            ("address = \"radius.example\"", "an IP address"),
            ("address = \"10.1.0.5\"\nretransmit_tries = 0", "retransmit_tries"),
        ] {
            let t = format!("[radius]\n{radius}\n{server}");
            let e = crate::from_toml::parse(&t).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains("s3cr3t"), "{radius}: {e}");
        }
    }

    /// The TOML and the secrets file become the IKE crate's connection: the key found by
    /// identity, the start action and DPD carried over; a missing key is an error naming
    /// the identities, never a key.
    #[test]
    fn a_connection_and_its_key_become_the_ike_configuration() {
        let c = crate::from_toml::parse(GOOD).unwrap();
        let conn = &c.connections[0];
        let secrets =
            super::Secrets::parse("[[ike]]\nid = [\"site-a.example\", \"site-b.example\"]\nsecret = \"0x0a0b0c\"\n")
                .unwrap();
        let ike = conn.to_ike(&secrets).unwrap();
        assert_eq!(ike.name, "site-b");
        assert_eq!(ike.remote_addr, Some("198.51.100.2".parse().unwrap()));
        assert!(ike.encap);
        assert_eq!(ike.dpd_delay, Some(std::time::Duration::from_secs(30)));
        assert_eq!(ike.children.len(), 1);
        assert_eq!(ike.children[0].remote_ts.len(), 2);
        assert_eq!(ike.start_action, ipsec_ike::StartAction::Trap);
        assert!(!format!("{ike:?}").contains("0a0b0c"));
        assert_eq!(
            (ike.fragmentation, ike.fragment_size),
            (true, 1280),
            "strongSwan's defaults"
        );
        for (line, frag, size) in [
            ("fragmentation = \"no\"", false, 1280),
            ("fragmentation = \"accept\"\nfragment_size = 576", true, 576),
            ("fragmentation = \"force\"\nfragment_size = 0", true, 1280),
        ] {
            let c = crate::from_toml::parse(&GOOD.replace("dpd_delay = 30", line)).unwrap();
            let ike = c.connections[0].to_ike(&secrets).unwrap();
            assert_eq!((ike.fragmentation, ike.fragment_size), (frag, size), "{line}");
        }
        // MOBIKE (RFC 4555): on unless `mobike = false` (swanctl's default yes).
        assert!(ike.mobike);
        let c = crate::from_toml::parse(&GOOD.replace("dpd_delay = 30", "mobike = false")).unwrap();
        assert!(!c.connections[0].to_ike(&secrets).unwrap().mobike);
        // EAP-only (RFC 5998): off unless `eap_only = true`.
        assert!(!ike.eap_only);
        let c = crate::from_toml::parse(&GOOD.replace("dpd_delay = 30", "eap_only = true")).unwrap();
        assert!(c.connections[0].to_ike(&secrets).unwrap().eap_only);
        for (line, what) in [
            ("fragmentation = \"maybe\"", "fragmentation = \"maybe\""),
            ("fragment_size = 100", "fragment_size = 100"),
        ] {
            let e = crate::from_toml::parse(&GOOD.replace("dpd_delay = 30", line)).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }
        // tunneld's children always go in UDP, so IKE moves to the NAT-T ports without a
        // NAT too (#31 defect 7): `encap = false` or no `encap` still forces it.
        for toml in [
            GOOD.replace("encap = true", "encap = false"),
            GOOD.replace("encap = true\n", ""),
        ] {
            let c = crate::from_toml::parse(&toml).unwrap();
            assert!(!c.connections[0].encap);
            assert!(c.connections[0].to_ike(&secrets).unwrap().encap);
        }
        let none = super::Secrets::parse("[[ike]]\nid = \"elsewhere\"\nsecret = \"k\"\n").unwrap();
        let e = conn.to_ike(&none).unwrap_err();
        assert!(e.contains("no pre-shared key") && e.contains("site-a.example"), "{e}");
    }

    #[test]
    fn connection_errors_name_the_line_and_what() {
        for (bad, want) in [
            (GOOD.replace("\"psk\"", "\"pubkey\""), "needs local.certs"),
            (
                GOOD.replace("\"psk\"", "\"eap\""),
                "\"psk\", \"pubkey\", \"eap-mschapv2\", \"eap-tls\" or \"eap-radius\"",
            ),
            (
                GOOD.replace("auth = \"psk\" }", "auth = \"psk\", cacerts = [\"/x\"] }"),
                "cacerts and crls belong in remote",
            ),
            (GOOD.replace("198.51.100.2", "fd00::2"), "different IP versions"),
            (GOOD.replace("\"trap\"", "\"later\""), "start_action `later`"),
            (GOOD.replace("10.2.0.0/16\"", "10.2.0.0/99\""), "traffic selector"),
            (
                GOOD.replace("x25519\"", "x25519-rot13\""),
                "proposals: `aes128gcm16-prfsha256-x25519-rot13`",
            ),
            (GOOD.replace("site-b.example", ""), "remote.id"),
            (GOOD.replace("dpd_delay", "dpd_dleay"), "unknown field"),
            (format!("{GOOD}{GOOD}"), "already named"),
            (GOOD.replace("dpd_delay = 30", "rekey_time = \"4x\""), "rekey_time"),
            (GOOD.replace("dpd_delay = 30", "dpd_action = \"explode\""), "dpd_action"),
            (
                GOOD.replace("start_action = \"trap\"", "rekey_time = \"1h\"\nlife_time = \"30m\""),
                "life_time is shorter",
            ),
        ] {
            let e = crate::from_toml::parse(&bad).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("line"), "{want}: {e}");
        }
        let no_child = "[[connection]]\nname = \"m\"\nlocal_addrs = [\"10.0.0.1\"]\n";
        assert!(crate::from_toml::parse(no_child)
            .unwrap_err()
            .to_string()
            .contains("at least one child"));
        let any_start = "[[connection]]\nname = \"m\"\nlocal_addrs = [\"10.0.0.1\"]\n\
                         [[connection.children]]\nname = \"c\"\nstart_action = \"start\"\n";
        assert!(crate::from_toml::parse(any_start)
            .unwrap_err()
            .to_string()
            .contains("remote address"));
    }

    /// swanctl's lifetimes and their defaults; several children.
    #[test]
    fn lifetimes_in_swanctl_words_with_its_defaults() {
        let c = crate::from_toml::parse(GOOD).unwrap();
        let conn = &c.connections[0];
        let l = conn.children[0].lifetimes;
        let s = std::time::Duration::from_secs;
        assert_eq!((l.rekey_time, l.life_time, l.rand_time), (s(3600), s(3960), s(360)));
        assert_eq!((conn.rekey_time, conn.rand_time), (Some(s(4 * 3600)), s(1440)));
        assert_eq!(conn.dpd_action, ipsec_ike::DeadAction::Clear);
        let more = GOOD.replace("dpd_delay = 30", "dpd_delay = 30\nrekey_time = 0\ndpd_timeout = \"2m\"\ndpd_action = \"restart\"\nclose_action = \"trap\"")
            .replace(
                "start_action = \"trap\"",
                "start_action = \"trap\"\nrekey_time = \"8s\"\nrand_time = \"0s\"\nrekey_bytes = 10000000\n\n\
                 [[connection.children]]\nname = \"two\"\nlocal_ts = [\"10.5.0.0/16\"]\nremote_ts = [\"10.6.0.0/16\"]\nlife_time = 7200",
            );
        let c = crate::from_toml::parse(&more).unwrap();
        let conn = &c.connections[0];
        assert_eq!(conn.rekey_time, None, "0 = never");
        assert_eq!(conn.dpd_timeout, Some(s(120)));
        assert_eq!(
            (conn.dpd_action, conn.close_action),
            (ipsec_ike::DeadAction::Restart, ipsec_ike::DeadAction::Trap)
        );
        let l = conn.children[0].lifetimes;
        assert_eq!((l.rekey_time, l.life_time, l.rand_time), (s(8), s(8) + s(8) / 10, s(0)));
        assert_eq!((l.rekey_bytes, l.life_bytes), (10_000_000, 11_000_000));
        assert_eq!(conn.children[1].lifetimes.life_time, s(7200));
        let secrets = super::Secrets::parse("[[ike]]\nsecret = \"k\"\n").unwrap();
        let ike = conn.to_ike(&secrets).unwrap();
        assert_eq!(ike.children.len(), 2, "several children are taken");
        assert_eq!(ike.children[0].lifetimes, l);
        assert_eq!(ike.dpd_action, ipsec_ike::DeadAction::Restart);
    }
}
