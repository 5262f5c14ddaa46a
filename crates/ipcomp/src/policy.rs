//! When to try compressing: the RFC 3173 back-off and the McGregor-Lee cost model. Sans-IO:
//! the caller measures time and feeds rates in; nothing here reads a clock.

/// RFC 3173 section 2.2 back-off: after `after_misses` consecutive packets that did not
/// compress, skip compression for the next `skip` packets, then try again. `after_misses`
/// 0 disables it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// N: consecutive incompressible packets that trigger the back-off.
    pub after_misses: u32,
    /// M: packets sent uncompressed without trying, once triggered.
    pub skip: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            after_misses: 8,
            skip: 64,
        }
    }
}

/// State of the back-off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackoffState {
    misses: u32,
    skipping: u32,
}

impl BackoffState {
    /// Whether to skip this packet (counts the skip).
    pub fn should_skip(&mut self) -> bool {
        if self.skipping > 0 {
            self.skipping -= 1;
            return true;
        }
        false
    }
    /// Records an attempt: `compressed` or not.
    pub fn record(&mut self, cfg: &Backoff, compressed: bool) {
        if compressed {
            self.misses = 0;
            return;
        }
        self.misses += 1;
        if cfg.after_misses > 0 && self.misses >= cfg.after_misses {
            self.misses = 0;
            self.skipping = cfg.skip;
        }
    }
    /// Consecutive misses so far.
    pub fn misses(&self) -> u32 {
        self.misses
    }
    /// Packets still to skip.
    pub fn skipping(&self) -> u32 {
        self.skipping
    }
}

/// A crypto operation whose rate the model uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CryptoOp {
    /// Encryption (R_E).
    Encrypt,
    /// Decryption (R_D); the encryption rate stands in until observed.
    Decrypt,
    /// Integrity check value computation (R_HC).
    IntegrityCompute,
    /// Integrity check value verification (R_HV); the compute rate stands in until observed.
    IntegrityVerify,
}

/// How much lower another algorithm's slowest stage must be before the model switches to
/// it (see [`CostModel::decide`]): 25%.
pub const ALGORITHM_HYSTERESIS: f64 = 0.25;

/// The share of the throughput probes may cost while the model says "skip" (0.5%).
pub const PROBE_BUDGET: f64 = 0.005;
/// The most packets between two probes the budget may ask for.
pub const MAX_PROBE_BUDGET: u32 = 4096;

/// An exponentially weighted moving average (weight 1/8 for a new sample).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ewma {
    value: f64,
    seen: bool,
}

impl Ewma {
    /// Adds a timing sample. Whatever else runs on the core only ever adds time to an
    /// operation: being preempted, a cold cache, and (on a kernel without
    /// `CONFIG_IRQ_TIME_ACCOUNTING`, which charges softirq work to the thread it interrupts)
    /// the network's softirqs. In tunneld at 100 Mbit/s about half of all compressions carried
    /// such work, up to 4x their own time (DEFLATE 1,426-byte packets: 10th percentile 28
    /// ns/B, median 29-39, 90th 60-80, 99th 110-136), while an operation's own cost varies little.
    /// So the estimate is a low one: a sample below it moves it halfway down to the sample; a
    /// sample above raises it by 1/8 of the excess, at most by 1/64 (1.6%), however far above.
    /// Interference, frequent or large, cannot lift it far (on those timings it stayed within
    /// 27-45 ns/B; an average weighing the excess, capped at 2x, reached 72 and made the model
    /// skip at 100 Mbit/s); a real slowdown takes it up within some 40 samples, a speed-up
    /// down within a few. One slow first sample is forgotten in a few samples.
    pub fn update_time(&mut self, sample: f64) {
        if !self.seen {
            self.update(sample);
        } else if sample < self.value {
            self.value += (sample - self.value) / 2.0;
        } else {
            self.value += ((sample - self.value) / 8.0).min(self.value / 64.0);
        }
    }
    /// Adds a sample.
    pub fn update(&mut self, sample: f64) {
        if self.seen {
            self.value += (sample - self.value) / 8.0;
        } else {
            self.value = sample;
            self.seen = true;
        }
    }
    /// The average, if any sample was seen.
    pub fn get(&self) -> Option<f64> {
        self.seen.then_some(self.value)
    }
}

/// How an IPComp SA decides whether to compress an outbound packet (RFC 3173 section 2.2
/// leaves the choice to the sender; the receiver accepts both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum AdaptiveMode {
    /// Never compress: every packet goes uncompressed, by choice.
    Off,
    /// Try every packet of at least the minimum size (non-expansion still applies).
    Always,
    /// RFC 3173 back-off: after N consecutive incompressible packets skip the next M (the
    /// default, and what Linux and FreeS/WAN do).
    #[default]
    Backoff,
    /// The McGregor-Lee Complete-model inequality ([`CostModel`]), fed online.
    Model,
}

