//! One IKE SA (RFC 7296 1, 2): who it is (SPIs, role, connection), where its peer is (2.23),
//! its state with the data each state needs, the two halves of the message-ID window (2.3:
//! our requests in the [`TaskManager`], the peer's in the [`PeerWindow`]) and its child SAs.
//! The exchanges themselves are tasks ([`crate::task`]), one module each.
use crate::alg::IkeSuite;
use crate::config::{Config, Connection};
use crate::dropped::Dropped;
use crate::error::Error;
use crate::event::{ChildSaInfo, DownReason, Event, Role, Transmit, UdpEncap};
use crate::header::{ExchangeType, HeaderRepr};
use crate::id::Identity;
use crate::keys::{derive_ike_keys, skeyseed, IkeKeys};
use crate::limits::MAX_QUEUED_OUTPUT;
use crate::message::{emit_chain, parse_chain, Message, Payload};
use crate::nat::NatState;
use crate::sk::SkCipher;
use crate::task::TaskManager;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// The non-ESP marker that precedes IKE on the NAT-T port (RFC 3948 2.2).
pub const NON_ESP_MARKER: [u8; 4] = [0; 4];

/// An IKE SA's keys: the SK_* (2.14) and the two ciphers of its Encrypted payloads.
pub(crate) struct Crypto {
    pub suite: IkeSuite,
    pub keys: IkeKeys,
    pub sk_in: SkCipher,
    pub sk_out: SkCipher,
}

