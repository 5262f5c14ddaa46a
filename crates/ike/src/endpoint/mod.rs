//! The sans-IO endpoint (quinn-proto style): it owns the configuration and every IKE SA,
//! takes datagrams, commands and the time, and hands back datagrams to send, the next
//! deadline and events. It never touches a socket, a clock, a file or the OS's randomness.
//!
//! Here the endpoint's state, time and output; the caller's commands are in `commands`,
//! a received datagram (and a new IKE_SA_INIT's admission) in `inbound`, what is done after
//! an SA has handled something (its effects, dead SAs removed) in `reap`.
use crate::config::Config;
use crate::error::CommandError;
use crate::event::{Event, Transmit};
use crate::ike_sa::{Cx, IkeSa, Output};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use rand_core::CryptoRngCore;

mod commands;
mod inbound;
mod radius;
mod reap;

pub use radius::{RadiusDropped, RadiusServerStats, RadiusStats, RadiusTransmit};

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

/// A connection's handle: its index in [`Config::connections`] ([`Endpoint::conn_id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub usize);

/// A child's handle: its connection's and its index in that connection's
/// [`crate::ChildConfig`]s ([`Endpoint::child_id`]). A trap holds it, so an acquire names its
/// child without a name to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChildId {
    /// Its connection.
    pub conn: ConnId,
    /// Its index in the connection's `children`.
    pub child: usize,
}

/// A handle to an IKE SA: our SPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SaHandle(pub u64);

/// The IKE endpoint.
pub struct Endpoint {
    cfg: Config,
    /// The IKE SAs by our SPI, each boxed: a B-tree node holds 11 values, about two thirds
    /// of them used, and an `IkeSa` is a large struct, so inline values cost a third more
    /// than the SAs themselves (docs/performance.md, "Many remote-access clients"); and an SA
    /// taken out while it handles a message moves as a pointer.
    sas: BTreeMap<u64, Box<IkeSa>>,
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
    /// Its IKE SAs, for the crate's tests.
    #[cfg(test)]
    pub(crate) fn sas_mut(&mut self) -> impl Iterator<Item = &mut IkeSa> {
        self.sas.values_mut().map(|sa| &mut **sa)
    }

    /// An endpoint with no SAs.
    pub fn new(cfg: Config) -> Self {
        let out = Output {
            leases: crate::pool::Leases::new(&cfg.pools),
            ..Default::default()
        };
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
            out,
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

    /// Runs the timers due at `now`: retransmissions with back-off, giving up (the SA goes
    /// down with [`crate::event::DownReason::Timeout`]), half-open expiry, liveness checks.
    pub fn handle_timeout(&mut self, now: Duration, rng: &mut impl CryptoRngCore) {
        let mut with_effects = Vec::new();
        for (k, sa) in self.sas.iter_mut() {
            let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
            sa.handle_timeout(&mut cx, rng);
            if sa.has_effects() {
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
            t.add(s.stats());
        }
        t
    }

    /// Every IKE SA (half-open ones included) with its children, as of `now`.
    pub fn status(&self, now: Duration) -> Vec<crate::status::IkeSaStatus> {
        self.sas.values().map(|s| s.status(&self.cfg, now)).collect()
    }

    /// Every address pool's size and leases ([`crate::pool`]).
    pub fn pool_stats(&self) -> Vec<crate::pool::PoolStats> {
        self.out.leases.stats()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.transmits.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.events.pop_front()
    }
}

#[cfg(test)]
impl Endpoint {
    /// Runs `f` on the IKE SA with our SPI `spi` and a context at `now` (unit tests that
    /// must reach inside an exchange, e.g. forge a payload inside the encryption).
    pub(crate) fn with_sa<R>(
        &mut self,
        spi: u64,
        now: Duration,
        f: impl FnOnce(&mut IkeSa, &mut Cx) -> R,
    ) -> Option<R> {
        let unix = wall(self.clock, now);
        let sa = self.sas.get_mut(&spi)?;
        let mut cx = Cx::new(&self.cfg, &mut self.out, now, unix);
        Some(f(sa, &mut cx))
    }

    /// Our SPIs of the IKE SAs (unit tests).
    pub(crate) fn spis(&self) -> Vec<u64> {
        self.sas.keys().copied().collect()
    }
}
