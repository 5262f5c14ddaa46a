//! Packet processing through the SPD and SAD (RFC 4301 sections 5.1 and 5.2): outbound
//! packets are matched to a policy and sealed with its bundle; inbound packets are opened SA
//! by SA from the outside in, then checked against the inbound policy their inner headers
//! match. Sans-IO: the caller passes the packet buffer and the time.
//!
//! Split into a control side and a data plane, as Linux XFRM splits configuration (under
//! `xfrm_cfg_mutex`) from `xfrm_output_one`/`xfrm_input` (per-SA state only): the [`Engine`]
//! (`&mut self`) adds, replaces and removes SAs and policies, collects events and expires SAs,
//! and after every change publishes an immutable [`DataPlane`] (SPD + SAD of shared SAs). Any
//! number of threads process packets through a `&DataPlane` at once, each with its own
//! [`Worker`] (IV generator). Counters, lifetime usage and SA states are atomics on the
//! shared SAs, so the control side reads them without stopping the workers and each soft or
//! hard event is raised once.

use crate::bundle::PacketError;
use crate::counters::{CompSnapshot, Counters, DropReason, Drops};
use crate::left_right::{catch_up, change, Change};
use crate::lifetime::{Limit, State, Usage};
use crate::sad::{InstallError, SaConfig, SaEntry, SaId, Sad, SharedSa};
use crate::spd::{Action, Policy, Spd};
use crate::udp_encap::{Ports, UdpEncap};
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use core::sync::atomic::Ordering;
use core::time::Duration;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::Proto;
use ipsec_core::PacketBuf;

/// The most SAs one inbound packet may be opened with (IPComp + ESP + AH, and one more for
/// a nested tunnel). Deeper nesting is dropped as malformed.
pub const MAX_DEPTH: usize = 4;

/// Something the caller should know about, in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A soft limit was reached: the SA still works; negotiate its replacement.
    SoftExpired {
        /// The SA.
        sa: SaId,
        /// The limit reached.
        limit: Limit,
    },
    /// A hard limit was reached (or the sequence space ran out): the SA drops its packets.
    HardExpired {
        /// The SA.
        sa: SaId,
        /// The limit reached.
        limit: Limit,
    },
}

/// A packet the engine dropped: why, and at which SA if one was involved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// The reason it was counted under.
    pub reason: DropReason,
    /// The SA whose counters it went to (`None`: the engine's own counters).
    pub sa: Option<SaId>,
    /// The transform error behind it, if there was one.
    pub error: Option<PacketError>,
}

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason.name())?;
        if let Some(e) = &self.error {
            write!(f, " ({e})")?;
        }
        if let Some(id) = self.sa {
            write!(f, " at SA {}", id.0)?;
        }
        Ok(())
    }
}

/// What happened to a packet that was not dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A protect policy matched. Outbound: sealed by this many SAs (an IPComp SA that left
    /// the packet uncompressed is not counted). Inbound: opened by this many SAs, as the
    /// policy requires (a transport-mode IPComp SA whose peer did not compress is not counted;
    /// a tunnel-mode one, which removed the IP-in-IP header, is).
    Protected(usize),
    /// A bypass policy let it through unchanged.
    Bypass,
}

/// How the packets a data plane seals leave the host: what the caller's socket takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Framing {
    /// Whole IP packets, outer header included (a raw IP socket, a pcap).
    #[default]
    Ip,
    /// The ESP part only, for a UDP socket whose kernel writes the IP and UDP headers (ESP in
    /// UDP, RFC 3948 2.1): a tunnel-mode ESP SA builds no outer header
    /// ([`ipsec_esp::OuterIp::Socket`]), and a transport-mode packet's own IP header goes once
    /// it is sealed; where the packet goes is its [`Route`]. Only ESP goes in UDP: a bundle
    /// whose outermost SA is AH or IPComp drops its packets ([`DropReason::EncapMismatch`],
    /// [`EncapError::NotEsp`](crate::udp_encap::EncapError::NotEsp)) before sealing any.
    Udp,
}

