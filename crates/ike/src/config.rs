//! Configuration: plain structs the daemon fills from its own file format (swanctl.conf
//! words where strongSwan has them). No serde here.
use crate::alg::{parse_proposals, ProposalKind, ProposalSpec};
use crate::error::Error;
use crate::id::Identity;
use crate::pki::{Certificate, IdPattern, Signer, TrustStore};
use crate::retransmit::RetransmitConfig;
use crate::ts::TrafficSelector;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::time::Duration;
use zeroize::Zeroizing;

/// A pre-shared key. Never printed: `Debug` shows only its length class.
#[derive(Clone)]
pub struct Psk(Zeroizing<Vec<u8>>);

impl Psk {
    /// From the secret's bytes.
    pub fn new(secret: &[u8]) -> Self {
        Psk(Zeroizing::new(secret.to_vec()))
    }
    /// The secret, for the AUTH computation.
    pub(crate) fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Psk(<redacted>)")
    }
}

/// How we prove our identity (swanctl's `local.auth`).
#[derive(Clone)]
pub enum LocalAuth {
    /// EAP-MSCHAPv2 as the client (RFC 7296 2.16; swanctl's `auth = eap-mschapv2`): no
    /// AUTH in the first IKE_AUTH request, EAP Responses, then AUTH with the MSK. The
    /// responder proves itself with a signature ([`RemoteAuth::Pubkey`]).
    Eap {
        /// The EAP identity (swanctl's `eap_id`), sent in the EAP-Identity Response.
        identity: Vec<u8>,
        /// The password (the secrets file's `[[eap]]`); zeroized, never printed.
        password: Psk,
    },
    /// A pre-shared key (RFC 7296 2.15).
    Psk(Psk),
    /// A signature made with our private key (RFC 7427, or the classic methods of 3.8
    /// for a peer that does not announce SIGNATURE_HASH_ALGORITHMS), and the certificates
    /// we send: ours first (3.6: the one whose key verifies AUTH), then intermediates.
    Pubkey {
        /// Signs for us; the crate never holds the key itself ([`crate::pki::Signer`]).
        signer: Arc<dyn Signer>,
        /// Our certificate, then intermediate CA certificates.
        certs: Vec<Certificate>,
        /// When we send them.
        send_cert: SendCert,
    },
}

impl fmt::Debug for LocalAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalAuth::Psk(_) => f.write_str("psk"),
            LocalAuth::Eap { .. } => f.write_str("eap-mschapv2"),
            LocalAuth::Pubkey { certs, .. } => match certs.first() {
                Some(c) => write!(f, "pubkey ({})", c.subject()),
                None => f.write_str("pubkey"),
            },
        }
    }
}

/// When we send our certificates (swanctl's `send_cert`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendCert {
    /// Always (a peer without our certificate cannot verify us otherwise; Windows clients
    /// do not ask with CERTREQ).
    #[default]
    Always,
    /// Only when the peer sent a CERTREQ (strongSwan's default).
    IfAsked,
    /// Never (the peer has our certificate).
    Never,
}

/// How the peer must prove its identity (swanctl's `remote.auth`).
#[derive(Clone)]
pub enum RemoteAuth {
    /// The same pre-shared key (2.15).
    Psk(Psk),
    /// A signature by the key of a certificate that chains to one of these CAs, valid now,
    /// and that carries the identity the peer claims (RFC 4945 4.1.3).
    Pubkey {
        /// Trusted CAs and their CRLs.
        trust: Arc<TrustStore>,
    },
    /// EAP (RFC 7296 2.16; swanctl's `auth = eap-mschapv2` / `eap-tls` / `eap-radius`): the
    /// peer sends no
    /// AUTH in its first IKE_AUTH request; we ask its EAP identity (`eap_id = %any`), run the
    /// method ([`ipsec_eap::server::Authenticator`]) and then check its AUTH made with the
    /// MSK ([`crate::eap`]). Our own side signs ([`LocalAuth::Pubkey`]).
    Eap {
        /// Where the method runs: here with `creds`, or on a RADIUS server.
        backend: ipsec_eap::server::Backend,
        /// The users' NT password hashes (the secrets file's `[[eap]]`).
        creds: Arc<dyn EapCredentials>,
    },
}

