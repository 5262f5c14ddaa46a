//! MOBIKE, the IKEv2 mobility and multihoming protocol (RFC 4555; strongSwan's
//! `ike_mobike` task).
//!
//! - Support is announced with MOBIKE_SUPPORTED in IKE_AUTH, both ways (3.2): in the
//!   initiator's first IKE_AUTH request and the responder's last response, when the
//!   connection allows it (`mobike`, default yes). Both sent it: MOBIKE is in use
//!   ([`Mobike::agreed`]).
//! - The peer's other addresses, ADDITIONAL_IP4/6_ADDRESS and NO_ADDITIONAL_ADDRESSES (3.4,
//!   3.6), are kept for the status (at most [`MAX_ADDITIONAL`]); never an error.
//! - The responder's side of UPDATE_SA_ADDRESSES (3.5): the request is processed as any
//!   (a retransmission gets the kept response and changes nothing); NAT detection is redone
//!   with its NAT_DETECTION_* notifies (3.5, 3.8; NO_NATS_ALLOWED and a NAT found:
//!   UNEXPECTED_NAT_DETECTED, 3.9); the IKE SA's path moves to the request's source (3.5:
//!   "the values from the IP header"), and every child SA's outer endpoint with it
//!   ([`Event::PeerEndpointChanged`] with `mobike`); the answer carries NAT_DETECTION_*
//!   for the new path and echoes COOKIE2 (3.5, 3.7).
//! - With MOBIKE in use the peer's address changes only by UPDATE_SA_ADDRESSES: another
//!   request from a new address (strongSwan's path probe, a DPD) is answered there
//!   (responses go where the request came from, RFC 7296 2.11) but moves nothing; the
//!   implicit update of RFC 7296 2.23 is the non-MOBIKE case.
//! - Spoofing (3.6, 5.2): only an integrity-checked request reaches this module (a forged
//!   one fails its ICV and is dropped and counted by the endpoint, [`crate::Dropped`]); an
//!   UPDATE_SA_ADDRESSES on an IKE SA without MOBIKE, or with a malformed COOKIE2, moves
//!   nothing and is reported ([`Event::MobikeRefused`], counted in
//!   [`crate::status::IkeSaStats::mobike_refused`]).
//! - Return routability as responder (3.5 "if necessary, initiate a return routability check
//!   for the new address and wait until the check is completed", 5.2.1): an
//!   UPDATE_SA_ADDRESSES from a new address is answered at once, but the IKE SA and its
//!   children move only when our INFORMATIONAL with a fresh COOKIE2, sent to that address
//!   ([`MobikeCheck`]), is answered from there with the COOKIE2 echoed (3.7). Until then
//!   the data plane stays on the old path. Unanswered there within [`CHECK_WINDOW`] (a
//!   spoofed or unreachable address), or answered from elsewhere, or with another COOKIE2:
//!   nothing moves, [`MobikeRefusal::CheckFailed`] (counted, reported); the same request is
//!   then retransmitted on the IKE SA's old path (a request cannot be abandoned: its message
//!   ID is spent, RFC 7296 2.1), where a peer that did not move answers it.
//! - The initiator's side ([`IkeMobike`], `Endpoint::update_addresses`): an INFORMATIONAL
//!   with UPDATE_SA_ADDRESSES, COOKIE2 and NAT_DETECTION_* from where the SA now sends;
//!   the response's COOKIE2 must be ours (3.7: else the SA is closed, as strongSwan does).
//! - Our own address changed ([`update_local`], `Endpoint::update_local`): the SA sends from
//!   the new address at once and the update goes from there (3.5); without MOBIKE nothing
//!   changes and the caller is told (no make-before-break IKE SA in its place).
use crate::event::{DownReason, Event, MobikeRefusal};
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa};
use crate::message::{Find, Payload};
use crate::notify::{kind, Notify};
use crate::task::{Next, Reply};
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};
use rand_core::CryptoRngCore;

/// The most additional addresses of a peer kept (3.4: more are ignored).
pub const MAX_ADDITIONAL: usize = 16;
/// COOKIE2's length bounds (RFC 4555 4.2: 8 to 64 octets).
const COOKIE2_LEN: core::ops::RangeInclusive<usize> = 8..=64;

/// An IKE SA's MOBIKE state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mobike {
    /// Both sides sent MOBIKE_SUPPORTED (3.2).
    pub agreed: bool,
    /// The peer's MOBIKE_SUPPORTED came (in its IKE_AUTH request or response).
    pub peer_supported: bool,
    /// The peer's additional addresses (3.4), as last sent.
    pub peer_addresses: Vec<IpAddr>,
    /// The peer said it has no other address (NO_ADDITIONAL_ADDRESSES).
    pub no_additional: bool,
    /// Initiator behind a NAT: the NAT_DETECTION_DESTINATION_IP of the peer's last answer
    /// (how it sees us); another one means the NAT's mapping changed (3.8).
    pub seen_as: Option<[u8; 20]>,
    /// The (local, remote) addresses of the request being answered: its response goes
    /// there (RFC 7296 2.11), and UPDATE_SA_ADDRESSES moves the SA there.
    pub request: Option<(SocketAddr, SocketAddr)>,
    /// Where the last response to one of our requests came from (a return-routability
    /// check is answered from the address it checks, or it failed).
    pub response_from: Option<SocketAddr>,
    /// The address the peer's last UPDATE_SA_ADDRESSES asked for and the NAT state its
    /// NAT_DETECTION_* notifies gave, while the return-routability check runs ([`MobikeCheck`]).
    pub pending: Option<(SocketAddr, Option<crate::nat::NatState>)>,
}

/// With MOBIKE in use, only UPDATE_SA_ADDRESSES moves an established SA's peer (3.5).
pub(crate) fn holds_path(sa: &IkeSa) -> bool {
    sa.mobike().agreed && sa.is_established()
}

/// MOBIKE_SUPPORTED for our first IKE_AUTH request (3.2).
pub(crate) fn announce(conn: &crate::config::Connection) -> Option<Payload> {
    conn.mobike
        .then(|| Payload::Notify(Notify::ike(kind::MOBIKE_SUPPORTED, &[])))
}