impl Crypto {
    /// SKEYSEED from the nonces and the shared secret (2.14), or, for an IKE SA that
    /// replaces another, from the old SA's SK_d (2.18): `prf(SK_d (old), g^ir (new) | Ni | Nr)`.
    #[allow(clippy::too_many_arguments)]
    pub fn derive(
        role: Role,
        suite: IkeSuite,
        old_sk_d: Option<&[u8]>,
        shared: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Crypto, Error> {
        Self::derive_with(role, suite, old_sk_d, shared, ni, nr, &[], spi_i, spi_r)
    }

    /// [`Crypto::derive`] for a rekey with additional key exchanges (RFC 9370 2.2.4):
    /// `SKEYSEED = prf(SK_d (old), SK(0) | Ni | Nr | SK(1) | ... | SK(n))`, `add` being
    /// SK(1) | ... | SK(n) (strongSwan's order too).
    #[allow(clippy::too_many_arguments)]
    pub fn derive_with(
        role: Role,
        suite: IkeSuite,
        old_sk_d: Option<&[u8]>,
        shared: &[u8],
        ni: &[u8],
        nr: &[u8],
        add: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Crypto, Error> {
        let seed = match old_sk_d {
            None => skeyseed(suite.prf, ni, nr, shared),
            Some(d) => crate::keys::rekey_skeyseed(suite.prf, d, shared, ni, nr, add),
        };
        let keys = derive_ike_keys(&suite, &seed, ni, nr, spi_i, spi_r);
        let (out_e, out_a, in_e, in_a) = if role == Role::Initiator {
            (&keys.sk_ei, &keys.sk_ai, &keys.sk_er, &keys.sk_ar)
        } else {
            (&keys.sk_er, &keys.sk_ar, &keys.sk_ei, &keys.sk_ai)
        };
        Ok(Crypto {
            sk_out: SkCipher::new(suite.encr, suite.integ, out_e, out_a)?,
            sk_in: SkCipher::new(suite.encr, suite.integ, in_e, in_a)?,
            keys,
            suite,
        })
    }
}

/// What IKE_AUTH signs and the first child's KEYMAT needs (2.15, 2.17), kept from
/// IKE_SA_INIT until IKE_AUTH is done.
pub(crate) struct Handshake {
    pub ni: Vec<u8>,
    pub nr: Vec<u8>,
    /// IKE_SA_INIT request and response as sent/received.
    pub init_req: Vec<u8>,
    pub init_resp: Vec<u8>,
    /// The hash algorithms the peer announced for signatures (RFC 7427 4).
    pub peer_hashes: Option<Vec<u16>>,
    /// The peer sent a CERTREQ in IKE_SA_INIT (3.7).
    pub peer_certreq: bool,
    /// IKE_INTERMEDIATE (RFC 9242): the IntAuth chain, the additional key exchanges run.
    pub int: crate::task::ike_intermediate::Intermediate,
}

/// Where an IKE SA is, with the data that state needs.
pub(crate) enum State {
    /// Initiator: IKE_SA_INIT sent (its task holds the key exchange and our nonce).
    InitSent,
    /// Responder: IKE_SA_INIT answered, waiting for IKE_AUTH (half-open).
    HalfOpen { hs: Handshake, crypto: Crypto },
    /// Initiator: IKE_AUTH sent.
    AuthSent { hs: Handshake, crypto: Crypto },
    /// Both sides authenticated.
    Established { crypto: Crypto, remote_id: Identity },
    /// Replaced by a rekeyed IKE SA (2.18): only answers the Delete of itself.
    Rekeyed { crypto: Crypto, remote_id: Identity },
    /// Gone; removed by the endpoint.
    Dead,
}

impl State {
    pub fn crypto(&self) -> Option<&Crypto> {
        match self {
            State::HalfOpen { crypto, .. }
            | State::AuthSent { crypto, .. }
            | State::Established { crypto, .. }
            | State::Rekeyed { crypto, .. } => Some(crypto),
            State::InitSent | State::Dead => None,
        }
    }
    pub fn crypto_mut(&mut self) -> Option<&mut Crypto> {
        match self {
            State::HalfOpen { crypto, .. }
            | State::AuthSent { crypto, .. }
            | State::Established { crypto, .. }
            | State::Rekeyed { crypto, .. } => Some(crypto),
            State::InitSent | State::Dead => None,
        }
    }
    pub fn is_established(&self) -> bool {
        matches!(self, State::Established { .. })
    }
    pub fn is_dead(&self) -> bool {
        matches!(self, State::Dead)
    }
    pub fn remote_id(&self) -> Option<&Identity> {
        match self {
            State::Established { remote_id, .. } | State::Rekeyed { remote_id, .. } => Some(remote_id),
            _ => None,
        }
    }
}

/// The peer's half of the message-ID window (2.3): the ID of its next request, and our
/// response to its last one, kept for a retransmission of that request (2.1).
#[derive(Default)]
pub(crate) struct PeerWindow {
    pub expected: u32,
    pub kept: Option<(u32, Vec<u8>)>,
}

/// Where the peer is and how IKE reaches it (2.23).
pub(crate) struct Path {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// IKE runs on the NAT-T ports (with the non-ESP marker).
    pub natt: bool,
    pub nat: NatState,
}

/// Lifetimes of a child SA pair, as deadlines on the endpoint's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChildTimers {
    /// Start a rekey (ours) at this time.
    pub rekey_at: Option<Duration>,
    /// Delete it at this time if it was not rekeyed (hard lifetime).
    pub expire_at: Option<Duration>,
}

/// Where a child SA pair is in its life (2.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChildState {
    /// Installed and carrying traffic.
    Installed,
    /// A rekey of ours is outstanding; `peer`: the peer rekeyed it too meanwhile (2.8.1).
    Rekeying {
        peer: Option<crate::task::child_rekey::PeerRekey>,
    },
    /// Replaced by a new pair; kept for packets still in flight until its Delete (ours
    /// when `we_delete`, else the peer's; ours anyway at `until`).
    Rekeyed { until: Duration, we_delete: bool },
    /// Our Delete of it is outstanding.
    Deleting,
}

/// A child SA pair of this IKE SA.
pub(crate) struct Child {
    pub info: ChildSaInfo,
    pub state: ChildState,
    pub timers: ChildTimers,
    /// Index of its [`crate::config::ChildConfig`] in the connection.
    pub cfg: usize,
}

impl Child {
    pub fn spi_in(&self) -> u32 {
        self.info.spi_in
    }
}