impl AdaptiveMode {
    /// Every mode, in the order of their names.
    pub const ALL: [AdaptiveMode; 4] = [
        AdaptiveMode::Off,
        AdaptiveMode::Always,
        AdaptiveMode::Backoff,
        AdaptiveMode::Model,
    ];
    /// `off`, `always`, `backoff` or `model`.
    pub fn name(self) -> &'static str {
        match self {
            AdaptiveMode::Off => "off",
            AdaptiveMode::Always => "always",
            AdaptiveMode::Backoff => "backoff",
            AdaptiveMode::Model => "model",
        }
    }
    /// The mode a name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// An IPComp SA's adaptive setting, as configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Adaptive {
    /// The mode.
    pub mode: AdaptiveMode,
    /// The rate of the link the secured packets leave on, in bit/s (R_SECNET of the model);
    /// 0: unknown, estimated from the rate the SA's packets leave at ([`LinkEstimator`]).
    pub link_bps: u64,
    /// A second algorithm the SA may send with, under its own CPI (RFC 3173 section 3.3: the
    /// CPI names the algorithm): in [`AdaptiveMode::Model`] the model chooses among off, the
    /// SA's algorithm and this one; in every mode the SA accepts packets under both CPIs.
    pub alternative: Option<Alternative>,
}

/// An IPComp SA's second algorithm and the CPI its packets carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Alternative {
    /// The algorithm.
    pub algorithm: crate::Algorithm,
    /// Its CPI: different from the SA's own, and known to the peer (a well-known one, 2 for
    /// DEFLATE or 3 for LZS, only if no other SA of the host uses it; else one of the
    /// negotiated or private range).
    pub cpi: u16,
}

impl Adaptive {
    /// The cost model's configuration for [`AdaptiveMode::Model`] (`None` otherwise).
    pub fn model_config(&self) -> Option<ModelConfig> {
        (self.mode == AdaptiveMode::Model).then(|| ModelConfig::new(self.link_bps as f64))
    }
}

/// Configuration of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelConfig {
    /// The link rate the secured packet is sent at, in bit/s (R_SECNET); 0: unknown, estimated
    /// ([`LinkEstimator`]).
    pub link_bps: f64,
    /// While the model says "skip", still compress one packet in this many to keep the
    /// measured ratio and rates fresh (0: never probe). A probe whose own figures agree with
    /// the decision doubles the interval, up to [`ModelConfig::max_probe_interval`]; one that
    /// disagrees sets it back to this.
    pub probe_interval: u32,
    /// The longest interval between probes.
    pub max_probe_interval: u32,
    /// Hysteresis: with `on` and `off` the slowest stage with and without compression
    /// ([`Stages`]), compressing starts when on < off × (1 − h) and stops when on ≥ off ×
    /// (1 − h/4), so a link near break-even does not make the decision flap, and compression
    /// that gains nothing stops.
    pub hysteresis: f64,
}

impl ModelConfig {
    /// Defaults for a link of `link_bps` bit/s (0: unknown, estimated): a probe every 16 to
    /// 256 skipped packets, 10% hysteresis.
    pub fn new(link_bps: f64) -> Self {
        ModelConfig {
            link_bps,
            probe_interval: 16,
            max_probe_interval: 256,
            hysteresis: 0.1,
        }
    }
}

/// The model's inputs and state, for display (inverse rates in ns per original byte).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelStatus {
    /// Whether the model currently says "compress".
    pub compressing: bool,
    /// Times the decision changed.
    pub flips: u64,
    /// The packets sent compressed as probes while the decision was "skip".
    pub probes: u64,
    /// Compression cost (EWMA), ns per original byte.
    pub comp_ns: Option<f64>,
    /// Decompression cost used: observed, else equal to compression (the assumption).
    pub decomp_ns: Option<f64>,
    /// Encryption cost (EWMA), ns per byte; 0 if not observed.
    pub enc_ns: f64,
    /// Integrity check computation cost, ns per byte; 0 if not observed.
    pub hc_ns: f64,
    /// Link time, ns per byte (8e9 / link rate): the configured rate, else the estimate, else
    /// 0 (unknown yet).
    pub net_ns: f64,
    /// The link rate estimated from what the SA sent, bit/s (`None` until a window closed).
    pub link_estimate_bps: Option<f64>,
    /// Whether the link rate used is the configured one (else estimated).
    pub link_configured: bool,
    /// Compressed / original size (EWMA over the attempts), i.e. 1/X.
    pub inv_ratio: Option<f64>,
    /// The paper's inequality now, ns per original byte: its left side (what compression
    /// saves, summed over the stages).
    pub gain_ns: Option<f64>,
    /// The paper's right side (compression + decompression).
    pub cost_ns: Option<f64>,
    /// The pipelined form, which decides: the slowest stage with compression, ns per original
    /// byte ([`Stages::on`]).
    pub on_ns: Option<f64>,
    /// The slowest stage without compression ([`Stages::off`]).
    pub off_ns: Option<f64>,
    /// Whether the decompression cost was measured (else assumed equal to compression).
    pub decomp_measured: bool,
    /// Compression attempts the model has seen.
    pub samples: u64,
    /// The algorithm in use (index: 0 the SA's own, 1 its [`Alternative`]); the figures
    /// above are its.
    pub active: usize,
    /// Times the algorithm in use changed.
    pub switches: u64,
}

