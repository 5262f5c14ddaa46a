//! The data plane: what packets go through, shared by every worker thread (RFC 4301 sections
//! 5.1 and 5.2: outbound processing through the SPD and the bundle's SAs; inbound processing SA
//! by SA from the outside in, then the inbound policy check), and each thread's [`Worker`].
//! The control side that builds and publishes it is [`Engine`](super::Engine).

use super::{encap_matches, Arrival, Dropped, Framing, Route, Verdict, MAX_DEPTH};
use crate::bundle::PacketError;
use crate::counters::{AtomicDrops, DropReason};
use crate::lifetime::{Limit, State};
use crate::sad::{Codecs, SaEntry, SaId, Sad, SharedSa};
use crate::spd::{Action, Direction, Flow, Policy, Spd};
use crate::udp_encap::EncapError;
use alloc::sync::Arc;
use core::net::IpAddr;
use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use ipsec_core::ip::{self, proto, Ipv4Packet, Ipv6Packet, Split};
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Mode, Proto};
use ipsec_core::PacketBuf;
use ipsec_esp::OuterIp;
use ipsec_ipcomp::CryptoOp;

/// A worker's own context: what a thread needs besides the shared data plane: the CSPRNG
/// that makes ESP CBC IVs (RFC 3602 section 3: unpredictable IVs) and its IPComp codecs
/// ([`Codecs`]); one per thread, so no thread waits for another's IV or codec.
///
/// With a clock (the default with `std`: [`monotonic_ns`]; [`Worker::with_clock`] otherwise),
/// the worker also times what feeds an adaptive IPComp SA's cost model: each compression and
/// decompression of such an SA, and (one run in [`CRYPTO_SAMPLE`]) the bundle's ESP or AH
/// work after it. No SA wants timing unless it has a model, so other SAs pay nothing.
#[derive(Debug)]
pub struct Worker {
    rng: IvRng,
    clock: Option<fn() -> u64>,
    runs: u32,
    codecs: Codecs,
}

/// Nanoseconds since the first call, on the monotonic clock (`Instant`: `clock_gettime
/// (CLOCK_MONOTONIC)` through the vDSO on Linux, nanosecond resolution): the clock
/// [`Worker::new`] gives its workers.
#[cfg(feature = "std")]
pub fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

/// One sealed run in this many has its ESP/AH work timed for an adaptive IPComp SA.
pub const CRYPTO_SAMPLE: u32 = 8;

impl Worker {
    /// A worker whose IV generator is seeded by the operating system, with the monotonic
    /// clock [`monotonic_ns`] (so adaptive IPComp SAs get their timings on every path).
    #[cfg(feature = "std")]
    pub fn new() -> Result<Self, PacketError> {
        Ok(Worker::with_rng(IvRng::from_os()?).with_clock(monotonic_ns))
    }

    /// A worker with a caller-seeded IV generator (for `no_std` targets and reproducible
    /// tests) and no clock: give it one with [`Worker::with_clock`], or its adaptive IPComp
    /// SAs' models see no timings (and count what they missed, see `untimed` in snapshots).
    pub fn with_rng(rng: IvRng) -> Self {
        Worker {
            rng,
            clock: None,
            runs: 0,
            codecs: Codecs::default(),
        }
    }

    /// Gives the worker a monotonic clock in nanoseconds (e.g. `Instant`-based), to time
    /// compression and crypto for adaptive IPComp SAs.
    pub fn with_clock(mut self, clock: fn() -> u64) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Whether the worker has a clock.
    pub fn has_clock(&self) -> bool {
        self.clock.is_some()
    }

    /// Makes the codecs of `plane`'s IPComp SAs now, so their first packets allocate nothing.
    pub fn prepare(&mut self, plane: &DataPlane) {
        for (_, e) in plane.sad.iter() {
            if let SharedSa::Comp(s) = &e.sa {
                self.codecs.prepare(s);
            }
        }
    }
}

/// Counters and flags shared by every data plane an engine publishes.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) inbound_drops: AtomicDrops,
    pub(super) outbound_drops: AtomicDrops,
    /// Set when an SA raised an event the control side has not collected.
    pub(super) events: AtomicBool,
}

/// The packet path: an immutable SPD and SAD of shared SAs. Published by [`Engine`](super::Engine) after
/// every change; `outbound`/`inbound` take `&self`, so threads share one `Arc<DataPlane>`
/// (or an `ArcSwap`, see [`Engine::plane_handle`](super::Engine::plane_handle)) and never take a global lock.
#[derive(Debug, Clone, Default)]
pub struct DataPlane {
    /// Shared with the control side and the other planes published since the last policy
    /// change (publishing copies the two pointers, not the tables).
    pub(super) spd: Arc<Spd>,
    /// Shared as the SPD, until the next SA change.
    pub(super) sad: Arc<Sad>,
    pub(super) shared: Arc<Shared>,
}

/// The outermost header of a packet, parsed once per layer: the IP length it claims, the split
/// before the first non-extension header, the addresses, and whether the packet is an IP
/// fragment.
struct Outer {
    len: usize,
    split: Split,
    src: IpAddr,
    dst: IpAddr,
    fragment: bool,
}

