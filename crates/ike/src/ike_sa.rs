//! One IKE SA: its state, keys, message IDs (window of 1, RFC 7296 2.3), the outstanding
//! request with its retransmission timer (2.1, 2.4), the queue of requests waiting for the
//! window, the last response kept for retransmitted requests (2.1), and its child SAs.
//! The exchanges are handled in [`crate::exchange`], one module per exchange type.
use crate::alg::{DhGroup, IkeSuite};
use crate::config::{Config, Connection};
use crate::dh::KeyExchange;
use crate::error::Error;
use crate::event::{ChildSaInfo, DownReason, Event, Role, Transmit, UdpEncap};
use crate::header::{ExchangeType, HeaderRepr};
use crate::id::Identity;
use crate::keys::{ChildKeys, IkeKeys};
use crate::limits::{MAX_QUEUED_OUTPUT, MAX_QUEUED_REQUESTS};
use crate::message::{emit_chain, parse_chain, Message, Payload};
use crate::nat::NatState;
use crate::retransmit::{Expiry, Retransmitter};
use crate::sk::SkCipher;
use crate::ts::TrafficSelector;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// The non-ESP marker that precedes IKE on the NAT-T port (RFC 3948 2.2).
pub const NON_ESP_MARKER: [u8; 4] = [0; 4];

/// Where an IKE SA is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Initiator: IKE_SA_INIT sent.
    InitSent,
    /// Responder: IKE_SA_INIT answered, waiting for IKE_AUTH.
    InitDone,
    /// Initiator: IKE_AUTH sent.
    AuthSent,
    /// Both sides authenticated.
    Established,
    /// Gone; removed by the endpoint.
    Dead,
}

/// A request of ours, waiting in the queue or outstanding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// IKE_SA_INIT.
    Init,
    /// IKE_AUTH.
    Auth,
    /// INFORMATIONAL with a Delete of the IKE SA.
    DeleteIke,
    /// INFORMATIONAL with a Delete of a child (our inbound SPI).
    DeleteChild(u32),
    /// Empty INFORMATIONAL: liveness check.
    Dpd,
}

impl Request {
    fn exchange(&self) -> ExchangeType {
        match self {
            Request::Init => ExchangeType::IkeSaInit,
            Request::Auth => ExchangeType::IkeAuth,
            _ => ExchangeType::Informational,
        }
    }
}

pub(crate) struct Outstanding {
    pub id: u32,
    pub req: Request,
    pub bytes: Vec<u8>,
    pub timer: Retransmitter,
}

/// The child the initiator asks for in IKE_AUTH.
pub(crate) struct PendingChild {
    pub cfg: usize,
    pub spi_in: u32,
    pub ts_i: Vec<TrafficSelector>,
    pub ts_r: Vec<TrafficSelector>,
}

/// An established child SA pair.
pub(crate) struct Child {
    pub info: ChildSaInfo,
}

impl Child {
    pub fn spi_in(&self) -> u32 {
        self.info.spi_in
    }
}

/// What the exchange handlers need besides the SA.
pub(crate) struct Cx<'a> {
    pub cfg: &'a Config,
    pub out: &'a mut Output,
    pub now: Duration,
}

/// Transmits and events waiting for the caller.
#[derive(Default)]
pub(crate) struct Output {
    pub transmits: VecDeque<Transmit>,
    pub events: VecDeque<Event>,
    pub dropped_output: u64,
}

