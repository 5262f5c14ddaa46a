//! The RADIUS socket's table (RFC 3579 pass-through, [`crate::endpoint`]'s `radius`): which
//! IKE SA has which Identifier (RFC 2865 3) outstanding, the datagrams waiting to be sent and
//! the counters. Kept in the endpoint's output so every task context reaches it, as the pools'
//! leases are; a leaf module, so the IKE SA's context does not import the endpoint.
use crate::limits::MAX_QUEUED_OUTPUT;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::fmt;

/// What went to and came from the RADIUS server, and what was dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RadiusStats {
    /// Datagrams handed out to send (retransmissions included).
    pub sent: u64,
    /// Retransmissions among them (RFC 2865 2.5).
    pub retransmitted: u64,
    /// Answers taken: Access-Challenge, -Accept, -Reject.
    pub answers: u64,
    /// Conversations the server accepted (the client then proves the MSK, 2.16).
    pub accepted: u64,
    /// Conversations the server rejected, or ended with an answer we could not use.
    pub rejected: u64,
    /// Conversations ended because the server did not answer (every try timed out).
    pub server_down: u64,
    /// Answers dropped: to no outstanding request.
    pub unmatched: u64,
    /// Answers dropped: wrong Response Authenticator or Message-Authenticator.
    pub bad_authenticator: u64,
    /// Answers dropped: not a RADIUS packet.
    pub malformed: u64,
    /// Conversations refused because 256 requests were outstanding on the socket already
    /// (no Identifier left: the server is not keeping up).
    pub no_identifier: u64,
}

/// One RADIUS server's figures and health (servers in the config's order: by preference).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RadiusServerStats {
    /// Datagrams sent to it (retransmissions included).
    pub sent: u64,
    /// Retransmissions among them.
    pub retransmitted: u64,
    /// Answers from it taken.
    pub answers: u64,
    /// Requests whose every try on it timed out (each then went to another server, or
    /// ended the conversation with the server-down refusal).
    pub timeouts: u64,
    /// Requests that came to it from another server that timed out.
    pub failovers_to: u64,
    /// Times it was marked down.
    pub marked_down: u64,
    /// Marked down now (skipped for new conversations until `retry` has passed).
    pub down: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Health {
    /// Marked down until then (then tried again).
    down_until: Option<core::time::Duration>,
    stats: RadiusServerStats,
}

/// The RADIUS socket's state shared by the IKE SAs (kept in the endpoint's output, so every
/// task context reaches it, as the pools' leases are).
#[derive(Default)]
pub(crate) struct RadiusTable {
    /// Identifier -> our SPI of the SA with a request with it outstanding.
    outstanding: BTreeMap<u8, u64>,
    /// Where the search for a free Identifier starts (round robin).
    next: u8,
    /// Datagrams for a server: the SPI of the SA they are for, the server, the packet.
    pub(crate) transmits: VecDeque<(u64, usize, Vec<u8>)>,
    pub stats: RadiusStats,
    /// Each server's health and figures (index: the backend's server number).
    servers: Vec<Health>,
}

/// How many servers the table follows at most (the client's `tried` bit set is 32 bits).
pub const MAX_SERVERS: usize = 32;