/// The stages a packet goes through, each in ns per original byte, without and with
/// compression; `r` = 1/X (compressed / original):
///
/// ```text
///            sender              link        receiver
/// off        E + H               N           D + V
/// on         C + (E + H)·r       N·r         U + (D + V)·r
/// ```
///
/// with C, U compression and decompression, E, H encryption and ICV computation, D, V
/// decryption and ICV verification, N the link (8e9 / R_SECNET). The stages overlap in a
/// pipelined daemon (the sender's next packet is compressed while this one is on the link and
/// the peer decrypts the one before): throughput is bounded by the slowest stage, so
/// compression pays when `max(on) < max(off)`. The paper's Complete model sums the stages
/// instead (a packet processed start to end before the next), which is [`CostModel::sides`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stages {
    /// Sender without compression: E + H.
    pub send_off: f64,
    /// Sender with: C + (E + H)·r.
    pub send_on: f64,
    /// Link without: N.
    pub link_off: f64,
    /// Link with: N·r.
    pub link_on: f64,
    /// Receiver without: D + V.
    pub recv_off: f64,
    /// Receiver with: U + (D + V)·r.
    pub recv_on: f64,
}

impl Stages {
    /// The slowest stage with compression.
    pub fn on(&self) -> f64 {
        self.send_on.max(self.link_on).max(self.recv_on)
    }
    /// The slowest stage without.
    pub fn off(&self) -> f64 {
        self.send_off.max(self.link_off).max(self.recv_off)
    }
}

/// Windows the link estimate is made of (each [`LinkEstimator::WINDOW_NS`] long).
const LINK_WINDOWS: usize = 8;

/// Estimates the link rate (R_SECNET) when none is configured, from the rate the SA's
/// packets leave at: the bytes the bundle puts on the wire per window of
/// [`WINDOW_NS`](Self::WINDOW_NS), the largest of the last `LINK_WINDOWS` (8) windows (a max
/// filter, as BBR estimates a path's bottleneck bandwidth). The daemon's sends block when the
/// link's queue is full, so a window in which the sender was not busy compressing moves bytes
/// at the link's rate (or at the sender's, when the CPU is the bottleneck: a lower bound of the
/// link, which still says "the link is not the slowest stage"). A window in which compression
/// kept the sender busy (70% of the window or more) says only that the link is at least that
/// fast: it never lowers the estimate, so a CPU-bound compressing sender cannot talk itself
/// into believing the link is slow. A gap longer than a window (an idle sender) restarts the
/// window, so idle time does not count as a slow link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkEstimator {
    start: u64,
    last: u64,
    bytes: u64,
    busy_ns: u64,
    open: bool,
    /// Rates (bit/s) of the last windows the sender was not saturated in.
    free: [f64; LINK_WINDOWS],
    free_next: usize,
    /// Rates of the last saturated windows (lower bounds).
    bound: [f64; LINK_WINDOWS],
    bound_next: usize,
    windows: u64,
}

impl Default for LinkEstimator {
    fn default() -> Self {
        LinkEstimator {
            start: 0,
            last: 0,
            bytes: 0,
            busy_ns: 0,
            open: false,
            free: [0.0; LINK_WINDOWS],
            free_next: 0,
            bound: [0.0; LINK_WINDOWS],
            bound_next: 0,
            windows: 0,
        }
    }
}

impl LinkEstimator {
    /// The length of one measuring window, ns (10 ms).
    pub const WINDOW_NS: u64 = 10_000_000;