/// Where a sealed packet goes, named by the engine with its verdict (as boringtun's
/// `WriteToNetwork` and wireguard-go's `QueueOutboundElement { peer, keypair }` carry theirs):
/// the SA that sealed its outermost header and the next hop, so the caller neither parses
/// the packet nor reads the SPI back out of it to find where to send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The SA of the outermost header.
    pub sa: SaId,
    /// Its SPI (IPComp: CPI): the key IKE's SAs are known by to the caller.
    pub spi: u32,
    /// The outer destination: a tunnel-mode SA's tunnel end, else the packet's own
    /// destination (transport mode).
    pub to: IpAddr,
}

/// An inbound packet's context as far as the engine is concerned: how it reached the host
/// (told by the caller, which read it from a socket) and what the engine learned opening it
/// (reported by [`DataPlane::inbound_batch_arrivals`], which fills in the rest). A daemon
/// carries it from the socket to the TUN write: it attributes the packet to a peer from the
/// SA, without looking anything up again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arrival {
    /// In: the UDP ports the packet arrived in (ESP in UDP, RFC 3948), `None` when it
    /// arrived as a bare IP packet. An ESP SA with `encap espinudp` takes only packets that
    /// arrived in UDP to its destination port ([`DropReason::EncapMismatch`]); an SA without
    /// takes either (a daemon that carries all ESP in UDP configures it once, not per SA).
    pub encap: Option<Ports>,
    /// In: `Some((src, dst))` when the buffer holds only a datagram's payload, the socket
    /// having taken the IP and UDP headers off (ESP in UDP), with the datagram's source and
    /// destination as the socket told them. The payload is opened as the ESP packet it must
    /// be (its SA found by its SPI and `dst`), with no IP header put in front of it; a
    /// transport-mode packet gets its IP header from these addresses once opened
    /// ([`udp_encap::push_datagram_header`](crate::udp_encap::push_datagram_header)).
    /// `None`: the buffer holds a whole IP packet.
    pub datagram: Option<(IpAddr, IpAddr)>,
    /// The SA that opened the outermost ESP, AH or IPComp header (`None`: none did).
    pub sa: Option<SaId>,
    /// That SA is ESP or AH, checks replays, and the packet's sequence number is above every
    /// one it had accepted: a new packet, not a late, delayed or replayed copy. RFC 7296 2.23
    /// lets only such a packet move a NAT'd peer's address (an attacker who captured an older
    /// packet, or any packet of an SA without a replay window, cannot redirect the tunnel).
    pub newest: bool,
    /// The outermost header's source and destination, as parsed to find that SA (`None`:
    /// the packet did not get that far).
    pub outer: Option<(IpAddr, IpAddr)>,
}

impl Arrival {
    /// A packet that arrived in a UDP datagram with these ports.
    pub fn in_udp(ports: Ports) -> Arrival {
        Arrival {
            encap: Some(ports),
            ..Arrival::default()
        }
    }

    /// The payload of a UDP datagram from `src` to `dst` with these ports, the socket having
    /// taken the IP and UDP headers off ([`Arrival::datagram`]).
    pub fn in_datagram(ports: Ports, src: IpAddr, dst: IpAddr) -> Arrival {
        Arrival {
            encap: Some(ports),
            datagram: Some((src, dst)),
            ..Arrival::default()
        }
    }
}

/// Whether a packet that arrived as `arrived` may be opened by an SA with `want`: an SA with
/// ESP in UDP only from a datagram to its port (the source port is not checked: a NAT may
/// rewrite it, RFC 3948 has the receiver follow it).
fn encap_matches(want: Option<UdpEncap>, arrived: Option<Ports>) -> bool {
    match (want, arrived) {
        (None, _) => true,
        (Some(w), Some(p)) => w.dport == p.dport,
        (Some(_), None) => false,
    }
}

