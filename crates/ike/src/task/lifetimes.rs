//! The timers of an established IKE SA and its children (strongSwan's `rekey_time`,
//! `rand_time`, `life_time`): liveness checks ([`super::ike_dpd`]); a child rekeyed at its
//! rekey time less a random jitter (so the two ends do not start together, 2.8.1), deleted
//! at its life time if it was not (one the peer's rekey replaced goes without a Delete of
//! ours: the peer deletes it, 2.8); a replaced child deleted after [`REKEYED_GRACE`] if its
//! Delete did not come; the IKE SA rekeyed at the connection's `rekey_time` (2.18).
use crate::config::{Config, RekeyBy};
use crate::event::DownReason;
use crate::ike_sa::{ChildState, ChildTimers, Cx, IkeSa, State};
use crate::task::{child_delete::ChildDelete, child_rekey::ChildRekey, ike_rekey::IkeRekey, Task};
use alloc::vec::Vec;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// How long a replaced child stays installed waiting for its Delete (2.8) before we
/// delete it ourselves.
pub(crate) const REKEYED_GRACE: Duration = Duration::from_secs(30);

/// How long a replaced IKE SA waits for its Delete (2.18).
const REKEYED_IKE_GRACE: Duration = Duration::from_secs(60);

/// `base` less a jitter in `0..=rand`, drawn from `seed`'s random bits (an SPI).
fn jittered(base: Duration, rand: Duration, seed: u64) -> Duration {
    let r = rand.min(base).as_millis() as u64;
    let j = if r == 0 { 0 } else { seed % (r + 1) };
    base.saturating_sub(Duration::from_millis(j))
        .max(Duration::from_secs(1))
}

/// Whether we start rekeys of this IKE SA and its children (the connection's `rekey_by`):
/// its initiator always does; the responder unless the connection leaves them to the client,
/// or (`auto`) the client is Windows behind a NAT, which answers a responder's
/// CREATE_CHILD_SA with errors or drops it (issue #36). Decided when the IKE SA (and each
/// child) gets its timers; NAT detection (2.23) and the vendor IDs came in IKE_SA_INIT.
pub(crate) fn we_rekey(sa: &IkeSa, cfg: &Config) -> bool {
    if sa.is_initiator() {
        return true;
    }
    match sa.conn(cfg).rekey_by {
        RekeyBy::Both => true,
        RekeyBy::Client => false,
        RekeyBy::Auto => !(sa.peer_windows() && sa.path().nat.peer_behind_nat),
    }
}

/// The IKE SA just became established: when to rekey it.
pub(crate) fn ike_established(sa: &mut IkeSa, cx: &mut Cx) {
    let c = sa.conn(cx.cfg);
    let at = c
        .rekey_time
        .filter(|_| we_rekey(sa, cx.cfg))
        .map(|t| cx.now + jittered(t, c.rand_time.unwrap_or(t / 10), sa.spi_i() ^ sa.spi_r()));
    sa.schedule_rekey(at);
}

/// A new child's timers.
pub(crate) fn child_timers(sa: &IkeSa, cx: &Cx, cfg: usize, spi_in: u32) -> ChildTimers {
    let l = sa.conn(cx.cfg).children[cfg].lifetimes;
    ChildTimers {
        rekey_at: (l.rekey_time > Duration::ZERO && we_rekey(sa, cx.cfg))
            .then(|| cx.now + jittered(l.rekey_time, l.rand_time, spi_in as u64)),
        expire_at: (l.life_time > Duration::ZERO).then(|| cx.now + l.life_time.max(l.rekey_time)),
    }
}

/// A rekey that failed for now is tried again in 2 to 5 s.
pub(crate) fn retry_rekey_later(sa: &mut IkeSa, cx: &Cx, spi_in: u32, rng: &mut impl CryptoRngCore) {
    let d = Duration::from_millis(2000 + u64::from(rng.next_u32() % 3000));
    if let Some(c) = sa.child_mut(spi_in) {
        c.timers.rekey_at = Some(cx.now + d);
    }
}

/// The same for the IKE SA.
pub(crate) fn retry_ike_rekey_later(sa: &mut IkeSa, cx: &Cx, rng: &mut impl CryptoRngCore) {
    sa.schedule_rekey(Some(
        cx.now + Duration::from_millis(2000 + u64::from(rng.next_u32() % 3000)),
    ));
}

fn ike_rekey_due(sa: &IkeSa) -> Option<Duration> {
    sa.is_established()
        .then_some(sa.rekey_at())
        .flatten()
        .filter(|_| !sa.has_task(|t| matches!(t, Task::IkeRekey(_))))
}

/// A deletion that could not be queued (the queue of requests is full) is tried again this
/// much later, not at once.
const QUEUE_FULL_RETRY: Duration = Duration::from_secs(1);

/// Whether our Delete of the child `spi_in` is queued or outstanding.
fn delete_pending(sa: &IkeSa, spi_in: u32) -> bool {
    sa.has_task(|t| matches!(t, Task::ChildDelete(d) if d.spi_in == spi_in))
}