/// Effects an IKE SA has on the endpoint beyond itself, drained after every call (quinn's
/// `EndpointEvent`).
pub(crate) enum EndpointEvent {
    /// The peer sent INITIAL_CONTACT (2.4): its other IKE SAs with us are gone.
    InitialContact,
    /// This SA was rekeyed (2.18): the new one takes over the children.
    Rekeyed(alloc::boxed::Box<IkeSa>),
    /// This SA is gone, for this reason (the connection's dpd_action or close_action).
    Down(DownReason),
}

/// The endpoint's IKE SAs as a request that can make one sees them (the caps of
/// [`crate::limits`] that an IKE SA rekey must not bypass), counted by the endpoint before
/// it hands the SA an IKE_AUTH or CREATE_CHILD_SA request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Census {
    /// IKE SAs of the endpoint, this one and half-open ones included.
    pub ike_sas: usize,
    /// The other live IKE SAs whose peer proved this SA's identity (replaced ones waiting
    /// for their Delete included).
    pub same_identity: usize,
}

/// What the exchange handlers need besides the SA.
pub(crate) struct Cx<'a> {
    pub cfg: &'a Config,
    pub out: &'a mut Output,
    pub now: Duration,
    /// The peer addresses of the endpoint's other established IKE SAs, for a request that
    /// can make a child ([`crate::child::choose`]); empty elsewhere.
    pub others: &'a [core::net::IpAddr],
    /// Wall-clock time (seconds since 1970) if the caller gave it, for certificate validity.
    pub unix: Option<u64>,
    /// For a received request: how many of the endpoint's other live IKE SAs have a peer
    /// that proved this identity (the cap per identity at IKE_AUTH); None elsewhere.
    pub peers_of: Option<&'a dyn Fn(&Identity) -> usize>,
}

impl<'a> Cx<'a> {
    /// The context at `now` for all but a received request (no other SAs' peers, no count
    /// per identity): `unix` is the wall clock if the caller gave it.
    pub fn new(cfg: &'a Config, out: &'a mut Output, now: Duration, unix: Option<u64>) -> Self {
        Cx {
            cfg,
            out,
            now,
            others: &[],
            unix,
            peers_of: None,
        }
    }
}

/// Transmits and events waiting for the caller.
#[derive(Default)]
pub(crate) struct Output {
    pub transmits: VecDeque<Transmit>,
    pub events: VecDeque<Event>,
    pub dropped_output: u64,
    /// The pools' leases: endpoint state kept here so every task context reaches it
    /// ([`crate::task::config_payload`]).
    pub leases: crate::pool::Leases,
}

impl Output {
    pub fn event(&mut self, e: Event) {
        if self.events.len() >= MAX_QUEUED_OUTPUT {
            self.events.pop_front();
            self.dropped_output += 1;
        }
        self.events.push_back(e);
    }
    /// The IKE SA filed under `spi` is gone: its leases go offline, reported.
    pub fn release_leases(&mut self, spi: u64) {
        for r in self.leases.release(spi) {
            self.event(Event::LeaseReleased {
                pool: r.pool,
                identity: r.identity,
                address: r.address,
            });
        }
    }
    pub fn transmit(&mut self, t: Transmit) {
        if self.transmits.len() >= MAX_QUEUED_OUTPUT {
            self.transmits.pop_front();
            self.dropped_output += 1;
        }
        self.transmits.push_back(t);
    }
}

pub(crate) struct IkeSa {
    pub conn: usize,
    pub role: Role,
    pub spi_i: u64,
    pub spi_r: u64,
    pub path: Path,
    pub state: State,
    /// Our requests: the one outstanding and the ones waiting for the window.
    pub tasks: TaskManager,
    /// The peer's requests.
    pub window: PeerWindow,
    pub children: Vec<Child>,
    pub last_heard: Duration,
    pub created: Duration,
    /// When we rekey this IKE SA (None: never).
    pub rekey_at: Option<Duration>,
    pub effects: Vec<EndpointEvent>,
    pub stats: crate::status::IkeSaStats,
    /// IKE fragmentation (RFC 7383 2.3): the connection's `fragment_size` when both sides
    /// announced support in IKE_SA_INIT; None: fragments are neither sent nor accepted.
    pub fragmentation: Option<u16>,
    /// The peer's fragmented requests \[0\] and responses \[1\] being reassembled (2.6).
    pub reassembly: [crate::fragment::Reassembly; 2],
    /// Responder: a CREATE_CHILD_SA waiting for its IKE_FOLLOWUP_KE (RFC 9370 2.2.4).
    pub followup: Option<crate::task::followup_ke::Pending>,
    /// The endpoint's SAs as of the request being handled ([`Census`]).
    pub census: Census,
    /// Responder: the EAP conversation of IKE_AUTH (RFC 7296 2.16) while it runs.
    pub eap: Option<alloc::boxed::Box<crate::task::ike_auth_eap::EapState>>,
    /// Virtual addresses (RFC 7296 3.15): a responder's leases to the peer, an
    /// initiator's own from the CFG_REPLY ([`crate::task::config_payload`]).
    pub vips: Vec<core::net::IpAddr>,
}