/// Notes what an IKE_AUTH message of the peer says of MOBIKE (3.2, 3.4).
pub(crate) fn peer_auth_message(sa: &mut IkeSa, ps: &[Payload]) {
    if ps.notify(kind::MOBIKE_SUPPORTED).is_some() {
        sa.mobike_mut().peer_supported = true;
    }
    addresses(sa, ps);
}

/// The initiator, its IKE SA up: MOBIKE is in use when both sent MOBIKE_SUPPORTED.
pub(crate) fn initiator_established(sa: &mut IkeSa, cx: &Cx, ps: &[Payload]) {
    peer_auth_message(sa, ps);
    sa.mobike_mut().agreed = sa.conn(cx.cfg).mobike && sa.mobike().peer_supported;
}

/// The responder's last IKE_AUTH response: MOBIKE_SUPPORTED when the peer's request had it
/// and the connection (as finally chosen) allows it (3.2).
pub(crate) fn responder_established(sa: &mut IkeSa, cx: &Cx, resp: &mut Vec<Payload>) {
    sa.mobike_mut().agreed = sa.conn(cx.cfg).mobike && sa.mobike().peer_supported;
    if sa.mobike().agreed {
        resp.push(Payload::Notify(Notify::ike(kind::MOBIKE_SUPPORTED, &[])));
    }
}

/// ADDITIONAL_IP4/6_ADDRESS and NO_ADDITIONAL_ADDRESSES (3.4, 3.6): a new list replaces the
/// old one; malformed ones are skipped, never an error.
fn addresses(sa: &mut IkeSa, ps: &[Payload]) {
    let mut list = Vec::new();
    let mut any = false;
    for n in ps.iter().filter_map(|p| match p {
        Payload::Notify(n) => Some(n),
        _ => None,
    }) {
        // A malformed one (wrong length) is skipped; the list is still a new list.
        let a = match (n.kind, n.data.len()) {
            (kind::ADDITIONAL_IP4_ADDRESS, 4) => <[u8; 4]>::try_from(&n.data[..]).ok().map(IpAddr::from),
            (kind::ADDITIONAL_IP6_ADDRESS, 16) => <[u8; 16]>::try_from(&n.data[..]).ok().map(IpAddr::from),
            (kind::ADDITIONAL_IP4_ADDRESS | kind::ADDITIONAL_IP6_ADDRESS, _) => None,
            _ => continue,
        };
        any = true;
        if let Some(a) = a {
            if list.len() < MAX_ADDITIONAL && !list.contains(&a) {
                list.push(a);
            }
        }
    }
    let none = ps.notify(kind::NO_ADDITIONAL_ADDRESSES).is_some();
    if any || none {
        sa.mobike_mut().peer_addresses = list;
        sa.mobike_mut().no_additional = none;
    }
}

fn refuse(sa: &mut IkeSa, cx: &mut Cx, from: SocketAddr, reason: MobikeRefusal) {
    sa.stats_mut().mobike_refused += 1;
    cx.out.event(Event::MobikeRefused {
        conn: sa.conn_name(cx.cfg),
        spi_i: sa.spi_i(),
        from,
        reason,
    });
}

/// The responder's side of an INFORMATIONAL carrying MOBIKE notifies (3.5, 3.7): None when
/// it carries none (another task answers it).
pub(crate) fn informational(
    sa: &mut IkeSa,
    cx: &mut Cx,
    ps: &[Payload],
    rng: &mut impl CryptoRngCore,
) -> Option<Reply> {
    let update = ps.notify(kind::UPDATE_SA_ADDRESSES).is_some();
    let cookie2 = ps.notify(kind::COOKIE2).map(|n| n.data.clone());
    let natd = ps.notify(kind::NAT_DETECTION_DESTINATION_IP).is_some();
    let addrs = [
        kind::ADDITIONAL_IP4_ADDRESS,
        kind::ADDITIONAL_IP6_ADDRESS,
        kind::NO_ADDITIONAL_ADDRESSES,
    ]
    .iter()
    .any(|k| ps.notify(*k).is_some());
    if !(update || cookie2.is_some() || natd || addrs) {
        return None;
    }
    let (local, remote) = sa.mobike().request.unwrap_or((sa.path().local, sa.path().remote));
    if !sa.mobike().agreed || !sa.is_established() {
        if update {
            refuse(sa, cx, remote, MobikeRefusal::NotNegotiated);
        }
        // Answered empty, as any INFORMATIONAL we do not act on.
        return None;
    }
    if cookie2.as_ref().is_some_and(|c| !COOKIE2_LEN.contains(&c.len())) {
        refuse(sa, cx, remote, MobikeRefusal::BadCookie2);
        sa.stats_mut().invalid_syntax += 1;
        return Some(Reply::notify(kind::INVALID_SYNTAX));
    }
    addresses(sa, ps);
    if update {
        let nat = super::ike_init::nat_state(ps, sa.spi_i(), sa.spi_r(), local, remote);
        let behind = nat.is_some_and(|n| n.peer_behind_nat || n.local_behind_nat);
        if behind && ps.notify(kind::NO_NATS_ALLOWED).is_some() {
            // 3.9: the peer does not want its addresses translated; nothing moves.
            refuse(sa, cx, remote, MobikeRefusal::UnexpectedNat);
            return Some(Reply::notify(kind::UNEXPECTED_NAT_DETECTED));
        }
        if remote == sa.path().remote {
            // Same address (a retransmitted move, or NAT detection only): nothing to check.
            sa.mobike_mut().pending = None;
            if let Some(n) = nat {
                sa.set_nat(n);
            }
            move_peer(sa, cx, remote);
        } else {
            // A new address: checked first (3.5); the SA moves when the check is answered.
            sa.mobike_mut().pending = Some((remote, nat));
            sa.queue_task(cx, super::Task::MobikeCheck(MobikeCheck::new(rng)), rng);
        }
    }
    let mut resp = Vec::new();
    if natd {
        let fake = sa.conn(cx.cfg).encap;
        resp.extend(super::ike_init::nat_notifies(
            sa.spi_i(),
            sa.spi_r(),
            local,
            remote,
            fake,
            rng,
        ));
    }
    if let Some(c) = cookie2 {
        resp.push(Payload::Notify(Notify::ike(kind::COOKIE2, &c)));
    }
    Some(Reply::with(resp))
}

