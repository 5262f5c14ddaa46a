//! Per-SA, per-direction counters and drop reasons (RFC 4301 section 4.4.2.1 keeps the
//! counts; the reasons are those an operator asks "why was it dropped?" about).

use crate::bundle::PacketError;
use core::fmt;
use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use ipsec_core::Error;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(rename_all = "snake_case"))]
pub enum DropReason {
    /// The ICV did not verify.
    BadIcv,
    /// Replayed, too old for the window, or sequence number 0.
    Replay,
    /// ESP padding not as RFC 4303 2.4 requires.
    BadPadding,
    /// Truncated or malformed headers, or a payload that does not decompress.
    Malformed,
    /// The SA reached a hard lifetime limit or ran out of sequence numbers.
    Expired,
    /// No SA for the SPI (inbound) or a policy naming an SA that is gone.
    NoSa,
    /// A discard policy, no policy at all, or an inbound packet whose protection does not
    /// match its policy (RFC 4301 5.2).
    PolicyDiscard,
    /// The caller's buffer has too little room, or the packet would exceed 65535 bytes.
    NoRoom,
    /// An ESP or AH packet that is an IP fragment (RFC 4303 3.4.1, RFC 4302 3.4.1).
    Fragment,
    /// An ESP packet of an SA with `encap espinudp` that did not arrive in UDP to the SA's
    /// port (RFC 3948 5.2: the peers agreed on ESP in UDP; Linux counts it as
    /// XFRMINSTATEMISMATCH).
    EncapMismatch,
}

impl DropReason {
    /// Every reason, in the order snapshots list them.
    pub const ALL: [DropReason; 10] = [
        DropReason::BadIcv,
        DropReason::Replay,
        DropReason::BadPadding,
        DropReason::Malformed,
        DropReason::Expired,
        DropReason::NoSa,
        DropReason::PolicyDiscard,
        DropReason::NoRoom,
        DropReason::Fragment,
        DropReason::EncapMismatch,
    ];