/// One SA in a [`Snapshot`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SaSnapshot {
    /// Its id.
    pub id: SaId,
    /// Its configured name.
    pub name: String,
    /// `esp`, `ah` or `comp`.
    pub proto: &'static str,
    /// SPI (IPComp: CPI).
    pub spi: u32,
    /// `transport` or `tunnel`.
    pub mode: &'static str,
    /// Mature, dying or expired.
    pub state: State,
    /// The hard limit that expired it.
    pub expired_by: Option<Limit>,
    /// Bytes and packets counted against the lifetime.
    pub usage: Usage,
    /// Seconds since it was installed.
    pub age_seconds: u64,
    /// Inbound traffic and drops.
    pub inbound: Counters,
    /// Outbound traffic and drops.
    pub outbound: Counters,
    /// IPComp SAs: the adaptive mode, its counters and the cost model's inputs.
    pub comp: Option<CompSnapshot>,
}

/// What was counted on the SAs taken out ([`Engine::remove_sa`]: deleted, or replaced and
/// retired), added up: once an SA is freed its counters live on here, so no total a snapshot
/// gives ever goes down and the snapshot stays the size of the SAs installed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Retired {
    /// SAs taken out since the engine started.
    pub sas: u64,
    /// Of those, the ones not freed yet: a worker still holds a data plane published before
    /// they were taken out (their counters are counted here already and may still grow).
    pub held: u64,
    /// Bytes and packets they were charged against their lifetimes.
    pub bytes: u64,
    /// Packets likewise.
    pub packets: u64,
    /// Their inbound traffic and drops.
    pub inbound: Counters,
    /// Their outbound traffic and drops.
    pub outbound: Counters,
}

impl Retired {
    fn add(&mut self, e: &SaEntry) {
        let u = e.usage();
        self.sas += 1;
        self.bytes = self.bytes.saturating_add(u.bytes);
        self.packets = self.packets.saturating_add(u.packets);
        self.inbound.add(&e.inbound());
        self.outbound.add(&e.outbound());
    }
}

/// All counters at one moment; serializes to JSON with the `serde` feature.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    /// Each SA installed now, in install order.
    pub sas: Vec<SaSnapshot>,
    /// The SAs taken out, their counters added up.
    pub retired: Retired,
    /// Inbound drops not charged to an SA (no SA, policy).
    pub inbound_drops: Drops,
    /// Outbound drops not charged to an SA (policy).
    pub outbound_drops: Drops,
}

mod dataplane;
#[cfg(feature = "std")]
pub use dataplane::monotonic_ns;
pub use dataplane::{DataPlane, Worker, CRYPTO_SAMPLE, MAX_BATCH};

/// The control side: SAs and policies are added, replaced and removed here (`&mut self`),
/// events collected and SAs expired; every change publishes a new [`DataPlane`] that workers
/// pick up. [`Engine::outbound`] and [`Engine::inbound`] run the current plane with the
/// engine's own worker, for single-threaded callers.
#[derive(Debug)]
pub struct Engine {
    plane: DataPlane,
    published: Arc<DataPlane>,
    /// SAs taken out that a data plane in use may still hold (freed by [`Engine::reclaim`]).
    held: Vec<Arc<SaEntry>>,
    /// The counters of the SAs freed.
    retired: Retired,
    #[cfg(feature = "std")]
    handle: PlaneHandle,
    events: VecDeque<Event>,
    worker: Option<Worker>,
    /// The SPD as it was before the last policy change, with the changes since: the next
    /// change is made on it (when no data plane in use holds it any more) instead of on a
    /// copy of the whole list. See [`change`].
    spare_spd: Option<(Arc<Spd>, Vec<SpdChange>)>,
    /// The same for the SAD.
    spare_sad: Option<(Arc<Sad>, Vec<SadChange>)>,
}

/// A change to the SAD.
#[derive(Debug, Clone)]
enum SadChange {
    Insert(SaId, Arc<SaEntry>),
    Unindex(SaId),
    Take(SaId),
}

impl Change<Sad> for SadChange {
    type Out = Option<Arc<SaEntry>>;
    fn apply(self, sad: &mut Sad) -> Option<Arc<SaEntry>> {
        match self {
            SadChange::Insert(id, e) => {
                sad.insert(id, e);
                None
            }
            SadChange::Unindex(id) => {
                sad.unindex(id);
                None
            }
            SadChange::Take(id) => sad.take(id),
        }
    }
}