/// Moves the IKE SA's peer and its children's outer endpoint to `to` (3.5 steps 4, 7).
fn move_peer(sa: &mut IkeSa, cx: &mut Cx, to: SocketAddr) {
    sa.stats_mut().mobike_updates += 1;
    let Some(old) = sa.move_to(cx.cfg, to) else {
        return;
    };
    cx.out.event(Event::PeerEndpointChanged {
        conn: sa.conn_name(cx.cfg),
        spi_i: sa.spi_i(),
        old,
        new: to,
        mobike: true,
    });
}

/// Behind a NAT with MOBIKE, our liveness check carries NAT_DETECTION_* (3.8, as strongSwan
/// does): the NAT's mapping may change under us, and with MOBIKE the peer does not follow
/// it by itself. Else the empty INFORMATIONAL of [`super::ike_dpd`].
pub(crate) fn dpd_build(
    sa: &mut IkeSa,
    cx: &Cx,
    id: u32,
    rng: &mut impl CryptoRngCore,
) -> Result<Vec<u8>, crate::Error> {
    if !(sa.mobike().agreed && sa.path().nat.local_behind_nat) {
        return super::ike_dpd::build(sa, id, rng);
    }
    let fake = sa.conn(cx.cfg).encap;
    let p = super::ike_init::nat_notifies(sa.spi_i(), sa.spi_r(), sa.path().local, sa.path().remote, fake, rng);
    sa.seal(ExchangeType::Informational, false, id, &p, rng)
}

/// The answer to our liveness check: the peer sees us at another address or port than
/// before (or we do not know yet where it saw us), so the NAT's mapping changed: an
/// UPDATE_SA_ADDRESSES follows (3.8).
pub(crate) fn dpd_response(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) {
    let Some(d) = ps.notify(kind::NAT_DETECTION_DESTINATION_IP) else {
        return;
    };
    let Ok(seen) = <[u8; 20]>::try_from(d.data.as_slice()) else {
        return;
    };
    if !sa.mobike().agreed || sa.mobike().seen_as == Some(seen) {
        return;
    }
    sa.mobike_mut().seen_as = Some(seen);
    let t = super::Task::IkeMobike(IkeMobike::new(rng));
    sa.queue_task(cx, t, rng);
}

/// Our own address changed (3.5, initiator; a laptop from Wi-Fi to LTE): the IKE SA sends
/// from `ip` from now on (its children's outer endpoint with it) and tells the peer with an
/// UPDATE_SA_ADDRESSES from there ([`IkeMobike`]: COOKIE2, NAT_DETECTION_* for the new
/// path, retransmitted as any request). `false`, nothing changed: MOBIKE is not in use on
/// this SA (3.2; the caller says so, no fresh IKE SA is made in its place).
pub(crate) fn update_local(sa: &mut IkeSa, cx: &mut Cx, ip: IpAddr, rng: &mut impl CryptoRngCore) -> bool {
    if !holds_path(sa) {
        return false;
    }
    sa.move_local(ip);
    let t = super::Task::IkeMobike(IkeMobike::new(rng));
    sa.queue_task(cx, t, rng);
    true
}

/// How long a return-routability check is sent to the address it checks before it has
/// failed: two transmissions with the default retransmission timer (at 0 and 4 s).
pub const CHECK_WINDOW: core::time::Duration = core::time::Duration::from_secs(10);

/// The responder's return-routability check of the peer's new address (3.5, 5.2.1): an
/// INFORMATIONAL with COOKIE2 sent to that address; the answer must come from there and
/// echo the COOKIE2 (3.7).
pub(crate) struct MobikeCheck {
    cookie2: [u8; 16],
    /// The address checked, fixed when the request is built (the latest one asked for).
    to: Option<SocketAddr>,
    /// Unanswered within [`CHECK_WINDOW`]: reported, sent on the old path from then on.
    given_up: bool,
}

impl MobikeCheck {
    pub fn new(rng: &mut impl CryptoRngCore) -> Self {
        let mut cookie2 = [0u8; 16];
        rng.fill_bytes(&mut cookie2);
        MobikeCheck {
            cookie2,
            to: None,
            given_up: false,
        }
    }

    /// Where it goes: the address checked, until given up (then the IKE SA's path).
    pub fn to(&self) -> Option<SocketAddr> {
        self.to.filter(|_| !self.given_up)
    }

    /// INFORMATIONAL with COOKIE2 (3.7).
    pub fn build(&mut self, sa: &mut IkeSa, id: u32, rng: &mut impl CryptoRngCore) -> Result<Vec<u8>, crate::Error> {
        self.to = sa.mobike().pending.map(|(a, _)| a);
        let p = [Payload::Notify(Notify::ike(kind::COOKIE2, &self.cookie2))];
        sa.seal(ExchangeType::Informational, false, id, &p, rng)
    }

    /// The answer: from the address checked with our COOKIE2, the SA and its children move
    /// there; otherwise nothing moves. A newer address asked for meanwhile is checked next.
    pub fn process(self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
        let Some(to) = self.to else { return Next::Done };
        let ours = ps.notify(kind::COOKIE2).map(|n| n.data.as_slice()) == Some(&self.cookie2[..]);
        let pending = sa.mobike().pending;
        let from_there = sa.mobike().response_from == Some(to);
        if !self.given_up {
            if !ours {
                refuse(sa, cx, to, MobikeRefusal::BadCookie2);
            } else if !from_there {
                refuse(sa, cx, to, MobikeRefusal::CheckFailed);
            } else {
                sa.stats_mut().mobike_checks += 1;
                if let Some((_, Some(n))) = pending.filter(|(a, _)| *a == to) {
                    sa.set_nat(n);
                }
                move_peer(sa, cx, to);
            }
        }
        match pending {
            Some((a, _)) if a != to && a != sa.path().remote => {
                sa.queue_task(cx, super::Task::MobikeCheck(MobikeCheck::new(rng)), rng);
            }
            _ => sa.mobike_mut().pending = None,
        }
        Next::Done
    }
}

