//! After an SA has handled something: what it asks of the endpoint ([`EndpointEvent`]:
//! INITIAL_CONTACT 2.4, a rekeyed IKE SA 2.18, a restart after it went down), dead SAs
//! removed and the half-open index settled.
use super::{wall, Endpoint};
use crate::config::DeadAction;
use crate::event::DownReason;
use crate::ike_sa::{Cx, EndpointEvent};
use alloc::vec::Vec;
use core::time::Duration;
use rand_core::CryptoRngCore;

impl Endpoint {
    /// Brings the half-open index up to date for the SA filed under `spi` (gone, or no
    /// longer half-open).
    fn settle(&mut self, spi: u64) {
        let Some(e) = self.responders.get_mut(&spi) else { return };
        let sa = self.sas.get(&spi).filter(|s| !s.is_dead());
        let still = sa.is_some_and(|s| s.is_half_open());
        let ip = e.key.1.ip();
        if e.half_open && !still {
            e.half_open = false;
            self.half_open_total = self.half_open_total.saturating_sub(1);
            if let Some(n) = self.half_open_by_ip.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.half_open_by_ip.remove(&ip);
                }
            }
        }
        if sa.is_none() {
            if let Some(e) = self.responders.remove(&spi) {
                if self.half_open.get(&e.key) == Some(&spi) {
                    self.half_open.remove(&e.key);
                }
            }
        }
    }

    /// Removes the SA filed under `spi` if it is dead, and settles its half-open entry.
    pub(super) fn reap_one(&mut self, spi: u64) {
        if self.sas.get(&spi).is_some_and(|s| s.is_dead()) {
            if let Some(s) = self.sas.remove(&spi) {
                self.gone.add(s.stats());
                self.out.release_leases(spi);
                self.out.radius.forget(spi);
            }
        }
        self.settle(spi);
    }

    /// What the SA filed under `spi` asks of the endpoint ([`EndpointEvent`]).
    pub(super) fn apply_effects(&mut self, spi: u64, now: Duration, rng: &mut impl CryptoRngCore) {
        let Some(sa) = self.sas.get_mut(&spi) else { return };
        let effects = sa.take_effects();
        let conn = sa.conn_index();
        let initiator_side = self.cfg.connections[conn].remote_addr.is_some();
        for e in effects {
            match e {
                EndpointEvent::InitialContact { delete } => {
                    self.initial_contact(spi, now, delete, rng);
                    self.reap_all = true;
                }
                EndpointEvent::Rekeyed(new) => {
                    let key = new.our_spi();
                    // Its leases move with it (2.18; its addresses came over in
                    // `IkeSa::successor`).
                    self.out.leases.rekeyed(spi, key);
                    self.sas.insert(key, new);
                    // The requests that moved with the children (2.18) go out on it now.
                    if let Some(n) = self.sas.get_mut(&key) {
                        let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
                        n.start_next(&mut cx, rng);
                    }
                }
                EndpointEvent::Down(reason) => {
                    let c = &self.cfg.connections[conn];
                    let action = match reason {
                        DownReason::Timeout => c.dpd_action,
                        DownReason::Peer => c.close_action,
                        _ => DeadAction::Clear,
                    };
                    // Restart (swanctl's dpd_action/close_action = restart), unless another
                    // SA of the connection is up or coming up.
                    let other = self
                        .sas
                        .iter()
                        .any(|(k, s)| *k != spi && s.conn_index() == conn && !s.is_dead());
                    if action == DeadAction::Restart && initiator_side && !other {
                        let _ = self.initiate_with(now, conn, None, rng);
                    }
                }
            }
        }
    }

    /// INITIAL_CONTACT (2.4): the peer has no other SA with us; forget ours with it. With
    /// `delete` (`unique = replace`), each is sent its Delete first (1.4.1), once: its
    /// answer is not waited for, and the old peer's later messages meet no SA (counted as
    /// an unknown SPI). Its children go down (events) and its leases moved to the new SA.
    fn initial_contact(&mut self, spi: u64, now: Duration, delete: bool, rng: &mut impl CryptoRngCore) {
        let Some((conn, id)) = self.sas.get(&spi).map(|s| (s.conn_index(), s.remote_id().cloned())) else {
            return;
        };
        let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
        for (k, s) in self.sas.iter_mut() {
            if *k != spi && s.conn_index() == conn && s.remote_id().cloned() == id && s.is_established() {
                if delete {
                    crate::task::ike_delete::tell_and_forget(s, &mut cx, rng);
                }
                s.kill(&mut cx, DownReason::Replaced);
            }
        }
    }

    pub(super) fn reap(&mut self) {
        let dead: Vec<u64> = self.sas.iter().filter(|(_, s)| s.is_dead()).map(|(k, _)| *k).collect();
        for k in dead {
            if let Some(s) = self.sas.remove(&k) {
                self.gone.add(s.stats());
                self.out.release_leases(k);
                self.out.radius.forget(k);
            }
        }
        let responders: Vec<u64> = self.responders.keys().copied().collect();
        for k in responders {
            self.settle(k);
        }
        self.reap_all = false;
    }
}