impl Outer {
    /// Checks the header once ([`Ipv4Packet::new_checked`] or [`Ipv6Packet::new_checked`]:
    /// version, lengths within the buffer) and reads everything the layer needs from it; the
    /// IPv6 extension headers are walked within the claimed length (link-layer padding after
    /// it is no header).
    fn of(packet: &[u8]) -> Result<Outer, ipsec_core::Error> {
        match ip::version(packet)? {
            4 => {
                let p = Ipv4Packet::new_checked(packet)?;
                Ok(Outer {
                    len: p.total_len(),
                    split: Split {
                        nh_offset: ip::ipv4_field::PROTOCOL,
                        offset: p.header_len(),
                        next: p.protocol(),
                    },
                    src: IpAddr::V4(p.src()),
                    dst: IpAddr::V4(p.dst()),
                    fragment: p.is_fragment(),
                })
            }
            _ => {
                let p = Ipv6Packet::new_checked(packet)?;
                let len = p.total_len();
                let mut fragment = false;
                let split = ip::walk_ipv6_ext(&packet[..len], |h| fragment |= h.kind == proto::FRAGMENT)?;
                Ok(Outer {
                    len,
                    split,
                    src: IpAddr::V6(p.src()),
                    dst: IpAddr::V6(p.dst()),
                    fragment,
                })
            }
        }
    }

    /// The SPI (IPComp: CPI) of an ESP, AH or IPComp header at the split.
    fn spi(&self, packet: &[u8]) -> Result<u32, ipsec_core::Error> {
        crate::bundle::spi_of(self.split.next, &packet[self.split.offset..])
    }
}

/// One layer an inbound packet was opened with, counted only once its policy accepts it.
#[derive(Debug, Clone, Copy)]
struct Layer {
    id: SaId,
    before: usize,
    after: usize,
    uncompressed: bool,
}

/// What a batch run adds to one SA, added to its atomics once.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    packets: u64,
    before: u64,
    after: u64,
    overhead: i64,
    not_compressed: u64,
    /// Bytes charged to the lifetime.
    charged: u64,
}

/// An outbound packet's protect policy (its index), its verdict if no SA applies, or its drop.
type Classified = Result<Result<usize, Verdict>, Dropped>;

/// The worker's clock, if this run's crypto is to be timed for the adaptive IPComp SA `timed`.
fn crypto_clock(timed: Option<&SaEntry>, w: &Worker) -> Option<fn() -> u64> {
    timed?;
    // The first run and one in CRYPTO_SAMPLE after it: a model needs its first figures early.
    w.clock.filter(|_| w.runs % CRYPTO_SAMPLE == 1)
}

/// Feeds `ns` spent on the live packets of a run (of `lens` bytes before the transform) into
/// an adaptive IPComp SA's model.
fn feed_crypto(comp: &SaEntry, op: CryptoOp, lens: &[usize], live: &[bool], ns: u64) {
    let bytes: usize = lens.iter().zip(live).filter(|(_, l)| **l).map(|(b, _)| *b).sum();
    if let SharedSa::Comp(s) = &comp.sa {
        s.observe_crypto(op, bytes, ns);
    }
}

/// Tells an adaptive IPComp SA's model that its bundle put `wire` bytes on the link at `now`
/// (its link-rate estimate, when no rate is configured).
fn feed_sent(comp: Option<&SaEntry>, codecs: &mut Codecs, wire: usize, now: Duration) {
    if let Some(SharedSa::Comp(s)) = comp.map(|e| &e.sa) {
        s.observe_sent(codecs, wire, now.as_nanos() as u64);
    }
}

/// Whether the SA is an IPComp SA with a cost model (whose bundle's work is timed for it).
fn has_model(e: &SaEntry) -> bool {
    matches!(&e.sa, SharedSa::Comp(s) if s.wants_timing())
}

/// Packets a batch call prepares at once (more are processed in chunks of this size).
pub const MAX_BATCH: usize = ipsec_esp::MAX_BATCH;

impl DataPlane {
    /// The policies this plane matches against.
    pub fn spd(&self) -> &Spd {
        &self.spd
    }

    /// The SAs.
    pub fn sad(&self) -> &Sad {
        &self.sad
    }

    fn raise(&self) {
        self.shared.events.store(true, Ordering::Release);
    }

    /// Whether an SA raised an event (a byte or packet limit reached on traffic) that the
    /// control side has not collected yet ([`Engine::next_event`](super::Engine::next_event)): one atomic load, so a
    /// daemon can look often and take the control side's lock only when there is something.
    pub fn events_pending(&self) -> bool {
        self.shared.events.load(Ordering::Acquire)
    }

    fn drop_engine(&self, dir: Direction, reason: DropReason, error: Option<PacketError>) -> Dropped {
        match dir {
            Direction::In => self.shared.inbound_drops.count(reason),
            Direction::Out => self.shared.outbound_drops.count(reason),
        }
        Dropped {
            reason,
            sa: None,
            error,
        }
    }

    fn drop_at(&self, dir: Direction, id: SaId, reason: DropReason, error: Option<PacketError>) -> Dropped {
        if let Some(e) = self.sad.get(id) {
            match dir {
                Direction::In => e.inbound.count_drop(reason),
                Direction::Out => e.outbound.count_drop(reason),
            }
            let exhausted = matches!(error, Some(PacketError::Ipsec(ipsec_core::Error::SequenceExhausted)));
            if exhausted && e.hard_expire(Limit::Sequence) {
                self.raise();
            }
        }
        Dropped {
            reason,
            sa: Some(id),
            error,
        }
    }