/// The outstanding return-routability check unanswered for [`CHECK_WINDOW`]: it failed,
/// nothing moves (reported once); its retransmissions go on the old path from now on.
pub(crate) fn check_timeout(sa: &mut IkeSa, cx: &mut Cx) {
    let now = cx.now;
    let Some((super::Task::MobikeCheck(c), started)) = sa.active_task_mut() else {
        return;
    };
    if c.given_up || now < started + CHECK_WINDOW {
        return;
    }
    c.given_up = true;
    let to = c.to;
    if let Some(to) = to {
        if sa.mobike().pending.is_some_and(|(a, _)| a == to) {
            sa.mobike_mut().pending = None;
        }
        refuse(sa, cx, to, MobikeRefusal::CheckFailed);
    }
}

/// Our UPDATE_SA_ADDRESSES exchange (3.5, initiator).
pub(crate) struct IkeMobike {
    cookie2: [u8; 16],
}

impl IkeMobike {
    pub fn new(rng: &mut impl CryptoRngCore) -> Self {
        let mut cookie2 = [0u8; 16];
        rng.fill_bytes(&mut cookie2);
        IkeMobike { cookie2 }
    }

    /// UPDATE_SA_ADDRESSES, COOKIE2, NAT_DETECTION_* for the path it goes on.
    pub fn build(
        &self,
        sa: &mut IkeSa,
        cx: &Cx,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        let fake = sa.conn(cx.cfg).encap;
        let mut p = alloc::vec![
            Payload::Notify(Notify::ike(kind::UPDATE_SA_ADDRESSES, &[])),
            Payload::Notify(Notify::ike(kind::COOKIE2, &self.cookie2)),
        ];
        p.extend(super::ike_init::nat_notifies(
            sa.spi_i(),
            sa.spi_r(),
            sa.path().local,
            sa.path().remote,
            fake,
            rng,
        ));
        sa.seal(ExchangeType::Informational, false, id, &p, rng)
    }

    /// The response: our COOKIE2 back (3.7), the NAT state from its notifies.
    pub fn process(self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload]) -> Next {
        if ps.notify(kind::COOKIE2).map(|n| n.data.as_slice()) != Some(&self.cookie2[..]) {
            let from = sa.path().remote;
            refuse(sa, cx, from, MobikeRefusal::BadCookie2);
            sa.kill(cx, DownReason::PeerError(kind::INVALID_SYNTAX));
            return Next::Done;
        }
        let (local, remote) = (sa.path().local, sa.path().remote);
        if let Some(n) = super::ike_init::nat_state(ps, sa.spi_i(), sa.spi_r(), local, remote) {
            sa.set_nat(n);
        }
        if let Some(d) = ps.notify(kind::NAT_DETECTION_DESTINATION_IP) {
            sa.mobike_mut().seen_as = <[u8; 20]>::try_from(d.data.as_slice()).ok();
        }
        sa.stats_mut().mobike_updates += 1;
        cx.out.event(Event::Alive {
            conn: sa.conn_name(cx.cfg),
            at: cx.now,
        });
        Next::Done
    }
}

#[cfg(test)]
mod tests {
    //! Two endpoints of this crate in memory (A initiates to B), with requests of A's SA
    //! sealed by hand where our initiator would never send them, delivered from any source.
    use super::*;
    use crate::config::{Config, Connection};
    use crate::{Endpoint, Transmit};
    use alloc::string::ToString;
    use core::time::Duration;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    const A: &str = "10.0.0.1";
    const B: &str = "10.0.0.2";
    const NOW: Duration = Duration::from_secs(1000);

