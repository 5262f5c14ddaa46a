//! Per-SA, per-direction counters and drop reasons (RFC 4301 section 4.4.2.1 keeps the
//! counts; the reasons are those an operator asks "why was it dropped?" about).

use crate::bundle::PacketError;
use core::fmt;
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
}

impl DropReason {
    /// Every reason, in the order snapshots list them.
    pub const ALL: [DropReason; 8] = [
        DropReason::BadIcv,
        DropReason::Replay,
        DropReason::BadPadding,
        DropReason::Malformed,
        DropReason::Expired,
        DropReason::NoSa,
        DropReason::PolicyDiscard,
        DropReason::NoRoom,
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
        }
    }

    /// The reason for a transform error.
    pub fn of(e: &PacketError) -> DropReason {
        match e {
            PacketError::Ipsec(e) => DropReason::of_core(e),
            PacketError::Comp(_) | PacketError::NotIp | PacketError::LinkType(_) => DropReason::Malformed,
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
}