    /// Records `bytes` put on the wire at `now_ns`; `true` when this closed a window.
    pub fn observe_sent(&mut self, bytes: usize, now_ns: u64) -> bool {
        if !self.open || now_ns < self.last || now_ns - self.last > Self::WINDOW_NS {
            // A new window starts at this send; its bytes were queued before it started.
            self.open = true;
            self.start = now_ns;
            self.last = now_ns;
            self.bytes = 0;
            self.busy_ns = 0;
            return false;
        }
        self.last = now_ns;
        self.bytes += bytes as u64;
        let elapsed = now_ns - self.start;
        if elapsed >= Self::WINDOW_NS {
            let rate = self.bytes as f64 * 8e9 / elapsed as f64;
            if self.busy_ns.saturating_mul(10) >= elapsed.saturating_mul(7) {
                self.bound[self.bound_next] = rate;
                self.bound_next = (self.bound_next + 1) % LINK_WINDOWS;
            } else {
                self.free[self.free_next] = rate;
                self.free_next = (self.free_next + 1) % LINK_WINDOWS;
            }
            self.windows += 1;
            self.start = now_ns;
            self.bytes = 0;
            self.busy_ns = 0;
            return true;
        }
        false
    }
    /// Records `ns` the sender spent compressing.
    pub fn observe_busy(&mut self, ns: u64) {
        if self.open {
            self.busy_ns += ns;
        }
    }
    /// The estimate, bit/s: `None` until a window closed.
    pub fn estimate(&self) -> Option<f64> {
        let m = self.free.iter().chain(&self.bound).fold(0.0f64, |a, &b| a.max(b));
        (self.windows > 0 && m > 0.0).then_some(m)
    }
    /// Windows measured so far.
    pub fn windows(&self) -> u64 {
        self.windows
    }
}

/// The most algorithms one model chooses among (the SA's and one [`Alternative`]).
pub const MAX_ALGORITHMS: usize = 2;

/// What the model knows of one algorithm on this SA's data.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Figures {
    comp: Ewma,
    decomp: Ewma,
    /// compressed/original, i.e. 1/X.
    inv_ratio: Ewma,
    samples: u64,
}

/// One algorithm's figures, for display (ns per original byte).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AlgorithmStatus {
    /// Compression cost (EWMA).
    pub comp_ns: Option<f64>,
    /// Decompression cost: observed, else equal to compression.
    pub decomp_ns: Option<f64>,
    /// Compressed / original (EWMA over the attempts).
    pub inv_ratio: Option<f64>,
    /// The slowest stage with this algorithm ([`Stages::on`]).
    pub on_ns: Option<f64>,
    /// Compression attempts with it.
    pub samples: u64,
}

/// The cost model of an adaptive IPComp SA, after McGregor and Lee. The paper's Complete
/// model says compression pays when
///
/// ```text
/// (1 - 1/X)(1/R_E + 1/R_D + 1/R_HC + 1/R_HV + 1/R_SECNET) >= 1/R_COMP + 1/R_DECOMP
/// ```
///
/// with X the compression ratio (original/compressed, header-free) and R the rates: the
/// stages summed, as for one packet processed from start to end. A pipelined daemon overlaps
/// them, so the decision here uses the pipelined form ([`Stages`]: the slowest stage with
/// compression against the slowest without); the paper's sides stay available as a report
/// ([`CostModel::sides`]).
///
/// The model keeps the inverse rates, in nanoseconds per (uncompressed) byte, as EWMAs of what
/// the caller observes. Unobserved crypto costs count as 0 (no such transform); decryption and
/// verification default to their forward rates and decompression, until measured, to the
/// compression rate (the paper's assumption, conservative). An unknown link rate is
/// estimated ([`LinkEstimator`]); until an estimate exists the model does not compress
/// (except its probes), since the link may well be the fast stage.
///
/// With several algorithms ([`CostModel::with_algorithms`], index 0 the SA's own), each has
/// its own compression and decompression costs and ratio on this SA's data; the model
/// compresses with the one whose slowest stage is lowest (switching only for a gain of
/// [`ALGORITHM_HYSTERESIS`]), and keeps the other's figures fresh with probes: while skipping,
/// probes take the algorithms in turn; while compressing, one packet in [`CostModel::alternative_spacing`] goes out
/// compressed with the other (a valid packet under its CPI, not a wasted one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Configuration.
    pub config: ModelConfig,
    figs: [Figures; MAX_ALGORITHMS],
    algorithms: usize,
    active: usize,
    enc: Ewma,
    dec: Ewma,
    hc: Ewma,
    hv: Ewma,
    link: LinkEstimator,
    samples: u64,
    skipped_since_probe: u32,
    /// The algorithm the last probe while skipping used ([`CostModel::take_probe`]).
    last_probe: usize,
    since_alternative: u32,
    probe_every: u32,
    compressing: bool,
    flips: u64,
    switches: u64,
    probes: u64,
}

impl CostModel {
    /// A model of one algorithm with no observations.
    pub fn new(config: ModelConfig) -> Self {
        Self::with_algorithms(config, 1)
    }

