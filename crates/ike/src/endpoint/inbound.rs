//! A received datagram: the NAT-T non-ESP marker (RFC 3948 2.2), the IKE SA it is for, and
//! for a new IKE_SA_INIT the admission of a half-open SA (RFC 7296 2.6 cookies, RFC 8019 4
//! caps) before one is made.
use super::{wall, Endpoint, Responder};
use crate::dropped::Dropped;
use crate::error::Error;
use crate::header::ExchangeType;
use crate::ike_sa::Cx;
use crate::limits::MAX_IKE_SAS;
use crate::message::{Find, Message, Payload};
use crate::task::ike_init::respond_init;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use ipsec_core::nat_t::NON_ESP_MARKER;
use rand_core::CryptoRngCore;

impl Endpoint {
    /// Handles one received UDP payload. `local` is the address and port it arrived on
    /// (on the NAT-T port the payload is expected to start with the non-ESP marker, which is
    /// stripped here; without it the datagram is ESP: [`Dropped::NotIke`]).
    pub fn handle_datagram(
        &mut self,
        now: Duration,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let raw = if local.port() == self.cfg.natt_port {
            if data == [0xff] {
                return Err(Dropped::Keepalive);
            }
            match data.strip_prefix(&NON_ESP_MARKER[..]) {
                Some(r) => r,
                None => return Err(Dropped::NotIke),
            }
        } else {
            data
        };
        // A new IKE_SA_INIT is unauthenticated and a half-open SA keeps it: bounded before
        // it is parsed (limits::MAX_INIT_LEN).
        if raw.len() > crate::limits::MAX_INIT_LEN
            && crate::header::IkePacket::new_checked(raw)
                .and_then(|p| crate::header::HeaderRepr::parse(&p))
                .is_ok_and(|h| h.exchange == ExchangeType::IkeSaInit && !h.response && h.spi_r == 0)
        {
            self.dos.too_large += 1;
            return Err(Dropped::TooLarge);
        }
        let msg = match Message::parse(raw) {
            Ok(m) => m,
            Err(e) => {
                self.refuse_critical(raw, e, local, remote);
                return Err(Dropped::Malformed(e));
            }
        };
        let h = msg.header;
        if h.exchange == ExchangeType::IkeSaInit && !h.response && h.spi_r == 0 {
            // Nothing dies here: no reap (a dropped request costs no pass over the SAs).
            return self.on_new_init(now, raw, &msg, local, remote, rng);
        }
        let our = if h.initiator { h.spi_r } else { h.spi_i };
        let r = {
            // A request that can make a child: the other IKE SAs' peers, which a NATed
            // peer's `dynamic` selectors must not claim (child::choose). Only for an SA we
            // have (a datagram for an unknown SPI costs no pass over the SAs).
            // The same pass counts the SAs of this SA's peer identity, for the caps an IKE
            // SA rekey must not bypass (limits::MAX_IKE_SAS_PER_IDENTITY).
            let known = self.sas.get(&our).is_some_and(|s| !s.is_dead());
            let mut census = crate::ike_sa::Census {
                ike_sas: self.sas.len(),
                same_identity: 0,
            };
            let others: Vec<IpAddr> =
                if known && !h.response && matches!(h.exchange, ExchangeType::IkeAuth | ExchangeType::CreateChildSa) {
                    let id = self.sas.get(&our).and_then(|s| s.remote_id());
                    let mut v = Vec::new();
                    for (_, s) in self.sas.iter().filter(|(k, _)| **k != our) {
                        if s.is_established() {
                            v.push(s.path().remote.ip());
                        }
                        if id.is_some() && !s.is_dead() && s.remote_id() == id {
                            census.same_identity += 1;
                        }
                    }
                    v
                } else {
                    Vec::new()
                };
            // The SA is taken out of the map while it handles the message, so that the
            // count of the others' identities (asked for only by an authenticated IKE_AUTH)
            // can look at them: O(log n) here, O(n) only when asked.
            match self.sas.remove(&our) {
                Some(mut sa) if !sa.is_dead() => {
                    sa.set_census(census);
                    let sas = &self.sas;
                    let peers_of = |id: &crate::id::Identity| {
                        sas.values()
                            .filter(|s| !s.is_dead() && s.remote_id() == Some(id))
                            .count()
                    };
                    let mut cx = Cx {
                        cfg: &self.cfg,
                        out: &mut self.out,
                        now,
                        others: &others,
                        unix: wall(self.clock, now),
                        peers_of: Some(&peers_of),
                    };
                    let r = sa.handle_message(&mut cx, raw, &msg, local, remote, rng);
                    self.sas.insert(our, sa);
                    self.apply_effects(our, now, rng);
                    r
                }
                Some(sa) => {
                    self.sas.insert(our, sa);
                    Err(Dropped::UnknownSpi)
                }
                None => Err(Dropped::UnknownSpi),
            }
        };
        if core::mem::take(&mut self.reap_all) {
            self.reap();
        } else {
            self.reap_one(our);
        }
        r
    }

