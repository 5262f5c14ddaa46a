//! An IPComp SA: compresses outbound packets and decompresses inbound ones, in place in a
//! [`PacketBuf`].
use crate::compressor::{Algorithm, Compressor};
use crate::error::Error;
use crate::header::{IpcompPacket, IpcompRepr, HEADER_LEN};
use crate::policy::{
    Adaptive, AdaptiveMode, Alternative, Backoff, BackoffState, CostModel, Counters, ModelConfig, ModelStatus,
};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::net::IpAddr;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use ipsec_core::ip::{self, ipv4_field, ipv6_field, proto, Ipv4Packet, Ipv4Repr, Ipv6Repr, Split, MAX_PACKET};
use ipsec_core::{Mode, PacketBuf, SaParams, Tunnel};

/// Packets (transport: payloads; tunnel: inner packets) shorter than this are not compressed
/// (RFC 2394 / RFC 2395 give 90 bytes as the typical threshold).
pub const DEFAULT_MIN_SIZE: usize = 90;
/// TTL / hop limit of a tunnel-mode outer header.
pub const OUTER_TTL: u8 = 64;

/// Configuration of an IPComp SA.
#[derive(Debug, Clone, PartialEq)]
pub struct IpcompConfig {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The CPI sent and expected (defaults to the algorithm's).
    pub cpi: u16,
    /// Transport or tunnel.
    pub mode: Mode,
    /// Tunnel endpoints (required in tunnel mode).
    pub tunnel: Option<Tunnel>,
    /// Smallest payload (transport) or inner packet (tunnel) worth compressing.
    pub min_size: usize,
    /// Largest packet decompression may produce (the MTU of the inner side); at most 65535.
    pub mtu: usize,
    /// DEFLATE only: largest match distance emitted. 2048 (default) suits Linux's 2 KB-window
    /// inflate; 32768 gives zlib's full window to peers that inflate with one.
    pub deflate_window: usize,
    /// How outbound packets are chosen for compression.
    pub adaptive: AdaptiveMode,
    /// RFC 3173 back-off (used in [`AdaptiveMode::Backoff`]).
    pub backoff: Backoff,
    /// Cost model: required by [`AdaptiveMode::Model`] (defaults to an unlimited link when
    /// `None`); in [`AdaptiveMode::Backoff`] it is consulted after the back-off if given.
    pub model: Option<ModelConfig>,
    /// A second algorithm under its own CPI: accepted inbound in every mode; outbound, the
    /// model of [`AdaptiveMode::Model`] chooses between it and [`algorithm`](Self::algorithm)
    /// (the other modes send with `algorithm` only).
    pub alternative: Option<Alternative>,
}

impl IpcompConfig {
    /// Transport mode, the algorithm's CPI and the defaults.
    pub fn new(algorithm: Algorithm) -> Self {
        IpcompConfig {
            algorithm,
            cpi: algorithm.cpi(),
            mode: Mode::Transport,
            tunnel: None,
            min_size: DEFAULT_MIN_SIZE,
            mtu: MAX_PACKET,
            deflate_window: crate::deflate::LINUX_WINDOW,
            adaptive: AdaptiveMode::default(),
            backoff: Backoff::default(),
            model: None,
            alternative: None,
        }
    }
    /// Sets the adaptive mode and, for [`AdaptiveMode::Model`], the model for its link rate.
    pub fn with_adaptive(mut self, a: Adaptive) -> Self {
        self.adaptive = a.mode;
        self.model = a.model_config();
        self.alternative = a.alternative;
        self
    }
    /// From shared SA parameters (protocol IPComp; `spi` holds the CPI).
    pub fn from_sa_params(p: &SaParams, algorithm: Algorithm) -> Result<Self, Error> {
        p.validate()?;
        if p.proto != ipsec_core::sa::Proto::Comp {
            return Err(Error::Core(ipsec_core::Error::InvalidSa("not an IPComp SA")));
        }
        let cpi = u16::try_from(p.spi).map_err(|_| ipsec_core::Error::InvalidSa("a CPI is 16 bits"))?;
        Ok(IpcompConfig {
            cpi,
            mode: p.mode,
            tunnel: p.tunnel,
            ..Self::new(algorithm)
        })
    }
}

/// Why a packet was sent without compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// Shorter than the minimum size.
    TooSmall,
    /// Compression was tried and did not shrink it by more than the header (non-expansion).
    Incompressible {
        /// Bytes compression was tried on.
        original: usize,
    },
    /// The RFC 3173 back-off.
    Backoff,
    /// The cost model.
    Model,
    /// The SA's mode is [`AdaptiveMode::Off`].
    Off,
}

/// What [`IpcompSa::seal`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SealOutcome {
    /// The IPComp header was inserted and the payload compressed.
    Compressed {
        /// Bytes compressed (payload, or inner packet in tunnel mode).
        original: usize,
        /// Their compressed length, without the 4-byte header.
        compressed: usize,
    },
    /// Sent uncompressed: transport mode leaves the packet byte-identical; tunnel mode
    /// encapsulates it IP-in-IP (outer next header 4 or 41, no IPComp header).
    NotCompressed(SkipReason),
}