/// The users an EAP-MSCHAPv2 responder knows ([`ipsec_eap::mschapv2::Credentials`]),
/// shareable between threads.
pub trait EapCredentials: ipsec_eap::mschapv2::Credentials + Send + Sync {}
impl<T: ipsec_eap::mschapv2::Credentials + Send + Sync> EapCredentials for T {}

impl fmt::Debug for RemoteAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteAuth::Psk(_) => f.write_str("psk"),
            RemoteAuth::Pubkey { trust } => write!(f, "pubkey ({} CAs)", trust.cas().len()),
            RemoteAuth::Eap { backend, .. } => f.write_str(backend.method_name()),
        }
    }
}

impl RemoteAuth {
    /// Whether an AUTH payload of `method` is of this kind (3.8).
    pub fn accepts_method(&self, method: u8) -> bool {
        use crate::auth::method as m;
        match self {
            RemoteAuth::Psk(_) => method == m::SHARED_KEY,
            RemoteAuth::Pubkey { .. } => matches!(method, m::RSA_SIG | m::DIGITAL_SIGNATURE | 9..=11),
            // The first request has no AUTH; the last one's (MSK, method 2) is checked by
            // crate::eap, never as a pre-shared key.
            RemoteAuth::Eap { .. } => false,
        }
    }

    /// Whether the peer authenticates with EAP (its first IKE_AUTH request has no AUTH).
    pub fn is_eap(&self) -> bool {
        matches!(self, RemoteAuth::Eap { .. })
    }
}

/// What to do with a connection or child when the daemon starts (swanctl `start_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartAction {
    /// Wait for the peer or a command.
    #[default]
    None,
    /// Initiate at start ([`crate::Endpoint::start`]).
    Start,
    /// Install a trap policy; the daemon calls [`crate::Endpoint::acquire`] on a match.
    Trap,
}

/// What happens when the peer is found dead (swanctl `dpd_action`) or closes the IKE SA
/// (`close_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeadAction {
    /// Forget the SAs (swanctl's `clear`, and `none`).
    #[default]
    Clear,
    /// Start the connection again at once (needs a remote address).
    Restart,
    /// Forget the SAs and let the next matching packet start the connection again (a trap
    /// policy, as `start_action = trap`).
    Trap,
}

/// IPsec mode of a child SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Tunnel mode.
    #[default]
    Tunnel,
    /// Transport mode (negotiated with USE_TRANSPORT_MODE, RFC 7296 1.3.1).
    Transport,
}

/// Lifetimes of a child SA (swanctl's words and defaults): the IKE SA rekeys it at
/// `rekey_time` less a random part of `rand_time`, and deletes it at `life_time` if that did
/// not happen; the byte and packet limits are counted by the data plane, which asks for the
/// rekey ([`crate::Endpoint::rekey_child`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildLifetimes {
    /// Rekey after this long (swanctl `rekey_time`, default 1 h).
    pub rekey_time: Duration,
    /// Hard expiry (swanctl `life_time`, default rekey_time + 10 %).
    pub life_time: Duration,
    /// Start the rekey up to this much earlier, at random (swanctl `rand_time`, default
    /// life_time - rekey_time), so the two ends do not start together.
    pub rand_time: Duration,
    /// Rekey after this many bytes (0: none).
    pub rekey_bytes: u64,
    /// Rekey after this many packets (0: none).
    pub rekey_packets: u64,
    /// Hard limit in bytes (0: none; default rekey_bytes + 10 %).
    pub life_bytes: u64,
    /// Hard limit in packets (0: none).
    pub life_packets: u64,
}

impl Default for ChildLifetimes {
    fn default() -> Self {
        ChildLifetimes {
            rekey_time: Duration::from_secs(3600),
            life_time: Duration::from_secs(3960),
            rand_time: Duration::from_secs(360),
            rekey_bytes: 0,
            rekey_packets: 0,
            life_bytes: 0,
            life_packets: 0,
        }
    }
}