    /// Checks the SA's state and hard limits before it processes packets: `Ok(n)` is how many
    /// of the next packets (of the byte lengths `lens` gives) it may still process, following
    /// Linux's rule that an SA works while its counts are below the hard limit.
    ///
    /// `pending` is usage an inbound batch has tallied for the SA but not yet applied: it
    /// counts against the limits, and the SA expires when the tally is applied, not here.
    fn admit(
        &self,
        e: &SaEntry,
        now: Duration,
        lens: impl Iterator<Item = usize>,
        pending: &Tally,
    ) -> Result<usize, DropReason> {
        match e.state() {
            State::Expired => return Err(DropReason::Expired),
            State::Removed => return Err(DropReason::NoSa),
            State::Mature | State::Dying => {}
        }
        let hard = &e.config.lifetime.hard;
        let mut u = e.usage();
        u.packets += pending.packets;
        u.bytes += pending.charged;
        if let Some(l) = hard.reached(&u, now) {
            if pending.packets == 0 && e.hard_expire(l) {
                self.raise();
            }
            return Err(DropReason::Expired);
        }
        if hard.bytes.is_none() && hard.packets.is_none() {
            return Ok(usize::MAX);
        }
        let mut n = 0;
        for len in lens {
            if hard.reached(&u, now).is_some() {
                break;
            }
            u.charge(len);
            n += 1;
        }
        Ok(n)
    }

    /// Moves the SA to dying or expired if its usage or age reached a limit.
    pub(super) fn check_limits(&self, e: &SaEntry, now: Duration) {
        let u = e.usage();
        if e.state() == State::Mature {
            if let Some(limit) = e.config.lifetime.soft.reached(&u, now) {
                if e.soft_expire(limit) {
                    self.raise();
                }
            }
        }
        if let Some(limit) = e.config.lifetime.hard.reached(&u, now) {
            if e.hard_expire(limit) {
                self.raise();
            }
        }
    }

    /// Adds a tally to an SA's counters and lifetime in one step and checks its limits.
    fn apply(&self, dir: Direction, id: SaId, t: &Tally, now: Duration) {
        let Some(e) = self.sad.get(id) else { return };
        let c = match dir {
            Direction::In => &e.inbound,
            Direction::Out => &e.outbound,
        };
        if t.packets > 0 {
            c.count_n(t.packets, t.before, t.after, t.overhead);
            e.charge(t.packets, t.charged);
        }
        if t.not_compressed > 0 {
            c.count_not_compressed(t.not_compressed);
        }
        if t.packets > 0 {
            self.check_limits(e, now);
        }
    }

    /// Whether SA `got` satisfies a policy that names `want`: the same SA, or one with its
    /// protocol, mode and endpoints (its predecessor or successor across a rekey).
    fn stands_in(&self, got: SaId, want: SaId) -> bool {
        got == want
            || match (self.sad.get(got), self.sad.get(want)) {
                (Some(g), Some(w)) => g.same_template(w),
                _ => false,
            }
    }

    /// The outbound policy's bundle for a packet, or its verdict if it is not protected.
    fn classify_out(&self, packet: &[u8]) -> Classified {
        let flow = match Flow::from_packet(packet) {
            Ok(f) => f,
            Err(e) => return Err(self.drop_engine(Direction::Out, DropReason::Malformed, Some(e.into()))),
        };
        self.classify_flow(&flow)
    }

    fn classify_flow(&self, flow: &Flow) -> Classified {
        match self.spd.lookup(Direction::Out, flow) {
            None
            | Some((
                _,
                Policy {
                    action: Action::Discard,
                    ..
                },
            )) => Err(self.drop_engine(Direction::Out, DropReason::PolicyDiscard, None)),
            Some((
                _,
                Policy {
                    action: Action::Bypass, ..
                },
            )) => Ok(Err(Verdict::Bypass)),
            Some((i, _)) => Ok(Ok(i)),
        }
    }

    fn bundle(&self, policy: usize) -> &[SaId] {
        match self.spd.policies().get(policy).map(|p| &p.action) {
            Some(Action::Protect(ids)) => ids,
            _ => &[],
        }
    }

    /// Processes an outbound packet (RFC 4301 5.1): the first matching outbound policy
    /// decides; a protect policy seals the packet in place with its bundle, in order.
    pub fn outbound(&self, w: &mut Worker, buf: &mut PacketBuf, now: Duration) -> Result<Verdict, Dropped> {
        let policy = match self.classify_out(buf.packet())? {
            Ok(p) => p,
            Err(v) => return Ok(v),
        };
        let mut applied = 0;
        // An adaptive IPComp SA earlier in the bundle, whose model this packet's crypto feeds.
        w.runs = w.runs.wrapping_add(1);
        let mut timed: Option<&SaEntry> = None;
        for &id in self.bundle(policy) {
            let Some(e) = self.sad.get(id) else {
                return Err(self.drop_at(Direction::Out, id, DropReason::NoSa, None));
            };
            let before = buf.len();
            match self.admit(e, now, core::iter::once(before), &Tally::default()) {
                Ok(0) => return Err(self.drop_at(Direction::Out, id, DropReason::Expired, None)),
                Ok(_) => {}
                Err(r) => return Err(self.drop_at(Direction::Out, id, r, None)),
            }
            let t0 = crypto_clock(timed, w).map(|c| (c, c()));
            let applies = match e.sa.seal_timed(&mut w.rng, &mut w.codecs, buf, w.clock) {
                Ok(a) => a,
                Err(err) => return Err(self.drop_at(Direction::Out, id, DropReason::of(&err), Some(err))),
            };
            if let (Some((c, t0)), Some(comp)) = (t0, timed) {
                let op = match e.sa {
                    SharedSa::Ah(_) => CryptoOp::IntegrityCompute,
                    _ => CryptoOp::Encrypt,
                };
                feed_crypto(comp, op, &[before], &[true], c().saturating_sub(t0));
            }
            if has_model(e) {
                timed = Some(e);
            }
            let after = buf.len();
            let t = Tally {
                packets: 1,
                before: before as u64,
                after: after as u64,
                overhead: after as i64 - before as i64,
                not_compressed: u64::from(!applies),
                charged: before as u64,
            };
            applied += usize::from(applies);
            self.apply(Direction::Out, id, &t, now);
        }
        feed_sent(timed, &mut w.codecs, buf.len(), now);
        w.codecs.flush();
        Ok(Verdict::Protected(applied))
    }