impl IkeSa {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        conn: usize,
        role: Role,
        spi_i: u64,
        spi_r: u64,
        local: SocketAddr,
        remote: SocketAddr,
        state: State,
        now: Duration,
    ) -> Self {
        IkeSa {
            conn,
            role,
            spi_i,
            spi_r,
            path: Path {
                local,
                remote,
                natt: false,
                nat: NatState::default(),
            },
            state,
            tasks: TaskManager::default(),
            window: PeerWindow::default(),
            children: Vec::new(),
            last_heard: now,
            created: now,
            rekey_at: None,
            effects: Vec::new(),
            stats: Default::default(),
            fragmentation: None,
            reassembly: Default::default(),
            followup: None,
            census: Census::default(),
            eap: None,
            vips: Vec::new(),
        }
    }

    /// Our SPI: the key the endpoint files this SA under.
    pub fn our_spi(&self) -> u64 {
        match self.role {
            Role::Initiator => self.spi_i,
            Role::Responder => self.spi_r,
        }
    }

    pub fn conn<'c>(&self, cfg: &'c Config) -> &'c Connection {
        &cfg.connections[self.conn]
    }

    pub fn conn_name(&self, cfg: &Config) -> String {
        self.conn(cfg).name.clone()
    }

    pub fn is_initiator(&self) -> bool {
        self.role == Role::Initiator
    }

    pub fn header(&self, exchange: ExchangeType, response: bool, id: u32) -> HeaderRepr {
        HeaderRepr {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            next_payload: 0,
            exchange,
            initiator: self.is_initiator(),
            response,
            message_id: id,
            length: 0,
        }
    }

    /// Queues a message to the peer, with the non-ESP marker on the NAT-T ports: one
    /// datagram, or one per fragment of a fragmented message (a train, [`crate::fragment`]).
    pub fn send(&self, cx: &mut Cx, bytes: &[u8]) {
        for d in crate::fragment::datagrams(bytes) {
            let mut payload = Vec::with_capacity(d.len() + 4);
            if self.path.natt {
                payload.extend_from_slice(&NON_ESP_MARKER);
            }
            payload.extend_from_slice(d);
            cx.out.transmit(Transmit {
                local: self.path.local,
                remote: self.path.remote,
                payload,
            });
        }
    }

    /// Builds an encrypted message; when fragmentation was negotiated and the message
    /// would not fit the fragment size, its fragments (RFC 7383 2.5.3) as a train. (A
    /// message that would need more than [`crate::limits::MAX_FRAGMENTS`] goes whole.)
    pub fn seal(
        &mut self,
        exchange: ExchangeType,
        response: bool,
        id: u32,
        payloads: &[Payload],
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, Error> {
        let h = self.header(exchange, response, id);
        let (first, inner) = emit_chain(payloads)?;
        let budget = self
            .fragmentation
            .map(|size| crate::fragment::message_budget(size, self.path.remote, self.path.natt));
        let c = self.state.crypto_mut().ok_or(Error::BadEncryptedPayload)?;
        if let Some(budget) = budget.filter(|&b| c.sk_out.sealed_len(inner.len()) > b) {
            if let Ok(train) = crate::fragment::seal_fragments(&mut c.sk_out, &h, first, &inner, budget, rng) {
                self.stats.fragments_sent += crate::fragment::datagrams(&train).count() as u64;
                return Ok(train);
            }
        }
        c.sk_out.seal(&h, first, &inner, rng)
    }

    /// Authenticates and decrypts a received encrypted message (3.14), or, for an
    /// Encrypted Fragment payload (RFC 7383 2.6), authenticates the fragment, keeps it and
    /// returns the message once its last fragment came (`Ok(None)` until then). `Err` here
    /// means the datagram is not used and gets no answer.
    pub fn open(&mut self, cx: &mut Cx, raw: &[u8], msg: &Message) -> Result<Option<Opened>, Dropped> {
        if msg.header.next_payload != crate::payload::kind::SKF {
            return self.decrypt(raw, msg).map(Some).map_err(Dropped::Malformed);
        }
        let r = self.open_fragment(cx.now, raw, msg);
        match &r {
            Ok(Some(_)) => self.stats.fragmented_messages += 1,
            Ok(None) => {}
            Err(_) => self.stats.fragments_dropped += 1,
        }
        r.map_err(Dropped::Fragment)
    }

    fn open_fragment(
        &mut self,
        now: Duration,
        raw: &[u8],
        msg: &Message,
    ) -> Result<Option<Opened>, crate::fragment::FragmentError> {
        use crate::fragment::{FragmentError, FragmentRepr};
        let h = &msg.header;
        if self.fragmentation.is_none() {
            return Err(FragmentError::NotNegotiated);
        }
        if h.exchange == ExchangeType::IkeSaInit {
            return Err(FragmentError::InitExchange);
        }
        let f = FragmentRepr::parse(raw, h)?;
        let exchange = h.exchange.to_u8();
        let buf = &mut self.reassembly[usize::from(h.response)];
        buf.expire(now);
        buf.check(h.message_id, exchange, &f)?;
        // Before the peer is authenticated the keys of an IKE_SA_INIT anyone can make are
        // enough to send fragments: a half-open SA holds at most MAX_PREAUTH_MESSAGE_LEN
        // (issue #39: 65,000 octets held 30 s by each of 1,024 half-open SAs).
        let limit = if self.state.is_established() || matches!(self.state, State::Rekeyed { .. }) {
            crate::limits::MAX_MESSAGE_LEN
        } else {
            crate::limits::MAX_PREAUTH_MESSAGE_LEN
        };
        // A fragment whose ciphertext alone (less the most an IV, padding and ICV take) is
        // over the bound is refused before it is decrypted.
        const MOST_OVERHEAD: usize = 16 + 256 + 32;
        if raw.len().saturating_sub(f.iv_at) > limit + MOST_OVERHEAD {
            return Err(FragmentError::TooLong);
        }
        let c = self.state.crypto().ok_or(FragmentError::NotNegotiated)?;
        let plain = c.sk_in.open_at(raw, f.iv_at).map_err(|e| match e {
            Error::BadIntegrity => FragmentError::BadIntegrity,
            e => FragmentError::Malformed(e),
        })?;
        self.stats.fragments_received += 1;
        let done =
            self.reassembly[usize::from(h.response)].add_within(now, h.message_id, exchange, &f, plain, limit)?;
        Ok(done.map(|(first, inner)| Opened {
            inner,
            first,
            bad: None,
        }))
    }

    /// Checks an encrypted message's integrity and decrypts it (3.14): `Err` here means it
    /// is not from the peer, and is dropped without an answer. Bad padding after a valid
    /// ICV is the peer's malformed message: [`Opened::payloads`] says so.
    pub fn decrypt(&self, raw: &[u8], msg: &Message) -> Result<Opened, Error> {
        let (off, first) = msg.chain.sk.ok_or(Error::MissingPayload("Encrypted"))?;
        if !msg.chain.payloads.is_empty() {
            return Err(Error::BadEncryptedPayload);
        }
        let c = self.state.crypto().ok_or(Error::BadEncryptedPayload)?;
        match c.sk_in.open(raw, off) {
            Ok(inner) => Ok(Opened {
                inner,
                first,
                bad: None,
            }),
            // The padding is read only after the ICV (or the AEAD tag) verified: the message
            // is the peer's, malformed, and a request gets INVALID_SYNTAX (2.21.3, 3.10.1).
            Err(Error::BadPadding) => Ok(Opened {
                inner: Default::default(),
                first,
                bad: Some(Error::BadPadding),
            }),
            Err(e) => Err(e),
        }
    }

    /// Sends a response to the peer's request `id` and keeps it for a retransmission of
    /// that request (2.1).
    pub fn respond(
        &mut self,
        cx: &mut Cx,
        exchange: ExchangeType,
        id: u32,
        payloads: &[Payload],
        rng: &mut impl CryptoRngCore,
    ) {
        match self.seal(exchange, true, id, payloads, rng) {
            Ok(bytes) => {
                self.send(cx, &bytes);
                self.window.kept = Some((id, bytes));
            }
            Err(_) => self.window.kept = None,
        }
    }

    /// Marks the SA dead, reporting its children and itself down.
    pub fn kill(&mut self, cx: &mut Cx, reason: DownReason) {
        if self.state.is_dead() {
            return;
        }
        let name = self.conn_name(cx.cfg);
        let child_reason = if reason == DownReason::Local || reason == DownReason::Peer {
            reason
        } else {
            DownReason::IkeSaDown
        };
        for c in self.children.drain(..) {
            cx.out.event(Event::ChildDown {
                conn: name.clone(),
                child: c.info.child.clone(),
                spi_in: c.info.spi_in,
                spi_out: c.info.spi_out,
                reason: child_reason,
            });
        }
        let half_open = matches!(self.state, State::HalfOpen { .. });
        // A stalled EAP conversation is announced (it got past IKE_SA_INIT; RFC 7296 2.16).
        let announce = !(half_open && reason == DownReason::HalfOpenTimeout && self.eap.is_none());
        if announce {
            cx.out.event(Event::IkeDown {
                conn: name,
                spi_i: self.spi_i,
                spi_r: self.spi_r,
                remote: self.path.remote,
                reason,
            });
        }
        self.state = State::Dead;
        self.tasks.clear();
        self.effects.push(EndpointEvent::Down(reason));
    }

    /// Reports a child down and forgets it.
    pub fn child_down(&mut self, cx: &mut Cx, spi_in: u32, reason: DownReason) {
        let name = self.conn_name(cx.cfg);
        if let Some(i) = self.children.iter().position(|c| c.spi_in() == spi_in) {
            let c = self.children.remove(i);
            cx.out.event(Event::ChildDown {
                conn: name,
                child: c.info.child.clone(),
                spi_in: c.info.spi_in,
                spi_out: c.info.spi_out,
                reason,
            });
        }
    }

    /// The UDP encapsulation of child SAs: when a NAT is detected or encapsulation forced,
    /// on the NAT-T ports (RFC 3948): the IKE path's once IKE moved there (behind a NAT the
    /// peer's port is the NAT's mapping), else ours and the peer's configured NAT-T port —
    /// never the IKE port, whose socket drops ESP.
    pub fn child_encap(&self, cfg: &Config) -> Option<UdpEncap> {
        let conn = self.conn(cfg);
        let (local_port, remote_port) = if self.path.natt {
            (self.path.local.port(), self.path.remote.port())
        } else {
            (cfg.natt_port, conn.remote_natt_port)
        };
        (self.path.nat.peer_behind_nat || self.path.nat.local_behind_nat || conn.encap).then_some(UdpEncap {
            local_port,
            remote_port,
        })
    }

    /// Records an authenticated message's addresses (2.23: only those move the peer).
    pub fn authenticated_from(&mut self, cx: &mut Cx, local: SocketAddr, remote: SocketAddr) {
        self.last_heard = cx.now;
        self.path.local = local;
        if local.port() == cx.cfg.natt_port {
            self.path.natt = true;
        }
        if remote != self.path.remote {
            let old = self.path.remote;
            self.path.remote = remote;
            if self.state.is_established() {
                cx.out.event(Event::PeerEndpointChanged {
                    conn: self.conn_name(cx.cfg),
                    spi_i: self.spi_i,
                    old,
                    new: remote,
                });
                for c in &mut self.children {
                    c.info.remote = remote;
                    if let Some(e) = c.info.encap.as_mut() {
                        e.remote_port = remote.port();
                    }
                }
            }
        }
    }

    /// Timers: retransmission, half-open expiry, liveness checks, rekeying and expiry.
    pub fn handle_timeout(&mut self, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
        if self.state.is_dead() {
            return;
        }
        for r in &mut self.reassembly {
            r.expire(cx.now);
        }
        crate::task::followup_ke::expire(self, cx.now);
        // A liveness check unanswered for dpd_timeout: the peer is gone (2.4).
        let dpd_timeout = self.conn(cx.cfg).dpd_timeout;
        if let (Some(t), Some(a)) = (dpd_timeout, self.tasks.active.as_ref()) {
            if matches!(a.task, crate::task::Task::IkeDpd) && cx.now >= a.started + t {
                self.kill(cx, DownReason::Timeout);
                return;
            }
        }
        match self.tasks.handle_timeout(cx.now, &cx.cfg.retransmit) {
            Ok(Some(bytes)) => {
                self.stats.retransmits += 1;
                self.send(cx, &bytes)
            }
            Ok(None) => {}
            Err(()) => {
                self.kill(cx, DownReason::Timeout);
                return;
            }
        }
        if matches!(self.state, State::HalfOpen { .. }) && cx.now >= self.created + cx.cfg.half_open_timeout {
            self.kill(cx, DownReason::HalfOpenTimeout);
            return;
        }
        crate::task::lifetimes::handle_timeout(self, cx, rng);
    }

    pub fn poll_timeout(&self, cfg: &Config) -> Option<Duration> {
        if self.state.is_dead() {
            return None;
        }
        let mut t: Option<Duration> = self.tasks.deadline();
        if let Some(d) = self.tasks.dpd_deadline(self.conn(cfg).dpd_timeout) {
            t = Some(t.map_or(d, |x| x.min(d)));
        }
        let mut consider = |d: Duration| t = Some(t.map_or(d, |x| x.min(d)));
        if matches!(self.state, State::HalfOpen { .. }) {
            consider(self.created + cfg.half_open_timeout);
        }
        if let Some(d) = crate::task::lifetimes::deadline(self, cfg) {
            consider(d);
        }
        for d in self.reassembly.iter().filter_map(|r| r.deadline()) {
            consider(d);
        }
        if let Some(p) = &self.followup {
            consider(p.deadline());
        }
        t
    }

    /// A child SA pair's [`ChildSaInfo`] from its negotiated parameters and keys.
    pub fn child_info(&self, cfg: &Config, a: &crate::child::Agreed, keys: &crate::keys::ChildKeys) -> ChildSaInfo {
        let c = &self.conn(cfg).children[a.cfg];
        let (encr_out, integ_out, encr_in, integ_in) = ChildSaInfo::new_keys(a.initiator, keys);
        ChildSaInfo {
            conn: self.conn_name(cfg),
            child: c.name.clone(),
            protocol: 50,
            spi_in: a.spi_in,
            spi_out: a.spi_out,
            suite: a.suite,
            mode: a.mode,
            local_ts: a.local_ts.clone(),
            remote_ts: a.remote_ts.clone(),
            lifetimes: c.lifetimes,
            encap: self.child_encap(cfg),
            local: self.path.local,
            remote: self.path.remote,
            initiator: a.initiator,
            rekeys: None,
            encr_out,
            integ_out,
            encr_in,
            integ_in,
        }
    }
}