/// A child SA configuration (a swanctl `children` section).
#[derive(Debug, Clone)]
pub struct ChildConfig {
    /// Name.
    pub name: String,
    /// Our side's selectors. Empty means `dynamic`: our IKE address.
    pub local_ts: Vec<TrafficSelector>,
    /// The peer's side's selectors. Empty means `dynamic`: the peer's IKE address.
    pub remote_ts: Vec<TrafficSelector>,
    /// ESP proposals (see [`crate::alg::parse_proposal`]).
    pub esp_proposals: Vec<ProposalSpec>,
    /// Mode.
    pub mode: Mode,
    /// Lifetimes.
    pub lifetimes: ChildLifetimes,
    /// Start action.
    pub start_action: StartAction,
}

impl ChildConfig {
    /// A tunnel-mode child from swanctl-style strings: comma-separated selectors and
    /// proposals.
    pub fn new(name: &str, local_ts: &str, remote_ts: &str, esp_proposals: &str) -> Result<Self, Error> {
        Ok(ChildConfig {
            name: name.into(),
            local_ts: parse_ts_list(local_ts)?,
            remote_ts: parse_ts_list(remote_ts)?,
            esp_proposals: parse_proposals(esp_proposals, ProposalKind::Esp)?,
            mode: Mode::Tunnel,
            lifetimes: ChildLifetimes::default(),
            start_action: StartAction::None,
        })
    }
}

/// Parses `10.1.0.0/16, 10.2.0.0/16[tcp]`; `dynamic` or an empty string give an empty list.
pub fn parse_ts_list(s: &str) -> Result<Vec<TrafficSelector>, Error> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty() && *p != "dynamic") {
        if v.len() >= crate::limits::MAX_TS {
            return Err(Error::TooManyTs);
        }
        v.push(TrafficSelector::from_str_config(part)?);
    }
    Ok(v)
}

/// A connection (a swanctl `connections` section).
#[derive(Debug, Clone)]
pub struct Connection {
    /// Name.
    pub name: String,
    /// Our address.
    pub local_addr: IpAddr,
    /// The peer's address; `None` accepts any (responder only).
    pub remote_addr: Option<IpAddr>,
    /// The peer's IKE port (500).
    pub remote_port: u16,
    /// The peer's NAT-T port (4500).
    pub remote_natt_port: u16,
    /// Our identity.
    pub local_id: Identity,
    /// The identity the peer must prove, sent as IDr by the initiator; `None` accepts any
    /// (that `remote_id_match` allows).
    pub remote_id: Option<Identity>,
    /// A wildcard the peer's identity must match instead (`C=CH, O=strongSwan, CN=*`,
    /// `*.example.org`; swanctl writes both in `remote.id`), not sent.
    pub remote_id_match: Option<IdPattern>,
    /// How we authenticate.
    pub local_auth: LocalAuth,
    /// How the peer must.
    pub remote_auth: RemoteAuth,
    /// Send CERTREQ for our trusted CAs (3.7) when the peer authenticates with a signature.
    pub send_certreq: bool,
    /// IKE proposals.
    pub ike_proposals: Vec<ProposalSpec>,
    /// Child SAs; the first is negotiated in IKE_AUTH.
    pub children: Vec<ChildConfig>,
    /// Start action of the IKE SA (and its first child).
    pub start_action: StartAction,
    /// Send an empty INFORMATIONAL after this long without a message from the peer.
    pub dpd_delay: Option<Duration>,
    /// Give a liveness check up after this long without an answer (None: when the
    /// retransmissions run out, 2.4).
    pub dpd_timeout: Option<Duration>,
    /// What happens when the peer is found dead.
    pub dpd_action: DeadAction,
    /// What happens when the peer deletes the IKE SA.
    pub close_action: DeadAction,
    /// Force UDP encapsulation (strongSwan `encap = yes`): we send a NAT_DETECTION_SOURCE_IP
    /// that cannot match, as strongSwan does, so both sides think we are behind a NAT.
    pub encap: bool,
    /// Rekey the IKE SA after this long (swanctl `rekey_time`, default 4 h; None: never).
    pub rekey_time: Option<Duration>,
    /// Start the IKE rekey up to this much earlier, at random (swanctl `rand_time`; None:
    /// a tenth of `rekey_time`).
    pub rand_time: Option<Duration>,
    /// Send INITIAL_CONTACT in IKE_AUTH (1.3.1 / 2.4).
    pub initial_contact: bool,
    /// IKE fragmentation (RFC 7383; strongSwan's `fragmentation = yes`, the default):
    /// announce support in IKE_SA_INIT and, when the peer does too, accept fragments and
    /// fragment our encrypted messages larger than `fragment_size`.
    pub fragmentation: bool,
    /// The largest IP datagram an IKE fragment goes in (RFC 7383 2.5.1; strongSwan's
    /// `charon.fragment_size`, default 1280 for IPv4 and IPv6). Raised to
    /// [`crate::limits::MIN_FRAGMENT_SIZE`].
    pub fragment_size: u16,
    /// Pools the peer's virtual addresses come from, in order (swanctl `pools`; responder).
    pub pools: Vec<String>,
    /// Virtual addresses we ask for (swanctl `vips`: `0.0.0.0` or `::` for any; initiator).
    pub vips: Vec<IpAddr>,
    /// Another IKE SA of the same peer identity (swanctl `unique`).
    pub unique: crate::pool::Unique,
    /// MOBIKE (RFC 4555; swanctl `mobike`, default yes): announce MOBIKE_SUPPORTED in
    /// IKE_AUTH and, when both sides did, follow the peer's UPDATE_SA_ADDRESSES
    /// (`task::ike_mobike`).
    pub mobike: bool,
    /// EAP-only authentication as responder (RFC 5998; `eap_only`, default no): when the
    /// client sends EAP_ONLY_AUTHENTICATION and the connection's EAP method is one RFC 5998
    /// section 4 calls safe (mutual, key generating, dictionary-attack resistant: here
    /// EAP-TLS), the first IKE_AUTH response carries no CERT and no AUTH; we prove
    /// ourselves with the MSK's AUTH at the end (`task::ike_auth_eap`).
    pub eap_only: bool,
    /// Which side starts rekeys of the IKE SA and its children (issue #36: clients that
    /// refuse a server's rekey).
    pub rekey_by: RekeyBy,
    /// Vendor IDs we send in IKE_SA_INIT (RFC 7296 3.12; none by default): an initiator
    /// that stands in for a client known by them ([`crate::vendor`]), in tests and load runs.
    pub vendor_ids: Vec<Vec<u8>>,
}

