//! The timers of an established IKE SA and its children: liveness checks ([`super::ike_dpd`])
//! and, from the configured lifetimes, rekeying and expiry.
use crate::config::Config;
use crate::ike_sa::{ChildTimers, Cx, IkeSa};
use core::time::Duration;
use rand_core::CryptoRngCore;

/// The IKE SA just became established.
pub(crate) fn ike_established(_sa: &mut IkeSa, _cx: &mut Cx) {}

/// A new child's timers.
pub(crate) fn child_timers(_sa: &IkeSa, _cx: &Cx, _cfg: usize) -> ChildTimers {
    ChildTimers {
        rekey_at: None,
        expire_at: None,
    }
}

/// The earliest of the SA's timers.
pub(crate) fn deadline(sa: &IkeSa, cfg: &Config) -> Option<Duration> {
    super::ike_dpd::deadline(sa, cfg)
}

/// Runs the timers that are due.
pub(crate) fn handle_timeout(sa: &mut IkeSa, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
    super::ike_dpd::handle_timeout(sa, cx, rng);
}