    /// Processes a batch of outbound packets: `out[i]` is packet `i`'s verdict. Packets are
    /// classified one by one (a packet whose flow equals the previous one's reuses its policy
    /// lookup); each run of consecutive packets under the same protect policy is sealed
    /// together, with one draw from each SA's sequence counter
    /// ([`AtomicSeq::take_n`](ipsec_core::replay::AtomicSeq::take_n)), one lifetime charge
    /// and one counter update per SA, and multi-buffer crypto where the SA supports it.
    pub fn outbound_batch(
        &self,
        w: &mut Worker,
        bufs: &mut [PacketBuf],
        out: &mut [Result<Verdict, Dropped>],
        now: Duration,
    ) {
        self.outbound_batch_routed(w, bufs, out, &mut [], Framing::Ip, now);
    }

    /// [`outbound_batch`](Self::outbound_batch) framed for the caller's socket (`framing`:
    /// whole IP packets, or for a UDP socket the ESP part only, with no outer header built)
    /// that also names, in `routes[i]`, where packet `i` goes: its outermost SA and next hop
    /// ([`Route`]), so the caller sends it without parsing it again. `Some` exactly where
    /// `out[i]` is `Ok(Verdict::Protected(_))`; packets beyond `routes` get none.
    pub fn outbound_batch_routed(
        &self,
        w: &mut Worker,
        bufs: &mut [PacketBuf],
        out: &mut [Result<Verdict, Dropped>],
        routes: &mut [Option<Route>],
        framing: Framing,
        now: Duration,
    ) {
        for r in routes.iter_mut() {
            *r = None;
        }
        let n = bufs.len().min(out.len());
        let mut start = 0;
        while start < n {
            let end = (start + MAX_BATCH).min(n);
            let mut policy = [usize::MAX; MAX_BATCH];
            let mut last: Option<(Flow, Classified)> = None;
            for i in start..end {
                let r = match Flow::from_packet(bufs[i].packet()) {
                    Err(e) => Err(self.drop_engine(Direction::Out, DropReason::Malformed, Some(e.into()))),
                    Ok(f) => match &last {
                        Some((lf, r)) if *lf == f => match r {
                            Err(d) => Err(self.drop_engine(Direction::Out, d.reason, None)),
                            Ok(v) => Ok(*v),
                        },
                        _ => {
                            let r = self.classify_flow(&f);
                            last = Some((f, r));
                            r
                        }
                    },
                };
                match r {
                    Ok(Ok(p)) => {
                        policy[i - start] = p;
                        out[i] = Ok(Verdict::Protected(0));
                    }
                    Ok(Err(v)) => out[i] = Ok(v),
                    Err(d) => out[i] = Err(d),
                }
            }
            let mut i = start;
            while i < end {
                let p = policy[i - start];
                if p == usize::MAX {
                    i += 1;
                    continue;
                }
                let mut j = i + 1;
                while j < end && policy[j - start] == p {
                    j += 1;
                }
                let r = routes.len();
                let run = &mut routes[i.min(r)..j.min(r)];
                self.seal_run(w, &mut bufs[i..j], &mut out[i..j], run, p, framing, now);
                i = j;
            }
            start = end;
        }
    }