/// A change to the SPD, kept to be made again on the spare copy.
#[derive(Debug, Clone)]
enum SpdChange {
    Push(Policy),
    Remove(usize),
    Repoint(SaId, SaId),
    /// [`Spd::insert`].
    Insert(usize, Vec<Policy>),
    /// The policies at these positions (ascending) go ([`Spd::remove_at`]).
    RemoveAt(Vec<usize>),
}

impl Change<Spd> for SpdChange {
    /// The policies taken out, with their positions.
    type Out = Vec<(usize, Policy)>;
    fn apply(self, spd: &mut Spd) -> Vec<(usize, Policy)> {
        match self {
            SpdChange::Push(p) => {
                spd.push(p);
                Vec::new()
            }
            SpdChange::Remove(i) => spd.remove(i).map(|p| (i, p)).into_iter().collect(),
            SpdChange::Repoint(old, new) => {
                spd.repoint(old, new);
                Vec::new()
            }
            SpdChange::Insert(at, ps) => {
                spd.insert(at, ps);
                Vec::new()
            }
            SpdChange::RemoveAt(at) => spd.remove_at(&at),
        }
    }
}

/// A data plane that workers load per batch and the control side replaces after each change
/// (a read-copy-update pointer, `arc_swap::ArcSwap`: loading is a few atomic operations and
/// never waits for the control side).
#[cfg(feature = "std")]
pub type PlaneHandle = Arc<arc_swap::ArcSwap<DataPlane>>;

impl Default for Engine {
    fn default() -> Self {
        let plane = DataPlane::default();
        let published = Arc::new(plane.clone());
        Engine {
            #[cfg(feature = "std")]
            handle: Arc::new(arc_swap::ArcSwap::new(Arc::clone(&published))),
            plane,
            published,
            held: Vec::new(),
            retired: Retired::default(),
            events: VecDeque::new(),
            worker: None,
            spare_spd: None,
            spare_sad: None,
        }
    }
}

fn rank(p: Proto) -> u8 {
    match p {
        Proto::Comp => 0,
        Proto::Esp => 1,
        Proto::Ah => 2,
    }
}

impl Engine {
    /// An engine with no SAs and no policies (so every packet is discarded).
    pub fn new() -> Self {
        Engine::default()
    }

    fn change_spd(&mut self, c: SpdChange) -> Vec<(usize, Policy)> {
        change(&mut self.plane.spd, &mut self.spare_spd, c)
    }

    fn change_sad(&mut self, c: SadChange) -> Option<Arc<SaEntry>> {
        change(&mut self.plane.sad, &mut self.spare_sad, c)
    }

    /// Keys an SA and puts it in the SAD (not yet published).
    fn install(&mut self, config: SaConfig, now: Duration) -> Result<SaId, InstallError> {
        let (id, entry) = self.plane.sad.prepare(config, now)?;
        self.change_sad(SadChange::Insert(id, entry));
        Ok(id)
    }

    fn publish(&mut self) {
        self.published = Arc::new(self.plane.clone());
        #[cfg(feature = "std")]
        self.handle.store(Arc::clone(&self.published));
        catch_up(&mut self.spare_spd);
        catch_up(&mut self.spare_sad);
    }

    /// The data plane as of the last change.
    pub fn data_plane(&self) -> Arc<DataPlane> {
        Arc::clone(&self.published)
    }

    /// The pointer workers load the current data plane from; it follows every change.
    #[cfg(feature = "std")]
    pub fn plane_handle(&self) -> PlaneHandle {
        Arc::clone(&self.handle)
    }

    /// Keys and installs an SA at time `now` (the start of its time limits).
    #[cfg(feature = "std")]
    pub fn add_sa(&mut self, config: SaConfig, now: Duration) -> Result<SaId, InstallError> {
        let id = self.install(config, now)?;
        self.publish();
        Ok(id)
    }

