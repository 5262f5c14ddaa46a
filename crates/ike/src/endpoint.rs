//! The sans-IO endpoint (quinn-proto style): it owns the configuration and every IKE SA,
//! takes datagrams, commands and the time, and hands back datagrams to send, the next
//! deadline and events. It never touches a socket, a clock, a file or the OS's randomness.
use crate::child::{new_spi, Offer};
use crate::config::{Config, DeadAction, StartAction};
use crate::error::{CommandError, Error};
use crate::event::{DownReason, Event, Role, Transmit};
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, EndpointEvent, IkeSa, Output, State, NON_ESP_MARKER};
use crate::limits::MAX_IKE_SAS;
use crate::message::{Find, Message, Payload};
use crate::task::ike_auth::IkeAuth;
use crate::task::ike_init::{respond_init, IkeInit};
use crate::task::{
    child_create::ChildCreate, child_delete::ChildDelete, child_rekey::ChildRekey, ike_rekey::IkeRekey, Task,
};
use crate::ts::TrafficSelector;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use rand_core::CryptoRngCore;

/// Why a received datagram was not used (count these; none is fatal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dropped {
    /// Malformed, or failed its integrity check.
    Malformed(Error),
    /// On the NAT-T port without the non-ESP marker: ESP, for the data plane.
    NotIke,
    /// A NAT-keepalive (RFC 3948 2.3).
    Keepalive,
    /// No IKE SA has this SPI.
    UnknownSpi,
    /// A response to no outstanding request.
    UnexpectedResponse,
    /// A request outside the window (2.3).
    OutOfWindow,
    /// The I flag names the wrong side.
    WrongRole,
    /// Not expected in the SA's state.
    WrongState,
    /// IKE_SA_INIT answered with NO_PROPOSAL_CHOSEN.
    NoProposal,
    /// IKE_SA_INIT answered with INVALID_KE_PAYLOAD.
    InvalidKe,
    /// Too many IKE SAs.
    TooManySas,
    /// Authenticated, but its payloads are malformed: answered with INVALID_SYNTAX (or
    /// UNSUPPORTED_CRITICAL_PAYLOAD) when it was a request (RFC 7296 2.21.3, 3.10.1).
    InvalidSyntax(Error),
    /// An IKE fragment not used (RFC 7383 2.6; [`crate::fragment`]).
    Fragment(crate::fragment::FragmentError),
    /// A new IKE_SA_INIT without a valid cookie while cookies are required: answered with
    /// N(COOKIE), no state kept (2.6, [`crate::cookie`]).
    CookieRequired,
    /// A new IKE_SA_INIT from a source with `half_open_per_source` half-open SAs already.
    HalfOpenPerSource,
    /// A new IKE_SA_INIT while `half_open_max` SAs are half-open.
    HalfOpenLimit,
    /// A new IKE_SA_INIT longer than [`crate::limits::MAX_INIT_LEN`].
    TooLarge,
}

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dropped::Malformed(e) => write!(f, "malformed: {e}"),
            Dropped::InvalidSyntax(e) => write!(f, "authenticated but malformed (answered INVALID_SYNTAX): {e}"),
            Dropped::Fragment(e) => write!(f, "IKE fragment: {e}"),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// The packet that triggered an acquire (for the first selectors, RFC 7296 2.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketSelectors {
    /// Source address (ours).
    pub src: IpAddr,
    /// Destination address (the peer's side).
    pub dst: IpAddr,
    /// IP protocol.
    pub protocol: u8,
    /// Source port (0 if none).
    pub src_port: u16,
    /// Destination port (0 if none).
    pub dst_port: u16,
}

impl PacketSelectors {
    /// No packet (a command started the child).
    pub(crate) const NONE: PacketSelectors = PacketSelectors {
        src: IpAddr::V4(core::net::Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(core::net::Ipv4Addr::UNSPECIFIED),
        protocol: 0,
        src_port: 0,
        dst_port: 0,
    };
}

/// A responder SA's entry in the endpoint's half-open index.
struct Responder {
    key: (u64, SocketAddr),
    half_open: bool,
}

/// A handle to an IKE SA: our SPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SaHandle(pub u64);

/// The IKE endpoint.
pub struct Endpoint {
    cfg: Config,
    sas: BTreeMap<u64, IkeSa>,
    /// Responder SAs by (initiator SPI, peer), for IKE_SA_INIT retransmissions: kept while
    /// the SA lives, since a retransmission can arrive after IKE_AUTH (on another port).
    half_open: BTreeMap<(u64, SocketAddr), u64>,
    /// The responder SAs under `half_open`, by our SPI: their key there, and whether they
    /// are still half-open (counted in `half_open_by_ip`).
    responders: BTreeMap<u64, Responder>,
    /// Half-open responder SAs per source address, and in all (RFC 8019 4).
    half_open_by_ip: BTreeMap<IpAddr, usize>,
    half_open_total: usize,
    cookies: crate::cookie::CookieJar,
    dos: crate::cookie::DosStats,
    /// An SA other than the one a datagram was for may have died (INITIAL_CONTACT): the
    /// next reap looks at all of them.
    reap_all: bool,
    out: Output,
    /// The counters of the IKE SAs already gone.
    gone: crate::status::IkeSaStats,
    /// (endpoint time, seconds since 1970) at the last [`Endpoint::set_unix_time`].
    clock: Option<(Duration, u64)>,
}

/// Wall-clock seconds at endpoint time `now`, from the last reading.
fn wall(clock: Option<(Duration, u64)>, now: Duration) -> Option<u64> {
    clock.map(|(at, unix)| {
        if now >= at {
            unix.saturating_add((now - at).as_secs())
        } else {
            unix.saturating_sub((at - now).as_secs())
        }
    })
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Endpoint({} connections, {} IKE SAs)",
            self.cfg.connections.len(),
            self.sas.len()
        )
    }
}