    /// Seals a run of packets under one protect policy, framed as `framing` says, and names
    /// each sealed packet's route in `routes` (as far as it reaches). On entry `out[i]` is
    /// `Ok(Protected(0))` for each packet; on return each is its verdict.
    #[allow(clippy::too_many_arguments)]
    fn seal_run(
        &self,
        w: &mut Worker,
        bufs: &mut [PacketBuf],
        out: &mut [Result<Verdict, Dropped>],
        routes: &mut [Option<Route>],
        policy: usize,
        framing: Framing,
        now: Duration,
    ) {
        let n = bufs.len().min(out.len()).min(MAX_BATCH);
        let bundle = self.bundle(policy);
        let outermost = bundle.last().copied();
        if framing == Framing::Udp {
            // RFC 3948 2.1: only ESP goes in UDP; refused before any SA spends a number.
            let proto = outermost.and_then(|id| self.sad.get(id)).map(|e| e.config.params.proto);
            if let (Some(id), Some(p)) = (outermost, proto.filter(|p| *p != Proto::Esp)) {
                let err = PacketError::Encap(EncapError::NotEsp(p.number()));
                for o in out[..n].iter_mut().filter(|o| o.is_ok()) {
                    *o = Err(self.drop_at(Direction::Out, id, DropReason::EncapMismatch, Some(err)));
                }
                return;
            }
        }
        // An adaptive IPComp SA earlier in the bundle, whose model this run's crypto feeds.
        w.runs = w.runs.wrapping_add(1);
        let mut timed: Option<&SaEntry> = None;
        for &id in bundle {
            let Some(e) = self.sad.get(id) else {
                for o in out[..n].iter_mut().filter(|o| o.is_ok()) {
                    *o = Err(self.drop_at(Direction::Out, id, DropReason::NoSa, None));
                }
                continue;
            };
            let live = |out: &[Result<Verdict, Dropped>], b: &[PacketBuf]| {
                out.iter()
                    .zip(b)
                    .filter(|(o, _)| o.is_ok())
                    .map(|(_, b)| b.len())
                    .collect_lens()
            };
            let lens = live(&out[..n], &bufs[..n]);
            let allowed = match self.admit(e, now, lens.iter(), &Tally::default()) {
                Ok(a) => a,
                Err(r) => {
                    for o in out[..n].iter_mut().filter(|o| o.is_ok()) {
                        *o = Err(self.drop_at(Direction::Out, id, r, None));
                    }
                    continue;
                }
            };
            // Packets past the hard limit are dropped as expired; the SA expires after them.
            for (seen, o) in out[..n].iter_mut().filter(|o| o.is_ok()).enumerate() {
                if seen >= allowed {
                    *o = Err(self.drop_at(Direction::Out, id, DropReason::Expired, None));
                }
            }
            let mut before = [0usize; MAX_BATCH];
            for (b, l) in bufs[..n].iter().zip(before.iter_mut()) {
                *l = b.len();
            }
            let mut t = Tally::default();
            let mut sealed = [false; MAX_BATCH];
            match &e.sa {
                SharedSa::Esp(esp) => {
                    let mut res: [Result<u64, ipsec_core::Error>; MAX_BATCH] = [Ok(0); MAX_BATCH];
                    for (r, o) in res.iter_mut().zip(&out[..n]) {
                        if o.is_err() {
                            *r = Err(ipsec_core::Error::Truncated);
                        }
                    }
                    let live: [bool; MAX_BATCH] = core::array::from_fn(|i| i < n && out[i].is_ok());
                    let t0 = crypto_clock(timed, w).map(|c| (c, c()));
                    let outer = match framing {
                        Framing::Udp if Some(id) == outermost => OuterIp::Socket,
                        _ => OuterIp::Header,
                    };
                    esp.seal_batch_outer(&mut w.rng, &mut bufs[..n], &mut res[..n], outer);
                    if let (Some((c, t0)), Some(comp)) = (t0, timed) {
                        feed_crypto(
                            comp,
                            CryptoOp::Encrypt,
                            &before[..n],
                            &live[..n],
                            c().saturating_sub(t0),
                        );
                    }
                    for i in 0..n {
                        if !live[i] {
                            continue;
                        }
                        match res[i] {
                            Ok(_) => sealed[i] = true,
                            Err(err) => {
                                let err = PacketError::Ipsec(err);
                                out[i] = Err(self.drop_at(Direction::Out, id, DropReason::of(&err), Some(err)));
                            }
                        }
                    }
                }
                sa => {
                    let live: [bool; MAX_BATCH] = core::array::from_fn(|i| i < n && out[i].is_ok());
                    let t0 = crypto_clock(timed, w).map(|c| (c, c()));
                    if has_model(e) {
                        timed = Some(e);
                    }
                    for i in 0..n {
                        if out[i].is_err() {
                            continue;
                        }
                        match sa.seal_timed(&mut w.rng, &mut w.codecs, &mut bufs[i], w.clock) {
                            Ok(true) => sealed[i] = true,
                            Ok(false) => {
                                // IPComp left it uncompressed: counted, not "applied".
                                t.not_compressed += 1;
                                t.packets += 1;
                                t.before += before[i] as u64;
                                t.after += bufs[i].len() as u64;
                                t.overhead += bufs[i].len() as i64 - before[i] as i64;
                                t.charged += before[i] as u64;
                            }
                            Err(err) => {
                                out[i] = Err(self.drop_at(Direction::Out, id, DropReason::of(&err), Some(err)));
                            }
                        }
                    }
                    if let (Some((c, t0)), Some(comp), SharedSa::Ah(_)) = (t0, timed, sa) {
                        let ns = c().saturating_sub(t0);
                        feed_crypto(comp, CryptoOp::IntegrityCompute, &before[..n], &live[..n], ns);
                    }
                }
            }
            for i in 0..n {
                if sealed[i] {
                    let after = bufs[i].len();
                    t.packets += 1;
                    t.before += before[i] as u64;
                    t.after += after as u64;
                    t.overhead += after as i64 - before[i] as i64;
                    t.charged += before[i] as u64;
                    if let Ok(Verdict::Protected(k)) = &mut out[i] {
                        *k += 1;
                    }
                }
            }
            self.apply(Direction::Out, id, &t, now);
        }
        if let Some(e) = outermost.and_then(|id| Some((id, self.sad.get(id)?))) {
            self.route_run(e, &mut bufs[..n], &mut out[..n], routes, framing);
        }
        if timed.is_some() {
            let wire = out[..n]
                .iter()
                .zip(&bufs[..n])
                .filter(|(o, _)| o.is_ok())
                .map(|(_, b)| b.len())
                .sum();
            feed_sent(timed, &mut w.codecs, wire, now);
        }
        w.codecs.flush();
    }