    /// A model choosing among `algorithms` (1 to [`MAX_ALGORITHMS`]; index 0 is the SA's own
    /// algorithm, which it starts with).
    pub fn with_algorithms(config: ModelConfig, algorithms: usize) -> Self {
        CostModel {
            config,
            figs: [Figures::default(); MAX_ALGORITHMS],
            algorithms: algorithms.clamp(1, MAX_ALGORITHMS),
            active: 0,
            enc: Ewma::default(),
            dec: Ewma::default(),
            hc: Ewma::default(),
            hv: Ewma::default(),
            link: LinkEstimator::default(),
            samples: 0,
            skipped_since_probe: 0,
            last_probe: 0,
            since_alternative: 0,
            probe_every: config.probe_interval,
            // A configured link: compress until the first measurement says otherwise (the
            // paper's start). An unknown one: measure it uncompressed first.
            compressing: config.link_bps > 0.0,
            flips: 0,
            switches: 0,
            probes: 0,
        }
    }

    fn ns_per_byte(bytes: usize, nanos: u64) -> Option<f64> {
        (bytes > 0).then(|| nanos as f64 / bytes as f64)
    }

    /// The algorithms the model chooses among.
    pub fn algorithms(&self) -> usize {
        self.algorithms
    }
    /// The algorithm it compresses with (index; 0 is the SA's own).
    pub fn active(&self) -> usize {
        self.active
    }
    /// Times the algorithm in use changed.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Records a compression of `bytes_in` to `bytes_out` (header-free) taking `nanos`, with
    /// the algorithm in use. An incompressible packet is recorded with `bytes_out = bytes_in`.
    pub fn observe_compress(&mut self, bytes_in: usize, bytes_out: usize, nanos: u64) {
        self.observe_compress_with(self.active, bytes_in, bytes_out, nanos);
    }
    /// As [`observe_compress`](Self::observe_compress), with algorithm `alg`.
    pub fn observe_compress_with(&mut self, alg: usize, bytes_in: usize, bytes_out: usize, nanos: u64) {
        let Some(f) = self.figs[..self.algorithms].get_mut(alg) else {
            return;
        };
        if let Some(t) = Self::ns_per_byte(bytes_in, nanos) {
            f.comp.update_time(t);
            f.inv_ratio.update((bytes_out as f64 / bytes_in as f64).min(1.0));
            f.samples += 1;
            self.samples += 1;
            self.link.observe_busy(nanos);
        }
    }
    /// Records that the bundle put `wire` bytes on the link at `now_ns` (the caller's
    /// monotonic clock, e.g. the engine's `now`): the link estimate's input.
    pub fn observe_sent(&mut self, wire: usize, now_ns: u64) {
        if self.link.observe_sent(wire, now_ns) && self.config.link_bps <= 0.0 {
            self.decide();
        }
    }
    /// The link estimator.
    pub fn link_estimator(&self) -> &LinkEstimator {
        &self.link
    }
    /// Records a decompression (with the algorithm in use) producing `bytes_out` bytes in
    /// `nanos`.
    pub fn observe_decompress(&mut self, bytes_out: usize, nanos: u64) {
        self.observe_decompress_with(self.active, bytes_out, nanos);
    }
    /// As [`observe_decompress`](Self::observe_decompress), with algorithm `alg`.
    pub fn observe_decompress_with(&mut self, alg: usize, bytes_out: usize, nanos: u64) {
        if let (Some(f), Some(t)) = (
            self.figs[..self.algorithms].get_mut(alg),
            Self::ns_per_byte(bytes_out, nanos),
        ) {
            f.decomp.update_time(t);
        }
    }
    /// Records a crypto operation over `bytes` taking `nanos`.
    pub fn observe_crypto(&mut self, op: CryptoOp, bytes: usize, nanos: u64) {
        if let Some(t) = Self::ns_per_byte(bytes, nanos) {
            match op {
                CryptoOp::Encrypt => self.enc.update_time(t),
                CryptoOp::Decrypt => self.dec.update_time(t),
                CryptoOp::IntegrityCompute => self.hc.update_time(t),
                CryptoOp::IntegrityVerify => self.hv.update_time(t),
            }
        }
    }

    /// Sets a rate directly, in bit/s (e.g. from a benchmark or configuration).
    pub fn set_crypto_rate(&mut self, op: CryptoOp, bps: f64) {
        self.observe_crypto_ns(op, 8e9 / bps);
    }
    fn observe_crypto_ns(&mut self, op: CryptoOp, ns: f64) {
        let e = match op {
            CryptoOp::Encrypt => &mut self.enc,
            CryptoOp::Decrypt => &mut self.dec,
            CryptoOp::IntegrityCompute => &mut self.hc,
            CryptoOp::IntegrityVerify => &mut self.hv,
        };
        *e = Ewma::default();
        e.update(ns);
    }

