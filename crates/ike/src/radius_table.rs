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

/// The RADIUS socket's state shared by the IKE SAs (kept in the endpoint's output, so every
/// task context reaches it, as the pools' leases are).
#[derive(Default)]
pub(crate) struct RadiusTable {
    /// Identifier -> our SPI of the SA with a request with it outstanding.
    outstanding: BTreeMap<u8, u64>,
    /// Where the search for a free Identifier starts (round robin).
    next: u8,
    /// Datagrams for the server: the SPI of the SA they are for, and the packet.
    pub(crate) transmits: VecDeque<(u64, Vec<u8>)>,
    pub stats: RadiusStats,
}

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

    /// Queues a datagram for the server.
    pub fn transmit(&mut self, sa: u64, data: Vec<u8>, retransmission: bool) {
        if self.transmits.len() >= MAX_QUEUED_OUTPUT {
            // The caller does not poll: the request's own retransmission follows.
            self.transmits.pop_front();
        }
        self.stats.sent += 1;
        if retransmission {
            self.stats.retransmitted += 1;
        }
        self.transmits.push_back((sa, data));
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