    /// Names the route of each packet of a run sealed with outermost SA `id`: a tunnel-mode
    /// SA's tunnel end, without a look at the packet; in transport mode the packet's own
    /// destination, its IP header then taken off for a UDP socket ([`Framing::Udp`]), which
    /// writes its own.
    fn route_run(
        &self,
        (id, e): (SaId, &SaEntry),
        bufs: &mut [PacketBuf],
        out: &mut [Result<Verdict, Dropped>],
        routes: &mut [Option<Route>],
        framing: Framing,
    ) {
        let p = &e.config.params;
        let tunnel_end = match p.mode {
            Mode::Tunnel => p.tunnel.map(|t| t.dst),
            Mode::Transport => None,
        };
        for (i, (buf, o)) in bufs.iter_mut().zip(out.iter_mut()).enumerate() {
            if o.is_err() {
                continue;
            }
            let to = match tunnel_end {
                Some(to) => to,
                None => match Outer::of(buf.packet()) {
                    Ok(h) => {
                        if framing == Framing::Udp {
                            if let Err(err) = buf.pull_front(h.split.offset) {
                                *o = Err(self.drop_at(Direction::Out, id, DropReason::NoRoom, Some(err.into())));
                                continue;
                            }
                        }
                        h.dst
                    }
                    Err(err) => {
                        *o = Err(self.drop_at(Direction::Out, id, DropReason::Malformed, Some(err.into())));
                        continue;
                    }
                },
            };
            if let Some(r) = routes.get_mut(i) {
                *r = Some(Route { sa: id, spi: p.spi, to });
            }
        }
    }

    /// Processes an inbound packet (RFC 4301 5.2): opens it in place SA by SA, from the
    /// outside in, while the outer header is ESP, AH or IPComp with an SA here (or IP-in-IP
    /// between a tunnel-mode IPComp SA's endpoints); then the first inbound policy matching the
    /// result must ask for exactly the SAs used (a transport-mode IPComp SA may be missing: its
    /// peer sent the packet uncompressed). Each header is parsed once per layer and its offset
    /// handed to the SA. SAs are charged (counters and lifetime) only once the policy has
    /// accepted the packet, so packets the policy refuses cannot use up an SA's lifetime.
    /// IPComp inside IPComp is refused (RFC 3173 section 2: never compress twice).
    pub fn inbound(&self, w: &mut Worker, buf: &mut PacketBuf, now: Duration) -> Result<Verdict, Dropped> {
        let mut tallies = Tallies::default();
        let r = self.inbound_one(w, buf, now, &mut tallies, &mut Arrival::default());
        tallies.flush(self, now);
        w.codecs.flush();
        r
    }

    /// Processes a batch of inbound packets: `out[i]` is packet `i`'s verdict. Each SA's
    /// counters and lifetime are updated once per batch (its hard limits still hold packet
    /// by packet).
    pub fn inbound_batch(
        &self,
        w: &mut Worker,
        bufs: &mut [PacketBuf],
        out: &mut [Result<Verdict, Dropped>],
        now: Duration,
    ) {
        let mut tallies = Tallies::default();
        for (buf, o) in bufs.iter_mut().zip(out.iter_mut()) {
            *o = self.inbound_one(w, buf, now, &mut tallies, &mut Arrival::default());
        }
        tallies.flush(self, now);
        w.codecs.flush();
    }

    /// [`inbound_batch`](Self::inbound_batch) that also reports, in `arrivals[i]`, the SA
    /// that opened packet `i`'s outermost header and whether the packet was new for it
    /// ([`Arrival`]): a daemon attributes an accepted packet to its peer from this, without
    /// looking the SA up again. Meaningful only where `out[i]` is `Ok(Verdict::Protected(_))`.
    pub fn inbound_batch_arrivals(
        &self,
        w: &mut Worker,
        bufs: &mut [PacketBuf],
        out: &mut [Result<Verdict, Dropped>],
        arrivals: &mut [Arrival],
        now: Duration,
    ) {
        let mut tallies = Tallies::default();
        for ((buf, o), a) in bufs.iter_mut().zip(out.iter_mut()).zip(arrivals.iter_mut()) {
            *o = self.inbound_one(w, buf, now, &mut tallies, a);
        }
        tallies.flush(self, now);
        w.codecs.flush();
    }

    /// The SA [`inbound`](Self::inbound) would open `packet`'s outermost ESP, AH or IPComp
    /// header with (the same lookup by protocol, SPI and destination, RFC 4301 4.1), without
    /// opening or counting anything; `None` if the packet is malformed, has no such header or
    /// no SA here. When this plane then accepts the packet, that SA authenticated it (or
    /// decompressed it): a caller can attribute the packet to the SA's peer. No allocation.
    pub fn inbound_sa(&self, packet: &[u8]) -> Option<SaId> {
        let outer = Outer::of(packet).ok()?;
        let next = outer.split.next;
        if !matches!(next, proto::ESP | proto::AH | proto::COMP) {
            return None;
        }
        let spi = outer.spi(packet).ok()?;
        self.sad.lookup(next, spi, outer.dst)
    }