impl SealOutcome {
    /// (bytes in, bytes out) of a compression attempt, for [`CostModel::observe_compress`].
    pub fn attempt(&self) -> Option<(usize, usize)> {
        match *self {
            SealOutcome::Compressed { original, compressed } => Some((original, compressed)),
            SealOutcome::NotCompressed(SkipReason::Incompressible { original }) => Some((original, original)),
            SealOutcome::NotCompressed(_) => None,
        }
    }
}

/// What [`IpcompSa::open`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenOutcome {
    /// The payload was decompressed and the IPComp header removed.
    Decompressed {
        /// Compressed bytes (without header).
        compressed: usize,
        /// Decompressed bytes.
        original: usize,
    },
    /// No IPComp header: transport mode leaves the packet as is; tunnel mode removes the
    /// IP-in-IP outer header.
    NotCompressed,
}

/// One thread's codec: the algorithm's state (match-finder tables, inflater) and the scratch
/// buffers compression and decompression write into, allocated once. An [`IpcompSa`] has
/// one; a multi-threaded caller gives each thread its own (per algorithm and window, see
/// [`Codec::fits`]) and shares one [`SharedIpcomp`], so an SA compresses on every thread at
/// once and its lock is held only for the decision and the bookkeeping, never the codec.
#[derive(Debug)]
pub struct Codec {
    compressor: Compressor,
    window: usize,
    scratch: Vec<u8>,
    /// Where a sampled decompression of the codec's own output goes (see
    /// [`DECOMPRESS_SAMPLE`]).
    check: Vec<u8>,
}

/// One compression in this many (of an SA with a cost model), and one probe in 4, is
/// decompressed again into a spare buffer and timed: the model's decompression cost, measured
/// on the data the SA sends (the peer's own rate is not observable; the paper assumed it equal
/// to compression's).
pub const DECOMPRESS_SAMPLE: u32 = 64;

impl Codec {
    /// The codec of an SA of configuration `cfg` for its own algorithm.
    pub fn new(cfg: &IpcompConfig) -> Self {
        Self::of(cfg.algorithm, cfg.deflate_window)
    }
    /// The codec of `algorithm` (DEFLATE: matches at most `window` bytes back).
    pub fn of(algorithm: Algorithm, window: usize) -> Self {
        let compressor = match algorithm {
            Algorithm::Deflate => Compressor::deflate_with_window(window),
            a => Compressor::new(a),
        };
        Codec {
            compressor,
            window,
            scratch: vec![0u8; MAX_PACKET + ipv6_field::HEADER_LEN],
            check: vec![0u8; MAX_PACKET + ipv6_field::HEADER_LEN],
        }
    }
    /// Whether this codec serves SAs of configuration `cfg` (same algorithm and, for
    /// DEFLATE, the same window): codecs hold no state from one packet to the next.
    pub fn fits(&self, cfg: &IpcompConfig) -> bool {
        self.is(cfg.algorithm, cfg.deflate_window)
    }
    fn is(&self, algorithm: Algorithm, window: usize) -> bool {
        self.compressor.algorithm() == algorithm && (algorithm != Algorithm::Deflate || self.window == window)
    }
}

/// What an SA publishes for every thread's fast path, without its lock: the cached decision
/// and the counts threads add in bulk.
#[derive(Debug, Default)]
struct Published {
    /// 0: decide under the lock, packet by packet (the model compresses, cannot decide yet,
    /// or the mode is not `model`). n > 0: the model skips; each thread sends its packets
    /// uncompressed without asking and takes a probe after n of them
    /// ([`CostModel::skip_spacing`]).
    spacing: AtomicU32,
    /// Counts threads added from their [`Codecs`] ([`Pending`]).
    skipped_model: AtomicU64,
    skipped_off: AtomicU64,
    skipped_too_small: AtomicU64,
    received_uncompressed: AtomicU64,
}

/// One thread's counts for one SA, not yet added to the SA's ([`Codecs::flush`]).
#[derive(Debug, Default, Clone, Copy)]
struct Pending {
    skipped_model: u64,
    skipped_off: u64,
    skipped_too_small: u64,
    received_uncompressed: u64,
}

/// One thread's view of one SA: what it counted, the packets it skipped since its last
/// probe, and the wire bytes it sent since it last told the link estimate.
#[derive(Debug)]
struct Slot {
    sa: Arc<Published>,
    pending: Pending,
    skipped: u32,
    sent_bytes: u64,
    sent_at: Option<u64>,
}

impl Slot {
    fn flush(&mut self) {
        let p = core::mem::take(&mut self.pending);
        for (n, c) in [
            (p.skipped_model, &self.sa.skipped_model),
            (p.skipped_off, &self.sa.skipped_off),
            (p.skipped_too_small, &self.sa.skipped_too_small),
            (p.received_uncompressed, &self.sa.received_uncompressed),
        ] {
            if n > 0 {
                c.fetch_add(n, Relaxed);
            }
        }
    }
}