    /// The name used in snapshots and logs.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::BadIcv => "bad_icv",
            DropReason::Replay => "replay",
            DropReason::BadPadding => "bad_padding",
            DropReason::Malformed => "malformed",
            DropReason::Expired => "expired",
            DropReason::NoSa => "no_sa",
            DropReason::PolicyDiscard => "policy_discard",
            DropReason::NoRoom => "no_room",
            DropReason::Fragment => "fragment",
            DropReason::EncapMismatch => "encap_mismatch",
        }
    }

    /// The reason for a transform error.
    pub fn of(e: &PacketError) -> DropReason {
        match e {
            PacketError::Ipsec(e) => DropReason::of_core(e),
            PacketError::Comp(_) | PacketError::NotIp | PacketError::LinkType(_) => DropReason::Malformed,
            PacketError::Encap(
                crate::udp_encap::EncapError::NotEncapsulated(_) | crate::udp_encap::EncapError::UnexpectedEncap(_),
            ) => DropReason::EncapMismatch,
            PacketError::Encap(_) => DropReason::Malformed,
        }
    }

    fn of_core(e: &Error) -> DropReason {
        match e {
            Error::BadIcv => DropReason::BadIcv,
            Error::Replay | Error::TooOld | Error::SequenceZero => DropReason::Replay,
            Error::BadPadding => DropReason::BadPadding,
            Error::SequenceExhausted => DropReason::Expired,
            Error::UnknownSpi(_) => DropReason::NoSa,
            Error::NoHeadroom | Error::NoTailroom | Error::TooBig => DropReason::NoRoom,
            Error::Fragment => DropReason::Fragment,
            _ => DropReason::Malformed,
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Drop counts by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Drops {
    /// [`DropReason::BadIcv`].
    pub bad_icv: u64,
    /// [`DropReason::Replay`].
    pub replay: u64,
    /// [`DropReason::BadPadding`].
    pub bad_padding: u64,
    /// [`DropReason::Malformed`].
    pub malformed: u64,
    /// [`DropReason::Expired`].
    pub expired: u64,
    /// [`DropReason::NoSa`].
    pub no_sa: u64,
    /// [`DropReason::PolicyDiscard`].
    pub policy_discard: u64,
    /// [`DropReason::NoRoom`].
    pub no_room: u64,
    /// [`DropReason::Fragment`].
    pub fragment: u64,
    /// [`DropReason::EncapMismatch`].
    pub encap_mismatch: u64,
}

impl Drops {
    fn slot(&mut self, r: DropReason) -> &mut u64 {
        match r {
            DropReason::BadIcv => &mut self.bad_icv,
            DropReason::Replay => &mut self.replay,
            DropReason::BadPadding => &mut self.bad_padding,
            DropReason::Malformed => &mut self.malformed,
            DropReason::Expired => &mut self.expired,
            DropReason::NoSa => &mut self.no_sa,
            DropReason::PolicyDiscard => &mut self.policy_discard,
            DropReason::NoRoom => &mut self.no_room,
            DropReason::Fragment => &mut self.fragment,
            DropReason::EncapMismatch => &mut self.encap_mismatch,
        }
    }

    /// Counts one drop.
    pub fn count(&mut self, r: DropReason) {
        let s = self.slot(r);
        *s = s.saturating_add(1);
    }

    /// The count for one reason.
    pub fn get(&self, r: DropReason) -> u64 {
        let mut c = *self;
        *c.slot(r)
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        DropReason::ALL.iter().map(|&r| self.get(r)).sum()
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Drops) {
        for r in DropReason::ALL {
            let s = self.slot(r);
            *s = s.saturating_add(other.get(r));
        }
    }
}

/// Traffic through one SA in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Packets the transform was applied to successfully.
    pub packets: u64,
    /// Their bytes before the transform (IP packet as handed to the SA).
    pub bytes_before: u64,
    /// Their bytes after it.
    pub bytes_after: u64,
    /// Bytes the transform added on the wire: `wire − plain`, summed; negative when IPComp
    /// saved more than the headers cost.
    pub overhead_bytes: i64,
    /// Outbound IPComp packets sent uncompressed (non-expansion, RFC 3173 2.2), or inbound
    /// packets of an IPComp SA's bundle that arrived uncompressed.
    pub not_compressed: u64,
    /// Packets dropped at this SA, by reason.
    pub drops: Drops,
}

impl Counters {
    /// Counts one packet the transform turned from `before` bytes into `after` bytes.
    /// `wire_minus_plain` is the overhead in the direction's sense.
    pub fn count(&mut self, before: usize, after: usize, wire_minus_plain: i64) {
        self.packets = self.packets.saturating_add(1);
        self.bytes_before = self.bytes_before.saturating_add(before as u64);
        self.bytes_after = self.bytes_after.saturating_add(after as u64);
        self.overhead_bytes = self.overhead_bytes.saturating_add(wire_minus_plain);
    }

    /// Adds `other`'s counts to these (totals over several SAs).
    pub fn add(&mut self, other: &Counters) {
        self.packets = self.packets.saturating_add(other.packets);
        self.bytes_before = self.bytes_before.saturating_add(other.bytes_before);
        self.bytes_after = self.bytes_after.saturating_add(other.bytes_after);
        self.overhead_bytes = self.overhead_bytes.saturating_add(other.overhead_bytes);
        self.not_compressed = self.not_compressed.saturating_add(other.not_compressed);
        self.drops.add(&other.drops);
    }
}

/// Drop counts by reason that many threads add to at once.
#[derive(Debug, Default)]
pub struct AtomicDrops([AtomicU64; DropReason::ALL.len()]);

impl AtomicDrops {
    /// Counts one drop.
    pub fn count(&self, r: DropReason) {
        let i = DropReason::ALL.iter().position(|&x| x == r).unwrap_or(0);
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn load(&self) -> Drops {
        let mut d = Drops::default();
        for (r, a) in DropReason::ALL.iter().zip(&self.0) {
            *d.slot(*r) = a.load(Ordering::Relaxed);
        }
        d
    }
}

/// [`Counters`] that many threads add to at once (relaxed atomics: each figure is exact,
/// a snapshot taken while packets flow may mix figures a few packets apart).
#[derive(Debug, Default)]
pub struct AtomicCounters {
    packets: AtomicU64,
    bytes_before: AtomicU64,
    bytes_after: AtomicU64,
    overhead_bytes: AtomicI64,
    not_compressed: AtomicU64,
    drops: AtomicDrops,
}

impl AtomicCounters {
    /// Counts `packets` packets that the transform turned from `before` bytes into `after`
    /// bytes in all (a batch adds once).
    pub fn count_n(&self, packets: u64, before: u64, after: u64, wire_minus_plain: i64) {
        self.packets.fetch_add(packets, Ordering::Relaxed);
        self.bytes_before.fetch_add(before, Ordering::Relaxed);
        self.bytes_after.fetch_add(after, Ordering::Relaxed);
        self.overhead_bytes.fetch_add(wire_minus_plain, Ordering::Relaxed);
    }

    /// Counts packets that went (or came) uncompressed through an IPComp SA.
    pub fn count_not_compressed(&self, n: u64) {
        self.not_compressed.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one drop.
    pub fn count_drop(&self, r: DropReason) {
        self.drops.count(r);
    }

    /// The counts now.
    pub fn load(&self) -> Counters {
        Counters {
            packets: self.packets.load(Ordering::Relaxed),
            bytes_before: self.bytes_before.load(Ordering::Relaxed),
            bytes_after: self.bytes_after.load(Ordering::Relaxed),
            overhead_bytes: self.overhead_bytes.load(Ordering::Relaxed),
            not_compressed: self.not_compressed.load(Ordering::Relaxed),
            drops: self.drops.load(),
        }
    }
}

/// An IPComp SA in a snapshot: its adaptive mode, what it did with each packet, and the cost
/// model's inputs and decision (mode `model`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CompSnapshot {
    /// `off`, `always`, `backoff` or `model`.
    pub mode: &'static str,
    /// The configured link rate, bit/s (0: unknown, estimated by the model).
    pub link_bps: u64,
    /// Packets sent compressed (probes included).
    pub compressed: u64,
    /// Tried, but did not shrink (sent uncompressed, RFC 3173 non-expansion).
    pub incompressible: u64,
    /// Below the minimum size.
    pub too_small: u64,
    /// Sent uncompressed by choice: mode `off`.
    pub uncompressed_by_choice: u64,
    /// Skipped by the RFC 3173 back-off.
    pub skipped_backoff: u64,
    /// Skipped because the model said compression does not pay.
    pub skipped_model: u64,
    /// Bytes saved on the wire by compression.
    pub bytes_saved: u64,
    /// Inbound: packets decompressed.
    pub decompressed: u64,
    /// The model (mode `model`).
    pub model: Option<ModelSnapshot>,
}

/// The cost model's state: rates in Mbit/s (of original bytes), the ratio X, both sides of
/// the inequality in ns per original byte.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ModelSnapshot {
    /// `compress` or `skip`.
    pub decision: &'static str,
    /// The algorithm the model compresses with (`deflate`, `lzf`, `lzs`): the SA's own, or
    /// its alternative when it chose that one. The figures below are this algorithm's.
    pub algorithm: &'static str,
    /// Times the model changed algorithm (SAs with an alternative).
    pub switches: u64,
    /// The other algorithm's figures (SAs with an alternative): compression rate, Mbit/s.
    pub other_comp_mbps: Option<f64>,
    /// The other algorithm's ratio X.
    pub other_ratio: Option<f64>,
    /// The other algorithm's slowest stage, ns per original byte.
    pub other_on_ns_per_byte: Option<f64>,
    /// Times the decision changed.
    pub flips: u64,
    /// Probes sent compressed while the decision was `skip`.
    pub probes: u64,
    /// Compression attempts timed (the model's samples).
    pub samples: u64,
    /// Compression attempts that should have been timed but were not (no clock): anything
    /// but 0 means the model is deciding blind.
    pub untimed: u64,
    /// Compression rate (EWMA of this SA's compressions).
    pub comp_mbps: Option<f64>,
    /// Decompression rate: measured (a sample of this SA's own output decompressed again,
    /// and inbound decompressions), else assumed equal to the compression rate.
    pub decomp_mbps: Option<f64>,
    /// Whether `decomp_mbps` was measured.
    pub decomp_measured: bool,
    /// Encryption rate of the bundle's ESP (0: not measured yet).
    pub enc_mbps: Option<f64>,
    /// ICV computation rate of the bundle's AH (none: no AH).
    pub icv_mbps: Option<f64>,
    /// The link rate used: configured, else estimated (none: not known yet).
    pub link_mbps: Option<f64>,
    /// `configured`, `estimated` or `unknown`.
    pub link_source: &'static str,
    /// The link rate estimated from what the SA's bundle sent (also when one is configured).
    pub link_estimate_mbps: Option<f64>,
    /// Compression ratio X = original / compressed (EWMA over the attempts).
    pub ratio: Option<f64>,
    /// The paper's left side: (1 - 1/X)(crypto + link), ns per original byte (a report).
    pub gain_ns_per_byte: Option<f64>,
    /// The paper's right side: compression + decompression, ns per original byte.
    pub cost_ns_per_byte: Option<f64>,
    /// The pipelined form, which decides: the slowest stage with compression, ns per
    /// original byte.
    pub on_ns_per_byte: Option<f64>,
    /// The slowest stage without compression.
    pub off_ns_per_byte: Option<f64>,
}

fn mbps(ns_per_byte: f64) -> Option<f64> {
    (ns_per_byte > 0.0).then(|| 8000.0 / ns_per_byte)
}

impl CompSnapshot {
    /// The snapshot of an IPComp SA.
    pub fn of(adaptive: ipsec_ipcomp::Adaptive, sa: &ipsec_ipcomp::SharedIpcomp) -> Self {
        let (c, status, other, untimed) = {
            let s = sa.state();
            let other = s
                .model()
                .and_then(|m| m.algorithm_status(1 - m.active().min(1)).filter(|_| m.algorithms() > 1));
            (*s.counters(), s.model().map(|m| m.status()), other, s.untimed())
        };
        let c = sa.with_published(c);
        let names: [&'static str; 2] = {
            let mut it = sa.algorithms().map(|(a, _)| a.name());
            let first = it.next().unwrap_or("");
            [first, it.next().unwrap_or(first)]
        };
        CompSnapshot {
            mode: sa.config().adaptive.name(),
            link_bps: adaptive.link_bps,
            compressed: c.compressed,
            incompressible: c.skipped_incompressible,
            too_small: c.skipped_too_small,
            uncompressed_by_choice: c.skipped_off,
            skipped_backoff: c.skipped_backoff,
            skipped_model: c.skipped_model,
            bytes_saved: c.bytes_saved,
            decompressed: c.decompressed,
            model: status.map(|m| ModelSnapshot {
                decision: if m.compressing { "compress" } else { "skip" },
                algorithm: names[m.active.min(1)],
                switches: m.switches,
                other_comp_mbps: other.and_then(|o| o.comp_ns).and_then(mbps),
                other_ratio: other.and_then(|o| o.inv_ratio).filter(|r| *r > 0.0).map(|r| 1.0 / r),
                other_on_ns_per_byte: other.and_then(|o| o.on_ns),
                flips: m.flips,
                probes: m.probes,
                samples: m.samples,
                untimed,
                comp_mbps: m.comp_ns.and_then(mbps),
                decomp_mbps: m.decomp_ns.and_then(mbps),
                decomp_measured: m.decomp_measured,
                enc_mbps: mbps(m.enc_ns),
                icv_mbps: mbps(m.hc_ns),
                link_mbps: if adaptive.link_bps > 0 {
                    Some(adaptive.link_bps as f64 / 1e6)
                } else {
                    m.link_estimate_bps.map(|b| b / 1e6)
                },
                link_source: match (m.link_configured, m.net_ns > 0.0) {
                    (true, _) => "configured",
                    (false, true) => "estimated",
                    (false, false) => "unknown",
                },
                link_estimate_mbps: m.link_estimate_bps.map(|b| b / 1e6),
                ratio: m.inv_ratio.filter(|r| *r > 0.0).map(|r| 1.0 / r),
                gain_ns_per_byte: m.gain_ns,
                cost_ns_per_byte: m.cost_ns,
                on_ns_per_byte: m.on_ns,
                off_ns_per_byte: m.off_ns,
            }),
        }
    }
}