impl Endpoint {
    /// An endpoint with no SAs.
    pub fn new(cfg: Config) -> Self {
        Endpoint {
            cfg,
            sas: BTreeMap::new(),
            half_open: BTreeMap::new(),
            responders: BTreeMap::new(),
            half_open_by_ip: BTreeMap::new(),
            half_open_total: 0,
            cookies: Default::default(),
            dos: Default::default(),
            reap_all: false,
            out: Output::default(),
            gone: Default::default(),
            clock: None,
        }
    }

    /// Tells the endpoint the wall-clock time (`unix`: seconds since 1970) at endpoint time
    /// `now`, for checking certificates' validity periods. The endpoint never reads a clock
    /// itself; call this at start and now and then (clock steps are followed from then on).
    /// Without it, certificate authentication is refused.
    pub fn set_unix_time(&mut self, now: Duration, unix: u64) {
        self.clock = Some((now, unix));
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Number of IKE SAs (half-open ones included).
    pub fn ike_sa_count(&self) -> usize {
        self.sas.len()
    }

    /// Half-open responder SAs (IKE_SA_INIT answered, no IKE_AUTH yet).
    pub fn half_open_count(&self) -> usize {
        self.half_open_total
    }

    /// What the defences against IKE_SA_INIT floods did ([`crate::cookie`]).
    pub fn dos_stats(&self) -> crate::cookie::DosStats {
        self.dos
    }

    /// Events and datagrams dropped because the caller did not poll (bounded queues).
    pub fn dropped_output(&self) -> u64 {
        self.out.dropped_output
    }

    fn conn_index(&self, name: &str) -> Result<usize, CommandError> {
        self.cfg
            .connections
            .iter()
            .position(|c| c.name == name)
            .ok_or(CommandError::UnknownConnection)
    }

    fn new_ike_spi(&self, rng: &mut impl CryptoRngCore) -> u64 {
        loop {
            let s = rng.next_u64();
            if s != 0 && !self.sas.contains_key(&s) {
                return s;
            }
        }
    }

    /// Initiates every connection whose start action is `start`.
    pub fn start(&mut self, now: Duration, rng: &mut impl CryptoRngCore) {
        let names: Vec<_> = self
            .cfg
            .connections
            .iter()
            .filter(|c| c.start_action == StartAction::Start)
            .map(|c| c.name.clone())
            .collect();
        for n in names {
            let _ = self.initiate(now, &n, rng);
        }
    }

    /// Initiates an IKE SA for a connection with its first child (IKE_SA_INIT then IKE_AUTH).
    pub fn initiate(
        &mut self,
        now: Duration,
        conn: &str,
        rng: &mut impl CryptoRngCore,
    ) -> Result<SaHandle, CommandError> {
        let ci = self.conn_index(conn)?;
        self.initiate_with(now, ci, None, rng)
    }

    /// A child's selectors as the initiator offers them: the configured ones (the addresses
    /// for `dynamic`), the packet's own first when a packet started it (2.9).
    fn child_selectors(
        &self,
        ci: usize,
        chi: usize,
        packet: Option<(usize, PacketSelectors)>,
    ) -> (Vec<TrafficSelector>, Vec<TrafficSelector>) {
        let c = &self.cfg.connections[ci];
        let child = &c.children[chi];
        let remote_ip = c.remote_addr.unwrap_or(c.local_addr);
        let mut ts_i = if child.local_ts.is_empty() {
            alloc::vec![TrafficSelector::host(c.local_addr)]
        } else {
            child.local_ts.clone()
        };
        let mut ts_r = if child.remote_ts.is_empty() {
            alloc::vec![TrafficSelector::host(remote_ip)]
        } else {
            child.remote_ts.clone()
        };
        if let Some((_, p)) = packet.filter(|(_, p)| *p != PacketSelectors::NONE) {
            let port = |x: u16| {
                if p.protocol == 6 || p.protocol == 17 || p.protocol == 132 {
                    (x, x)
                } else {
                    (0, 0xffff)
                }
            };
            let (sp, ep) = port(p.src_port);
            let (dsp, dep) = port(p.dst_port);
            ts_i.insert(
                0,
                TrafficSelector {
                    protocol: p.protocol,
                    start_port: sp,
                    end_port: ep,
                    start: p.src,
                    end: p.src,
                },
            );
            ts_r.insert(
                0,
                TrafficSelector {
                    protocol: p.protocol,
                    start_port: dsp,
                    end_port: dep,
                    start: p.dst,
                    end: p.dst,
                },
            );
            ts_i.truncate(crate::limits::MAX_TS);
            ts_r.truncate(crate::limits::MAX_TS);
        }
        (ts_i, ts_r)
    }

    fn initiate_with(
        &mut self,
        now: Duration,
        ci: usize,
        packet: Option<(usize, PacketSelectors)>,
        rng: &mut impl CryptoRngCore,
    ) -> Result<SaHandle, CommandError> {
        if self.sas.len() >= MAX_IKE_SAS {
            return Err(CommandError::TooManySas);
        }
        let c = &self.cfg.connections[ci];
        let remote_ip = c
            .remote_addr
            .ok_or(CommandError::BadConfig("no remote address to initiate to"))?;
        let dh = *c
            .ike_proposals
            .first()
            .and_then(|p| p.dh.first())
            .ok_or(CommandError::BadConfig("no IKE proposal"))?;
        let local = SocketAddr::new(c.local_addr, self.cfg.ike_port);
        let remote = SocketAddr::new(remote_ip, c.remote_port);
        let spi = self.new_ike_spi(rng);
        let mut sa = IkeSa::new(ci, Role::Initiator, spi, 0, local, remote, State::InitSent, now);
        let child_idx = packet.map(|(i, _)| i).unwrap_or(0);
        let mut offer = None;
        if c.children.get(child_idx).is_some() {
            let (ts_i, ts_r) = self.child_selectors(ci, child_idx, packet);
            offer = Some(Offer {
                cfg: child_idx,
                spi_in: new_spi(rng),
                ts_i,
                ts_r,
                kex: None,
            });
        }
        let mut cx = Cx {
            cfg: &self.cfg,
            out: &mut self.out,
            now,
            others: &[],
            unix: wall(self.clock, now),
            peers_of: None,
        };
        sa.queue_task(&mut cx, Task::IkeInit(IkeInit::new(dh)), rng);
        sa.queue_task(&mut cx, Task::IkeAuth(IkeAuth { child: offer }), rng);
        self.sas.insert(spi, sa);
        Ok(SaHandle(spi))
    }

    /// A trap policy matched a packet: start the connection's IKE SA with that child, the
    /// packet's selectors first (2.9), or, on an established IKE SA without that child, the
    /// child alone with CREATE_CHILD_SA (1.3.1). Nothing happens while the child is up or
    /// being set up.
    pub fn acquire(
        &mut self,
        now: Duration,
        conn: &str,
        child: &str,
        packet: PacketSelectors,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        self.start_child(now, conn, child, Some(packet), rng)
    }

    /// Starts the child `child` of `conn` (`ipsec ike initiate CONN/CHILD`): with
    /// CREATE_CHILD_SA on the connection's established IKE SA, or a new IKE SA carrying it.
    pub fn initiate_child(
        &mut self,
        now: Duration,
        conn: &str,
        child: &str,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        self.start_child(now, conn, child, None, rng)
    }

    fn start_child(
        &mut self,
        now: Duration,
        conn: &str,
        child: &str,
        packet: Option<PacketSelectors>,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let ci = self.conn_index(conn)?;
        let chi = self.cfg.connections[ci]
            .children
            .iter()
            .position(|c| c.name == child)
            .ok_or(CommandError::UnknownChild)?;
        let busy = self.sas.values().any(|s| {
            s.conn == ci
                && (s.children.iter().any(|c| c.cfg == chi)
                    || !s.state.is_established() && !s.state.is_dead() && s.role == Role::Initiator
                    || s.tasks
                        .iter()
                        .any(|t| matches!(t, Task::ChildCreate(c) if c.offer.cfg == chi)))
        });
        if busy {
            return Ok(());
        }
        let established = self
            .sas
            .iter()
            .find(|(_, s)| s.conn == ci && s.state.is_established())
            .map(|(k, _)| *k);
        let Some(spi) = established else {
            let packet = packet.map(|p| (chi, p));
            let packet = packet.or(Some((chi, PacketSelectors::NONE)));
            self.initiate_with(now, ci, packet, rng)?;
            return Ok(());
        };
        let (ts_i, ts_r) = self.child_selectors(ci, chi, packet.map(|p| (chi, p)));
        let offer = Offer::new(&self.cfg.connections[ci], chi, ts_i, ts_r, true, rng);
        let task = Task::ChildCreate(ChildCreate::new(offer, rng));
        if let Some(sa) = self.sas.get_mut(&spi) {
            let mut cx = Cx {
                cfg: &self.cfg,
                out: &mut self.out,
                now,
                others: &[],
                unix: wall(self.clock, now),
                peers_of: None,
            };
            sa.queue_task(&mut cx, task, rng);
        }
        Ok(())
    }

    /// Rekeys the child pair we receive on `spi_in` now (`ipsec ike rekey`, or the data
    /// plane's byte or packet limit, or a sequence number near its end).
    pub fn rekey_child(
        &mut self,
        now: Duration,
        spi_in: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let cfg = &self.cfg;
        let sa = self
            .sas
            .values_mut()
            .find(|s| s.children.iter().any(|c| c.spi_in() == spi_in))
            .ok_or(CommandError::NotEstablished)?;
        let task = ChildRekey::new(sa, cfg, spi_in, rng).ok_or(CommandError::NotEstablished)?;
        let mut cx = Cx {
            cfg,
            out: &mut self.out,
            now,
            others: &[],
            unix: wall(self.clock, now),
            peers_of: None,
        };
        sa.queue_task(&mut cx, Task::ChildRekey(task), rng);
        Ok(())
    }

    /// Rekeys the connection's IKE SAs now (`ipsec ike rekey CONN`).
    pub fn rekey_ike(&mut self, now: Duration, conn: &str, rng: &mut impl CryptoRngCore) -> Result<(), CommandError> {
        self.on_established(now, conn, rng, |sa, rng| IkeRekey::new(sa, rng).map(Task::IkeRekey))
    }

    /// Queues `task(sa)` on each of the connection's established IKE SAs; none:
    /// [`CommandError::NotEstablished`].
    fn on_established<R: CryptoRngCore>(
        &mut self,
        now: Duration,
        conn: &str,
        rng: &mut R,
        mut task: impl FnMut(&IkeSa, &mut R) -> Option<Task>,
    ) -> Result<(), CommandError> {
        let ci = self.conn_index(conn)?;
        let mut found = false;
        for sa in self
            .sas
            .values_mut()
            .filter(|s| s.conn == ci && s.state.is_established())
        {
            found = true;
            if let Some(t) = task(sa, rng) {
                let mut cx = Cx {
                    cfg: &self.cfg,
                    out: &mut self.out,
                    now,
                    others: &[],
                    unix: wall(self.clock, now),
                    peers_of: None,
                };
                sa.queue_task(&mut cx, t, rng);
            }
        }
        if found {
            Ok(())
        } else {
            Err(CommandError::NotEstablished)
        }
    }

    /// The children of the connection's established IKE SAs: (child name, our inbound SPI).
    pub fn children(&self, conn: &str) -> Vec<(alloc::string::String, u32)> {
        let Ok(ci) = self.conn_index(conn) else {
            return Vec::new();
        };
        self.sas
            .values()
            .filter(|s| s.conn == ci)
            .flat_map(|s| s.children.iter().map(|c| (c.info.child.clone(), c.spi_in())))
            .collect()
    }

    /// Deletes the connection's IKE SAs (INFORMATIONAL with a Delete; half-open ones are
    /// dropped at once).
    pub fn terminate(&mut self, now: Duration, conn: &str, rng: &mut impl CryptoRngCore) -> Result<(), CommandError> {
        let ci = self.conn_index(conn)?;
        let mut found = false;
        for sa in self.sas.values_mut().filter(|s| s.conn == ci) {
            found = true;
            let mut cx = Cx {
                cfg: &self.cfg,
                out: &mut self.out,
                now,
                others: &[],
                unix: wall(self.clock, now),
                peers_of: None,
            };
            if sa.state.is_established() {
                sa.queue_task(&mut cx, Task::IkeDelete, rng);
            } else {
                sa.kill(&mut cx, DownReason::Local);
            }
        }
        self.reap();
        if found {
            Ok(())
        } else {
            Err(CommandError::NotEstablished)
        }
    }

    /// Deletes one IKE SA by handle.
    pub fn delete_ike_sa(
        &mut self,
        now: Duration,
        sa: SaHandle,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let s = self.sas.get_mut(&sa.0).ok_or(CommandError::NotEstablished)?;
        let mut cx = Cx {
            cfg: &self.cfg,
            out: &mut self.out,
            now,
            others: &[],
            unix: wall(self.clock, now),
            peers_of: None,
        };
        if s.state.is_established() {
            s.queue_task(&mut cx, Task::IkeDelete, rng);
        } else {
            s.kill(&mut cx, DownReason::Local);
        }
        self.reap();
        Ok(())
    }

    /// Deletes a child SA pair by the SPI we receive on.
    pub fn delete_child(
        &mut self,
        now: Duration,
        spi_in: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let s = self
            .sas
            .values_mut()
            .find(|s| s.children.iter().any(|c| c.spi_in() == spi_in))
            .ok_or(CommandError::NotEstablished)?;
        let mut cx = Cx {
            cfg: &self.cfg,
            out: &mut self.out,
            now,
            others: &[],
            unix: wall(self.clock, now),
            peers_of: None,
        };
        s.queue_task(&mut cx, Task::ChildDelete(ChildDelete { spi_in }), rng);
        Ok(())
    }

    /// Sends a liveness check (empty INFORMATIONAL) on the connection's IKE SAs now.
    pub fn check_liveness(
        &mut self,
        now: Duration,
        conn: &str,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        self.on_established(now, conn, rng, |_, _| Some(Task::IkeDpd))
    }

    /// Handles one received UDP payload. `local` is the address and port it arrived on
    /// (on the NAT-T port the payload is expected to start with the non-ESP marker, which is
    /// stripped here; without it the datagram is ESP: [`Dropped::NotIke`]).
    pub fn handle_datagram(
        &mut self,
        now: Duration,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let raw = if local.port() == self.cfg.natt_port {
            if data == [0xff] {
                return Err(Dropped::Keepalive);
            }
            match data.strip_prefix(&NON_ESP_MARKER[..]) {
                Some(r) => r,
                None => return Err(Dropped::NotIke),
            }
        } else {
            data
        };
        // A new IKE_SA_INIT is unauthenticated and a half-open SA keeps it: bounded before
        // it is parsed (limits::MAX_INIT_LEN).
        if raw.len() > crate::limits::MAX_INIT_LEN
            && crate::header::IkePacket::new_checked(raw)
                .and_then(|p| crate::header::HeaderRepr::parse(&p))
                .is_ok_and(|h| h.exchange == ExchangeType::IkeSaInit && !h.response && h.spi_r == 0)
        {
            self.dos.too_large += 1;
            return Err(Dropped::TooLarge);
        }
        let msg = match Message::parse(raw) {
            Ok(m) => m,
            Err(e) => {
                self.refuse_critical(raw, e, local, remote);
                return Err(Dropped::Malformed(e));
            }
        };
        let h = msg.header;
        if h.exchange == ExchangeType::IkeSaInit && !h.response && h.spi_r == 0 {
            // Nothing dies here: no reap (a dropped request costs no pass over the SAs).
            return self.on_new_init(now, raw, &msg, local, remote, rng);
        }
        let our = if h.initiator { h.spi_r } else { h.spi_i };
        let r = {
            // A request that can make a child: the other IKE SAs' peers, which a NATed
            // peer's `dynamic` selectors must not claim (child::choose). Only for an SA we
            // have (a datagram for an unknown SPI costs no pass over the SAs).
            // The same pass counts the SAs of this SA's peer identity, for the caps an IKE
            // SA rekey must not bypass (limits::MAX_IKE_SAS_PER_IDENTITY).
            let known = self.sas.get(&our).is_some_and(|s| !s.state.is_dead());
            let mut census = crate::ike_sa::Census {
                ike_sas: self.sas.len(),
                same_identity: 0,
            };
            let others: Vec<IpAddr> =
                if known && !h.response && matches!(h.exchange, ExchangeType::IkeAuth | ExchangeType::CreateChildSa) {
                    let id = self.sas.get(&our).and_then(|s| s.state.remote_id());
                    let mut v = Vec::new();
                    for (_, s) in self.sas.iter().filter(|(k, _)| **k != our) {
                        if s.state.is_established() {
                            v.push(s.path.remote.ip());
                        }
                        if id.is_some() && !s.state.is_dead() && s.state.remote_id() == id {
                            census.same_identity += 1;
                        }
                    }
                    v
                } else {
                    Vec::new()
                };
            // The SA is taken out of the map while it handles the message, so that the
            // count of the others' identities (asked for only by an authenticated IKE_AUTH)
            // can look at them: O(log n) here, O(n) only when asked.
            match self.sas.remove(&our) {
                Some(mut sa) if !sa.state.is_dead() => {
                    sa.census = census;
                    let sas = &self.sas;
                    let peers_of = |id: &crate::id::Identity| {
                        sas.values()
                            .filter(|s| !s.state.is_dead() && s.state.remote_id() == Some(id))
                            .count()
                    };
                    let mut cx = Cx {
                        cfg: &self.cfg,
                        out: &mut self.out,
                        now,
                        others: &others,
                        unix: wall(self.clock, now),
                        peers_of: Some(&peers_of),
                    };
                    let r = sa.handle_message(&mut cx, raw, &msg, local, remote, rng);
                    self.sas.insert(our, sa);
                    self.apply_effects(our, now, rng);
                    r
                }
                Some(sa) => {
                    self.sas.insert(our, sa);
                    Err(Dropped::UnknownSpi)
                }
                None => Err(Dropped::UnknownSpi),
            }
        };
        if core::mem::take(&mut self.reap_all) {
            self.reap();
        } else {
            self.reap_one(our);
        }
        r
    }

    /// A new IKE_SA_INIT request (SPIr 0, message ID 0, not a response) with a critical
    /// payload we do not know: rejected with UNSUPPORTED_CRITICAL_PAYLOAD carrying its type
    /// (2.5), statelessly (no SA is made). Nothing else that fails to parse is answered.
    fn refuse_critical(&mut self, raw: &[u8], e: Error, local: SocketAddr, remote: SocketAddr) {
        let Error::UnsupportedCritical(t) = e else { return };
        let Ok(h) = crate::header::IkePacket::new_checked(raw).and_then(|p| crate::header::HeaderRepr::parse(&p))
        else {
            return;
        };
        if h.exchange == ExchangeType::IkeSaInit && !h.response && h.initiator && h.spi_r == 0 && h.message_id == 0 {
            crate::task::ike_init::stateless_reply(
                &mut self.out,
                &self.cfg,
                &h,
                local,
                remote,
                crate::notify::Notify::ike(crate::notify::kind::UNSUPPORTED_CRITICAL_PAYLOAD, &[t]),
            );
        }
    }

    fn on_new_init(
        &mut self,
        now: Duration,
        raw: &[u8],
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let key = (msg.header.spi_i, remote);
        if let Some(spi) = self.half_open.get(&key) {
            // A retransmitted IKE_SA_INIT: the kept response (2.1). One that comes after
            // the SA moved on (its IKE_AUTH came first, on port 4500) is answered by nothing:
            // the initiator has the response already, and a second SA would only wait to die.
            if let Some(sa) = self.sas.get(spi) {
                let Some((0, b)) = &sa.window.kept else {
                    return Err(Dropped::OutOfWindow);
                };
                let b = b.clone();
                let mut cx = Cx {
                    cfg: &self.cfg,
                    out: &mut self.out,
                    now,
                    others: &[],
                    unix: wall(self.clock, now),
                    peers_of: None,
                };
                sa.send(&mut cx, &b);
                return Ok(());
            }
        }
        self.admit(now, msg, local, remote, rng)?;
        if self.sas.len() >= MAX_IKE_SAS {
            return Err(Dropped::TooManySas);
        }
        let spi_r = self.new_ike_spi(rng);
        let sa = respond_init(&self.cfg, &mut self.out, now, raw, msg, local, remote, spi_r, rng)?;
        self.half_open.insert(key, spi_r);
        self.sas.insert(spi_r, sa);
        self.responders.insert(spi_r, Responder { key, half_open: true });
        *self.half_open_by_ip.entry(remote.ip()).or_insert(0) += 1;
        self.half_open_total += 1;
        Ok(())
    }

    /// Whether a new IKE_SA_INIT may make a half-open SA (RFC 7296 2.6, RFC 8019 4), in
    /// O(log n): with a valid cookie first, or while cookies are not required (fewer than
    /// `cookie_threshold` half-open SAs, fewer than `cookie_threshold_ip` from its source, not
    /// `force_cookies`); else it is answered with N(COOKIE) and nothing is kept. Then the
    /// caps: `half_open_per_source` and `half_open_max`.
    fn admit(
        &mut self,
        now: Duration,
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let h = &msg.header;
        let Some(ni) = msg.chain.payloads.nonce() else {
            // respond_init answers INVALID_SYNTAX, statelessly.
            return Ok(());
        };
        let ip = remote.ip();
        let from_ip = self.half_open_by_ip.get(&ip).copied().unwrap_or(0);
        // A cookie counts only as the first payload (2.6); one that does not verify is
        // ignored, the request handled as if it had none.
        let cookie = match msg.chain.payloads.first() {
            Some(Payload::Notify(n)) if n.kind == crate::notify::kind::COOKIE => Some(n.data.as_slice()),
            _ => None,
        };
        let proven = cookie.is_some_and(|c| self.cookies.verify(now, c, ni, ip, h.spi_i));
        match (cookie.is_some(), proven) {
            (_, true) => self.dos.cookies_accepted += 1,
            (true, false) => self.dos.cookies_refused += 1,
            _ => {}
        }
        let cfg = &self.cfg;
        let required =
            cfg.force_cookies || self.half_open_total >= cfg.cookie_threshold || from_ip >= cfg.cookie_threshold_ip;
        if required && !proven {
            if h.message_id != 0 || !h.initiator {
                return Err(Dropped::WrongState);
            }
            let c = self.cookies.make(now, rng, ni, ip, h.spi_i);
            crate::task::ike_init::stateless_reply(
                &mut self.out,
                cfg,
                h,
                local,
                remote,
                crate::notify::Notify::ike(crate::notify::kind::COOKIE, &c),
            );
            self.dos.cookies_sent += 1;
            return Err(Dropped::CookieRequired);
        }
        if from_ip >= cfg.half_open_per_source {
            self.dos.half_open_refused += 1;
            return Err(Dropped::HalfOpenPerSource);
        }
        if self.half_open_total >= cfg.half_open_max {
            self.dos.half_open_refused += 1;
            return Err(Dropped::HalfOpenLimit);
        }
        Ok(())
    }

    /// Brings the half-open index up to date for the SA filed under `spi` (gone, or no
    /// longer half-open).
    fn settle(&mut self, spi: u64) {
        let Some(e) = self.responders.get_mut(&spi) else { return };
        let sa = self.sas.get(&spi).filter(|s| !s.state.is_dead());
        let still = sa.is_some_and(|s| matches!(s.state, State::HalfOpen { .. }));
        let ip = e.key.1.ip();
        if e.half_open && !still {
            e.half_open = false;
            self.half_open_total = self.half_open_total.saturating_sub(1);
            if let Some(n) = self.half_open_by_ip.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.half_open_by_ip.remove(&ip);
                }
            }
        }
        if sa.is_none() {
            if let Some(e) = self.responders.remove(&spi) {
                if self.half_open.get(&e.key) == Some(&spi) {
                    self.half_open.remove(&e.key);
                }
            }
        }
    }

    /// Removes the SA filed under `spi` if it is dead, and settles its half-open entry.
    fn reap_one(&mut self, spi: u64) {
        if self.sas.get(&spi).is_some_and(|s| s.state.is_dead()) {
            if let Some(s) = self.sas.remove(&spi) {
                self.gone.add(&s.stats);
            }
        }
        self.settle(spi);
    }

    /// What the SA filed under `spi` asks of the endpoint ([`EndpointEvent`]).
    fn apply_effects(&mut self, spi: u64, now: Duration, rng: &mut impl CryptoRngCore) {
        let Some(sa) = self.sas.get_mut(&spi) else { return };
        let effects = core::mem::take(&mut sa.effects);
        let conn = sa.conn;
        let initiator_side = self.cfg.connections[conn].remote_addr.is_some();
        for e in effects {
            match e {
                EndpointEvent::InitialContact => {
                    self.initial_contact(spi, now);
                    self.reap_all = true;
                }
                EndpointEvent::Rekeyed(new) => {
                    let key = new.our_spi();
                    self.sas.insert(key, *new);
                    // The requests that moved with the children (2.18) go out on it now.
                    if let Some(n) = self.sas.get_mut(&key) {
                        let mut cx = Cx {
                            cfg: &self.cfg,
                            out: &mut self.out,
                            now,
                            others: &[],
                            unix: wall(self.clock, now),
                            peers_of: None,
                        };
                        n.start_next(&mut cx, rng);
                    }
                }
                EndpointEvent::Down(reason) => {
                    let c = &self.cfg.connections[conn];
                    let action = match reason {
                        DownReason::Timeout => c.dpd_action,
                        DownReason::Peer => c.close_action,
                        _ => DeadAction::Clear,
                    };
                    // Restart (swanctl's dpd_action/close_action = restart), unless another
                    // SA of the connection is up or coming up.
                    let other = self
                        .sas
                        .iter()
                        .any(|(k, s)| *k != spi && s.conn == conn && !s.state.is_dead());
                    if action == DeadAction::Restart && initiator_side && !other {
                        let _ = self.initiate_with(now, conn, None, rng);
                    }
                }
            }
        }
    }

    /// INITIAL_CONTACT (2.4): the peer has no other SA with us; forget ours with it.
    fn initial_contact(&mut self, spi: u64, now: Duration) {
        let Some((conn, id)) = self.sas.get(&spi).map(|s| (s.conn, s.state.remote_id().cloned())) else {
            return;
        };
        let mut cx = Cx {
            cfg: &self.cfg,
            out: &mut self.out,
            now,
            others: &[],
            unix: wall(self.clock, now),
            peers_of: None,
        };
        for (k, s) in self.sas.iter_mut() {
            if *k != spi && s.conn == conn && s.state.remote_id().cloned() == id && s.state.is_established() {
                s.kill(&mut cx, DownReason::Replaced);
            }
        }
    }

    fn reap(&mut self) {
        let dead: Vec<u64> = self
            .sas
            .iter()
            .filter(|(_, s)| s.state.is_dead())
            .map(|(k, _)| *k)
            .collect();
        for k in dead {
            if let Some(s) = self.sas.remove(&k) {
                self.gone.add(&s.stats);
            }
        }
        let responders: Vec<u64> = self.responders.keys().copied().collect();
        for k in responders {
            self.settle(k);
        }
        self.reap_all = false;
    }

    /// Runs the timers due at `now`: retransmissions with back-off, giving up (the SA goes
    /// down with [`DownReason::Timeout`]), half-open expiry, liveness checks.
    pub fn handle_timeout(&mut self, now: Duration, rng: &mut impl CryptoRngCore) {
        let mut with_effects = Vec::new();
        for (k, sa) in self.sas.iter_mut() {
            let mut cx = Cx {
                cfg: &self.cfg,
                out: &mut self.out,
                now,
                others: &[],
                unix: wall(self.clock, now),
                peers_of: None,
            };
            sa.handle_timeout(&mut cx, rng);
            if !sa.effects.is_empty() {
                with_effects.push(*k);
            }
        }
        for k in with_effects {
            self.apply_effects(k, now, rng);
        }
        self.reap();
    }

    /// The next deadline, if any: call [`Endpoint::handle_timeout`] then.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.sas.values().filter_map(|s| s.poll_timeout(&self.cfg)).min()
    }

    /// The counters of every IKE SA this endpoint had, live and gone.
    pub fn totals(&self) -> crate::status::IkeSaStats {
        let mut t = self.gone;
        for s in self.sas.values() {
            t.add(&s.stats);
        }
        t
    }

    /// Every IKE SA (half-open ones included) with its children, as of `now`.
    pub fn status(&self, now: Duration) -> Vec<crate::status::IkeSaStatus> {
        self.sas.values().map(|s| s.status(&self.cfg, now)).collect()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.events.pop_front()
    }

    /// The handle of connection `name` (its index in [`Config::connections`]): a caller
    /// resolves a name once, at its edge, and passes the handle inward.
    pub fn conn_id(&self, name: &str) -> Result<ConnId, CommandError> {
        self.conn_index(name).map(ConnId)
    }

    /// The handles of every connection, in the config's order.
    pub fn conn_ids(&self) -> impl Iterator<Item = ConnId> {
        (0..self.cfg.connections.len()).map(ConnId)
    }

    fn conn_at(&self, conn: ConnId) -> Result<usize, CommandError> {
        (conn.0 < self.cfg.connections.len())
            .then_some(conn.0)
            .ok_or(CommandError::UnknownConnection)
    }

    /// [`Endpoint::initiate`] of a connection by handle.
    pub fn initiate_conn(
        &mut self,
        now: Duration,
        conn: ConnId,
        rng: &mut impl CryptoRngCore,
    ) -> Result<SaHandle, CommandError> {
        let ci = self.conn_at(conn)?;
        self.initiate_with(now, ci, None, rng)
    }

    /// [`Endpoint::terminate`] of a connection by handle.
    pub fn terminate_conn(
        &mut self,
        now: Duration,
        conn: ConnId,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let ci = self.conn_at(conn)?;
        let mut found = false;
        for sa in self.sas.values_mut().filter(|s| s.conn == ci) {
            found = true;
            let mut cx = Cx {
                cfg: &self.cfg,
                out: &mut self.out,
                now,
                others: &[],
                unix: wall(self.clock, now),
                peers_of: None,
            };
            if sa.state.is_established() {
                sa.queue_task(&mut cx, Task::IkeDelete, rng);
            } else {
                sa.kill(&mut cx, DownReason::Local);
            }
        }
        self.reap();
        if found {
            Ok(())
        } else {
            Err(CommandError::NotEstablished)
        }
    }

    /// [`Endpoint::rekey_ike`] of a connection by handle.
    pub fn rekey_ike_conn(
        &mut self,
        now: Duration,
        conn: ConnId,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let ci = self.conn_at(conn)?;
        let mut found = false;
        for sa in self
            .sas
            .values_mut()
            .filter(|s| s.conn == ci && s.state.is_established())
        {
            found = true;
            if let Some(t) = IkeRekey::new(sa, rng).map(Task::IkeRekey) {
                let mut cx = Cx {
                    cfg: &self.cfg,
                    out: &mut self.out,
                    now,
                    others: &[],
                    unix: wall(self.clock, now),
                    peers_of: None,
                };
                sa.queue_task(&mut cx, t, rng);
            }
        }
        if found {
            Ok(())
        } else {
            Err(CommandError::NotEstablished)
        }
    }

    /// The inbound SPIs of the connection's child pairs named `child` ([`Endpoint::children`]
    /// by handle), for [`Endpoint::rekey_child`].
    pub fn child_spis(&self, conn: ConnId, child: &str) -> Vec<u32> {
        self.sas
            .values()
            .filter(|s| s.conn == conn.0)
            .flat_map(|s| s.children.iter().filter(|c| c.info.child == child).map(|c| c.spi_in()))
            .collect()
    }
}

/// A connection's handle: its index in [`Config::connections`] ([`Endpoint::conn_id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub usize);