/// The most SAs one thread's [`Codecs`] keeps a [`Slot`] for (the oldest goes first, its
/// counts flushed).
const MAX_SLOTS: usize = 64;

/// How often a thread tells an SA's link estimate what it sent: at most once per this many
/// ns (the estimate's windows are 10 ms).
const SENT_FLUSH_NS: u64 = 1_000_000;

/// One thread's IPComp state: a [`Codec`] per algorithm (and DEFLATE window) it has met, and
/// per SA it used, the SA's cached decision's count and the packets counted but not yet
/// added to the SA's counters. The fast path of an SA whose model skips (one atomic word per SA)
/// reads one atomic and counts here, so skipping a packet takes no lock and writes no shared
/// memory; [`Codecs::flush`] adds the counts (a caller with many packets flushes once per
/// batch: counters are exact after it).
#[derive(Debug, Default)]
pub struct Codecs {
    codecs: Vec<Codec>,
    slots: Vec<Slot>,
}

impl Codecs {
    /// None yet: they are made as SAs need them ([`prepare`](Self::prepare)).
    pub fn new() -> Self {
        Self::default()
    }
    fn codec_index(&mut self, algorithm: Algorithm, window: usize) -> usize {
        match self.codecs.iter().position(|c| c.is(algorithm, window)) {
            Some(i) => i,
            None => {
                self.codecs.push(Codec::of(algorithm, window));
                self.codecs.len() - 1
            }
        }
    }
    fn slot_index(&mut self, sa: &Arc<Published>) -> usize {
        if let Some(i) = self.slots.iter().position(|s| Arc::ptr_eq(&s.sa, sa)) {
            return i;
        }
        // SAs that are gone (only this slot holds their counts) go first.
        self.slots.retain_mut(|s| {
            s.flush();
            Arc::strong_count(&s.sa) > 1
        });
        if self.slots.len() >= MAX_SLOTS {
            self.slots.remove(0);
        }
        self.slots.push(Slot {
            sa: sa.clone(),
            pending: Pending::default(),
            skipped: 0,
            sent_bytes: 0,
            sent_at: None,
        });
        self.slots.len() - 1
    }
    /// Makes the codecs `sa` needs (each of its algorithms) now, so its first packets
    /// allocate nothing.
    pub fn prepare(&mut self, sa: &SharedIpcomp) {
        for (alg, _) in sa.algorithms() {
            self.codec_index(alg, sa.cfg.deflate_window);
        }
        self.slot_index(&sa.published);
    }
    /// Adds what this thread counted to its SAs' counters.
    pub fn flush(&mut self) {
        for s in &mut self.slots {
            s.flush();
        }
    }
}

/// An IPComp SA's decision state and counters: what every thread using the SA shares, behind
/// its lock.
#[derive(Debug)]
pub struct IpcompState {
    backoff: BackoffState,
    model: Option<CostModel>,
    counters: Counters,
    /// Compressions since the last timed decompression.
    since_decompress: u32,
    /// Attempts the model wanted timed but the caller gave no clock for.
    untimed: u64,
}

impl IpcompState {
    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// The back-off state.
    pub fn backoff(&self) -> &BackoffState {
        &self.backoff
    }
    /// The cost model (`None` if not configured).
    pub fn model(&self) -> Option<&CostModel> {
        self.model.as_ref()
    }
    /// The cost model, to feed measurements into.
    pub fn model_mut(&mut self) -> Option<&mut CostModel> {
        self.model.as_mut()
    }
    /// Compression attempts the model should have had timed but the caller gave no clock
    /// for (a caller's mistake: the model cannot decide without them).
    pub fn untimed(&self) -> u64 {
        self.untimed
    }
}

/// An IPComp SA shared by threads (`&self` everywhere): its configuration and, behind a
/// short lock, its [`IpcompState`]. Each thread brings its own [`Codec`]; compressing and
/// decompressing run outside the lock.
#[derive(Debug)]
pub struct SharedIpcomp {
    cfg: IpcompConfig,
    state: spin::Mutex<IpcompState>,
    published: Arc<Published>,
}

/// An IPComp SA with its own codec, for one thread (`&mut self`).
///
/// Order with the other transforms: on output, compress first and then apply ESP/AH to the
/// result; on input, remove ESP/AH first and then decompress (RFC 3173 section 3). Every
/// packet is compressed independently (no history across packets).
#[derive(Debug)]
pub struct IpcompSa {
    shared: SharedIpcomp,
    codecs: Codecs,
}

/// How the inserted header is placed in transport mode (RFC 3173 section 3.2): after the IPv4
/// header; for IPv6 after the Hop-by-Hop, Routing and Fragment headers (and any Destination
/// Options that precede a Routing header), before the first Destination Options header after
/// them or the upper-layer header. Unlike [`ip::transport_split`], a Destination Options
/// header with no Routing header after it is compressed.
pub fn transport_placement(packet: &[u8]) -> Result<Split, Error> {
    match ip::version(packet)? {
        4 => ip::ipv4_split(packet).map_err(Error::from),
        _ => {
            let first = ip::Ipv6Packet::new_checked(packet)?.next_header();
            let mut last = Split {
                nh_offset: ipv6_field::NEXT_HEADER,
                offset: ipv6_field::HEADER_LEN,
                next: first,
            };
            ip::walk_ipv6_ext(packet, |h| {
                if h.kind != proto::DSTOPTS {
                    last = Split {
                        nh_offset: h.offset,
                        offset: h.offset + h.len,
                        next: packet[h.offset],
                    };
                }
            })?;
            Ok(last)
        }
    }
}