impl RadiusTable {
    /// An Identifier no request outstanding on the socket has, if any.
    pub fn free_identifier(&mut self) -> Option<u8> {
        for _ in 0..=255u8 {
            let id = self.next;
            self.next = self.next.wrapping_add(1);
            if !self.outstanding.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// The SA filed under `spi` has `id` outstanding now (or nothing).
    pub fn track(&mut self, spi: u64, id: Option<u8>) {
        self.forget(spi);
        if let Some(id) = id {
            self.outstanding.insert(id, spi);
        }
    }

    /// The SA filed under `spi` has nothing outstanding (done, or gone).
    pub fn forget(&mut self, spi: u64) {
        self.outstanding.retain(|_, s| *s != spi);
    }

    /// The SA that has a request with `id` outstanding.
    pub fn owner(&self, id: u8) -> Option<u64> {
        self.outstanding.get(&id).copied()
    }

    /// Queues a datagram for server `server`.
    pub fn transmit(&mut self, sa: u64, server: usize, data: Vec<u8>, retransmission: bool) {
        if self.transmits.len() >= MAX_QUEUED_OUTPUT {
            // The caller does not poll: the request's own retransmission follows.
            self.transmits.pop_front();
        }
        self.stats.sent += 1;
        if retransmission {
            self.stats.retransmitted += 1;
        }
        if let Some(h) = self.health(server) {
            h.stats.sent += 1;
            if retransmission {
                h.stats.retransmitted += 1;
            }
        }
        self.transmits.push_back((sa, server, data));
    }

    fn health(&mut self, server: usize) -> Option<&mut Health> {
        if server >= MAX_SERVERS {
            return None;
        }
        if self.servers.len() <= server {
            self.servers.resize(server + 1, Health::default());
        }
        self.servers.get_mut(server)
    }

    /// The server a conversation (or a failed-over request) goes to, of `count` servers in
    /// order of preference: the first that is not marked down (or whose hold-down passed:
    /// it is tried again) and not in `skip` (bit n: server n, those this request went to);
    /// when every other one is marked down, the first of those not in `skip` (one may be
    /// back; nothing better to do); None when every server is in `skip`.
    pub fn pick(&mut self, count: usize, skip: u32, now: core::time::Duration) -> Option<usize> {
        let count = count.min(MAX_SERVERS);
        let candidates = || (0..count).filter(|n| skip & (1u32 << n) == 0);
        let up = candidates().find(|&n| {
            self.servers
                .get(n)
                .and_then(|h| h.down_until)
                .is_none_or(|until| now >= until)
        });
        up.or_else(|| candidates().next())
    }

    /// Every try of a request on `server` timed out: the server is marked down until
    /// `now + hold` (true: it was up until now, so the caller reports it).
    pub fn timed_out(&mut self, server: usize, now: core::time::Duration, hold: core::time::Duration) -> bool {
        let Some(h) = self.health(server) else { return false };
        h.stats.timeouts += 1;
        let was_up = h.down_until.is_none();
        h.down_until = Some(now + hold);
        h.stats.down = true;
        if was_up {
            h.stats.marked_down += 1;
        }
        was_up
    }

    /// A request went to `server` after another server timed out.
    pub fn failed_over_to(&mut self, server: usize) {
        if let Some(h) = self.health(server) {
            h.stats.failovers_to += 1;
        }
    }

    /// An authenticated answer came from `server` (true: it was marked down until now,
    /// so the caller reports it up).
    pub fn answered(&mut self, server: usize) -> bool {
        let Some(h) = self.health(server) else { return false };
        h.stats.answers += 1;
        h.stats.down = false;
        h.down_until.take().is_some()
    }

    /// Each server's figures, in the backend's order.
    pub fn server_stats(&self) -> Vec<RadiusServerStats> {
        self.servers.iter().map(|h| h.stats).collect()
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
}

/// Why a datagram from the RADIUS server was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RadiusDropped {
    /// Shorter than a RADIUS header or its Length is wrong.
    Malformed,
    /// No IKE SA has a request with its Identifier outstanding (a late duplicate, an
    /// answer for an SA that is gone).
    Unmatched,
    /// Its Response Authenticator or Message-Authenticator did not verify (RFC 2865 3,
    /// RFC 3579 3.2): not from the server that shares our secret.
    BadAuthenticator,
}

impl fmt::Display for RadiusDropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RadiusDropped::Malformed => "malformed RADIUS datagram",
            RadiusDropped::Unmatched => "RADIUS answer to no outstanding request",
            RadiusDropped::BadAuthenticator => "RADIUS answer with a wrong authenticator",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    /// Failover order: by preference (server number), skipping servers marked down until
    /// their hold-down passes and those the request already went to; with every untried one
    /// down, the first untried one anyway; none when all were tried.
    #[test]
    fn failover_order_by_preference_skipping_servers_marked_down() {
        let mut t = RadiusTable::default();
        let s = Duration::from_secs;
        assert_eq!(t.pick(3, 0, s(0)), Some(0));
        assert!(t.timed_out(0, s(10), s(60)), "reported down the first time");
        assert!(!t.timed_out(0, s(11), s(60)), "not again while down");
        assert_eq!(t.pick(3, 0b001, s(11)), Some(1), "the request's next server");
        assert_eq!(t.pick(3, 0, s(12)), Some(1), "a new conversation skips server 0");
        assert!(t.timed_out(1, s(20), s(60)));
        assert_eq!(t.pick(3, 0b011, s(20)), Some(2));
        assert_eq!(t.pick(3, 0, s(21)), Some(2));
        assert!(t.timed_out(2, s(30), s(60)));
        assert_eq!(t.pick(3, 0, s(31)), Some(0), "all down: the first anyway");
        assert_eq!(t.pick(3, 0b001, s(31)), Some(1));
        assert_eq!(t.pick(3, 0b111, s(31)), None, "every server tried");
        assert_eq!(
            t.pick(3, 0b100, s(71)),
            Some(0),
            "server 0's hold-down (until 71 s) passed"
        );
        assert_eq!(
            t.pick(3, 0b001, s(71)),
            Some(1),
            "1 and 2 still down: the first untried"
        );
        assert!(t.answered(1), "reported up");
        assert!(!t.answered(1));
        assert_eq!(t.pick(3, 0b001, s(72)), Some(1));
        let st = t.server_stats();
        assert_eq!((st[0].timeouts, st[0].marked_down, st[0].down), (2, 1, true));
        assert_eq!((st[1].answers, st[1].down), (2, false));
        assert_eq!(t.pick(1, 0, s(72)), Some(0), "one server: always it");
    }
}