impl IkeSa {
    /// What [`crate::Endpoint::status`] says of it.
    pub fn status(&self, cfg: &Config, now: Duration) -> crate::status::IkeSaStatus {
        let state = match self.state {
            State::InitSent | State::AuthSent { .. } => "connecting",
            State::HalfOpen { .. } => "half-open",
            State::Established { .. } => "established",
            State::Rekeyed { .. } => "rekeyed",
            State::Dead => "dead",
        };
        let left = |t: Option<Duration>| t.map(|t| t.saturating_sub(now));
        crate::status::IkeSaStatus {
            conn: self.conn_name(cfg),
            state,
            role: self.role,
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            local: self.path.local,
            remote: self.path.remote,
            remote_id: self.state.remote_id().map(|i| alloc::format!("{i}")),
            proposal: self.state.crypto().map(|c| c.suite.proposal_string()),
            nat: self.child_encap(cfg).is_some(),
            next_request_id: self.tasks.next_id,
            expected_peer_id: self.window.expected,
            age: now.saturating_sub(self.created),
            rekey_in: left(self.rekey_at),
            stats: self.stats,
            virtual_ips: self.vips.clone(),
            children: self
                .children
                .iter()
                .map(|c| crate::status::ChildSaStatus {
                    child: c.info.child.clone(),
                    state: match c.state {
                        ChildState::Installed => "installed",
                        ChildState::Rekeying { .. } => "rekeying",
                        ChildState::Rekeyed { .. } => "rekeyed",
                        ChildState::Deleting => "deleting",
                    },
                    spi_in: c.info.spi_in,
                    spi_out: c.info.spi_out,
                    proposal: c.info.suite.proposal_string(),
                    rekeys: c.info.rekeys,
                    rekey_in: left(c.timers.rekey_at),
                    expires_in: left(c.timers.expire_at),
                })
                .collect(),
        }
    }
}