/// A child's next deadline. None while our Delete of it is queued or outstanding: its grace
/// time and its hard lifetime are done with, and the Delete has its own (retransmission)
/// timer; a deadline left in the past would be due again at once, for ever (issue #39: the
/// IKE thread spun at 100 % while a second replaced pair's Delete waited for the window).
fn child_deadline(state: &ChildState, t: &ChildTimers, deleting: bool) -> Option<Duration> {
    if deleting || *state == ChildState::Deleting {
        return None;
    }
    let rekey = match state {
        ChildState::Installed => t.rekey_at,
        _ => None,
    };
    let grace = match state {
        ChildState::Rekeyed { until, .. } => Some(*until),
        _ => None,
    };
    // The hard lifetime waits while our rekey or Delete of the pair is outstanding
    // ([`handle_timeout`]): it is not a deadline then (one in the past would be due forever).
    let expire = match state {
        ChildState::Rekeying { .. } | ChildState::Deleting => None,
        _ => t.expire_at,
    };
    [rekey, expire, grace].into_iter().flatten().min()
}

/// The earliest of the SA's timers.
pub(crate) fn deadline(sa: &IkeSa, cfg: &Config) -> Option<Duration> {
    if let State::Rekeyed { .. } = sa.state() {
        return Some(sa.last_heard() + REKEYED_IKE_GRACE);
    }
    if !sa.is_established() {
        return None;
    }
    let children = sa
        .children()
        .iter()
        .filter_map(|c| child_deadline(&c.state, &c.timers, delete_pending(sa, c.spi_in())));
    [super::ike_dpd::deadline(sa, cfg), ike_rekey_due(sa)]
        .into_iter()
        .flatten()
        .chain(children)
        .min()
}

/// Runs the timers that are due.
pub(crate) fn handle_timeout(sa: &mut IkeSa, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
    if let State::Rekeyed { .. } = sa.state() {
        if cx.now >= sa.last_heard() + REKEYED_IKE_GRACE {
            super::ike_rekey::old_deleted(sa, cx);
        }
        return;
    }
    if !sa.is_established() {
        return;
    }
    super::ike_dpd::handle_timeout(sa, cx, rng);
    if ike_rekey_due(sa).is_some_and(|d| cx.now >= d) {
        sa.schedule_rekey(None);
        if let Some(t) = IkeRekey::new(sa, rng) {
            sa.queue_task(cx, Task::IkeRekey(t), rng);
        }
    }
    let mut rekey = Vec::new();
    let mut delete = Vec::new();
    let mut expired = Vec::new();
    for c in sa.children_mut() {
        match c.state {
            ChildState::Installed if c.timers.rekey_at.is_some_and(|d| cx.now >= d) => {
                c.timers.rekey_at = None;
                rekey.push(c.spi_in());
            }
            ChildState::Rekeyed { until, .. } if cx.now >= until => delete.push(c.spi_in()),
            _ => {}
        }
        if c.timers.expire_at.is_some_and(|d| cx.now >= d) {
            // Its hard lifetime: it must not be used any more.
            match c.state {
                // Our Delete of it is under way.
                ChildState::Deleting => c.timers.expire_at = None,
                // Our rekey of it is outstanding: who deletes it depends on that rekey
                // (2.8.1: if it loses a collision, the peer's rekey replaced the pair and the
                // Delete is the peer's); decided when it ends, the timer kept till then.
                ChildState::Rekeying { .. } => {}
                // Replaced by the peer's rekey: its Delete is the peer's (2.8, 2.8.1), and ours
                // could cross that rekey still in flight (our answer lost or late: the peer
                // retransmits), which the peer takes as a rekey/delete collision and drops the
                // new pair (2.25.1; charon does): no pair would be left on either side. It
                // goes here quietly; the peer's Delete is answered without one (1.4.1).
                ChildState::Rekeyed { we_delete: false, .. } => {
                    c.timers.expire_at = None;
                    expired.push(c.spi_in());
                }
                _ => {
                    c.timers.expire_at = None;
                    delete.push(c.spi_in());
                }
            }
        }
    }
    for spi in expired {
        sa.child_down(cx, spi, DownReason::Expired);
    }
    for spi in rekey {
        if let Some(t) = ChildRekey::new(sa, cx.cfg, spi, rng) {
            sa.queue_task(cx, Task::ChildRekey(t), rng);
        }
    }
    for spi_in in delete {
        sa.queue_task(cx, Task::ChildDelete(ChildDelete { spi_in }), rng);
        if !delete_pending(sa, spi_in) {
            // Not queued (the queue is full): again a little later, not at once.
            if let Some(c) = sa.child_mut(spi_in) {
                let later = cx.now + QUEUE_FULL_RETRY;
                match &mut c.state {
                    ChildState::Rekeyed { until, .. } => *until = later,
                    _ => c.timers.expire_at = Some(later),
                }
            }
        }
    }
}
