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

/// An exponentially weighted moving average (weight 1/8 for a new sample).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ewma {
    value: f64,
    seen: bool,
}

impl Ewma {
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

/// Configuration of the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelConfig {
    /// The link rate the secured packet is sent at, in bit/s (R_SECNET).
    pub link_bps: f64,
    /// While the model says "skip", still compress one packet in this many to keep the
    /// measured ratio and rates fresh (0: never probe).
    pub probe_interval: u32,
}

/// The McGregor-Lee Complete model: compression pays when
///
/// ```text
/// (1 - 1/X)(1/R_E + 1/R_D + 1/R_HC + 1/R_HV + 1/R_SECNET) >= 1/R_COMP + 1/R_DECOMP
/// ```
///
/// with X the compression ratio (original/compressed, header-free) and R the rates. The model
/// keeps the inverse rates, in nanoseconds per (uncompressed) byte, as EWMAs of what the
/// caller observes. Unobserved crypto costs count as 0 (no such transform); decryption and
/// verification default to their forward rates and decompression to the compression rate
/// (the paper's assumptions, and conservative for decompression).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Configuration.
    pub config: ModelConfig,
    comp: Ewma,
    decomp: Ewma,
    enc: Ewma,
    dec: Ewma,
    hc: Ewma,
    hv: Ewma,
    /// compressed/original, i.e. 1/X.
    inv_ratio: Ewma,
    skipped_since_probe: u32,
}

impl CostModel {
    /// A model with no observations.
    pub fn new(config: ModelConfig) -> Self {
        CostModel {
            config,
            comp: Ewma::default(),
            decomp: Ewma::default(),
            enc: Ewma::default(),
            dec: Ewma::default(),
            hc: Ewma::default(),
            hv: Ewma::default(),
            inv_ratio: Ewma::default(),
            skipped_since_probe: 0,
        }
    }

    fn ns_per_byte(bytes: usize, nanos: u64) -> Option<f64> {
        (bytes > 0).then(|| nanos as f64 / bytes as f64)
    }

    /// Records a compression of `bytes_in` to `bytes_out` (header-free) taking `nanos`.
    /// An incompressible packet is recorded with `bytes_out = bytes_in`.
    pub fn observe_compress(&mut self, bytes_in: usize, bytes_out: usize, nanos: u64) {
        if let Some(t) = Self::ns_per_byte(bytes_in, nanos) {
            self.comp.update(t);
            self.inv_ratio.update((bytes_out as f64 / bytes_in as f64).min(1.0));
        }
    }
    /// Records a decompression producing `bytes_out` bytes in `nanos`.
    pub fn observe_decompress(&mut self, bytes_out: usize, nanos: u64) {
        if let Some(t) = Self::ns_per_byte(bytes_out, nanos) {
            self.decomp.update(t);
        }
    }
    /// Records a crypto operation over `bytes` taking `nanos`.
    pub fn observe_crypto(&mut self, op: CryptoOp, bytes: usize, nanos: u64) {
        if let Some(t) = Self::ns_per_byte(bytes, nanos) {
            match op {
                CryptoOp::Encrypt => self.enc.update(t),
                CryptoOp::Decrypt => self.dec.update(t),
                CryptoOp::IntegrityCompute => self.hc.update(t),
                CryptoOp::IntegrityVerify => self.hv.update(t),
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

    /// Both sides of the inequality, in ns per original byte: (gain, cost). `None` until a
    /// compression has been observed.
    pub fn sides(&self) -> Option<(f64, f64)> {
        let comp = self.comp.get()?;
        let inv_x = self.inv_ratio.get()?;
        let decomp = self.decomp.get().unwrap_or(comp);
        let enc = self.enc.get().unwrap_or(0.0);
        let dec = self.dec.get().unwrap_or(enc);
        let hc = self.hc.get().unwrap_or(0.0);
        let hv = self.hv.get().unwrap_or(hc);
        let net = if self.config.link_bps > 0.0 {
            8e9 / self.config.link_bps
        } else {
            0.0
        };
        Some(((1.0 - inv_x) * (enc + dec + hc + hv + net), comp + decomp))
    }

    /// Whether compression pays (true while there is not enough data to tell).
    pub fn pays(&self) -> bool {
        !matches!(self.sides(), Some((gain, cost)) if gain < cost)
    }

    /// The per-packet decision: compress when it pays, or as a periodic probe.
    pub fn should_compress(&mut self) -> bool {
        if self.pays() {
            self.skipped_since_probe = 0;
            return true;
        }
        self.skipped_since_probe += 1;
        if self.config.probe_interval > 0 && self.skipped_since_probe >= self.config.probe_interval {
            self.skipped_since_probe = 0;
            return true;
        }
        false
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
    /// Payload bytes before compression, over the packets sent compressed.
    pub bytes_in: u64,
    /// Bytes saved on the wire (original payload - (compressed + 4-byte header)).
    pub bytes_saved: u64,
    /// Packets received compressed and decompressed.
    pub decompressed: u64,
    /// Packets received without an IPComp header (sent uncompressed by the peer).
    pub received_uncompressed: u64,
}