/// Which side of an IKE SA starts the rekeys of it and its children (`rekey_by`). The
/// initiator of the IKE SA (the client of a remote-access server) always may; this says
/// whether the responder does too. Either way the responder answers the initiator's rekeys,
/// and its hard lifetimes (a child's `life_time`, bytes, packets) still apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RekeyBy {
    /// `both`, except for a Windows client ([`crate::vendor::is_windows`]) behind a NAT,
    /// which answers a responder's CREATE_CHILD_SA with errors or not at all: then `client`.
    #[default]
    Auto,
    /// Both sides rekey at their own `rekey_time` (RFC 7296 2.8, what strongSwan does).
    Both,
    /// Only the IKE SA's initiator: as strongSwan's advice for such clients, `rekey_time = 0`
    /// on the server for the IKE SA and its children.
    Client,
}

impl RekeyBy {
    /// The word of the config file (`auto`, `both`, `client`).
    pub fn word(self) -> &'static str {
        match self {
            RekeyBy::Auto => "auto",
            RekeyBy::Both => "both",
            RekeyBy::Client => "client",
        }
    }
}

impl Connection {
    /// Whether either side signs (the IKE_SA_INIT then announces SIGNATURE_HASH_ALGORITHMS).
    pub fn uses_signatures(&self) -> bool {
        matches!(self.local_auth, LocalAuth::Pubkey { .. }) || matches!(self.remote_auth, RemoteAuth::Pubkey { .. })
    }

    /// Whether the peer identity `id` is one this connection accepts.
    pub fn accepts_remote_id(&self, id: &Identity) -> bool {
        match (&self.remote_id, &self.remote_id_match) {
            (Some(r), _) => r == id,
            (None, Some(p)) => crate::pki::id_matches_pattern(p, id),
            (None, None) => true,
        }
    }

