//! EAP passed through to a RADIUS server (RFC 3579) from the IKE responder: the endpoint's
//! side of one RADIUS socket shared by every IKE SA whose EAP conversation waits on it.
//!
//! While an SA's authenticator waits for the server, the peer's IKE_AUTH request stays
//! unanswered (RFC 7296 2.1 lets the responder take its time; a retransmission of that
//! request is absorbed, [`crate::task::eap_radius`]). The caller owns the socket: it sends
//! each [`RadiusTransmit`] from [`Endpoint::poll_radius`] to the server, hands every
//! datagram from the server's address to [`Endpoint::handle_radius`] (one from elsewhere it
//! drops itself), and the retransmission deadlines of the RADIUS client join
//! [`Endpoint::poll_timeout`].
//!
//! An answer is routed by its Identifier (RFC 2865 3) to the SA that has a request with it
//! outstanding; the endpoint gives every outstanding request on the socket its own
//! Identifier ([`RadiusTable::free_identifier`]), since the server takes two requests with
//! one Identifier from one client for duplicates. An answer that matches nothing, fails its
//! authenticator check or does not parse is dropped and counted ([`RadiusStats`]).
use super::{wall, Endpoint, SaHandle};
use crate::ike_sa::Cx;
use crate::limits::MAX_QUEUED_OUTPUT;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// A datagram for the RADIUS server, on behalf of an IKE SA.
#[derive(Clone, PartialEq, Eq)]
pub struct RadiusTransmit {
    /// The IKE SA whose EAP conversation it carries.
    pub sa: SaHandle,
    /// The RADIUS packet (an Access-Request, RFC 3579 2.1).
    pub data: Vec<u8>,
}

impl fmt::Debug for RadiusTransmit {
    /// The length only: the packet carries the User-Name and the EAP exchange.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RadiusTransmit({:?}, {} bytes)", self.sa, self.data.len())
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
    transmits: VecDeque<RadiusTransmit>,
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
        self.transmits.push_back(RadiusTransmit { sa: SaHandle(sa), data });
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
}

impl Endpoint {
    /// The next datagram for the RADIUS server (EAP-RADIUS connections).
    pub fn poll_radius(&mut self) -> Option<RadiusTransmit> {
        self.out.radius.transmits.pop_front()
    }

    /// A datagram from the RADIUS server (the caller checked that it came from the
    /// server's address and port): routed by its Identifier to the IKE SA that waits for
    /// it, whose deferred IKE_AUTH response goes out when the answer ends its wait. An
    /// error means it was dropped (and counted in [`Endpoint::radius_stats`]).
    pub fn handle_radius(
        &mut self,
        now: Duration,
        datagram: &[u8],
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), RadiusDropped> {
        let id = match ipsec_eap::radius::packet::Packet::new_checked(datagram) {
            Ok(p) => p.identifier(),
            Err(_) => {
                self.out.radius.stats.malformed += 1;
                return Err(RadiusDropped::Malformed);
            }
        };
        let Some(spi) = self.out.radius.owner(id) else {
            self.out.radius.stats.unmatched += 1;
            return Err(RadiusDropped::Unmatched);
        };
        let unix = wall(self.clock, now);
        let r = match self.sas.get_mut(&spi) {
            Some(sa) if !sa.is_dead() => {
                let mut cx = Cx::new(&self.cfg, &mut self.out, now, unix);
                crate::task::eap_radius::answer(sa, &mut cx, datagram, rng)
            }
            _ => Err(RadiusDropped::Unmatched),
        };
        match r {
            Err(RadiusDropped::Unmatched) => self.out.radius.stats.unmatched += 1,
            Err(RadiusDropped::BadAuthenticator) => self.out.radius.stats.bad_authenticator += 1,
            Err(RadiusDropped::Malformed) => self.out.radius.stats.malformed += 1,
            Ok(()) => self.out.radius.stats.answers += 1,
        }
        self.apply_effects(spi, now, rng);
        self.reap_one(spi);
        r
    }

    /// What went to and came from the RADIUS server.
    pub fn radius_stats(&self) -> RadiusStats {
        self.out.radius.stats
    }

    /// RADIUS requests outstanding (IKE SAs waiting for the server).
    pub fn radius_outstanding(&self) -> usize {
        self.out.radius.outstanding()
    }
}
