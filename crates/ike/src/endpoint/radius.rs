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
pub use crate::radius_table::{RadiusDropped, RadiusServerStats, RadiusStats};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// A datagram for the RADIUS server, on behalf of an IKE SA.
#[derive(Clone, PartialEq, Eq)]
pub struct RadiusTransmit {
    /// The IKE SA whose EAP conversation it carries.
    pub sa: SaHandle,
    /// The server it goes to: its number among the connection's RADIUS servers (in the
    /// order of preference of `Backend::Radius`'s config; 0 with one server).
    pub server: usize,
    /// The RADIUS packet (an Access-Request, RFC 3579 2.1).
    pub data: Vec<u8>,
}

impl fmt::Debug for RadiusTransmit {
    /// The length only: the packet carries the User-Name and the EAP exchange.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RadiusTransmit({:?}, server {}, {} bytes)",
            self.sa,
            self.server,
            self.data.len()
        )
    }
}

impl Endpoint {
    /// The next datagram for the RADIUS server (EAP-RADIUS connections).
    pub fn poll_radius(&mut self) -> Option<RadiusTransmit> {
        let (sa, server, data) = self.out.radius.transmits.pop_front()?;
        Some(RadiusTransmit {
            sa: SaHandle(sa),
            server,
            data,
        })
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
        self.handle_radius_from(now, 0, datagram, rng)
    }

    /// [`Endpoint::handle_radius`] for a datagram from server number `server` (the caller
    /// checked its address and port): an answer from another server than the one its
    /// request went to (a late one after a failover) is dropped as unmatched.
    pub fn handle_radius_from(
        &mut self,
        now: Duration,
        server: usize,
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
                crate::task::eap_radius::answer(sa, &mut cx, server, datagram, rng)
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

    /// Each RADIUS server's figures and health, by server number.
    pub fn radius_server_stats(&self) -> Vec<crate::radius_table::RadiusServerStats> {
        self.out.radius.server_stats()
    }

    /// RADIUS requests outstanding (IKE SAs waiting for the server).
    pub fn radius_outstanding(&self) -> usize {
        self.out.radius.outstanding()
    }
}