    /// The outermost layer of a packet that arrived as a datagram's payload, the socket having
    /// taken the IP and UDP headers off ([`Arrival::datagram`]): ESP, the only protocol that
    /// goes in UDP (RFC 3948 2.1), its SA found by the SPI the payload starts with and the
    /// destination the socket told (RFC 4301 4.1), opened where it lies
    /// ([`ipsec_esp::Esp::open_payload`]). A transport-mode packet then gets the datagram's
    /// IP header, from the addresses the socket told (RFC 3948 3.1.2 and 3.2.2 steps 1-2).
    /// The layer is counted as if its IP header had come with it, as a whole packet's is.
    fn open_datagram(
        &self,
        buf: &mut PacketBuf,
        (src, dst): (IpAddr, IpAddr),
        now: Duration,
        tallies: &mut Tallies,
        arrival: &mut Arrival,
    ) -> Result<Layer, Dropped> {
        let spi = match crate::bundle::spi_of(proto::ESP, buf.packet()) {
            Ok(s) => s,
            Err(e) => return Err(self.drop_engine(Direction::In, DropReason::Malformed, Some(e.into()))),
        };
        let Some((id, e)) = self
            .sad
            .lookup(proto::ESP, spi, dst)
            .and_then(|id| Some((id, self.sad.get(id)?)))
        else {
            let err = PacketError::Ipsec(ipsec_core::Error::UnknownSpi(spi));
            return Err(self.drop_engine(Direction::In, DropReason::NoSa, Some(err)));
        };
        arrival.outer = Some((src, dst));
        if !encap_matches(e.config.encap, arrival.encap) {
            let err = PacketError::Encap(match arrival.encap {
                None => EncapError::NotEncapsulated(spi),
                Some(_) => EncapError::UnexpectedEncap(spi),
            });
            return Err(self.drop_at(Direction::In, id, DropReason::EncapMismatch, Some(err)));
        }
        if let Err(r) = self.admit(e, now, core::iter::empty(), &tallies.get(id)) {
            return Err(self.drop_at(Direction::In, id, r, None));
        }
        let SharedSa::Esp(esp) = &e.sa else {
            return Err(self.drop_at(Direction::In, id, DropReason::NoSa, None));
        };
        let header = match dst {
            IpAddr::V4(_) => ip::ipv4_field::HEADER_LEN,
            IpAddr::V6(_) => ip::ipv6_field::HEADER_LEN,
        };
        let before = header + buf.len();
        let opened = match esp.open_payload(buf) {
            Ok(o) => o,
            Err(err) => {
                let err = PacketError::Ipsec(err);
                return Err(self.drop_at(Direction::In, id, DropReason::of(&err), Some(err)));
            }
        };
        if esp.mode() == Mode::Transport {
            if let Err(err) = crate::udp_encap::push_datagram_header(buf, src, dst, opened.next_header) {
                let err = PacketError::Encap(err);
                return Err(self.drop_at(Direction::In, id, DropReason::Malformed, Some(err)));
            }
        }
        arrival.sa = Some(id);
        arrival.newest = opened.newest;
        Ok(Layer {
            id,
            before,
            after: buf.len(),
            uncompressed: false,
        })
    }