    /// A new IKE_SA_INIT request (SPIr 0, message ID 0, not a response) with a critical
    /// payload we do not know: rejected with UNSUPPORTED_CRITICAL_PAYLOAD carrying its type
    /// (2.5), statelessly (no SA is made). Nothing else that fails to parse is answered.
    fn refuse_critical(&mut self, raw: &[u8], e: Error, local: SocketAddr, remote: SocketAddr) {
        let Error::UnsupportedCritical(t) = e else { return };
        let Ok(h) = crate::header::IkePacket::new_checked(raw).and_then(|p| crate::header::HeaderRepr::parse(&p))
        else {
            return;
        };
        if h.exchange == ExchangeType::IkeSaInit && !h.response && h.initiator && h.spi_r == 0 && h.message_id == 0 {
            crate::task::ike_init::stateless_reply(
                &mut self.out,
                &self.cfg,
                &h,
                local,
                remote,
                crate::notify::Notify::ike(crate::notify::kind::UNSUPPORTED_CRITICAL_PAYLOAD, &[t]),
            );
        }
    }

    fn on_new_init(
        &mut self,
        now: Duration,
        raw: &[u8],
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let key = (msg.header.spi_i, remote);
        if let Some(spi) = self.half_open.get(&key) {
            // A retransmitted IKE_SA_INIT: the kept response (2.1). One that comes after
            // the SA moved on (its IKE_AUTH came first, on port 4500) is answered by nothing:
            // the initiator has the response already, and a second SA would only wait to die.
            if let Some(sa) = self.sas.get(spi) {
                let Some(b) = sa.kept_response(0) else {
                    return Err(Dropped::OutOfWindow);
                };
                let b = b.to_vec();
                let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
                sa.send(&mut cx, &b);
                return Ok(());
            }
        }
        self.admit(now, msg, local, remote, rng)?;
        if self.sas.len() >= MAX_IKE_SAS {
            return Err(Dropped::TooManySas);
        }
        let spi_r = self.new_ike_spi(rng);
        let sa = respond_init(&self.cfg, &mut self.out, now, raw, msg, local, remote, spi_r, rng)?;
        self.half_open.insert(key, spi_r);
        self.sas.insert(spi_r, Box::new(sa));
        self.responders.insert(spi_r, Responder { key, half_open: true });
        *self.half_open_by_ip.entry(remote.ip()).or_insert(0) += 1;
        self.half_open_total += 1;
        Ok(())
    }

    /// Whether a new IKE_SA_INIT may make a half-open SA (RFC 7296 2.6, RFC 8019 4), in
    /// O(log n): with a valid cookie first, or while cookies are not required (fewer than
    /// `cookie_threshold` half-open SAs, fewer than `cookie_threshold_ip` from its source, not
    /// `force_cookies`); else it is answered with N(COOKIE) and nothing is kept. Then the
    /// caps: `half_open_per_source` and `half_open_max`.
    fn admit(
        &mut self,
        now: Duration,
        msg: &Message,
        local: SocketAddr,
        remote: SocketAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), Dropped> {
        let h = &msg.header;
        let Some(ni) = msg.chain.payloads.nonce() else {
            // respond_init answers INVALID_SYNTAX, statelessly.
            return Ok(());
        };
        let ip = remote.ip();
        let from_ip = self.half_open_by_ip.get(&ip).copied().unwrap_or(0);
        // A cookie counts only as the first payload (2.6); one that does not verify is
        // ignored, the request handled as if it had none.
        let cookie = match msg.chain.payloads.first() {
            Some(Payload::Notify(n)) if n.kind == crate::notify::kind::COOKIE => Some(n.data.as_slice()),
            _ => None,
        };
        let proven = cookie.is_some_and(|c| self.cookies.verify(now, c, ni, ip, h.spi_i));
        match (cookie.is_some(), proven) {
            (_, true) => self.dos.cookies_accepted += 1,
            (true, false) => self.dos.cookies_refused += 1,
            _ => {}
        }
        let cfg = &self.cfg;
        let required =
            cfg.force_cookies || self.half_open_total >= cfg.cookie_threshold || from_ip >= cfg.cookie_threshold_ip;
        if required && !proven {
            if h.message_id != 0 || !h.initiator {
                return Err(Dropped::WrongState);
            }
            let c = self.cookies.make(now, rng, ni, ip, h.spi_i);
            crate::task::ike_init::stateless_reply(
                &mut self.out,
                cfg,
                h,
                local,
                remote,
                crate::notify::Notify::ike(crate::notify::kind::COOKIE, &c),
            );
            self.dos.cookies_sent += 1;
            return Err(Dropped::CookieRequired);
        }
        if from_ip >= cfg.half_open_per_source {
            self.dos.half_open_refused += 1;
            return Err(Dropped::HalfOpenPerSource);
        }
        if self.half_open_total >= cfg.half_open_max {
            self.dos.half_open_refused += 1;
            return Err(Dropped::HalfOpenLimit);
        }
        Ok(())
    }
}