/// Resizes the part of the packet after `at` from its current length to `new_len`, using
/// tailroom first and headroom (moving the first `at` bytes) if the tailroom is short.
fn resize_tail(buf: &mut PacketBuf<'_>, at: usize, new_len: usize) -> Result<(), Error> {
    let old = buf.len() - at;
    if new_len <= old {
        buf.trim_back(old - new_len)?;
    } else if buf.tailroom() >= new_len - old {
        buf.push_back(new_len - old)?;
    } else {
        buf.insert_gap(at, new_len - old)?;
    }
    Ok(())
}

impl IpcompSa {
    /// Creates the SA, allocating its codec state and scratch buffers.
    pub fn new(cfg: IpcompConfig) -> Result<Self, Error> {
        let shared = SharedIpcomp::new(cfg)?;
        let mut codecs = Codecs::new();
        codecs.prepare(&shared);
        Ok(IpcompSa { shared, codecs })
    }
    /// The configuration.
    pub fn config(&self) -> &IpcompConfig {
        &self.shared.cfg
    }
    /// The counters.
    pub fn counters(&self) -> Counters {
        self.shared.counters()
    }
    /// The back-off state.
    pub fn backoff(&self) -> BackoffState {
        self.shared.state.lock().backoff
    }
    /// The cost model's published decision, after the model was changed through
    /// [`model_mut`](Self::model_mut).
    fn republish(&mut self) {
        let shared = &mut self.shared;
        let spacing = match (shared.cfg.adaptive, &shared.state.get_mut().model) {
            (AdaptiveMode::Model, Some(m)) => m.skip_spacing().unwrap_or(0),
            _ => 0,
        };
        shared.published.spacing.store(spacing, Relaxed);
    }
    /// The cost model, to feed measurements into (`None` if not configured).
    pub fn model_mut(&mut self) -> Option<&mut CostModel> {
        self.shared.state.get_mut().model.as_mut()
    }
    /// The cost model (a copy).
    pub fn model(&self) -> Option<CostModel> {
        self.shared.state.lock().model
    }
    /// Whether the caller should time [`seal`](Self::seal) and the bundle's crypto for this
    /// SA (it has a cost model to feed).
    pub fn wants_timing(&self) -> bool {
        self.shared.wants_timing()
    }
    /// The cost model's inputs and decision (`None` without a model).
    pub fn model_status(&self) -> Option<ModelStatus> {
        self.shared.model_status()
    }
    /// Feeds the time a [`seal`](Self::seal) took into the cost model (if it tried to
    /// compress), and re-evaluates the decision.
    pub fn observe_seal(&mut self, outcome: &SealOutcome, nanos: u64) {
        if let (Some(m), Some((i, o))) = (self.model_mut(), outcome.attempt()) {
            m.observe_attempt(i, o, nanos);
            m.decide();
        }
    }
    /// Feeds a crypto operation of the SA's bundle over `bytes` bytes taking `nanos` into
    /// the cost model.
    pub fn observe_crypto(&mut self, op: crate::policy::CryptoOp, bytes: usize, nanos: u64) {
        self.shared.observe_crypto(op, bytes, nanos);
    }
    /// Feeds the time an [`open`](Self::open) took into the cost model (if it decompressed).
    pub fn observe_open(&mut self, outcome: &OpenOutcome, nanos: u64) {
        if let (Some(m), OpenOutcome::Decompressed { original, .. }) = (self.model_mut(), outcome) {
            m.observe_decompress(*original, nanos);
        }
    }
    /// As [`seal`](Self::seal), timing the compression (only an attempt is timed: two calls
    /// of `clock`, monotonic nanoseconds) and feeding the cost model, if the SA has one.
    pub fn seal_timed(&mut self, buf: &mut PacketBuf<'_>, clock: fn() -> u64) -> Result<SealOutcome, Error> {
        self.republish();
        let r = self.shared.seal(&mut self.codecs, buf, Some(clock));
        self.codecs.flush();
        r
    }
    /// Compresses an outbound IP packet in place: [`SharedIpcomp::seal`] with the SA's codecs.
    pub fn seal(&mut self, buf: &mut PacketBuf<'_>) -> Result<SealOutcome, Error> {
        self.republish();
        let r = self.shared.seal(&mut self.codecs, buf, None);
        self.codecs.flush();
        r
    }
    /// Decompresses an inbound IP packet in place: [`SharedIpcomp::open`] with the SA's codecs.
    pub fn open(&mut self, buf: &mut PacketBuf<'_>) -> Result<OpenOutcome, Error> {
        let r = self.shared.open(&mut self.codecs, buf, None);
        self.codecs.flush();
        r
    }
    /// The shared part (configuration, decision state, counters).
    pub fn shared(&self) -> &SharedIpcomp {
        &self.shared
    }
}