    fn inbound_one(
        &self,
        w: &mut Worker,
        buf: &mut PacketBuf,
        now: Duration,
        tallies: &mut Tallies,
        arrival: &mut Arrival,
    ) -> Result<Verdict, Dropped> {
        *arrival = Arrival {
            encap: arrival.encap,
            datagram: arrival.datagram,
            ..Arrival::default()
        };
        let mut used = [Layer {
            id: SaId(0),
            before: 0,
            after: 0,
            uncompressed: false,
        }; MAX_DEPTH];
        let mut depth = 0;
        let mut decompressed = false;
        if let Some((src, dst)) = arrival.datagram {
            used[0] = self.open_datagram(buf, (src, dst), now, tallies, arrival)?;
            depth = 1;
        }
        loop {
            let outer = match Outer::of(buf.packet()) {
                Ok(o) => o,
                Err(e) => return Err(self.drop_engine(Direction::In, DropReason::Malformed, Some(e.into()))),
            };
            // Link-layer padding after the IP packet goes (Outer::of checked the length).
            if let Err(e) = buf.trim_back(buf.len() - outer.len) {
                return Err(self.drop_engine(Direction::In, DropReason::Malformed, Some(e.into())));
            }
            let next = outer.split.next;
            let ipsec = matches!(next, proto::ESP | proto::AH | proto::COMP);
            if decompressed && next == proto::COMP {
                // RFC 3173 section 2: a packet is never compressed twice.
                let err = PacketError::Comp(ipsec_ipcomp::Error::Malformed("IPComp inside IPComp"));
                return Err(self.drop_engine(Direction::In, DropReason::Malformed, Some(err)));
            }
            // An IP-in-IP packet between the endpoints of a tunnel-mode IPComp SA is that SA's
            // packet sent uncompressed (RFC 3173 2.2): the SA removes the outer header.
            let (id, uncompressed) = if ipsec {
                let spi = match outer.spi(buf.packet()) {
                    Ok(s) => s,
                    Err(e) => return Err(self.drop_engine(Direction::In, DropReason::Malformed, Some(e.into()))),
                };
                match self.sad.lookup(next, spi, outer.dst) {
                    Some(id) => (id, false),
                    None if depth == 0 => {
                        let err = PacketError::Ipsec(ipsec_core::Error::UnknownSpi(spi));
                        return Err(self.drop_engine(Direction::In, DropReason::NoSa, Some(err)));
                    }
                    None => break,
                }
            } else if matches!(next, proto::IPIP | proto::IPV6) && !decompressed {
                match self.sad.lookup_ipcomp_tunnel(outer.src, outer.dst) {
                    Some(id) if !used[..depth].iter().any(|l| l.id == id) => (id, true),
                    _ => break,
                }
            } else {
                break;
            };
            if depth == MAX_DEPTH {
                return Err(self.drop_engine(Direction::In, DropReason::Malformed, None));
            }
            let Some(e) = self.sad.get(id) else {
                return Err(self.drop_engine(Direction::In, DropReason::NoSa, None));
            };
            if outer.fragment && matches!(next, proto::ESP | proto::AH) {
                let err = PacketError::Ipsec(ipsec_core::Error::Fragment);
                return Err(self.drop_at(Direction::In, id, DropReason::Fragment, Some(err)));
            }
            if depth == 0 {
                arrival.outer = Some((outer.src, outer.dst));
                if next == proto::ESP && !encap_matches(e.config.encap, arrival.encap) {
                    let spi = e.config.params.spi;
                    let err = PacketError::Encap(match arrival.encap {
                        None => EncapError::NotEncapsulated(spi),
                        Some(_) => EncapError::UnexpectedEncap(spi),
                    });
                    return Err(self.drop_at(Direction::In, id, DropReason::EncapMismatch, Some(err)));
                }
            }
            let admitted = self.admit(e, now, core::iter::empty(), &tallies.get(id));
            if let Err(r) = admitted {
                return Err(self.drop_at(Direction::In, id, r, None));
            }
            let before = buf.len();
            let r = e.sa.open(buf, outer.split, &mut w.codecs, w.clock);
            let opened = match r {
                Ok(o) => o,
                Err(err) => return Err(self.drop_at(Direction::In, id, DropReason::of(&err), Some(err))),
            };
            decompressed |= opened.decompressed;
            if depth == 0 {
                arrival.sa = Some(id);
                arrival.newest = opened.newest;
            }
            used[depth] = Layer {
                id,
                before,
                after: buf.len(),
                uncompressed,
            };
            depth += 1;
        }
        let flow = match Flow::from_packet(buf.packet()) {
            Ok(f) => f,
            Err(e) => return Err(self.drop_engine(Direction::In, DropReason::Malformed, Some(e.into()))),
        };
        let used = &used[..depth];
        let action = self.spd.lookup(Direction::In, &flow).map(|(_, p)| &p.action);
        let bypass = matches!(action, Some(Action::Bypass));
        let mut skipped: [Option<SaId>; 3] = [None; 3];
        let ok = match action {
            None | Some(Action::Discard) => false,
            Some(Action::Bypass) => used.is_empty(),
            Some(Action::Protect(ids)) => {
                // Opened outside-in = the bundle's seal order reversed.
                let mut rest = used.iter().map(|l| l.id).peekable();
                let mut ok = true;
                for (i, &want) in ids.iter().rev().enumerate() {
                    if rest.peek().is_some_and(|&got| self.stands_in(got, want)) {
                        rest.next();
                    } else if self.sad.get(want).is_some_and(|e| {
                        // A transport-mode IPComp packet sent uncompressed is the plain packet;
                        // a tunnel-mode one arrives as IP-in-IP and went through the SA above.
                        e.config.params.proto == Proto::Comp && e.config.params.mode == Mode::Transport
                    }) {
                        if let Some(slot) = skipped.get_mut(i) {
                            *slot = Some(want);
                        }
                    } else {
                        ok = false;
                        break;
                    }
                }
                ok && rest.next().is_none()
            }
        };
        if !ok {
            return Err(self.drop_engine(Direction::In, DropReason::PolicyDiscard, None));
        }
        // Accepted: now the SAs are charged.
        for l in used {
            let t = tallies.entry(self, l.id, now);
            t.packets += 1;
            t.before += l.before as u64;
            t.after += l.after as u64;
            t.overhead += l.before as i64 - l.after as i64;
            t.charged += l.after as u64;
            if l.uncompressed {
                t.not_compressed += 1;
            }
        }
        for id in skipped.into_iter().flatten() {
            tallies.entry(self, id, now).not_compressed += 1;
        }
        Ok(if bypass {
            Verdict::Bypass
        } else {
            Verdict::Protected(depth)
        })
    }
}

/// Per-SA tallies of an inbound batch, applied once at its end.
#[derive(Default)]
struct Tallies {
    slots: [(Option<SaId>, Tally); 8],
}

impl Tallies {
    fn get(&self, id: SaId) -> Tally {
        self.slots
            .iter()
            .find(|(s, _)| *s == Some(id))
            .map(|(_, t)| *t)
            .unwrap_or_default()
    }

    /// The tally of `id`, making room (by applying the oldest) when all slots are taken.
    fn entry(&mut self, plane: &DataPlane, id: SaId, now: Duration) -> &mut Tally {
        let i = match self.slots.iter().position(|(s, _)| *s == Some(id)) {
            Some(i) => i,
            None => {
                let i = match self.slots.iter().position(|(s, _)| s.is_none()) {
                    Some(i) => i,
                    None => {
                        let (s, t) = self.slots[0];
                        if let Some(s) = s {
                            plane.apply(Direction::In, s, &t, now);
                        }
                        0
                    }
                };
                self.slots[i] = (Some(id), Tally::default());
                i
            }
        };
        &mut self.slots[i].1
    }

    fn flush(&mut self, plane: &DataPlane, now: Duration) {
        for (s, t) in self.slots.iter_mut() {
            if let Some(id) = s.take() {
                plane.apply(Direction::In, id, t, now);
            }
        }
    }
}

/// Lengths of the live packets of a run, on the stack.
trait CollectLens {
    fn collect_lens(self) -> LenList;
}

/// Up to [`MAX_BATCH`] packet lengths.
struct LenList {
    lens: [usize; MAX_BATCH],
    n: usize,
}

impl LenList {
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.lens[..self.n].iter().copied()
    }
}

impl<I: Iterator<Item = usize>> CollectLens for I {
    fn collect_lens(self) -> LenList {
        let mut l = LenList {
            lens: [0; MAX_BATCH],
            n: 0,
        };
        for (slot, v) in l.lens.iter_mut().zip(self) {
            *slot = v;
            l.n += 1;
        }
        l
    }
}
