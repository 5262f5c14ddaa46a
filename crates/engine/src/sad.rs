//! Security Association Database (RFC 4301 section 4.4.2): keyed SAs with their lifetimes
//! and counters. Inbound lookup is by (protocol, SPI[, destination]) in a hash map (RFC 4301
//! 4.1: the SPI, plus the destination where SAs share an SPI); outbound SAs are reached
//! through the SPD's policies by [`SaId`].

use crate::bundle::PacketError;
use crate::counters::{AtomicCounters, Counters};
use crate::lifetime::{Lifetime, Limit, State, Usage};
use crate::udp_encap::UdpEncap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use core::time::Duration;
use hashbrown::HashMap;
use ipsec_ah::Ah;
use ipsec_core::ip::Split;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Mode, Proto, SaParams, Tunnel};
use ipsec_core::PacketBuf;
use ipsec_esp::Esp;
pub use ipsec_ipcomp::Codecs;
use ipsec_ipcomp::{Adaptive, Algorithm, IpcompConfig, OpenOutcome, SealOutcome, SharedIpcomp};

/// The handle of an SA in the [`Sad`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SaId(pub u32);

/// Everything needed to install an SA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaConfig {
    /// A name for configs, logs and snapshots.
    pub name: String,
    /// Protocol, SPI, mode, algorithms and keys, replay window, ESN.
    pub params: SaParams,
    /// The compression algorithm of an IPComp SA.
    pub comp: Option<Algorithm>,
    /// An IPComp SA's adaptive mode and link rate (ignored by ESP and AH).
    pub adaptive: Adaptive,
    /// Soft and hard limits.
    pub lifetime: Lifetime,
    /// ESP in UDP (RFC 3948), `encap espinudp SPORT DPORT OADDR`: the ports (and original
    /// address) of the datagrams that carry an ESP SA's packets. The SA itself still seals and
    /// opens plain ESP; the caller adds and removes the UDP header ([`crate::udp_encap`]).
    pub encap: Option<UdpEncap>,
}

impl SaConfig {
    /// An SA without lifetime limits.
    pub fn new(name: impl Into<String>, params: SaParams, comp: Option<Algorithm>) -> Self {
        SaConfig {
            name: name.into(),
            params,
            comp,
            adaptive: Adaptive::default(),
            lifetime: Lifetime::default(),
            encap: None,
        }
    }

    /// The SPIs the SA is found by inbound: its own, and for an IPComp SA with an
    /// alternative algorithm that one's CPI (RFC 3173 section 3.3: the CPI names the
    /// algorithm, so each algorithm the peer may send with has its own).
    pub fn spis(&self) -> impl Iterator<Item = u32> {
        let alt = match self.params.proto {
            Proto::Comp => self.adaptive.alternative.map(|a| u32::from(a.cpi)),
            _ => None,
        };
        core::iter::once(self.params.spi).chain(alt)
    }

    /// Whether `other` would take a SAD slot of this SA: the same protocol and destination,
    /// and an SPI (or CPI, the alternative's included) in common.
    pub fn overlaps(&self, other: &SaConfig) -> bool {
        let ((p, _, d), (q, _, e)) = (self.key(), other.key());
        p == q && d == e && self.spis().any(|s| other.spis().any(|t| s == t))
    }

    /// The SAD key: (IP protocol, SPI or CPI, destination if the SA names one).
    pub fn key(&self) -> (u8, u32, Option<IpAddr>) {
        (
            self.params.proto.number(),
            self.params.spi,
            self.params.tunnel.map(|t| t.dst),
        )
    }
}