impl SharedIpcomp {
    /// Checks the configuration and sets up the decision state (no codec: see
    /// [`SharedIpcomp::codec`]).
    pub fn new(cfg: IpcompConfig) -> Result<Self, Error> {
        if cfg.mode == Mode::Tunnel {
            match cfg.tunnel {
                None => return Err(ipsec_core::Error::InvalidSa("tunnel mode needs src and dst addresses").into()),
                Some(t) if t.src.is_ipv4() != t.dst.is_ipv4() => {
                    return Err(ipsec_core::Error::InvalidSa("src and dst must be of the same IP version").into())
                }
                _ => {}
            }
        }
        if let Some(a) = cfg.alternative {
            if a.cpi == cfg.cpi {
                return Err(ipsec_core::Error::InvalidSa("the alternative algorithm needs a CPI of its own").into());
            }
        }
        let algorithms = if cfg.alternative.is_some() { 2 } else { 1 };
        let model = match (cfg.adaptive, cfg.model) {
            (AdaptiveMode::Model, m) => Some(CostModel::with_algorithms(
                m.unwrap_or(ModelConfig::new(0.0)),
                algorithms,
            )),
            (AdaptiveMode::Backoff, m) => m.map(CostModel::new),
            _ => None,
        };
        Ok(SharedIpcomp {
            state: spin::Mutex::new(IpcompState {
                backoff: BackoffState::default(),
                model,
                counters: Counters::default(),
                since_decompress: 0,
                untimed: 0,
            }),
            cfg,
            published: Arc::default(),
        })
    }
    /// A new codec for this SA's own algorithm (a thread's [`Codecs`] makes the codecs of
    /// every algorithm the SA uses).
    pub fn codec(&self) -> Codec {
        Codec::new(&self.cfg)
    }
    /// The algorithms the SA sends and accepts, with their CPIs: its own, then its
    /// alternative (if configured).
    pub fn algorithms(&self) -> impl Iterator<Item = (Algorithm, u16)> + '_ {
        core::iter::once((self.cfg.algorithm, self.cfg.cpi)).chain(self.cfg.alternative.map(|a| (a.algorithm, a.cpi)))
    }
    /// The algorithm (index) of a received CPI.
    fn algorithm_of(&self, cpi: u16) -> Option<usize> {
        self.algorithms().position(|(_, c)| c == cpi)
    }
    /// Publishes the decision of the state `s` for the fast path ([`Published::spacing`]).
    fn publish(&self, s: &IpcompState) {
        let v = match (self.cfg.adaptive, &s.model) {
            (AdaptiveMode::Model, Some(m)) => m.skip_spacing().unwrap_or(0),
            _ => 0,
        };
        if self.published.spacing.load(Relaxed) != v {
            self.published.spacing.store(v, Relaxed);
        }
    }
    /// The configuration.
    pub fn config(&self) -> &IpcompConfig {
        &self.cfg
    }
    /// The counters now (what threads counted on the fast path once they flushed it,
    /// [`Codecs::flush`]).
    pub fn counters(&self) -> Counters {
        let c = self.state.lock().counters;
        self.with_published(c)
    }
    /// `c` with the counts threads added without the lock.
    pub fn with_published(&self, mut c: Counters) -> Counters {
        let p = &self.published;
        c.skipped_model += p.skipped_model.load(Relaxed);
        c.skipped_off += p.skipped_off.load(Relaxed);
        c.skipped_too_small += p.skipped_too_small.load(Relaxed);
        c.received_uncompressed += p.received_uncompressed.load(Relaxed);
        c
    }
    /// The decision state, locked (keep it short: every thread's packets wait for it).
    pub fn state(&self) -> spin::MutexGuard<'_, IpcompState> {
        self.state.lock()
    }
    /// Whether the caller should time this SA's work and its bundle's crypto (it has a cost
    /// model to feed).
    pub fn wants_timing(&self) -> bool {
        match self.cfg.adaptive {
            AdaptiveMode::Model => true,
            AdaptiveMode::Backoff => self.cfg.model.is_some(),
            AdaptiveMode::Off | AdaptiveMode::Always => false,
        }
    }
    /// The cost model's inputs and decision (`None` without a model).
    pub fn model_status(&self) -> Option<ModelStatus> {
        self.state.lock().model.as_ref().map(CostModel::status)
    }
    /// Feeds a crypto operation of the SA's bundle over `bytes` bytes taking `nanos` into
    /// the cost model.
    pub fn observe_crypto(&self, op: crate::policy::CryptoOp, bytes: usize, nanos: u64) {
        let mut s = self.state.lock();
        if let Some(m) = s.model.as_mut() {
            m.observe_crypto(op, bytes, nanos);
            m.decide();
            self.publish(&s);
        }
    }
    /// Tells the cost model that the bundle put `wire` bytes on the link at `now_ns`
    /// (the caller's monotonic clock): what its link-rate estimate is made of. The thread's
    /// `codecs` sum the bytes and tell the model at most once per millisecond.
    pub fn observe_sent(&self, codecs: &mut Codecs, wire: usize, now_ns: u64) {
        if !self.wants_timing() {
            return;
        }
        let i = codecs.slot_index(&self.published);
        let slot = &mut codecs.slots[i];
        slot.sent_bytes += wire as u64;
        if slot.sent_at.is_some_and(|t| now_ns >= t && now_ns - t < SENT_FLUSH_NS) {
            return;
        }
        let bytes = core::mem::take(&mut slot.sent_bytes);
        slot.sent_at = Some(now_ns);
        let mut s = self.state.lock();
        if let Some(m) = s.model.as_mut() {
            m.observe_sent(bytes as usize, now_ns);
            self.publish(&s);
        }
    }

    /// Decides whether to try and with which algorithm, compresses into that algorithm's
    /// codec's scratch, and records the result (timed with `clock` if given and the SA has a
    /// model). Returns the compressed length, the CPI and the codec (index in `codecs`), or
    /// why not. While the model skips, a packet is decided without the lock ([`Published`]);
    /// otherwise the lock is held for the decision and for the bookkeeping, not meanwhile.
    fn try_compress(
        &self,
        codecs: &mut Codecs,
        data: &[u8],
        clock: Option<fn() -> u64>,
    ) -> Result<(usize, u16, usize), SkipReason> {
        let len = data.len();
        let slot = codecs.slot_index(&self.published);
        if len < self.cfg.min_size.max(HEADER_LEN + 1) {
            codecs.slots[slot].pending.skipped_too_small += 1;
            return Err(SkipReason::TooSmall);
        }
        if self.cfg.adaptive == AdaptiveMode::Off {
            codecs.slots[slot].pending.skipped_off += 1;
            return Err(SkipReason::Off);
        }
        // The fast path: the model skips; this thread counts its own packets to the probe.
        let spacing = self.published.spacing.load(Relaxed);
        let mut due = false;
        if spacing != 0 {
            let sl = &mut codecs.slots[slot];
            sl.skipped = sl.skipped.saturating_add(1);
            if sl.skipped < spacing {
                sl.pending.skipped_model += 1;
                return Err(SkipReason::Model);
            }
            sl.skipped = 0;
            due = true;
        }
        let (alg, sample) = {
            let mut s = self.state.lock();
            if self.cfg.adaptive == AdaptiveMode::Backoff && s.backoff.should_skip() {
                s.counters.skipped_backoff += 1;
                return Err(SkipReason::Backoff);
            }
            let mut probe = false;
            let mut alg = 0;
            if let Some(m) = s.model.as_mut() {
                let chosen = if due && m.skip_spacing().is_some() {
                    Some(m.take_probe())
                } else {
                    m.choose()
                };
                let Some(a) = chosen else {
                    s.counters.skipped_model += 1;
                    self.publish(&s);
                    return Err(SkipReason::Model);
                };
                alg = a;
                probe = !m.compressing() || a != m.active();
            }
            // One probe in 4 (they are few and the figures must stay fresh while skipping) and
            // one compression in DECOMPRESS_SAMPLE.
            let sample = s.model.is_some() && {
                s.since_decompress += if probe { DECOMPRESS_SAMPLE / 4 } else { 1 };
                s.since_decompress >= DECOMPRESS_SAMPLE
            };
            (alg, sample)
        };
        let (algorithm, cpi) = self.algorithms().nth(alg).unwrap_or((self.cfg.algorithm, self.cfg.cpi));
        let ci = codecs.codec_index(algorithm, self.cfg.deflate_window);
        let codec = &mut codecs.codecs[ci];
        // Useful only if compressed + 4 < original.
        let limit = len - HEADER_LEN - 1;
        let clock = clock.filter(|_| self.wants_timing());
        let t0 = clock.map(|c| c());
        let r = codec.compressor.compress(data, &mut codec.scratch[..limit]);
        let nanos = clock.zip(t0).map(|(c, t0)| c().saturating_sub(t0));
        let mut decompress_ns = None;
        if let (Some(n), Some(c), true) = (r, clock, sample) {
            let t0 = c();
            let ok = codec
                .compressor
                .decompress(&codec.scratch[..n], &mut codec.check[..len])
                == Ok(len);
            decompress_ns = ok.then(|| c().saturating_sub(t0));
        }
        let mut s = self.state.lock();
        if let (Some(m), Some(ns)) = (s.model.as_mut(), nanos) {
            m.observe_attempt_with(alg, len, r.unwrap_or(len), ns);
            if let Some(d) = decompress_ns {
                m.observe_decompress_with(alg, len, d);
            }
            m.decide();
        }
        if decompress_ns.is_some() {
            s.since_decompress = 0;
        }
        if nanos.is_none() && s.model.is_some() {
            s.untimed += 1;
        }
        self.publish(&s);
        let backoff = self.cfg.backoff;
        match r {
            Some(n) => {
                s.backoff.record(&backoff, true);
                s.counters.compressed += 1;
                s.counters.bytes_in += len as u64;
                s.counters.bytes_saved += (len - n - HEADER_LEN) as u64;
                Ok((n, cpi, ci))
            }
            None => {
                s.backoff.record(&backoff, false);
                s.counters.skipped_incompressible += 1;
                Err(SkipReason::Incompressible { original: len })
            }
        }
    }

    /// Compresses an outbound IP packet in place. Transport mode: the IPComp header goes where
    /// [`transport_placement`] says, with the IP length (and IPv4 checksum) fixed. Tunnel
    /// mode: the whole packet is compressed behind a new outer header. When the packet is not
    /// compressed, transport mode leaves it byte-identical and tunnel mode sends it IP-in-IP.
    ///
    /// Tunnel mode needs 20 (IPv4) or 40 (IPv6) bytes of headroom. `codecs` are the calling
    /// thread's (made as needed); with a `clock` (monotonic nanoseconds) an SA with a cost
    /// model times the attempt and feeds the model. The packet carries the CPI of the
    /// algorithm it was compressed with.
    pub fn seal(
        &self,
        codecs: &mut Codecs,
        buf: &mut PacketBuf<'_>,
        clock: Option<fn() -> u64>,
    ) -> Result<SealOutcome, Error> {
        buf.trim_to_ip_len()?;
        match self.cfg.mode {
            Mode::Transport => self.seal_transport(codecs, buf, clock),
            Mode::Tunnel => self.seal_tunnel(codecs, buf, clock),
        }
    }

    fn seal_transport(
        &self,
        codecs: &mut Codecs,
        buf: &mut PacketBuf<'_>,
        clock: Option<fn() -> u64>,
    ) -> Result<SealOutcome, Error> {
        let split = transport_placement(buf.packet())?;
        let original = buf.len() - split.offset;
        let (n, cpi, ci) = match self.try_compress(codecs, &buf.packet()[split.offset..], clock) {
            Ok(r) => r,
            Err(why) => return Ok(SealOutcome::NotCompressed(why)),
        };
        let codec = &codecs.codecs[ci];
        let pkt = buf.packet_mut();
        IpcompRepr {
            next_header: split.next,
            cpi,
        }
        .emit(&mut IpcompPacket::new_unchecked(&mut pkt[split.offset..]));
        let at = split.offset + HEADER_LEN;
        pkt[at..at + n].copy_from_slice(&codec.scratch[..n]);
        pkt[split.nh_offset] = proto::COMP;
        buf.trim_back(original - HEADER_LEN - n)?;
        ip::fix_length(buf.packet_mut())?;
        Ok(SealOutcome::Compressed {
            original,
            compressed: n,
        })
    }

    fn seal_tunnel(
        &self,
        codecs: &mut Codecs,
        buf: &mut PacketBuf<'_>,
        clock: Option<fn() -> u64>,
    ) -> Result<SealOutcome, Error> {
        let t = self
            .cfg
            .tunnel
            .ok_or(ipsec_core::Error::InvalidSa("tunnel mode needs src and dst addresses"))?;
        let inner = buf.packet();
        let (inner_next, dont_frag) = match ip::version(inner)? {
            4 => (proto::IPIP, Ipv4Packet::new_checked(inner)?.dont_frag()),
            _ => (proto::IPV6, false),
        };
        let mut tos = ip::tos(inner)?;
        if tos & 3 == 3 {
            tos = (tos & !3) | 2; // CE -> ECT(0) (RFC 6040 normal mode does not copy CE out)
        }
        let outer_len = if t.src.is_ipv4() {
            ipv4_field::HEADER_LEN
        } else {
            ipv6_field::HEADER_LEN
        };
        if buf.headroom() < outer_len {
            return Err(ipsec_core::Error::NoHeadroom.into());
        }
        if t.src.is_ipv4() && buf.len() + outer_len > MAX_PACKET {
            return Err(ipsec_core::Error::TooBig.into());
        }
        let original = buf.len();
        let (outcome, next) = match self.try_compress(codecs, buf.packet(), clock) {
            Ok((n, cpi, ci)) => {
                let codec = &codecs.codecs[ci];
                let pkt = buf.packet_mut();
                IpcompRepr {
                    next_header: inner_next,
                    cpi,
                }
                .emit(&mut IpcompPacket::new_unchecked(&mut pkt[..]));
                pkt[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&codec.scratch[..n]);
                buf.trim_back(original - HEADER_LEN - n)?;
                (
                    SealOutcome::Compressed {
                        original,
                        compressed: n,
                    },
                    proto::COMP,
                )
            }
            Err(why) => (SealOutcome::NotCompressed(why), inner_next),
        };
        let payload_len = buf.len();
        buf.push_front(outer_len)?;
        let out = buf.packet_mut();
        match (t.src, t.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Ipv4Repr {
                src,
                dst,
                protocol: next,
                payload_len,
                tos,
                ident: 0,
                dont_frag,
                ttl: OUTER_TTL,
            }
            .emit(out)?,
            (IpAddr::V6(src), IpAddr::V6(dst)) => Ipv6Repr {
                src,
                dst,
                next_header: next,
                payload_len,
                traffic_class: tos,
                flow_label: 0,
                hop_limit: OUTER_TTL,
            }
            .emit(out)?,
            _ => return Err(ipsec_core::Error::InvalidSa("src and dst must be of the same IP version").into()),
        }
        Ok(outcome)
    }

    /// Decompresses an inbound IP packet in place (after ESP/AH were removed). Transport mode:
    /// the IPComp header is removed and the payload decompressed behind the IP headers, whose
    /// length and next-header fields are fixed. Tunnel mode: the outer header and IPComp
    /// header are removed and the decompressed inner packet is what remains. A packet without
    /// an IPComp header is [`OpenOutcome::NotCompressed`].
    ///
    /// The result is bounded by 65535 bytes (IPv6: 40 + 65535) and by [`IpcompConfig::mtu`]:
    /// beyond that is [`Error::DecompressedTooBig`]. The buffer needs room (tailroom, or else
    /// headroom) for the decompressed size. `codecs` are the calling thread's; with a
    /// `clock`, an SA with a cost model times the decompression and feeds the model. The
    /// CPI must be the SA's or its alternative's; it says which algorithm inflates.
    pub fn open(
        &self,
        codecs: &mut Codecs,
        buf: &mut PacketBuf<'_>,
        clock: Option<fn() -> u64>,
    ) -> Result<OpenOutcome, Error> {
        buf.trim_to_ip_len()?;
        let split = ip::upper_split(buf.packet())?;
        let tunnel = self.cfg.mode == Mode::Tunnel;
        if split.next != proto::COMP {
            return match (tunnel, split.next) {
                (false, _) => {
                    let i = codecs.slot_index(&self.published);
                    codecs.slots[i].pending.received_uncompressed += 1;
                    Ok(OpenOutcome::NotCompressed)
                }
                (true, proto::IPIP | proto::IPV6) => {
                    self.decap_check(&buf.packet()[split.offset..], split.next)?;
                    buf.pull_front(split.offset)?;
                    let i = codecs.slot_index(&self.published);
                    codecs.slots[i].pending.received_uncompressed += 1;
                    Ok(OpenOutcome::NotCompressed)
                }
                (true, p) => Err(ipsec_core::Error::BadInnerProtocol(p).into()),
            };
        }
        let hdr = IpcompRepr::parse(&IpcompPacket::new_checked(&buf.packet()[split.offset..])?)?;
        let alg = self.algorithm_of(hdr.cpi).ok_or(Error::UnknownCpi(hdr.cpi))?;
        let (algorithm, _) = self.algorithms().nth(alg).unwrap_or((self.cfg.algorithm, self.cfg.cpi));
        let ci = codecs.codec_index(algorithm, self.cfg.deflate_window);
        let codec = &mut codecs.codecs[ci];
        let compressed = &buf.packet()[split.offset + HEADER_LEN..];
        let clen = compressed.len();
        let v6 = ip::version(buf.packet())? == 6;
        let keep = if tunnel { 0 } else { split.offset };
        let ip_max = if v6 && !tunnel {
            MAX_PACKET + ipv6_field::HEADER_LEN
        } else {
            MAX_PACKET
        };
        let bound = ip_max.min(self.cfg.mtu).saturating_sub(keep);
        let clock = clock.filter(|_| self.wants_timing());
        let t0 = clock.map(|c| c());
        let n = codec.compressor.decompress(compressed, &mut codec.scratch[..bound])?;
        let nanos = clock.zip(t0).map(|(c, t0)| c().saturating_sub(t0));
        if tunnel {
            self.decap_check(&codec.scratch[..n], hdr.next_header)?;
            resize_tail(buf, 0, n)?;
            buf.packet_mut().copy_from_slice(&codec.scratch[..n]);
        } else {
            resize_tail(buf, split.offset, n)?;
            let pkt = buf.packet_mut();
            pkt[split.offset..].copy_from_slice(&codec.scratch[..n]);
            pkt[split.nh_offset] = hdr.next_header;
            ip::fix_length(pkt)?;
        }
        let mut s = self.state.lock();
        s.counters.decompressed += 1;
        if let (Some(m), Some(ns)) = (s.model.as_mut(), nanos) {
            m.observe_decompress_with(alg, n, ns);
        }
        Ok(OpenOutcome::Decompressed {
            compressed: clen,
            original: n,
        })
    }

    /// Checks that a tunnel's inner packet is IPv4 for next header 4 or IPv6 for 41, whole.
    fn decap_check(&self, inner: &[u8], next: u8) -> Result<(), Error> {
        let want = match next {
            proto::IPIP => 4,
            proto::IPV6 => 6,
            p => return Err(ipsec_core::Error::BadInnerProtocol(p).into()),
        };
        if ip::version(inner)? != want || ip::claimed_len(inner)? != inner.len() {
            return Err(Error::Malformed(
                "inner packet does not match its next header or length",
            ));
        }
        Ok(())
    }
}