/// The decrypted inner payload chain of an authenticated message.
pub(crate) struct Opened {
    inner: zeroize::Zeroizing<Vec<u8>>,
    first: u8,
    /// Authenticated, but its plaintext is malformed (bad padding): no payloads.
    bad: Option<Error>,
}

impl Opened {
    /// The type of the first inner payload.
    pub fn first(&self) -> u8 {
        self.first
    }
    /// The inner payloads' bytes (no padding).
    pub fn inner(&self) -> &[u8] {
        &self.inner
    }

    /// The inner payloads; `Err`: authenticated but malformed (answered with INVALID_SYNTAX,
    /// 2.21.3, or UNSUPPORTED_CRITICAL_PAYLOAD, 2.5).
    pub fn payloads(&self) -> Result<Vec<Payload>, Error> {
        if let Some(e) = self.bad {
            return Err(e);
        }
        let chain = parse_chain(&self.inner, self.first)?;
        if chain.sk.is_some() {
            return Err(Error::BadEncryptedPayload);
        }
        Ok(chain.payloads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Connection, Psk};

    /// Forced encapsulation with a peer still on port 500 (it never moved to the NAT-T
    /// ports): the child's ESP in UDP goes between the NAT-T ports, never to IKE's port,
    /// whose socket drops ESP (#31 defect 7).
    #[test]
    fn child_encapsulation_is_on_the_natt_ports() {
        let a = "10.0.0.1".parse().unwrap();
        let b = "10.0.0.2".parse().unwrap();
        let mut c = Connection::new(
            "c",
            a,
            Some(b),
            crate::Identity::from_str_config("10.0.0.1").unwrap(),
            None,
            Psk::new(b"k"),
            "aes128gcm16-prfsha256-x25519",
        )
        .unwrap();
        c.encap = true;
        let cfg = Config::new(alloc::vec![c]);
        let mut sa = IkeSa::new(
            0,
            crate::event::Role::Responder,
            1,
            2,
            SocketAddr::new(a, 500),
            SocketAddr::new(b, 500),
            State::InitSent,
            Duration::ZERO,
        );
        let natt = Some(UdpEncap {
            local_port: 4500,
            remote_port: 4500,
        });
        assert_eq!(sa.child_encap(&cfg), natt);
        // Once IKE moved (behind a NAT: to the NAT's port), the path's ports.
        sa.path.natt = true;
        sa.path.local = SocketAddr::new(a, 4500);
        sa.path.remote = SocketAddr::new(b, 34500);
        assert_eq!(
            sa.child_encap(&cfg),
            Some(UdpEncap {
                local_port: 4500,
                remote_port: 34500
            })
        );
        let mut cfg = cfg;
        cfg.connections[0].encap = false;
        assert_eq!(sa.child_encap(&cfg), None, "no NAT, not forced: plain ESP");
    }
}