    /// As [`Engine::add_sa`], for `no_std` targets: `rng` seeds the IV generator of the
    /// engine's own worker (used by [`Engine::outbound`]) if it has none yet.
    pub fn add_sa_with_rng(&mut self, config: SaConfig, rng: IvRng, now: Duration) -> Result<SaId, InstallError> {
        let id = self.install(config, now)?;
        self.worker.get_or_insert_with(|| Worker::with_rng(rng));
        self.publish();
        Ok(id)
    }

    /// Appends a policy after the others of its direction. A protect policy's bundle must
    /// name installed SAs in seal order: IPComp, then ESP, then AH, each at most once.
    pub fn add_policy(&mut self, policy: Policy) -> Result<(), InstallError> {
        self.check_policy(&policy)?;
        self.change_spd(SpdChange::Push(policy));
        self.publish();
        Ok(())
    }

    /// Replaces every policy at once (a config reload), each checked as
    /// [`Engine::add_policy`] checks it; nothing changes unless all pass. Workers see the old
    /// list or the new one, never a mix: one data plane is published.
    pub fn set_policies(&mut self, policies: Vec<Policy>) -> Result<(), InstallError> {
        for p in &policies {
            self.check_policy(p)?;
        }
        let mut spd = Spd::new();
        for p in policies {
            spd.push(p);
        }
        self.plane.spd = Arc::new(spd);
        self.spare_spd = None;
        self.publish();
        Ok(())
    }

    /// Whether [`Engine::add_policy`] would take `policy` (its bundle's SAs installed and in
    /// seal order), without adding it: a config loader checks each policy for its error
    /// message, then installs all with one [`Engine::set_policies`].
    pub fn check_policy(&self, policy: &Policy) -> Result<(), InstallError> {
        if let Action::Protect(ids) = &policy.action {
            if ids.is_empty() || ids.len() > 3 {
                return Err(InstallError::BundleOrder);
            }
            let mut last = None;
            for &id in ids {
                let e = self.plane.sad.get(id).ok_or(InstallError::UnknownSa(id))?;
                let r = rank(e.config.params.proto);
                if last.is_some_and(|l| r <= l) {
                    return Err(InstallError::BundleOrder);
                }
                last = Some(r);
            }
        }
        Ok(())
    }

    /// Takes out the policy at `index` (its position in [`Spd::policies`]) and publishes the
    /// new data plane; packets no longer match it from the next one a worker processes.
    pub fn remove_policy(&mut self, index: usize) -> Result<Policy, InstallError> {
        if index >= self.plane.spd.policies().len() {
            return Err(InstallError::UnknownPolicy(index));
        }
        let (_, p) = self
            .change_spd(SpdChange::Remove(index))
            .pop()
            .ok_or(InstallError::UnknownPolicy(index))?;
        self.publish();
        Ok(p)
    }

    /// Puts `policies` in at position `at` of the SPD (past the end: after all), each checked
    /// as [`Engine::add_policy`] checks it; nothing changes unless all pass. One change of the
    /// SPD and one data plane published, however many: an IKE child's policies (appended), or
    /// a rekey's (before the pair it replaces, RFC 7296 2.8), without the SPD rebuilt.
    pub fn insert_policies(&mut self, at: usize, policies: Vec<Policy>) -> Result<(), InstallError> {
        for p in &policies {
            self.check_policy(p)?;
        }
        if !policies.is_empty() {
            self.change_spd(SpdChange::Insert(at, policies));
            self.publish();
        }
        Ok(())
    }

    /// Takes out every protect policy whose bundle names one of `sas` (an IKE child's, when it
    /// is deleted or rekeyed) and returns them with the positions they had. One change of the
    /// SPD, linear in its size without rebuilding its index, and one data plane published
    /// (none when no policy names them).
    pub fn remove_policies_using(&mut self, sas: &[SaId]) -> Vec<(usize, Policy)> {
        // found once here; both left-right copies then take out the same positions
        let at: Vec<usize> = (self.plane.spd.policies().iter().enumerate())
            .filter(|(_, p)| p.protects_with_any(sas))
            .map(|(i, _)| i)
            .collect();
        if at.is_empty() {
            return Vec::new();
        }
        let out = self.change_spd(SpdChange::RemoveAt(at));
        self.publish();
        out
    }