    /// The crypto costs: (E + H, D + V), ns per byte.
    fn crypto(&self) -> (f64, f64) {
        let enc = self.enc.get().unwrap_or(0.0);
        let dec = self.dec.get().unwrap_or(enc);
        let hc = self.hc.get().unwrap_or(0.0);
        let hv = self.hv.get().unwrap_or(hc);
        (enc + hc, dec + hv)
    }

    /// The paper's inequality for the algorithm in use, in ns per original byte: (gain,
    /// cost). `None` until a compression has been observed. A report: the decision uses
    /// [`CostModel::stages`].
    pub fn sides(&self) -> Option<(f64, f64)> {
        let f = &self.figs[self.active];
        let comp = f.comp.get()?;
        let inv_x = f.inv_ratio.get()?;
        let decomp = f.decomp.get().unwrap_or(comp);
        let (eh, dv) = self.crypto();
        let net = self.net_ns().unwrap_or(0.0);
        Some(((1.0 - inv_x) * (eh + dv + net), comp + decomp))
    }

    /// The pipelined stages of the algorithm in use, in ns per original byte. `None` until a
    /// compression has been observed and the link rate is known (configured or estimated).
    pub fn stages(&self) -> Option<Stages> {
        self.stages_of(self.active)
    }

    /// The pipelined stages with algorithm `alg` (`None` as for [`stages`](Self::stages), or
    /// for an algorithm the model does not have).
    pub fn stages_of(&self, alg: usize) -> Option<Stages> {
        let f = self.figs[..self.algorithms].get(alg)?;
        let comp = f.comp.get()?;
        let r = f.inv_ratio.get()?;
        let net = self.net_ns()?;
        let decomp = f.decomp.get().unwrap_or(comp);
        let (eh, dv) = self.crypto();
        Some(Stages {
            send_off: eh,
            send_on: comp + eh * r,
            link_off: net,
            link_on: net * r,
            recv_off: dv,
            recv_on: decomp + dv * r,
        })
    }

    /// Whether compression pays (true while there is not enough data to tell and the link
    /// rate is configured; false while an unknown link rate has not been estimated).
    pub fn pays(&self) -> bool {
        match self.stages() {
            Some(s) => s.on() < s.off(),
            None => self.compressing,
        }
    }

    /// The per-packet decision: compress when it pays (with hysteresis), or as a periodic
    /// probe while it does not.
    pub fn should_compress(&mut self) -> bool {
        self.choose().is_some()
    }

    /// The per-packet decision with the algorithm: `Some(alg)` compresses with algorithm
    /// `alg` (the one in use, a probe of the other, or a probe while skipping), `None` skips.
    pub fn choose(&mut self) -> Option<usize> {
        self.decide();
        if self.compressing {
            self.skipped_since_probe = 0;
            if self.algorithms > 1 {
                self.since_alternative += 1;
                if self.since_alternative >= self.alternative_spacing() {
                    self.since_alternative = 0;
                    self.probes += 1;
                    return Some(self.other());
                }
            }
            return Some(self.active);
        }
        self.skipped_since_probe += 1;
        if self.probe_every > 0 && self.skipped_since_probe >= self.probe_every.max(self.probe_budget()) {
            return Some(self.take_probe());
        }
        None
    }

    /// Counts a probe taken while skipping (by the caller's own count of skipped packets,
    /// [`skip_spacing`](Self::skip_spacing)) and says which algorithm it compresses with:
    /// with several, one without figures yet first, then each in turn.
    pub fn take_probe(&mut self) -> usize {
        self.skipped_since_probe = 0;
        self.probes += 1;
        // One without figures first (the other one: the SA's own has a sample by the time
        // the model skips); after that in turn. Not "the one with fewer samples": after a
        // long run compressing with one algorithm, that would send every probe to the other
        // for as many packets, and the first one's figure (perhaps one timed on a busy core)
        // would never be measured again.
        let alg = (0..self.algorithms)
            .find(|&a| self.figs[a].samples == 0)
            .unwrap_or((self.last_probe + 1) % self.algorithms);
        self.last_probe = alg;
        alg
    }

    /// While the model skips with its figures complete, the skipped packets between probes
    /// ([`ModelConfig::probe_interval`] or the probe budget, whichever is more; `u32::MAX`:
    /// never): a caller may count them itself, without asking the model per packet, and call
    /// [`take_probe`](Self::take_probe) when they are reached. `None` while the model
    /// compresses or cannot decide yet (ask it per packet: [`choose`](Self::choose)).
    pub fn skip_spacing(&self) -> Option<u32> {
        if self.compressing || self.stages().is_none() {
            return None;
        }
        Some(if self.probe_every == 0 {
            u32::MAX
        } else {
            self.probe_every.max(self.probe_budget())
        })
    }