/// Why an SA or policy could not be installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallError {
    /// The SA's parameters or keys are invalid.
    Sa(PacketError),
    /// The lifetime is inconsistent.
    Lifetime(&'static str),
    /// Another SA has the same protocol, SPI and destination.
    Duplicate {
        /// The SA already installed.
        existing: String,
    },
    /// A policy names an SA id that is not installed.
    UnknownSa(SaId),
    /// A policy's bundle is not IPComp → ESP → AH (a subset, each at most once).
    BundleOrder,
    /// A replacement SA must be of the same protocol as the SA it replaces.
    ReplaceProtocol,
    /// No policy at this index.
    UnknownPolicy(usize),
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::Sa(e) => write!(f, "{e}"),
            InstallError::Lifetime(why) => write!(f, "lifetime: {why}"),
            InstallError::Duplicate { existing } => {
                write!(f, "same protocol, SPI and destination as SA `{existing}`")
            }
            InstallError::UnknownSa(id) => write!(f, "no SA with id {}", id.0),
            InstallError::UnknownPolicy(i) => write!(f, "no policy at index {i}"),
            InstallError::ReplaceProtocol => {
                f.write_str("a replacement SA must have the protocol of the SA it replaces")
            }
            InstallError::BundleOrder => {
                f.write_str("a bundle applies IPComp, then ESP, then AH (any subset, each at most once) on output")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for InstallError {}

/// An SA's keyed transform, shared by every thread that uses the SA: ESP and AH by `&self`
/// (atomic sequence counter, replay window locked only for its bitmap), IPComp by `&self`
/// too, with each thread's own codec ([`Codecs`]) and a short lock on the SA's decision
/// state and counters, so one IPComp SA compresses on every worker at once.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per SA, never per packet
pub enum SharedSa {
    /// ESP.
    Esp(Esp),
    /// AH.
    Ah(Ah),
    /// IPComp.
    Comp(SharedIpcomp),
}

impl SharedSa {
    /// Keys the SA that `params` describe; an IPComp SA also needs its algorithm.
    pub fn new(params: &SaParams, comp: Option<Algorithm>) -> Result<Self, PacketError> {
        Self::with_adaptive(params, comp, Adaptive::default())
    }

    /// As [`SharedSa::new`], with an IPComp SA's adaptive setting.
    pub fn with_adaptive(params: &SaParams, comp: Option<Algorithm>, adaptive: Adaptive) -> Result<Self, PacketError> {
        Ok(match params.proto {
            Proto::Esp => SharedSa::Esp(Esp::new(params)?),
            Proto::Ah => SharedSa::Ah(Ah::new(params)?),
            Proto::Comp => {
                let alg = comp.ok_or(ipsec_core::Error::InvalidSa(
                    "an IPComp SA needs a compression algorithm",
                ))?;
                let cfg = IpcompConfig::from_sa_params(params, alg)?.with_adaptive(adaptive);
                SharedSa::Comp(SharedIpcomp::new(cfg)?)
            }
        })
    }

    /// Applies the SA to an outbound packet with the worker's IV generator and codecs.
    /// `Ok(false)` when IPComp left the packet as it was (non-expansion, RFC 3173 section
    /// 2.2).
    pub fn seal(&self, rng: &mut IvRng, codecs: &mut Codecs, buf: &mut PacketBuf) -> Result<bool, PacketError> {
        self.seal_timed(rng, codecs, buf, None)
    }

    /// As [`SharedSa::seal`]; an IPComp SA with a cost model times its compression with
    /// `clock` (monotonic nanoseconds) and feeds the model.
    pub fn seal_timed(
        &self,
        rng: &mut IvRng,
        codecs: &mut Codecs,
        buf: &mut PacketBuf,
        clock: Option<fn() -> u64>,
    ) -> Result<bool, PacketError> {
        match self {
            SharedSa::Esp(s) => s.seal(rng, buf).map(|_| true).map_err(Into::into),
            SharedSa::Ah(s) => s.seal(buf).map(|_| true).map_err(Into::into),
            SharedSa::Comp(s) => {
                let o = s.seal(codecs, buf, clock)?;
                Ok(matches!(o, SealOutcome::Compressed { .. }))
            }
        }
    }

    /// Removes the SA's header from an inbound packet whose outermost IPsec header is this
    /// SA's, found at `split` (ESP and AH; IPComp finds its own, with the worker's codecs and,
    /// for an SA with a cost model, timed by `clock`).
    pub fn open(
        &self,
        buf: &mut PacketBuf,
        split: Split,
        codecs: &mut Codecs,
        clock: Option<fn() -> u64>,
    ) -> Result<LayerOpened, PacketError> {
        match self {
            SharedSa::Esp(s) => s
                .open_at(buf, split)
                .map(|o| LayerOpened::authenticated(o.newest))
                .map_err(Into::into),
            SharedSa::Ah(s) => s
                .open_at(buf, split)
                .map(|o| LayerOpened::authenticated(o.newest))
                .map_err(Into::into),
            SharedSa::Comp(s) => Ok(LayerOpened {
                decompressed: matches!(s.open(codecs, buf, clock)?, OpenOutcome::Decompressed { .. }),
                newest: false,
            }),
        }
    }
}

/// What [`SharedSa::open`] learned about one layer of an inbound packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerOpened {
    /// IPComp: the payload was decompressed (`false`: its peer sent it uncompressed). ESP and
    /// AH: `false`.
    pub decompressed: bool,
    /// ESP and AH: the SA checks replays and the packet's sequence number is above every one
    /// it accepted before ([`ipsec_esp::Opened::newest`]). IPComp (no sequence numbers): `false`.
    pub newest: bool,
}

impl LayerOpened {
    fn authenticated(newest: bool) -> Self {
        LayerOpened {
            decompressed: false,
            newest,
        }
    }
}

/// Event bits an SA raised that the control side has not collected yet.
const PENDING_SOFT: u8 = 1;
const PENDING_HARD: u8 = 2;

fn state_code(s: State) -> u8 {
    match s {
        State::Mature => 0,
        State::Dying => 1,
        State::Expired => 2,
        State::Removed => 3,
    }
}

fn state_of(c: u8) -> State {
    match c {
        0 => State::Mature,
        1 => State::Dying,
        2 => State::Expired,
        _ => State::Removed,
    }
}

fn limit_code(l: Option<Limit>) -> u8 {
    match l {
        None => 0,
        Some(Limit::Bytes) => 1,
        Some(Limit::Packets) => 2,
        Some(Limit::Seconds) => 3,
        Some(Limit::Sequence) => 4,
    }
}

fn limit_of(c: u8) -> Option<Limit> {
    match c {
        1 => Some(Limit::Bytes),
        2 => Some(Limit::Packets),
        3 => Some(Limit::Seconds),
        4 => Some(Limit::Sequence),
        _ => None,
    }
}

/// An installed SA: its keyed transform, lifetime state and counters, shared by the control
/// side and every worker. Everything that changes per packet is atomic; state moves (soft
/// and hard expiry) are compare-and-swaps, so each event is raised exactly once however many
/// threads reach the limit together.
#[derive(Debug)]
pub struct SaEntry {
    /// How it was configured.
    pub config: SaConfig,
    pub(crate) sa: SharedSa,
    state: AtomicU8,
    expired_by: AtomicU8,
    soft_by: AtomicU8,
    pending: AtomicU8,
    bytes: AtomicU64,
    packets: AtomicU64,
    installed: Duration,
    pub(crate) inbound: AtomicCounters,
    pub(crate) outbound: AtomicCounters,
}

impl SaEntry {
    fn new(config: SaConfig, sa: SharedSa, now: Duration) -> Self {
        SaEntry {
            config,
            sa,
            state: AtomicU8::new(state_code(State::Mature)),
            expired_by: AtomicU8::new(0),
            soft_by: AtomicU8::new(0),
            pending: AtomicU8::new(0),
            bytes: AtomicU64::new(0),
            packets: AtomicU64::new(0),
            installed: now,
            inbound: AtomicCounters::default(),
            outbound: AtomicCounters::default(),
        }
    }

    /// Whether `other` can stand in for this SA in a policy: the same protocol, mode and
    /// endpoints (a rekeyed SA; RFC 4301 4.4.1.2 matches SAs to a policy by template).
    pub fn same_template(&self, other: &SaEntry) -> bool {
        let (a, b) = (&self.config.params, &other.config.params);
        a.proto == b.proto && a.mode == b.mode && a.tunnel == b.tunnel
    }

    /// The keyed transform.
    pub fn sa(&self) -> &SharedSa {
        &self.sa
    }

    /// Mature, dying (soft limit reached), expired or removed.
    pub fn state(&self) -> State {
        state_of(self.state.load(Ordering::Acquire))
    }

    /// Bytes and packets so far.
    pub fn usage(&self) -> Usage {
        Usage {
            bytes: self.bytes.load(Ordering::Relaxed),
            packets: self.packets.load(Ordering::Relaxed),
            installed: self.installed,
        }
    }

    /// The hard limit that stopped the SA, if one did.
    pub fn expired_by(&self) -> Option<Limit> {
        limit_of(self.expired_by.load(Ordering::Acquire))
    }

    /// Inbound counters, now.
    pub fn inbound(&self) -> Counters {
        self.inbound.load()
    }

    /// Outbound counters, now.
    pub fn outbound(&self) -> Counters {
        self.outbound.load()
    }

    /// Charges `packets` packets of `bytes` bytes in all to the lifetime.
    pub(crate) fn charge(&self, packets: u64, bytes: u64) {
        self.packets.fetch_add(packets, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Mature → dying, raising the soft event, if no other thread did it first.
    pub(crate) fn soft_expire(&self, limit: Limit) -> bool {
        let (m, d) = (state_code(State::Mature), state_code(State::Dying));
        if self
            .state
            .compare_exchange(m, d, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.soft_by.store(limit_code(Some(limit)), Ordering::Release);
            self.pending.fetch_or(PENDING_SOFT, Ordering::AcqRel);
            true
        } else {
            false
        }
    }

    /// Mature or dying → expired, raising the hard event, if no other thread did it first.
    pub(crate) fn hard_expire(&self, limit: Limit) -> bool {
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            if !matches!(state_of(cur), State::Mature | State::Dying) {
                return false;
            }
            match self
                .state
                .compare_exchange_weak(cur, state_code(State::Expired), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(c) => cur = c,
            }
        }
        self.expired_by.store(limit_code(Some(limit)), Ordering::Release);
        self.pending.fetch_or(PENDING_HARD, Ordering::AcqRel);
        true
    }

    pub(crate) fn mark_removed(&self) {
        self.state.store(state_code(State::Removed), Ordering::Release);
    }

    /// The events raised since the last call: (soft limit, hard limit).
    pub(crate) fn take_events(&self) -> (Option<Limit>, Option<Limit>) {
        let p = self.pending.swap(0, Ordering::AcqRel);
        let soft = (p & PENDING_SOFT != 0)
            .then(|| limit_of(self.soft_by.load(Ordering::Acquire)))
            .flatten();
        let hard = (p & PENDING_HARD != 0).then(|| self.expired_by()).flatten();
        (soft, hard)
    }

    /// Whether events are waiting for the control side.
    pub(crate) fn has_events(&self) -> bool {
        self.pending.load(Ordering::Acquire) != 0
    }
}

/// The installed SAs. Cloning is cheap in SAs (they are shared): the control side clones the
/// SAD to publish a new data plane.
///
/// Ids are never reused: an SA taken out (`Sad::take`) leaves no slot behind, so memory
/// follows the SAs installed now, not every SA there ever was, and an id still held
/// somewhere (an event, a policy naming a deleted SA) finds nothing rather than another SA.
#[derive(Debug, Default, Clone)]
pub struct Sad {
    entries: HashMap<SaId, Arc<SaEntry>>,
    /// The ids in `entries`, ascending (install order).
    order: Vec<SaId>,
    /// The next id to give.
    next: u32,
    /// (protocol, SPI, destination if the SA names one) → the SA: one flat entry per SA
    /// (and per alternative CPI), no list per (protocol, SPI) pair, which cost a heap block
    /// per SA in each left-right copy of the SAD.
    by_spi: HashMap<(u8, u32, Option<IpAddr>), SaId>,
    /// The tunnel-mode IPComp SAs (few; searched by endpoints).
    ipcomp_tunnels: Vec<SaId>,
}

impl Sad {
    /// An empty SAD.
    pub fn new() -> Self {
        Sad::default()
    }

    /// Keys and installs an SA at time `now` (the start of its time limits).
    pub fn install(&mut self, config: SaConfig, now: Duration) -> Result<SaId, InstallError> {
        let (id, entry) = self.prepare(config, now)?;
        self.insert(id, entry);
        Ok(id)
    }

    /// The checks and keying of [`Sad::install`], and the id the SA will have, without
    /// changing the SAD ([`Sad::insert`] puts it in).
    pub(crate) fn prepare(&self, config: SaConfig, now: Duration) -> Result<(SaId, Arc<SaEntry>), InstallError> {
        config.lifetime.validate().map_err(InstallError::Lifetime)?;
        if let Some(e) = config.encap {
            let why = if config.params.proto != Proto::Esp {
                Some("ESP in UDP (RFC 3948) is for ESP SAs only")
            } else if e.sport == 0 || e.dport == 0 {
                Some("ESP in UDP needs ports 1-65535")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(InstallError::Sa(PacketError::Ipsec(ipsec_core::Error::InvalidSa(why))));
            }
        }
        let (p, _, dst) = config.key();
        for spi in config.spis() {
            if let Some(id) = self.by_spi.get(&(p, spi, dst)) {
                let existing = self.entries.get(id).map_or_else(String::new, |e| e.config.name.clone());
                return Err(InstallError::Duplicate { existing });
            }
        }
        let sa = SharedSa::with_adaptive(&config.params, config.comp, config.adaptive).map_err(InstallError::Sa)?;
        if self.next == u32::MAX {
            return Err(InstallError::Sa(PacketError::Ipsec(ipsec_core::Error::InvalidSa(
                "no SA id left (2^32 - 1 SAs installed since start)",
            ))));
        }
        Ok((SaId(self.next), Arc::new(SaEntry::new(config, sa, now))))
    }

    /// Puts an SA that [`Sad::prepare`] made under its id (the next id given is the one
    /// after it).
    pub(crate) fn insert(&mut self, id: SaId, entry: Arc<SaEntry>) {
        let (p, _, dst) = entry.config.key();
        for spi in entry.config.spis() {
            self.by_spi.insert((p, spi, dst), id);
        }
        if entry.config.params.proto == Proto::Comp && entry.config.params.mode == Mode::Tunnel {
            self.ipcomp_tunnels.push(id);
        }
        self.entries.insert(id, entry);
        self.order.push(id);
        self.next = self.next.max(id.0.saturating_add(1));
    }

    /// The SA for an inbound header: the one whose destination is `dst`, else one installed
    /// without a destination.
    pub fn lookup(&self, proto: u8, spi: u32, dst: IpAddr) -> Option<SaId> {
        self.by_spi
            .get(&(proto, spi, Some(dst)))
            .or_else(|| self.by_spi.get(&(proto, spi, None)))
            .copied()
    }

    /// Takes an SA out of the inbound index; its entry (and counters) stay, marked removed.
    pub(crate) fn unindex(&mut self, id: SaId) {
        let Some(e) = self.entries.get(&id) else {
            return;
        };
        e.mark_removed();
        let (p, _, dst) = e.config.key();
        for spi in e.config.spis() {
            if self.by_spi.get(&(p, spi, dst)) == Some(&id) {
                self.by_spi.remove(&(p, spi, dst));
            }
        }
    }

    /// Takes a removed SA ([`Sad::unindex`]) out altogether; the caller keeps it until no
    /// published data plane holds it.
    pub(crate) fn take(&mut self, id: SaId) -> Option<Arc<SaEntry>> {
        let e = self.entries.remove(&id)?;
        self.order.retain(|&i| i != id);
        self.ipcomp_tunnels.retain(|&i| i != id);
        Some(e)
    }

    /// The tunnel-mode IPComp SA between `src` and `dst` (which receives IP-in-IP packets its
    /// peer did not compress), if one is installed.
    pub fn lookup_ipcomp_tunnel(&self, src: IpAddr, dst: IpAddr) -> Option<SaId> {
        let want = Some(Tunnel { src, dst });
        self.ipcomp_tunnels.iter().copied().find(|&id| {
            self.get(id)
                .is_some_and(|e| e.state() != State::Removed && e.config.params.tunnel == want)
        })
    }

    /// An SA by id.
    pub fn get(&self, id: SaId) -> Option<&SaEntry> {
        self.entries.get(&id).map(|e| &**e)
    }

    /// Every SA with its id, in install order.
    pub fn iter(&self) -> impl Iterator<Item = (SaId, &SaEntry)> {
        self.order
            .iter()
            .filter_map(|id| self.entries.get(id).map(|e| (*id, &**e)))
    }

    /// Number of SAs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