impl Output {
    pub fn event(&mut self, e: Event) {
        if self.events.len() >= MAX_QUEUED_OUTPUT {
            self.events.pop_front();
            self.dropped_output += 1;
        }
        self.events.push_back(e);
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
    pub state: State,
    pub spi_i: u64,
    pub spi_r: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// IKE runs on the NAT-T ports (with the non-ESP marker).
    pub natt: bool,
    pub nat: NatState,
    pub dh: DhGroup,
    pub ke_retries: u8,
    pub suite: Option<IkeSuite>,
    pub kex: Option<KeyExchange>,
    pub ni: Vec<u8>,
    pub nr: Vec<u8>,
    /// IKE_SA_INIT request and response as sent/received (signed by AUTH, 2.15).
    pub init_req: Vec<u8>,
    pub init_resp: Vec<u8>,
    pub keys: Option<IkeKeys>,
    pub sk_out: Option<SkCipher>,
    pub sk_in: Option<SkCipher>,
    /// Message ID of our next request.
    pub next_id: u32,
    /// Message ID of the peer's next request.
    pub peer_next_id: u32,
    pub outstanding: Option<Outstanding>,
    pub last_response: Option<(u32, Vec<u8>)>,
    pub queue: VecDeque<Request>,
    pub children: Vec<Child>,
    pub pending: Option<PendingChild>,
    pub remote_id: Option<Identity>,
    pub last_heard: Duration,
    pub created: Duration,
    /// Set when the peer sent INITIAL_CONTACT: the endpoint drops its other SAs (2.4).
    pub initial_contact: bool,
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
        dh: DhGroup,
        now: Duration,
    ) -> Self {
        IkeSa {
            conn,
            role,
            state: if role == Role::Initiator {
                State::InitSent
            } else {
                State::InitDone
            },
            spi_i,
            spi_r,
            local,
            remote,
            natt: false,
            nat: NatState::default(),
            dh,
            ke_retries: 0,
            suite: None,
            kex: None,
            ni: Vec::new(),
            nr: Vec::new(),
            init_req: Vec::new(),
            init_resp: Vec::new(),
            keys: None,
            sk_out: None,
            sk_in: None,
            next_id: 0,
            peer_next_id: 0,
            outstanding: None,
            last_response: None,
            queue: VecDeque::new(),
            children: Vec::new(),
            pending: None,
            remote_id: None,
            last_heard: now,
            created: now,
            initial_contact: false,
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

    /// Queues a datagram to the peer, with the non-ESP marker on the NAT-T ports.
    pub fn send(&self, cx: &mut Cx, bytes: &[u8]) {
        let mut payload = Vec::with_capacity(bytes.len() + 4);
        if self.natt {
            payload.extend_from_slice(&NON_ESP_MARKER);
        }
        payload.extend_from_slice(bytes);
        cx.out.transmit(Transmit {
            local: self.local,
            remote: self.remote,
            payload,
        });
    }

    /// Builds an encrypted message.
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
        let sk = self.sk_out.as_mut().ok_or(Error::BadEncryptedPayload)?;
        sk.seal(&h, first, &inner, rng)
    }

    /// Opens an encrypted message: integrity first, then the inner chain.
    pub fn open(&self, raw: &[u8], msg: &Message) -> Result<Vec<Payload>, Error> {
        let (off, first) = msg.chain.sk.ok_or(Error::MissingPayload("Encrypted"))?;
        if !msg.chain.payloads.is_empty() {
            return Err(Error::BadEncryptedPayload);
        }
        let sk = self.sk_in.as_ref().ok_or(Error::BadEncryptedPayload)?;
        let inner = sk.open(raw, off)?;
        let chain = parse_chain(&inner, first)?;
        if chain.sk.is_some() {
            return Err(Error::BadEncryptedPayload);
        }
        Ok(chain.payloads)
    }

    /// Sends a response and keeps it for retransmitted requests.
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
                self.last_response = Some((id, bytes));
            }
            Err(_) => self.last_response = None,
        }
    }

    /// Sends (or queues, if a request is outstanding) one of our requests.
    pub fn request(&mut self, cx: &mut Cx, req: Request, rng: &mut impl CryptoRngCore) {
        if self.outstanding.is_some()
            || self.state != State::Established && matches!(req, Request::DeleteChild(_) | Request::Dpd)
        {
            if self.queue.len() < MAX_QUEUED_REQUESTS && !self.queue.contains(&req) {
                self.queue.push_back(req);
            }
            return;
        }
        let id = self.next_id;
        let bytes = match self.build_request(cx, &req, id, rng) {
            Ok(b) => b,
            Err(_) => return,
        };
        self.send(cx, &bytes);
        self.outstanding = Some(Outstanding {
            id,
            req,
            bytes,
            timer: Retransmitter::new(cx.now, &cx.cfg.retransmit),
        });
    }

    fn build_request(
        &mut self,
        cx: &mut Cx,
        req: &Request,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, Error> {
        match req {
            Request::Init => self.build_init_request(cx, rng),
            Request::Auth => self.build_auth_request(cx, rng),
            Request::DeleteIke => self.seal(
                req.exchange(),
                false,
                id,
                &[Payload::Delete(crate::delete::Delete::Ike)],
                rng,
            ),
            Request::DeleteChild(spi) => self.seal(
                req.exchange(),
                false,
                id,
                &[Payload::Delete(crate::delete::Delete::Esp(alloc::vec![*spi]))],
                rng,
            ),
            Request::Dpd => self.seal(req.exchange(), false, id, &[], rng),
        }
    }

    /// After a response: the window is free again; send the next queued request.
    pub fn complete_request(&mut self, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
        if let Some(o) = self.outstanding.take() {
            self.next_id = o.id.wrapping_add(1);
        }
        if self.state == State::Dead {
            return;
        }
        if let Some(next) = self.queue.pop_front() {
            self.request(cx, next, rng);
        }
    }

    /// Marks the SA dead, reporting its children and itself down.
    pub fn kill(&mut self, cx: &mut Cx, reason: DownReason) {
        if self.state == State::Dead {
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
        let announce =
            !(self.role == Role::Responder && self.state == State::InitDone && reason == DownReason::HalfOpenTimeout);
        if announce {
            cx.out.event(Event::IkeDown {
                conn: name,
                spi_i: self.spi_i,
                spi_r: self.spi_r,
                reason,
            });
        }
        self.state = State::Dead;
        self.outstanding = None;
        self.queue.clear();
        self.kex = None;
        self.keys = None;
        self.sk_in = None;
        self.sk_out = None;
    }

    /// The UDP encapsulation of child SAs: when a NAT is detected or encapsulation forced.
    pub fn child_encap(&self, cfg: &Config) -> Option<UdpEncap> {
        (self.nat.peer_behind_nat || self.nat.local_behind_nat || self.conn(cfg).encap).then_some(UdpEncap {
            local_port: self.local.port(),
            remote_port: self.remote.port(),
        })
    }

    /// Records an authenticated message's addresses (2.23: only those move the peer).
    pub fn authenticated_from(&mut self, cx: &mut Cx, local: SocketAddr, remote: SocketAddr) {
        self.last_heard = cx.now;
        self.local = local;
        if local.port() == cx.cfg.natt_port {
            self.natt = true;
        }
        if remote != self.remote {
            let old = self.remote;
            self.remote = remote;
            if self.state == State::Established {
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

    /// Timers: retransmission, half-open expiry, liveness checks.
    pub fn handle_timeout(&mut self, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
        if self.state == State::Dead {
            return;
        }
        if let Some(o) = self.outstanding.as_mut() {
            if cx.now >= o.timer.deadline() {
                match o.timer.expire(cx.now, &cx.cfg.retransmit) {
                    Expiry::Resend => {
                        let b = o.bytes.clone();
                        self.send(cx, &b);
                    }
                    Expiry::GiveUp => {
                        self.kill(cx, DownReason::Timeout);
                        return;
                    }
                }
            }
        }
        if self.state == State::InitDone && cx.now >= self.created + cx.cfg.half_open_timeout {
            self.kill(cx, DownReason::HalfOpenTimeout);
            return;
        }
        if let Some(d) = self.dpd_deadline(cx.cfg) {
            if cx.now >= d {
                self.last_heard = cx.now;
                self.request(cx, Request::Dpd, rng);
            }
        }
    }

    fn dpd_deadline(&self, cfg: &Config) -> Option<Duration> {
        let delay = self.conn(cfg).dpd_delay?;
        (self.state == State::Established && self.outstanding.is_none() && self.queue.is_empty())
            .then(|| self.last_heard + delay)
    }

    pub fn poll_timeout(&self, cfg: &Config) -> Option<Duration> {
        if self.state == State::Dead {
            return None;
        }
        let mut t: Option<Duration> = self.outstanding.as_ref().map(|o| o.timer.deadline());
        let mut consider = |d: Duration| t = Some(t.map_or(d, |x| x.min(d)));
        if self.state == State::InitDone {
            consider(self.created + cfg.half_open_timeout);
        }
        if let Some(d) = self.dpd_deadline(cfg) {
            consider(d);
        }
        t
    }

    /// Child SA keys as a [`ChildSaInfo`].
    #[allow(clippy::too_many_arguments)]
    pub fn child_info(
        &self,
        cfg: &Config,
        child_cfg: usize,
        spi_in: u32,
        spi_out: u32,
        suite: crate::alg::ChildSuite,
        keys: &ChildKeys,
        local_ts: Vec<TrafficSelector>,
        remote_ts: Vec<TrafficSelector>,
        mode: crate::config::Mode,
    ) -> ChildSaInfo {
        let c = &self.conn(cfg).children[child_cfg];
        let (encr_out, integ_out, encr_in, integ_in) = ChildSaInfo::new_keys(self.is_initiator(), keys);
        ChildSaInfo {
            conn: self.conn_name(cfg),
            child: c.name.clone(),
            protocol: 50,
            spi_in,
            spi_out,
            suite,
            mode,
            local_ts,
            remote_ts,
            lifetimes: c.lifetimes,
            encap: self.child_encap(cfg),
            local: self.local,
            remote: self.remote,
            initiator: self.is_initiator(),
            encr_out,
            integ_out,
            encr_in,
            integ_in,
        }
    }
}