    /// Rekeying: installs `config` and points every policy that names `old` at it. The old SA
    /// stays in the SAD, so packets already in flight on it are still accepted (inbound
    /// policies match SAs by protocol, mode and endpoints); take it out with
    /// [`Engine::remove_sa`] when its peer has switched, or let its hard lifetime end it.
    #[cfg(feature = "std")]
    pub fn replace_sa(&mut self, old: SaId, config: SaConfig, now: Duration) -> Result<SaId, InstallError> {
        self.replace(old, config, now)
    }

    /// As [`Engine::replace_sa`], for `no_std` targets (see [`Engine::add_sa_with_rng`]).
    pub fn replace_sa_with_rng(
        &mut self,
        old: SaId,
        config: SaConfig,
        rng: IvRng,
        now: Duration,
    ) -> Result<SaId, InstallError> {
        self.worker.get_or_insert_with(|| Worker::with_rng(rng));
        self.replace(old, config, now)
    }

    fn replace(&mut self, old: SaId, config: SaConfig, now: Duration) -> Result<SaId, InstallError> {
        let old_proto = self
            .plane
            .sad
            .get(old)
            .ok_or(InstallError::UnknownSa(old))?
            .config
            .params
            .proto;
        if config.params.proto != old_proto {
            return Err(InstallError::ReplaceProtocol);
        }
        let new = self.install(config, now)?;
        self.change_spd(SpdChange::Repoint(old, new));
        self.publish();
        Ok(new)
    }

    /// Takes an SA out: inbound packets for it find no SA, and outbound policies that still
    /// name it drop their packets as `no_sa`. It leaves the SAD (its id is never given again)
    /// and its counters go to the snapshot's [`Retired`] totals. It is freed, keys zeroed,
    /// once no worker holds a data plane published before now: at once if none does, else
    /// at a later [`Engine::poll`] (a grace period, as RCU's, that the planes' reference
    /// counts measure).
    pub fn remove_sa(&mut self, id: SaId) -> Result<(), InstallError> {
        self.plane.sad.get(id).ok_or(InstallError::UnknownSa(id))?;
        self.change_sad(SadChange::Unindex(id));
        // Its last events (an expiry raised by a worker) are queued before it goes.
        self.collect_events_forced();
        if let Some(e) = self.change_sad(SadChange::Take(id)) {
            self.held.push(e);
        }
        self.publish();
        self.reclaim();
        Ok(())
    }

    /// Frees the SAs taken out that no data plane holds any more (every worker has moved on
    /// to a plane published after they went), adding their final counters to the retired
    /// totals. [`Engine::poll`] calls it; the number still held is [`Retired::held`].
    pub fn reclaim(&mut self) {
        // A spare SAD still holding an SA taken out lets it go once no plane holds the spare.
        catch_up(&mut self.spare_sad);
        let mut keep = Vec::new();
        for e in core::mem::take(&mut self.held) {
            // Unique: no plane has it, so no worker can count on it any more (`try_unwrap`
            // synchronizes with the other holders' drops, and so with their counting).
            match Arc::try_unwrap(e) {
                Ok(e) => self.retired.add(&e),
                Err(e) => keep.push(e),
            }
        }
        self.held = keep;
    }

    /// The retired totals now: the freed SAs' and those still held.
    fn retired_now(&self) -> Retired {
        let mut r = self.retired;
        for e in &self.held {
            r.add(e);
        }
        r.held = self.held.len() as u64;
        r
    }

    /// The policies.
    pub fn spd(&self) -> &Spd {
        &self.plane.spd
    }

    /// The SAs.
    pub fn sad(&self) -> &Sad {
        &self.plane.sad
    }