    fn sock(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn conn(name: &str, local: &str, remote: &str, mobike: bool) -> Connection {
        let (l, r) = if local == A {
            ("10.1.0.0/16", "10.2.0.0/16")
        } else {
            ("10.2.0.0/16", "10.1.0.0/16")
        };
        let mut c = crate::test_util::psk_conn(name, local, remote, l, r);
        c.mobike = mobike;
        c
    }

    struct Net {
        a: Endpoint,
        b: Endpoint,
        rng: ChaCha20Rng,
        /// What B sent, and the events of B.
        b_sent: Vec<Transmit>,
        b_events: Vec<Event>,
        /// Where A receives B's datagrams (A's own address).
        a_at: SocketAddr,
    }

    impl Net {
        fn up(mobike_a: bool, mobike_b: bool) -> Net {
            let mut n = Net {
                a: Endpoint::new(Config::new(alloc::vec![conn("a2b", A, B, mobike_a)])),
                b: Endpoint::new(Config::new(alloc::vec![conn("b2a", B, A, mobike_b)])),
                rng: ChaCha20Rng::seed_from_u64(7),
                b_sent: Vec::new(),
                b_events: Vec::new(),
                a_at: sock("10.0.0.1:500"),
            };
            n.a.initiate(NOW, "a2b", &mut n.rng).unwrap();
            n.pump(sock("10.0.0.1:500"));
            assert_eq!(n.b.status(NOW)[0].state, "established");
            n.b_events.clear();
            n
        }

        /// Delivers A's datagrams to B as coming from `a_from`, B's back to A.
        fn pump(&mut self, a_from: SocketAddr) {
            for _ in 0..20 {
                let mut moved = false;
                while let Some(t) = self.a.poll_transmit() {
                    moved = true;
                    let _ = self.b.handle_datagram(NOW, t.remote, a_from, &t.payload, &mut self.rng);
                }
                while let Some(t) = self.b.poll_transmit() {
                    moved = true;
                    self.b_sent.push(t.clone());
                    let _ = self
                        .a
                        .handle_datagram(NOW, self.a_at, t.local, &t.payload, &mut self.rng);
                }
                while let Some(e) = self.b.poll_event() {
                    self.b_events.push(e);
                }
                while self.a.poll_event().is_some() {}
                if !moved {
                    return;
                }
            }
        }

        /// A request of A's IKE SA with `ps`, sealed as A would (next message ID).
        fn a_request(&mut self, ps: &[Payload]) -> Vec<u8> {
            let sa = self.a.sas_mut().next().unwrap();
            let id = sa.take_request_id();
            sa.seal(ExchangeType::Informational, false, id, ps, &mut self.rng)
                .unwrap()
        }

        fn b_remote(&self) -> SocketAddr {
            self.b.status(NOW)[0].remote
        }

        fn b_moves(&self) -> usize {
            self.b_events
                .iter()
                .filter(|e| matches!(e, Event::PeerEndpointChanged { .. }))
                .count()
        }

        fn b_refusals(&self) -> Vec<MobikeRefusal> {
            self.b_events
                .iter()
                .filter_map(|e| match e {
                    Event::MobikeRefused { reason, .. } => Some(*reason),
                    _ => None,
                })
                .collect()
        }
    }

    fn n(k: u16, data: &[u8]) -> Payload {
        Payload::Notify(Notify::ike(k, data))
    }

    /// Both announce MOBIKE_SUPPORTED: in use; either says no: not (3.2).
    #[test]
    fn mobike_is_in_use_only_when_both_announce_it() {
        for (a, b, want) in [(true, true, true), (true, false, false), (false, true, false)] {
            let mut net = Net::up(a, b);
            let sa_a = net.a.sas_mut().next().unwrap().mobike().agreed;
            let sa_b = net.b.sas_mut().next().unwrap().mobike().agreed;
            assert_eq!((sa_a, sa_b), (want, want), "mobike a={a} b={b}");
            let r = net.a.update_addresses(NOW, "a2b", &mut net.rng);
            assert_eq!(r.is_ok(), want, "update_addresses with mobike a={a} b={b}: {r:?}");
        }
    }

    /// The peer's UPDATE_SA_ADDRESSES from a new address (3.5): the IKE SA and its child move
    /// there (one event, `mobike`), NAT detection redone, COOKIE2 echoed, the answer sent there.
    #[test]
    fn update_sa_addresses_moves_the_sa_and_its_children() {
        let mut net = Net::up(true, true);
        let (spi_i, spi_r) = (net.b.status(NOW)[0].spi_i, net.b.status(NOW)[0].spi_r);
        let moved_to = sock("10.9.9.9:4500");
        net.a.update_addresses(NOW, "a2b", &mut net.rng).unwrap();
        net.pump(moved_to);
        assert_eq!(net.b_remote(), moved_to);
        let st = &net.b.status(NOW)[0];
        assert_eq!((st.spi_i, st.spi_r), (spi_i, spi_r), "the same IKE SA");
        assert_eq!(st.stats.mobike_updates, 1);
        assert!(net.b_events.iter().any(|e| matches!(e,
            Event::PeerEndpointChanged { old, new, mobike: true, .. }
                if *old == sock("10.0.0.1:500") && *new == moved_to)));
        // B's answer went to the new address, with COOKIE2: A checked it and counted the update.
        assert_eq!(net.b_sent.last().unwrap().remote, moved_to);
        let a = &net.a.status(NOW)[0];
        assert_eq!((a.state, a.stats.mobike_updates), ("established", 1));
        // The children's endpoint moved too (what the data plane follows).
        let sa_b = net.b.sas_mut().next().unwrap();
        assert!(sa_b.children().iter().all(|c| c.info.remote == moved_to));
    }

    /// With MOBIKE in use, another request from elsewhere (strongSwan's path probe) is answered
    /// there but moves nothing: only UPDATE_SA_ADDRESSES does (3.5).
    #[test]
    fn a_request_from_elsewhere_without_update_moves_nothing() {
        let mut net = Net::up(true, true);
        net.a.check_liveness(NOW, "a2b", &mut net.rng).unwrap();
        net.pump(sock("10.9.9.9:500"));
        assert_eq!(net.b_remote(), sock("10.0.0.1:500"));
        assert_eq!(net.b_moves(), 0);
        assert_eq!(
            net.b_sent.last().unwrap().remote,
            sock("10.9.9.9:500"),
            "answered where it came from"
        );
    }

    /// Without MOBIKE the implicit move of RFC 7296 2.23 stays: an authenticated request from
    /// a new address moves the peer (a NAT's new mapping), reported without `mobike`.
    #[test]
    fn without_mobike_an_authenticated_request_moves_the_peer() {
        let mut net = Net::up(false, false);
        net.a.check_liveness(NOW, "a2b", &mut net.rng).unwrap();
        net.pump(sock("10.9.9.9:500"));
        assert_eq!(net.b_remote(), sock("10.9.9.9:500"));
        assert!(net
            .b_events
            .iter()
            .any(|e| matches!(e, Event::PeerEndpointChanged { mobike: false, .. })));
    }

    /// UPDATE_SA_ADDRESSES on an IKE SA without MOBIKE: nothing moves by it; refused, counted.
    #[test]
    fn update_without_mobike_is_refused_and_counted() {
        let mut net = Net::up(true, false);
        let req = net.a_request(&[n(kind::UPDATE_SA_ADDRESSES, &[]), n(kind::COOKIE2, &[1; 8])]);
        net.b
            .handle_datagram(NOW, sock("10.0.0.2:500"), sock("10.0.0.1:500"), &req, &mut net.rng)
            .unwrap();
        net.pump(sock("10.0.0.1:500"));
        assert_eq!(net.b_refusals(), [MobikeRefusal::NotNegotiated]);
        assert_eq!(net.b.status(NOW)[0].stats.mobike_refused, 1);
        assert_eq!(net.b.status(NOW)[0].stats.mobike_updates, 0);
    }

    /// A malformed COOKIE2 (3 bytes; 4.2 wants 8 to 64): INVALID_SYNTAX, nothing moves.
    #[test]
    fn a_bad_cookie2_moves_nothing() {
        let mut net = Net::up(true, true);
        let req = net.a_request(&[n(kind::UPDATE_SA_ADDRESSES, &[]), n(kind::COOKIE2, &[1, 2, 3])]);
        net.b
            .handle_datagram(NOW, sock("10.0.0.2:500"), sock("10.9.9.9:500"), &req, &mut net.rng)
            .unwrap();
        net.pump(sock("10.0.0.1:500"));
        assert_eq!(net.b_remote(), sock("10.0.0.1:500"));
        assert_eq!(net.b_refusals(), [MobikeRefusal::BadCookie2]);
        assert_eq!(net.b_moves(), 0);
    }

    /// A forged UPDATE_SA_ADDRESSES (its ICV broken) from a spoofed source is dropped before
    /// MOBIKE sees it; a captured valid one replayed from another source gets the kept answer
    /// and moves nothing (3.5: retransmissions change nothing; 5.2).
    #[test]
    fn forged_or_replayed_updates_from_a_spoofed_source_move_nothing() {
        let mut net = Net::up(true, true);
        let spoofed = sock("203.0.113.66:4500");
        let valid = net.a_request(&[n(kind::UPDATE_SA_ADDRESSES, &[]), n(kind::COOKIE2, &[9; 16])]);
        let mut forged = valid.clone();
        let last = forged.len() - 1;
        forged[last] ^= 1;
        let r = net
            .b
            .handle_datagram(NOW, sock("10.0.0.2:500"), spoofed, &forged, &mut net.rng);
        assert!(matches!(r, Err(crate::Dropped::Malformed(_))), "{r:?}");
        assert_eq!((net.b_remote(), net.b_moves()), (sock("10.0.0.1:500"), 0));
        // The real one from the real new address moves B; its replay from elsewhere does not.
        let real = sock("10.9.9.9:500");
        net.b
            .handle_datagram(NOW, sock("10.0.0.2:500"), real, &valid, &mut net.rng)
            .unwrap();
        net.pump(real);
        assert_eq!((net.b_remote(), net.b_moves()), (real, 1));
        net.b
            .handle_datagram(NOW, sock("10.0.0.2:500"), spoofed, &valid, &mut net.rng)
            .unwrap();
        net.pump(real);
        assert_eq!((net.b_remote(), net.b_moves()), (real, 1));
        assert!(
            net.b_sent.iter().all(|t| t.remote != spoofed),
            "nothing sent to the spoofed source"
        );
    }

    impl Net {
        /// What B sends now (kept in `b_sent`), its events collected.
        fn b_out(&mut self) -> Vec<Transmit> {
            let out: Vec<Transmit> = core::iter::from_fn(|| self.b.poll_transmit()).collect();
            self.b_sent.extend(out.iter().cloned());
            while let Some(e) = self.b.poll_event() {
                self.b_events.push(e);
            }
            out
        }

        /// Delivers B's datagrams to A; A's answers, as sent (their `remote` is B).
        fn deliver_a(&mut self, ts: &[Transmit]) -> Vec<Transmit> {
            for t in ts {
                let _ = self
                    .a
                    .handle_datagram(NOW, sock("10.0.0.1:500"), t.local, &t.payload, &mut self.rng);
            }
            while self.a.poll_event().is_some() {}
            core::iter::from_fn(|| self.a.poll_transmit()).collect()
        }

        /// Delivers A's datagrams to B as coming from `from`, at `now`.
        fn deliver_b(&mut self, ts: &[Transmit], from: SocketAddr, now: Duration) {
            for t in ts {
                let _ = self.b.handle_datagram(now, t.remote, from, &t.payload, &mut self.rng);
            }
        }

        /// A's UPDATE_SA_ADDRESSES delivered to B from `from`; what B sent back.
        fn update_from(&mut self, from: SocketAddr) -> Vec<Transmit> {
            self.a.update_addresses(NOW, "a2b", &mut self.rng).unwrap();
            let req: Vec<Transmit> = core::iter::from_fn(|| self.a.poll_transmit()).collect();
            self.deliver_b(&req, from, NOW);
            self.b_out()
        }

        fn b_children_at(&mut self) -> Vec<SocketAddr> {
            let sa = self.b.sas_mut().next().unwrap();
            sa.children().iter().map(|c| c.info.remote).collect()
        }
    }

    /// Return routability (3.5, 5.2.1): the update is answered, and a check with a COOKIE2 of
    /// B's goes to the new address; until it is answered from there nothing moves (the data
    /// plane keeps the old path); answered, the SA and its children move, counted.
    #[test]
    fn the_new_address_is_checked_before_the_sa_moves() {
        let mut net = Net::up(true, true);
        let old = sock("10.0.0.1:500");
        let new = sock("10.9.9.9:4500");
        let out = net.update_from(new);
        assert_eq!(out.len(), 2, "the answer and the check");
        assert!(out.iter().all(|t| t.remote == new), "both to the new address");
        assert_eq!((net.b_remote(), net.b_moves()), (old, 0), "not before the check");
        assert!(net.b_children_at().iter().all(|r| *r == old));
        let answers = net.deliver_a(&out);
        assert_eq!(answers.len(), 1, "A answers the check");
        net.deliver_b(&answers, new, NOW);
        assert!(net.b_out().is_empty());
        assert_eq!((net.b_remote(), net.b_moves()), (new, 1));
        assert!(net.b_children_at().iter().all(|r| *r == new));
        let st = &net.b.status(NOW)[0].stats;
        assert_eq!((st.mobike_checks, st.mobike_updates, st.mobike_refused), (1, 1, 0));
    }

    /// An update that names a spoofed source (a third party's address, 5.2.1): the check sent
    /// there is never answered; after CHECK_WINDOW it has failed (reported, counted), nothing
    /// moved, and its retransmission goes on the old path, where A answers it; the SA lives.
    #[test]
    fn an_unanswered_check_moves_nothing() {
        let mut net = Net::up(true, true);
        let old = sock("10.0.0.1:500");
        let victim = sock("203.0.113.66:4500");
        let out = net.update_from(victim);
        assert!(out.iter().all(|t| t.remote == victim));
        // Lost at the victim; B's timer: a retransmission there, then the window is over.
        let mut now = NOW;
        let mut back_on_old = Vec::new();
        for _ in 0..10 {
            now = net.b.poll_timeout().unwrap();
            net.b.handle_timeout(now, &mut net.rng);
            let sent = net.b_out();
            if let Some(t) = sent.iter().find(|t| t.remote == old) {
                back_on_old.push(t.clone());
                break;
            }
            assert!(sent.iter().all(|t| t.remote == victim), "{sent:?}");
        }
        assert!(
            now >= NOW + CHECK_WINDOW && now < NOW + Duration::from_secs(30),
            "{now:?}"
        );
        assert_eq!(net.b_refusals(), [MobikeRefusal::CheckFailed]);
        assert_eq!((net.b_remote(), net.b_moves()), (old, 0));
        assert!(net.b_children_at().iter().all(|r| *r == old));
        // A is still at the old address: it answers the check there; still nothing moves.
        let answers = net.deliver_a(&back_on_old);
        assert_eq!(answers.len(), 1);
        net.deliver_b(&answers, old, now);
        net.b_out();
        assert_eq!((net.b_remote(), net.b_moves()), (old, 0));
        let st = &net.b.status(now)[0];
        assert_eq!(st.state, "established");
        assert_eq!((st.stats.mobike_checks, st.stats.mobike_refused), (0, 1));
    }

    /// A second update from yet another address while the first check runs: the first
    /// answered moves the SA there, then the newer address is checked and the SA follows.
    #[test]
    fn a_newer_address_is_checked_after_the_running_check() {
        let mut net = Net::up(true, true);
        let (x, y) = (sock("10.9.9.9:4500"), sock("10.8.8.8:4500"));
        let first = net.update_from(x);
        let sa = net.a.sas_mut().next().unwrap();
        let (i, r) = (sa.spi_i(), sa.spi_r());
        // Sealed by hand with the ID after A's outstanding update (our initiator waits).
        let ps = [
            n(kind::UPDATE_SA_ADDRESSES, &[]),
            n(kind::COOKIE2, &[7; 8]),
            n(kind::NAT_DETECTION_SOURCE_IP, &crate::nat::nat_hash(i, r, y)),
            n(
                kind::NAT_DETECTION_DESTINATION_IP,
                &crate::nat::nat_hash(i, r, sock("10.0.0.2:500")),
            ),
        ];
        let sa = net.a.sas_mut().next().unwrap();
        let id = sa.spare_request_id();
        let req = sa
            .seal(ExchangeType::Informational, false, id, &ps, &mut net.rng)
            .unwrap();
        net.b
            .handle_datagram(NOW, sock("10.0.0.2:500"), y, &req, &mut net.rng)
            .unwrap();
        let second = net.b_out();
        assert!(
            second.iter().all(|t| t.remote == y) && second.len() == 1,
            "only the answer: {second:?}"
        );
        // The first check answered from x: the SA moves there, and y's check goes out.
        let answers = net.deliver_a(&first);
        net.deliver_b(&answers, x, NOW);
        let check_y = net.b_out();
        assert_eq!(net.b_remote(), x);
        assert!(check_y.len() == 1 && check_y[0].remote == y, "{check_y:?}");
        let answers = net.deliver_a(&check_y);
        net.deliver_b(&answers, y, NOW);
        net.b_out();
        assert_eq!((net.b_remote(), net.b_moves()), (y, 2));
        assert_eq!(net.b.status(NOW)[0].stats.mobike_checks, 2);
    }

    /// The check answered, but from another address than the one checked: failed, nothing
    /// moves.
    #[test]
    fn a_check_answered_from_elsewhere_moves_nothing() {
        let mut net = Net::up(true, true);
        let old = sock("10.0.0.1:500");
        let out = net.update_from(sock("10.9.9.9:4500"));
        let answers = net.deliver_a(&out);
        net.deliver_b(&answers, sock("198.51.100.7:4500"), NOW);
        net.b_out();
        assert_eq!(net.b_refusals(), [MobikeRefusal::CheckFailed]);
        assert_eq!((net.b_remote(), net.b_moves()), (old, 0));
    }

    /// ADDITIONAL_IP4/6_ADDRESS kept (a malformed one skipped), NO_ADDITIONAL_ADDRESSES
    /// clears them; never an error (3.4, 3.6).
    #[test]
    fn additional_addresses_are_kept() {
        let mut net = Net::up(true, true);
        let v6: core::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
        let req = net.a_request(&[
            n(kind::ADDITIONAL_IP4_ADDRESS, &[192, 0, 2, 7]),
            n(kind::ADDITIONAL_IP6_ADDRESS, &v6.octets()),
            n(kind::ADDITIONAL_IP4_ADDRESS, &[1, 2, 3]),
        ]);
        net.b
            .handle_datagram(NOW, sock("10.0.0.2:500"), sock("10.0.0.1:500"), &req, &mut net.rng)
            .unwrap();
        net.pump(sock("10.0.0.1:500"));
        let got: Vec<_> = net
            .b
            .sas_mut()
            .next()
            .unwrap()
            .mobike()
            .peer_addresses
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(got, ["192.0.2.7", "2001:db8::7"]);
        let req = net.a_request(&[n(kind::NO_ADDITIONAL_ADDRESSES, &[])]);
        net.b
            .handle_datagram(NOW, sock("10.0.0.2:500"), sock("10.0.0.1:500"), &req, &mut net.rng)
            .unwrap();
        net.pump(sock("10.0.0.1:500"));
        let m = net.b.sas_mut().next().unwrap().mobike();
        assert!(m.peer_addresses.is_empty() && m.no_additional);
        assert!(net.b_refusals().is_empty());
        assert_eq!(net.b.status(NOW)[0].state, "established");
    }

    /// NO_NATS_ALLOWED with a NAT in between (the NAT_DETECTION hashes do not match the
    /// addresses B sees): UNEXPECTED_NAT_DETECTED, nothing moves (3.9).
    #[test]
    fn no_nats_allowed_behind_a_nat_is_refused() {
        let mut net = Net::up(true, true);
        let sa = net.a.sas_mut().next().unwrap();
        let (i, r) = (sa.spi_i(), sa.spi_r());
        let req = net.a_request(&[
            n(kind::UPDATE_SA_ADDRESSES, &[]),
            n(kind::NO_NATS_ALLOWED, &[]),
            n(
                kind::NAT_DETECTION_SOURCE_IP,
                &crate::nat::nat_hash(i, r, sock("10.0.0.1:500")),
            ),
            n(
                kind::NAT_DETECTION_DESTINATION_IP,
                &crate::nat::nat_hash(i, r, sock("10.0.0.2:500")),
            ),
        ]);
        // It arrives translated: from 198.51.100.9, not the 10.0.0.1 its hash names.
        net.b
            .handle_datagram(NOW, sock("10.0.0.2:500"), sock("198.51.100.9:4500"), &req, &mut net.rng)
            .unwrap();
        net.pump(sock("10.0.0.1:500"));
        assert_eq!(net.b_refusals(), [MobikeRefusal::UnexpectedNat]);
        assert_eq!((net.b_remote(), net.b_moves()), (sock("10.0.0.1:500"), 0));
    }

    /// A's first transmit (the request `update_local` queued), not delivered.
    fn a_take(net: &mut Net) -> Transmit {
        net.a.poll_transmit().expect("A sent its UPDATE_SA_ADDRESSES")
    }

    /// Delivers `t` (A's) to B from the source A chose, then pumps from there (A now at
    /// that address).
    fn deliver_from_source(net: &mut Net, t: &Transmit) {
        net.a_at = t.local;
        net.b
            .handle_datagram(NOW, t.remote, t.local, &t.payload, &mut net.rng)
            .unwrap();
        net.pump(t.local);
    }

    /// Our own address changed (3.5, initiator): the IKE SA and its child send from the new
    /// address at once, the UPDATE_SA_ADDRESSES goes from there with COOKIE2 and
    /// NAT_DETECTION_*, the peer moves the same IKE SA there and answers there; our COOKIE2
    /// came back, so the update is counted and nothing else changes.
    #[test]
    fn our_address_change_moves_the_same_sa_with_update_sa_addresses() {
        let mut net = Net::up(true, true);
        let (spi_i, spi_r) = (net.b.status(NOW)[0].spi_i, net.b.status(NOW)[0].spi_r);
        let new: IpAddr = "10.0.7.7".parse().unwrap();
        assert_eq!(net.a.update_local(NOW, "a2b", new, &mut net.rng), Ok(1));
        let t = a_take(&mut net);
        assert_eq!(t.local, sock("10.0.7.7:500"), "sent from the new address");
        assert_eq!(t.remote, sock("10.0.0.2:500"));
        deliver_from_source(&mut net, &t);
        let st = &net.b.status(NOW)[0];
        assert_eq!((st.spi_i, st.spi_r), (spi_i, spi_r), "the same IKE SA at B");
        assert_eq!(st.remote, sock("10.0.7.7:500"), "B moved it");
        assert!(net.b_events.iter().any(|e| matches!(e,
            Event::PeerEndpointChanged { new, mobike: true, .. } if *new == sock("10.0.7.7:500"))));
        assert_eq!(
            net.b_sent.last().unwrap().remote,
            sock("10.0.7.7:500"),
            "answered there"
        );
        let a = &net.a.status(NOW)[0];
        assert_eq!(
            (a.state, a.local, a.stats.mobike_updates),
            ("established", sock("10.0.7.7:500"), 1)
        );
        let sa_a = net.a.sas_mut().next().unwrap();
        assert!(
            sa_a.children().iter().all(|c| c.info.local.ip() == new),
            "the child moved too"
        );
        // B's child follows (what its data plane sends to).
        let sa_b = net.b.sas_mut().next().unwrap();
        assert!(sa_b.children().iter().all(|c| c.info.remote.ip() == new));
    }

    /// The update is a request as any: lost, it is sent again (from the new address, the same
    /// bytes) at the retransmission deadline, and the retransmission moves the SA.
    #[test]
    fn our_update_is_retransmitted_from_the_new_address() {
        let mut net = Net::up(true, true);
        let new: IpAddr = "10.0.7.7".parse().unwrap();
        net.a.update_local(NOW, "a2b", new, &mut net.rng).unwrap();
        let lost = a_take(&mut net);
        assert!(net.a.poll_transmit().is_none());
        let due = net.a.poll_timeout().expect("a retransmission deadline");
        assert!(due > NOW && due <= NOW + Duration::from_secs(10), "{due:?}");
        net.a.handle_timeout(due, &mut net.rng);
        let again = net.a.poll_transmit().expect("retransmitted");
        assert_eq!((again.local, &again.payload), (lost.local, &lost.payload));
        deliver_from_source(&mut net, &again);
        assert_eq!(net.b_remote(), sock("10.0.7.7:500"));
        assert_eq!(net.a.status(NOW)[0].stats.mobike_updates, 1);
    }

    /// MOBIKE not in use (the peer did not announce it): refused, nothing moves or is sent;
    /// no connection or no SA: its own error.
    #[test]
    fn our_address_change_without_mobike_is_refused() {
        let mut net = Net::up(true, false);
        let new: IpAddr = "10.0.7.7".parse().unwrap();
        let r = net.a.update_local(NOW, "a2b", new, &mut net.rng);
        assert!(matches!(r, Err(crate::CommandError::Unsupported(_))), "{r:?}");
        assert_eq!(net.a.status(NOW)[0].local, sock("10.0.0.1:500"));
        assert!(net.a.poll_transmit().is_none());
        let r = net.a.update_local(NOW, "nope", new, &mut net.rng);
        assert_eq!(r, Err(crate::CommandError::UnknownConnection));
        let mut net = Net::up(true, true);
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let r = net.a.update_local(NOW, "a2b", v6, &mut net.rng);
        assert!(matches!(r, Err(crate::CommandError::Unsupported(_))), "{r:?}");
        assert_eq!(net.a.status(NOW)[0].local, sock("10.0.0.1:500"));
    }

    /// The answer to our update without our COOKIE2 (3.7: someone else answered, or the path
    /// is not the peer's): refused, counted, and the IKE SA closed, as strongSwan does.
    #[test]
    fn an_answer_with_another_cookie2_closes_the_sa() {
        let mut net = Net::up(true, true);
        let new: IpAddr = "10.0.7.7".parse().unwrap();
        net.a.update_local(NOW, "a2b", new, &mut net.rng).unwrap();
        let t = a_take(&mut net);
        // The request's message ID (IKE header octets 20..24), answered by B's keys with
        // a COOKIE2 that is not A's.
        let id = u32::from_be_bytes(t.payload[20..24].try_into().unwrap());
        let sa_b = net.b.sas_mut().next().unwrap();
        let resp = sa_b
            .seal(
                ExchangeType::Informational,
                true,
                id,
                &[n(kind::COOKIE2, &[0x55; 16])],
                &mut net.rng,
            )
            .unwrap();
        net.a
            .handle_datagram(NOW, t.local, t.remote, &resp, &mut net.rng)
            .unwrap();
        let mut refused = Vec::new();
        let mut down = false;
        while let Some(e) = net.a.poll_event() {
            match e {
                Event::MobikeRefused { reason, .. } => refused.push(reason),
                Event::IkeDown { .. } => down = true,
                _ => {}
            }
        }
        assert_eq!(refused, [MobikeRefusal::BadCookie2]);
        assert!(down, "the IKE SA is closed");
        assert_eq!(
            net.a.status(NOW).first().map(|s| s.stats.mobike_updates).unwrap_or(0),
            0
        );
    }
}
