//! Liveness checks (RFC 7296 2.4, strongSwan's `ike_dpd`): an empty INFORMATIONAL when
//! nothing was heard from the peer for `dpd_delay`; an answer is an [`Event::Alive`], no
//! answer after the retransmissions takes the SA down ([`crate::DownReason::Timeout`]).
//! The peer's checks, and any INFORMATIONAL without a Delete, are answered empty
//! ([`respond`]).
use crate::config::Config;
use crate::event::Event;
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa};
use crate::task::{Next, Reply, Task};
use alloc::vec::Vec;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// When the next check is due (None: checks are off or an exchange is under way).
pub(crate) fn deadline(sa: &IkeSa, cfg: &Config) -> Option<Duration> {
    let delay = sa.conn(cfg).dpd_delay?;
    (sa.is_established() && sa.is_idle()).then(|| sa.last_heard() + delay)
}

/// Sends a check if one is due.
pub(crate) fn handle_timeout(sa: &mut IkeSa, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
    if deadline(sa, cx.cfg).is_some_and(|d| cx.now >= d) {
        sa.heard(cx.now);
        sa.queue_task(cx, Task::IkeDpd, rng);
    }
}

/// Our check: an empty INFORMATIONAL.
pub(crate) fn build(sa: &mut IkeSa, id: u32, rng: &mut impl CryptoRngCore) -> Result<Vec<u8>, crate::Error> {
    sa.seal(ExchangeType::Informational, false, id, &[], rng)
}

/// The answer.
pub(crate) fn process(sa: &mut IkeSa, cx: &mut Cx) -> Next {
    let conn = sa.conn_name(cx.cfg);
    cx.out.event(Event::Alive { conn, at: cx.now });
    Next::Done
}

/// The peer's check (or an INFORMATIONAL with nothing we act on): answered empty.
pub(crate) fn respond() -> Reply {
    Reply::with(Vec::new())
}