    /// Collects the events the SAs raised into the queue, SA by SA (soft before hard).
    fn collect_events(&mut self) {
        if !self.plane.shared.events.swap(false, Ordering::AcqRel) {
            return;
        }
        self.collect_events_forced();
    }

    fn collect_events_forced(&mut self) {
        for (id, e) in self.plane.sad.iter() {
            if !e.has_events() {
                continue;
            }
            let (soft, hard) = e.take_events();
            if let Some(limit) = soft {
                self.events.push_back(Event::SoftExpired { sa: id, limit });
            }
            if let Some(limit) = hard {
                self.events.push_back(Event::HardExpired { sa: id, limit });
            }
        }
    }

    /// The oldest event not yet taken.
    pub fn next_event(&mut self) -> Option<Event> {
        self.collect_events();
        self.events.pop_front()
    }

    fn worker(&mut self) -> Result<&mut Worker, Dropped> {
        #[cfg(feature = "std")]
        if self.worker.is_none() {
            self.worker = Some(Worker::new().map_err(|e| Dropped {
                reason: DropReason::NoRoom,
                sa: None,
                error: Some(e),
            })?);
        }
        self.worker.as_mut().ok_or(Dropped {
            reason: DropReason::NoSa,
            sa: None,
            error: None,
        })
    }

    /// [`DataPlane::outbound`] on the current plane with the engine's own worker.
    pub fn outbound(&mut self, buf: &mut PacketBuf, now: Duration) -> Result<Verdict, Dropped> {
        let plane = Arc::clone(&self.published);
        let r = plane.outbound(self.worker()?, buf, now);
        self.collect_events();
        r
    }

    /// [`DataPlane::inbound`] on the current plane with the engine's own worker.
    pub fn inbound(&mut self, buf: &mut PacketBuf, now: Duration) -> Result<Verdict, Dropped> {
        let plane = Arc::clone(&self.published);
        let r = plane.inbound(self.worker()?, buf, now);
        self.collect_events();
        r
    }

    /// Expires SAs whose time limits have passed without traffic, raising their events.
    pub fn poll(&mut self, now: Duration) {
        for (_, e) in self.plane.sad.iter() {
            self.plane.check_limits(e, now);
        }
        self.collect_events();
        self.reclaim();
    }

    /// When [`Engine::poll`] next has something to do: the earliest time limit (soft for a
    /// mature SA, hard for a live one) on the caller's clock, or `None` if no SA has one
    /// (the shape of quinn's `poll_timeout`). Byte and packet limits are checked on traffic.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        for (_, e) in self.plane.sad.iter() {
            let lt = &e.config.lifetime;
            let installed = e.usage().installed;
            let at = |secs: Option<u64>| secs.map(|s| installed + Duration::from_secs(s));
            let candidates = match e.state() {
                State::Mature => [at(lt.soft.seconds), at(lt.hard.seconds)],
                State::Dying => [None, at(lt.hard.seconds)],
                State::Expired | State::Removed => [None, None],
            };
            for t in candidates.into_iter().flatten() {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        next
    }

    /// Every counter, now.
    pub fn snapshot(&self, now: Duration) -> Snapshot {
        Snapshot {
            sas: self.plane.sad.iter().map(|(id, e)| sa_snapshot(id, e, now)).collect(),
            retired: self.retired_now(),
            inbound_drops: self.plane.shared.inbound_drops.load(),
            outbound_drops: self.plane.shared.outbound_drops.load(),
        }
    }
}

fn sa_snapshot(id: SaId, e: &SaEntry, now: Duration) -> SaSnapshot {
    let p = &e.config.params;
    let usage = e.usage();
    SaSnapshot {
        id,
        name: e.config.name.clone(),
        proto: p.proto.name(),
        spi: p.spi,
        mode: p.mode.name(),
        state: e.state(),
        expired_by: e.expired_by(),
        usage,
        age_seconds: usage.age(now).as_secs(),
        inbound: e.inbound(),
        outbound: e.outbound(),
        comp: match &e.sa {
            SharedSa::Comp(s) => Some(CompSnapshot::of(e.config.adaptive, s)),
            _ => None,
        },
    }
}
