//! SA lifetimes (RFC 4301 section 4.4.2.1): soft and hard limits in bytes, packets and
//! seconds. A soft limit raises an event once; at a hard limit the SA stops.
//!
//! Counting follows Linux XFRM: the SA processes packets while its counts are below the hard
//! limit, so the packet that reaches a byte limit still passes and the next one is dropped.
//! Bytes are those of the packet before the transform on output and after it on input (the
//! protected traffic). Time is the caller's monotonic clock, passed in as a [`Duration`].

use core::time::Duration;

/// Limits in each unit; `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Limits {
    /// Bytes processed.
    pub bytes: Option<u64>,
    /// Packets processed.
    pub packets: Option<u64>,
    /// Seconds since the SA was installed.
    pub seconds: Option<u64>,
}

impl Limits {
    /// No limit at all.
    pub const NONE: Limits = Limits {
        bytes: None,
        packets: None,
        seconds: None,
    };

    /// The first limit the usage has reached, if any.
    pub fn reached(&self, u: &Usage, now: Duration) -> Option<Limit> {
        if self.packets.is_some_and(|l| u.packets >= l) {
            Some(Limit::Packets)
        } else if self.bytes.is_some_and(|l| u.bytes >= l) {
            Some(Limit::Bytes)
        } else if self.seconds.is_some_and(|l| u.age(now).as_secs() >= l) {
            Some(Limit::Seconds)
        } else {
            None
        }
    }

    /// Whether every limit is `None`.
    pub fn is_none(&self) -> bool {
        *self == Limits::NONE
    }
}

/// Soft and hard limits of one SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Lifetime {
    /// Reaching one raises [`crate::Event::SoftExpired`] (time to rekey).
    pub soft: Limits,
    /// Reaching one stops the SA.
    pub hard: Limits,
}

impl Lifetime {
    /// Checks that no soft limit is above its hard limit (a soft limit that can never fire).
    pub fn validate(&self) -> Result<(), &'static str> {
        let above = |s: Option<u64>, h: Option<u64>| matches!((s, h), (Some(s), Some(h)) if s > h);
        if above(self.soft.bytes, self.hard.bytes) {
            return Err("soft byte limit above the hard one");
        }
        if above(self.soft.packets, self.hard.packets) {
            return Err("soft packet limit above the hard one");
        }
        if above(self.soft.seconds, self.hard.seconds) {
            return Err("soft time limit above the hard one");
        }
        Ok(())
    }
}

/// Which limit was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(rename_all = "lowercase"))]
pub enum Limit {
    /// The byte count.
    Bytes,
    /// The packet count.
    Packets,
    /// The age.
    Seconds,
    /// The sequence number space (RFC 4303 3.3.3: without ESN, 2^32 − 1 packets).
    Sequence,
}

/// What an SA has used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Usage {
    /// Bytes processed, both directions.
    pub bytes: u64,
    /// Packets processed, both directions.
    pub packets: u64,
    /// When the SA was installed (caller's clock).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub installed: Duration,
}

impl Usage {
    /// Usage of an SA installed at `now`.
    pub fn new(now: Duration) -> Self {
        Usage {
            bytes: 0,
            packets: 0,
            installed: now,
        }
    }

    /// Time since installation (zero if the clock went back).
    pub fn age(&self, now: Duration) -> Duration {
        now.saturating_sub(self.installed)
    }

    /// Counts one packet of `bytes`.
    pub fn charge(&mut self, bytes: usize) {
        self.packets = self.packets.saturating_add(1);
        self.bytes = self.bytes.saturating_add(bytes as u64);
    }
}

/// Where an SA is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(rename_all = "kebab-case"))]
pub enum State {
    /// In use.
    Mature,
    /// A soft limit was reached: still in use, but should be replaced.
    Dying,
    /// A hard limit was reached: its packets are dropped.
    Expired,
    /// Taken out of the SAD by the caller (`Engine::remove_sa`): no longer found inbound, and
    /// policies that still name it drop their packets as `no_sa`.
    Removed,
}