    fn other(&self) -> usize {
        (self.active + 1) % self.algorithms
    }

    /// While compressing with several algorithms: the packets between two compressed with
    /// the algorithm not in use. [`ModelConfig::probe_interval`] until it has figures, then
    /// within [`PROBE_BUDGET`]: its slowest stage over the slowest stage now, divided by the
    /// budget (at most [`MAX_PROBE_BUDGET`]): a probe with a slower compressor costs the
    /// sender's time, one with a lower ratio the link's.
    pub fn alternative_spacing(&self) -> u32 {
        let floor = self.config.probe_interval.max(1);
        let (Some(alt), Some(now)) = (self.stages_of(self.other()), self.stages()) else {
            return floor;
        };
        Self::spacing(alt.on(), now.on()).max(floor)
    }

    /// `cost / (slowest · budget)` packets, rounded up, 1 to [`MAX_PROBE_BUDGET`].
    fn spacing(cost: f64, slowest: f64) -> u32 {
        if slowest <= 0.0 {
            return MAX_PROBE_BUDGET;
        }
        let n = cost / (slowest * PROBE_BUDGET);
        if n.is_finite() {
            // Rounded up without `f64::ceil` (not in `core`).
            let whole = n.min(MAX_PROBE_BUDGET as f64) as u32;
            (whole + u32::from((whole as f64) < n)).clamp(1, MAX_PROBE_BUDGET)
        } else {
            MAX_PROBE_BUDGET
        }
    }

    /// The fewest skipped packets between probes that keeps probing within
    /// [`PROBE_BUDGET`] of the throughput: a probe costs the sender's stage with compression
    /// instead of the slowest stage without, so one probe per `(send_on / off) / budget`
    /// packets costs about `budget` (at most [`MAX_PROBE_BUDGET`] packets apart). 1 until
    /// there is a compression sample; with the link not known yet, the stages without it.
    /// With several algorithms, the dearest one's sender stage.
    pub fn probe_budget(&self) -> u32 {
        let (eh, dv) = self.crypto();
        let mut send_on: Option<f64> = None;
        for f in &self.figs[..self.algorithms] {
            if let (Some(comp), Some(r)) = (f.comp.get(), f.inv_ratio.get()) {
                let s = comp + eh * r;
                send_on = Some(send_on.map_or(s, |m| m.max(s)));
            }
        }
        let Some(send_on) = send_on else {
            return 1;
        };
        Self::spacing(send_on, eh.max(dv).max(self.net_ns().unwrap_or(0.0)))
    }

    /// Re-evaluates the decision with hysteresis (first which algorithm, then whether to
    /// compress with it); `true` when whether to compress changed.
    pub fn decide(&mut self) -> bool {
        let h = self.config.hysteresis.clamp(0.0, 0.9);
        if self.algorithms > 1 {
            // The algorithm: the lowest slowest stage, by more than ALGORITHM_HYSTERESIS (or
            // h, if larger) to switch. A sender near its limit times its compressions
            // noisily (a core shared with the receiver and the application inflates them),
            // and where the choice matters the two differ by far more (LZF against DEFLATE
            // on a fast link: 2-3x); switching on noise costs the worse algorithm's packets.
            let hs = h.max(ALGORITHM_HYSTERESIS);
            let on = |a: usize| self.stages_of(a).map(|s| s.on());
            match (on(self.active), on(self.other())) {
                (None, Some(_)) => {
                    self.active = self.other();
                    self.switches += 1;
                }
                (Some(cur), Some(alt)) if alt < cur * (1.0 - hs) => {
                    self.active = self.other();
                    self.switches += 1;
                    self.since_alternative = 0;
                }
                _ => {}
            }
        }
        let Some(st) = self.stages() else {
            return false;
        };
        let (on, off) = (st.on(), st.off());
        // Both thresholds lie below parity: compressing that gains nothing (incompressible
        // data on a slow link, where the link bounds both) stops.
        let next = if self.compressing {
            on < off * (1.0 - h / 4.0)
        } else {
            on < off * (1.0 - h)
        };
        if next != self.compressing {
            self.compressing = next;
            self.flips += 1;
            self.probe_every = self.config.probe_interval;
            self.skipped_since_probe = 0;
            return true;
        }
        false
    }