    /// A connection with PSK authentication both ways and defaults: ports 500/4500, no
    /// DPD, no forced encapsulation.
    pub fn new(
        name: &str,
        local_addr: IpAddr,
        remote_addr: Option<IpAddr>,
        local_id: Identity,
        remote_id: Option<Identity>,
        psk: Psk,
        ike_proposals: &str,
    ) -> Result<Self, Error> {
        Ok(Connection {
            name: name.into(),
            local_addr,
            remote_addr,
            remote_port: 500,
            remote_natt_port: 4500,
            local_id,
            remote_id,
            remote_id_match: None,
            local_auth: LocalAuth::Psk(psk.clone()),
            remote_auth: RemoteAuth::Psk(psk),
            send_certreq: true,
            ike_proposals: parse_proposals(ike_proposals, ProposalKind::Ike)?,
            children: Vec::new(),
            start_action: StartAction::None,
            dpd_delay: None,
            dpd_timeout: None,
            dpd_action: DeadAction::Clear,
            close_action: DeadAction::Clear,
            encap: false,
            rekey_time: Some(Duration::from_secs(4 * 3600)),
            rand_time: None,
            initial_contact: true,
            fragmentation: true,
            fragment_size: 1280,
            pools: Vec::new(),
            vips: Vec::new(),
            unique: Default::default(),
            mobike: true,
            eap_only: false,
            rekey_by: RekeyBy::Auto,
            vendor_ids: Vec::new(),
        })
    }
}

/// The endpoint's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Connections.
    pub connections: Vec<Connection>,
    /// Our IKE port (500): datagrams on it carry IKE without a marker.
    pub ike_port: u16,
    /// Our NAT-T port (4500): datagrams on it carry IKE after the 4-byte non-ESP marker.
    pub natt_port: u16,
    /// Retransmission.
    pub retransmit: RetransmitConfig,
    /// Give up on a half-open responder IKE SA (no IKE_AUTH) after this long.
    pub half_open_timeout: Duration,
    /// Put the IKE SA keys in [`crate::Event::IkeUp`] (for a Wireshark key log). Off by
    /// default.
    pub export_ike_keys: bool,
    /// Half-open responder SAs from which on every new IKE_SA_INIT must bring a cookie
    /// (RFC 7296 2.6; strongSwan's `charon.cookie_threshold`, 30). See [`crate::cookie`].
    pub cookie_threshold: usize,
    /// Half-open SAs of one source address from which on its requests must bring a cookie
    /// (strongSwan's `cookie_threshold_ip`, 3). Below `half_open_per_source`, so requests
    /// spoofed from an address cannot fill its quota: the real peer gets a cookie, not a refusal.
    pub cookie_threshold_ip: usize,
    /// Half-open SAs one source address may have; more are refused
    /// ([`crate::Dropped::HalfOpenPerSource`]; strongSwan's `block_threshold`, 5).
    pub half_open_per_source: usize,
    /// Half-open SAs in all; more are refused ([`crate::Dropped::HalfOpenLimit`]). Well below
    /// [`crate::limits::MAX_IKE_SAS`] (4096), so half-open SAs never take the room of
    /// established ones or of our own initiations.
    pub half_open_max: usize,
    /// Every new IKE_SA_INIT must bring a cookie, whatever the load (strongSwan's
    /// `dos_protection` with `cookie_threshold = 0`).
    pub force_cookies: bool,
    /// Address pools (swanctl `pools`), named by connections' `pools`.
    pub pools: Vec<crate::pool::PoolConfig>,
}

impl Config {
    /// Defaults: ports 500 and 4500, strongSwan's retransmission, 30 s half-open timeout;
    /// cookies from 30 half-open SAs (3 of one source), at most 5 per source and 1024 in all.
    pub fn new(connections: Vec<Connection>) -> Self {
        Config {
            connections,
            ike_port: 500,
            natt_port: 4500,
            retransmit: RetransmitConfig::default(),
            half_open_timeout: Duration::from_secs(30),
            export_ike_keys: false,
            cookie_threshold: 30,
            cookie_threshold_ip: 3,
            half_open_per_source: 5,
            half_open_max: 1024,
            force_cookies: false,
            pools: Vec::new(),
        }
    }
}