    /// Tells the model what a probe showed: `sample_pays` is the inequality evaluated with
    /// the probe's own ratio and time. A probe that confirms "skip" doubles the probe
    /// interval (up to the maximum); one that contradicts it resets it, so a change in the
    /// data is followed by probes in quick succession.
    fn probe_result(&mut self, sample_pays: bool) {
        if self.compressing {
            return;
        }
        self.probe_every = if sample_pays {
            self.config.probe_interval
        } else {
            self.probe_every
                .saturating_mul(2)
                .min(self.config.max_probe_interval.max(self.config.probe_interval))
        };
    }

    /// Records a compression attempt with the algorithm in use and what it says about the
    /// decision (probe feedback).
    pub fn observe_attempt(&mut self, bytes_in: usize, bytes_out: usize, nanos: u64) {
        self.observe_attempt_with(self.active, bytes_in, bytes_out, nanos);
    }

    /// As [`observe_attempt`](Self::observe_attempt), with algorithm `alg`.
    pub fn observe_attempt_with(&mut self, alg: usize, bytes_in: usize, bytes_out: usize, nanos: u64) {
        if alg >= self.algorithms {
            return;
        }
        let sample = Self::ns_per_byte(bytes_in, nanos).map(|t| {
            let inv_x = (bytes_out as f64 / bytes_in as f64).min(1.0);
            let mut one = *self;
            one.figs[alg].comp = Ewma::default();
            one.figs[alg].comp.update(t);
            one.figs[alg].inv_ratio = Ewma::default();
            one.figs[alg].inv_ratio.update(inv_x);
            one.stages_of(alg).map_or(one.compressing, |s| s.on() < s.off())
        });
        self.observe_compress_with(alg, bytes_in, bytes_out, nanos);
        if let Some(p) = sample {
            self.probe_result(p);
        }
    }

    /// Whether the model currently says "compress" (before probes).
    pub fn compressing(&self) -> bool {
        self.compressing
    }

    /// One algorithm's figures (`None` for an index the model does not have).
    pub fn algorithm_status(&self, alg: usize) -> Option<AlgorithmStatus> {
        let f = self.figs[..self.algorithms].get(alg)?;
        let comp = f.comp.get();
        Some(AlgorithmStatus {
            comp_ns: comp,
            decomp_ns: f.decomp.get().or(comp),
            inv_ratio: f.inv_ratio.get(),
            on_ns: self.stages_of(alg).map(|s| s.on()),
            samples: f.samples,
        })
    }

    /// The inputs and state, for snapshots and logs (the figures of the algorithm in use).
    pub fn status(&self) -> ModelStatus {
        let sides = self.sides();
        let stages = self.stages();
        let f = &self.figs[self.active];
        let comp = f.comp.get();
        ModelStatus {
            compressing: self.compressing,
            flips: self.flips,
            probes: self.probes,
            comp_ns: comp,
            decomp_ns: f.decomp.get().or(comp),
            enc_ns: self.enc.get().unwrap_or(0.0),
            hc_ns: self.hc.get().unwrap_or(0.0),
            net_ns: self.net_ns().unwrap_or(0.0),
            link_estimate_bps: self.link.estimate(),
            link_configured: self.config.link_bps > 0.0,
            inv_ratio: f.inv_ratio.get(),
            gain_ns: sides.map(|s| s.0),
            cost_ns: sides.map(|s| s.1),
            on_ns: stages.map(|s| s.on()),
            off_ns: stages.map(|s| s.off()),
            decomp_measured: f.decomp.get().is_some(),
            samples: self.samples,
            active: self.active,
            switches: self.switches,
        }
    }

    /// The link's ns per byte: configured, else estimated, else unknown.
    fn net_ns(&self) -> Option<f64> {
        if self.config.link_bps > 0.0 {
            Some(8e9 / self.config.link_bps)
        } else {
            self.link.estimate().map(|bps| 8e9 / bps)
        }
    }
}

/// Counters of an IPComp SA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets sent compressed.
    pub compressed: u64,
    /// Packets sent uncompressed because compression did not shrink them (non-expansion).
    pub skipped_incompressible: u64,
    /// Packets below the minimum size, sent uncompressed without trying.
    pub skipped_too_small: u64,
    /// Packets sent uncompressed because of the RFC 3173 back-off.
    pub skipped_backoff: u64,
    /// Packets sent uncompressed because the cost model said compression does not pay.
    pub skipped_model: u64,
    /// Packets sent uncompressed by choice: the SA's mode is `off`.
    pub skipped_off: u64,
    /// Payload bytes before compression, over the packets sent compressed.
    pub bytes_in: u64,
    /// Bytes saved on the wire (original payload - (compressed + 4-byte header)).
    pub bytes_saved: u64,
    /// Packets received compressed and decompressed.
    pub decompressed: u64,
    /// Packets received without an IPComp header (sent uncompressed by the peer).
    pub received_uncompressed: u64,
}
