//! IKE_AUTH with EAP passed through to a RADIUS server (RFC 3579; RFC 7296 2.16 for the
//! IKE side): the responder's deferred responses.
//!
//! The authenticator ([`ipsec_eap::server::Authenticator`] with `Backend::Radius`) answers
//! an EAP Response with `Pending` while the server has it. The IKE_AUTH request that carried
//! the Response then stays unanswered ([`defer`]): the peer's window is held at it, a
//! retransmission of it is absorbed and counted (`deferred_retransmits`; RFC 7296 2.1: the
//! responder's answer to a retransmission is its one response, which does not exist yet),
//! and a new request is outside the window. The RADIUS datagrams go out through the
//! endpoint ([`crate::Endpoint::poll_radius`]), the RADIUS client's retransmission deadline
//! joins the SA's ([`deadline`]), and the server's answer ([`answer`]) or its silence
//! ([`handle_timeout`]: every try timed out, `RadiusServerDown`) ends the wait: the response
//! is built as for a local method (the next EAP Request, EAP-Success, or EAP-Failure with
//! AUTHENTICATION_FAILED and the SA gone) and sent under the deferred request's ID.
//!
//! The half-open deadline still holds while the SA waits: a conversation stuck anywhere
//! leaves nothing behind (no lease is made before the last AUTH; the endpoint forgets the
//! SA's RADIUS Identifier when the SA goes).
use super::ike_auth_eap::{refuse, step_reply};
use super::Reply;
use crate::authenticator::Refusal;
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa};
use crate::radius_table::RadiusDropped;
use alloc::vec::Vec;
use core::time::Duration;
use ipsec_eap::server::{Backend, FailureReason, Step};
use rand_core::CryptoRngCore;

/// The connection's RADIUS client settings (servers, hold-down), if it passes EAP on.
fn radius_config<'c>(sa: &IkeSa, cx: &Cx<'c>) -> Option<&'c ipsec_eap::radius::client::Config> {
    match &sa.conn(cx.cfg).remote_auth {
        crate::config::RemoteAuth::Eap {
            backend: Backend::Radius(c),
            ..
        } => Some(c),
        _ => None,
    }
}

/// Before the authenticator takes an EAP Response: a RADIUS Identifier free on the shared
/// socket for the Access-Request it makes. None free (256 outstanding: the server is not
/// keeping up): refused as if the server were down, counted (`no_identifier`).
pub(crate) fn prepare(sa: &mut IkeSa, cx: &mut Cx) -> Result<(), Reply> {
    let Some(rc) = radius_config(sa, cx) else {
        return Ok(());
    };
    let servers = rc.servers();
    match cx.out.radius.free_identifier() {
        Some(id) => {
            let now = cx.now;
            if let Some(st) = sa.eap_mut() {
                st.auth.use_radius_identifier(id);
                // A new conversation starts on the first server by preference that is not
                // marked down; a started one stays on its server (its State is that one's).
                if st.auth.radius_server().is_none() {
                    if let Some(server) = cx.out.radius.pick(servers, 0, now) {
                        st.auth.use_radius_server(server);
                    }
                }
            }
            Ok(())
        }
        None => {
            cx.out.radius.stats.no_identifier += 1;
            Err(refuse(sa, cx, Refusal::Eap(FailureReason::RadiusServerDown), None))
        }
    }
}

/// After the authenticator moved: its outstanding Identifier filed under this SA (or
/// none), its datagrams queued for the server.
pub(crate) fn sync(sa: &mut IkeSa, cx: &mut Cx, retransmission: bool) {
    let spi = sa.our_spi();
    let Some(st) = sa.eap_mut() else {
        cx.out.radius.forget(spi);
        return;
    };
    cx.out.radius.track(spi, st.auth.radius_identifier());
    let server = st.auth.radius_server().unwrap_or(0);
    while let Some(d) = st.auth.poll_radius_transmit() {
        cx.out.radius.transmit(spi, server, d, retransmission);
    }
}

/// The request being answered waits for the RADIUS server: no response now.
pub(crate) fn defer(sa: &mut IkeSa) -> Reply {
    // This request's ID: the window moved past it (ike_sa/window.rs, handle_request).
    sa.defer_response();
    Reply::with(Vec::new())
}

/// When the RADIUS client must retransmit or give up.
pub(crate) fn deadline(sa: &IkeSa) -> Option<Duration> {
    sa.eap()?.auth.poll_timeout()
}

/// The RADIUS client's timer: a retransmission; or every try on the request's server timed
/// out: that server is marked down (an event when it was up) and the request goes to the
/// next server by preference that it has not been to (a new Identifier and Request
/// Authenticator, RFC 2865 2.5); with none left the server is down for this conversation
/// (the deferred request answered with EAP-Failure, the SA gone).
pub(crate) fn handle_timeout(sa: &mut IkeSa, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
    let (servers, hold) = match radius_config(sa, cx) {
        Some(rc) => (rc.servers(), rc.retry_down_after),
        None => (1, core::time::Duration::from_secs(60)),
    };
    let now = cx.now;
    let Some(st) = sa.eap_mut() else { return };
    if st.auth.poll_timeout().is_none_or(|t| now < t) {
        return;
    }
    let out = &mut *cx.out;
    let mut failed_over = false;
    let step = st.auth.handle_timeout_failover(now, rng, &mut |failed, tried| {
        if out.radius.timed_out(failed, now, hold) {
            out.event(crate::event::Event::RadiusServer {
                server: failed,
                up: false,
            });
        }
        let next = out.radius.pick(servers, tried, now)?;
        let id = out.radius.free_identifier()?;
        out.radius.failed_over_to(next);
        failed_over = true;
        Some((next, id))
    });
    match step {
        Some(step) => answered(sa, cx, step, rng),
        // A failed-over request is a first send to its server, not a retransmission.
        None => sync(sa, cx, !failed_over),
    }
}

/// A datagram from the RADIUS server for this SA (the endpoint matched its Identifier).
pub(crate) fn answer(
    sa: &mut IkeSa,
    cx: &mut Cx,
    server: usize,
    datagram: &[u8],
    rng: &mut impl CryptoRngCore,
) -> Result<(), RadiusDropped> {
    let Some(st) = sa.eap_mut() else {
        return Err(RadiusDropped::Unmatched);
    };
    match st.auth.handle_radius_from(server, datagram) {
        Ok(step) => {
            if cx.out.radius.answered(server) {
                cx.out.event(crate::event::Event::RadiusServer { server, up: true });
            }
            answered(sa, cx, step, rng);
            Ok(())
        }
        Err(ipsec_eap::Error::BadAuthenticator) => Err(RadiusDropped::BadAuthenticator),
        Err(ipsec_eap::Error::Unexpected(_) | ipsec_eap::Error::WrongIdentifier { .. }) => {
            Err(RadiusDropped::Unmatched)
        }
        Err(_) => Err(RadiusDropped::Malformed),
    }
}

/// The wait is over: the deferred request's response, built from the step, goes out.
fn answered(sa: &mut IkeSa, cx: &mut Cx, step: Step, rng: &mut impl CryptoRngCore) {
    match &step {
        Step::Success { .. } => cx.out.radius.stats.accepted += 1,
        Step::Failure {
            reason: FailureReason::RadiusServerDown,
            ..
        } => cx.out.radius.stats.server_down += 1,
        Step::Failure { .. } => cx.out.radius.stats.rejected += 1,
        _ => {}
    }
    let reply = step_reply(sa, cx, step);
    sync(sa, cx, false);
    let Some(reply) = reply else {
        // Still pending (never after an answer or a timeout; kept waiting if it were).
        return;
    };
    let Some(id) = sa.take_deferred() else {
        // Nothing waits (the SA was answered otherwise): the outcome still holds.
        if let Some(reason) = reply.then {
            sa.kill(cx, reason);
        }
        return;
    };
    sa.respond(cx, ExchangeType::IkeAuth, id, &reply.payloads, rng);
    if let Some(reason) = reply.then {
        sa.kill(cx, reason);
    }
}

#[cfg(test)]
mod tests {
    //! The responder with a RADIUS backend between an EAP-MSCHAPv2 client (this crate's
    //! initiator) and a RADIUS server made of ipsec-eap's pieces (its MSCHAPv2 server, RFC
    //! 2865 signing, RFC 2548 keys; scripts/ci/ike-eap-radius.sh runs a real FreeRADIUS).
    use super::*;
    use crate::endpoint::Endpoint;
    use crate::event::{Event, Transmit};
    use alloc::sync::Arc;
    use ipsec_eap::ms_chap::NtHash;
    use ipsec_eap::mschapv2::{self, Credentials};
    use ipsec_eap::radius::packet::{attr, code, Builder, Packet, Repr as RadiusRepr};
    use ipsec_eap::radius::{auth, mppe};
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    const SECRET: &[u8] = b"radius secret";

    struct Users;
    impl Credentials for Users {
        fn nt_hash(&self, identity: &[u8]) -> Option<NtHash> {
            (identity == b"alice").then(|| NtHash::from_password("pw").unwrap())
        }
    }
    /// The IKE server's own users: none (everything goes to the RADIUS server).
    struct NoUsers;
    impl Credentials for NoUsers {
        fn nt_hash(&self, _: &[u8]) -> Option<NtHash> {
            None
        }
    }

    /// A RADIUS server: checks each Access-Request's Message-Authenticator, runs MSCHAPv2
    /// with its EAP-Message, answers signed with `secret`; a retransmitted request (the same
    /// bytes) gets the same answer.
    struct FakeRadius {
        secret: Vec<u8>,
        /// The secret requests are checked with (a forger's differs from its `secret`).
        verify: Vec<u8>,
        server: Option<mschapv2::Server>,
        last: Option<(Vec<u8>, Vec<u8>)>,
        requests: usize,
        rng: ChaCha20Rng,
    }

    impl FakeRadius {
        fn new(secret: &[u8]) -> FakeRadius {
            FakeRadius {
                secret: secret.to_vec(),
                verify: secret.to_vec(),
                server: None,
                last: None,
                requests: 0,
                rng: ChaCha20Rng::seed_from_u64(99),
            }
        }
        fn answer(&mut self, request: &[u8]) -> Vec<u8> {
            self.requests += 1;
            if let Some((q, a)) = &self.last {
                if q == request {
                    return a.clone();
                }
            }
            auth::verify_request(&self.verify, request).expect("request Message-Authenticator");
            let p = Packet::new_checked(request).unwrap();
            let r = RadiusRepr::parse(&p).unwrap();
            assert_eq!(r.code, code::ACCESS_REQUEST);
            let eap = r.eap_message().unwrap();
            let (code, eap_out, keys) = match &mut self.server {
                None => {
                    let ident = ipsec_eap::packet::Repr::parse_bytes(&eap)
                        .unwrap()
                        .data
                        .unwrap()
                        .1
                        .to_vec();
                    assert_eq!(r.get(attr::USER_NAME), Some(&ident[..]));
                    let (s, req) = mschapv2::Server::start(&ident, 1, &Users, &mut self.rng).unwrap();
                    self.server = Some(s);
                    (code::ACCESS_CHALLENGE, req, None)
                }
                Some(s) => match s.handle(&eap).unwrap() {
                    Step::Send(b) => (code::ACCESS_CHALLENGE, b, None),
                    Step::Success { msk, eap } => (code::ACCESS_ACCEPT, eap, Some(msk)),
                    Step::Failure { eap, .. } => (code::ACCESS_REJECT, eap, None),
                    Step::Pending => unreachable!(),
                },
            };
            let mut b = Builder::new(code, r.identifier, &[0; 16]);
            if code == code::ACCESS_CHALLENGE {
                b.attr(attr::STATE, &[0xab, r.identifier]).unwrap();
            }
            if let Some(msk) = keys {
                let k = msk.as_bytes();
                let recv = mppe::encrypt(&self.secret, &r.authenticator, [0x80, 1], &k[..16]);
                let send = mppe::encrypt(&self.secret, &r.authenticator, [0x80, 2], &k[16..32]);
                b.attr(
                    attr::VENDOR_SPECIFIC,
                    &mppe::vendor_specific(mppe::MS_MPPE_RECV_KEY, &recv),
                )
                .unwrap();
                b.attr(
                    attr::VENDOR_SPECIFIC,
                    &mppe::vendor_specific(mppe::MS_MPPE_SEND_KEY, &send),
                )
                .unwrap();
            }
            b.fragmented(attr::EAP_MESSAGE, &eap_out).unwrap();
            b.attr(attr::MESSAGE_AUTHENTICATOR, &auth::placeholder()).unwrap();
            let mut out = b.finish();
            auth::sign_response(&self.secret, &r.authenticator, &mut out).unwrap();
            self.last = Some((request.to_vec(), out.clone()));
            out
        }
    }

    /// A: the client with `password`; B: the server, EAP passed to RADIUS.
    fn endpoints(password: &str) -> (Endpoint, Endpoint) {
        let mut radius = ipsec_eap::radius::client::Config::new(SECRET, b"moon");
        radius.retransmit_after = Duration::from_secs(2);
        radius.max_tries = 3;
        crate::test_util::eap_endpoints(password, Backend::Radius(radius), Arc::new(NoUsers))
    }

    /// Moves IKE datagrams both ways and B's RADIUS datagrams through `radius` (None: the
    /// server does not answer) until nothing moves.
    fn pump(
        a: &mut Endpoint,
        b: &mut Endpoint,
        now: Duration,
        rng: &mut ChaCha20Rng,
        radius: &mut dyn FnMut(&[u8]) -> Option<Vec<u8>>,
    ) {
        for _ in 0..100 {
            let mut moved = false;
            while let Some(Transmit { local, remote, payload }) = a.poll_transmit() {
                moved = true;
                let _ = b.handle_datagram(now, remote, local, &payload, rng);
            }
            while let Some(Transmit { local, remote, payload }) = b.poll_transmit() {
                moved = true;
                let _ = a.handle_datagram(now, remote, local, &payload, rng);
            }
            while let Some(t) = b.poll_radius() {
                moved = true;
                if let Some(answer) = radius(&t.data) {
                    let _ = b.handle_radius(now, &answer, rng);
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn events(e: &mut Endpoint) -> Vec<Event> {
        core::iter::from_fn(|| e.poll_event()).collect()
    }

    fn auth_failed(ev: &[Event]) -> Option<Refusal> {
        ev.iter().find_map(|e| match e {
            Event::AuthFailed {
                reason, local: true, ..
            } => *reason,
            _ => None,
        })
    }

    #[test]
    fn accepted_by_the_radius_server_the_sa_comes_up() {
        let (mut a, mut b) = endpoints("pw");
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let now = Duration::from_secs(10);
        let mut server = FakeRadius::new(SECRET);
        a.initiate(now, "a", &mut rng).unwrap();
        let mut ids = Vec::new();
        pump(&mut a, &mut b, now, &mut rng, &mut |q| {
            ids.push(q[1]);
            Some(server.answer(q))
        });
        // The Identifiers the endpoint handed out (round robin on the shared socket), not
        // the authenticator's own random ones.
        assert_eq!(ids, [0, 1, 2]);
        assert_eq!(b.status(now)[0].state, "established");
        assert_eq!(a.status(now)[0].state, "established");
        assert_eq!(b.status(now)[0].remote_id.as_deref(), Some("alice"));
        assert_eq!(b.status(now)[0].children.len(), 1);
        let s = b.radius_stats();
        // Identity, Challenge-Response, Success-Response: three Access-Requests.
        assert_eq!((s.sent, s.answers, s.accepted, s.retransmitted), (3, 3, 1, 0), "{s:?}");
        assert_eq!(b.radius_outstanding(), 0);
        assert!(events(&mut b).iter().any(|e| matches!(e, Event::IkeUp { .. })));
    }

    /// While the server has the conversation, the IKE_AUTH request is not answered; its
    /// retransmission is absorbed (not a second Access-Request); the answer then brings the
    /// one response.
    #[test]
    fn the_request_waits_for_the_server_and_its_retransmission_is_absorbed() {
        let (mut a, mut b) = endpoints("pw");
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let mut now = Duration::from_secs(10);
        let mut server = FakeRadius::new(SECRET);
        a.initiate(now, "a", &mut rng).unwrap();
        // Up to the first Access-Request (the EAP-Identity Response), held back.
        let mut held = Vec::new();
        pump(&mut a, &mut b, now, &mut rng, &mut |q| {
            held.push(q.to_vec());
            None
        });
        assert_eq!(held.len(), 1);
        assert_eq!(b.radius_outstanding(), 1);
        assert!(b.poll_transmit().is_none(), "the request must wait for the server");
        // A retransmits its request (its timer); B absorbs it.
        now = a.poll_timeout().unwrap();
        a.handle_timeout(now, &mut rng);
        let mut retransmitted = 0;
        while let Some(Transmit { local, remote, payload }) = a.poll_transmit() {
            retransmitted += 1;
            assert_eq!(b.handle_datagram(now, remote, local, &payload, &mut rng), Ok(()));
        }
        assert_eq!(retransmitted, 1);
        assert!(
            b.poll_transmit().is_none(),
            "a retransmission gets no response of its own"
        );
        assert!(b.poll_radius().is_none(), "nor a second Access-Request");
        assert_eq!(b.totals().deferred_retransmits, 1);
        assert_eq!(
            b.totals().requests_answered,
            2,
            "IKE_SA_INIT, the first IKE_AUTH: the retransmission not again"
        );
        // The answer: B's response (the MSCHAPv2 Challenge) goes out once.
        let answer = server.answer(&held[0]);
        b.handle_radius(now, &answer, &mut rng).unwrap();
        let out: Vec<Transmit> = core::iter::from_fn(|| b.poll_transmit()).collect();
        assert_eq!(out.len(), 1);
        for t in out {
            a.handle_datagram(now, t.remote, t.local, &t.payload, &mut rng).unwrap();
        }
        pump(&mut a, &mut b, now, &mut rng, &mut |q| Some(server.answer(q)));
        assert_eq!(b.status(now)[0].state, "established");
        assert_eq!(a.status(now)[0].state, "established");
    }

    #[test]
    fn rejected_by_the_radius_server_nothing_is_left() {
        let (mut a, mut b) = endpoints("wrong");
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let now = Duration::from_secs(10);
        let mut server = FakeRadius::new(SECRET);
        a.initiate(now, "a", &mut rng).unwrap();
        pump(&mut a, &mut b, now, &mut rng, &mut |q| Some(server.answer(q)));
        // MSCHAPv2: the server's Failure-Request goes to the client, whose answer brings
        // the Access-Reject.
        assert_eq!(
            auth_failed(&events(&mut b)),
            Some(Refusal::Eap(FailureReason::RadiusReject))
        );
        assert_eq!(b.ike_sa_count(), 0);
        assert_eq!(b.radius_outstanding(), 0);
        assert_eq!(b.totals().eap_failures, 1);
        assert_eq!(b.radius_stats().rejected, 1);
        assert_eq!(a.ike_sa_count(), 0, "the client got AUTHENTICATION_FAILED");
    }

    #[test]
    fn a_server_that_never_answers_ends_with_eap_failure() {
        let (mut a, mut b) = endpoints("pw");
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let mut now = Duration::from_secs(10);
        a.initiate(now, "a", &mut rng).unwrap();
        let mut sent = 0;
        pump(&mut a, &mut b, now, &mut rng, &mut |_| {
            sent += 1;
            None
        });
        assert_eq!(sent, 1);
        // The RADIUS deadline is B's next one (before the half-open one).
        let deadline = b.poll_timeout().unwrap();
        assert_eq!(deadline, now + Duration::from_secs(2));
        let start = now;
        let mut ev = Vec::new();
        for round in 0.. {
            if b.ike_sa_count() == 0 {
                break;
            }
            assert!(round < 10, "the SA is still there after {round} timer rounds");
            now = b.poll_timeout().unwrap();
            assert!(
                now < start + Duration::from_secs(30),
                "gone before the half-open deadline"
            );
            b.handle_timeout(now, &mut rng);
            while b.poll_radius().is_some() {
                sent += 1;
            }
            ev.extend(events(&mut b));
        }
        assert_eq!(now, start + Duration::from_secs(6), "three tries, 2 s apart");
        assert_eq!(sent, 3);
        assert_eq!(auth_failed(&ev), Some(Refusal::Eap(FailureReason::RadiusServerDown)));
        let s = b.radius_stats();
        assert_eq!((s.server_down, s.retransmitted), (1, 2), "{s:?}");
        assert_eq!(b.radius_outstanding(), 0);
        // The deferred request got its response: EAP-Failure and AUTHENTICATION_FAILED.
        let out: Vec<Transmit> = core::iter::from_fn(|| b.poll_transmit()).collect();
        assert_eq!(out.len(), 1);
        for t in out {
            a.handle_datagram(now, t.remote, t.local, &t.payload, &mut rng).unwrap();
        }
        assert_eq!(a.ike_sa_count(), 0);
        assert!(events(&mut a)
            .iter()
            .any(|e| matches!(e, Event::AuthFailed { local: false, .. })));
    }

    /// An answer signed with another secret, or to no outstanding request, or not RADIUS at
    /// all: dropped, counted, the SA still waiting; the real answer then goes through.
    #[test]
    fn answers_with_a_wrong_authenticator_or_no_request_are_dropped() {
        let (mut a, mut b) = endpoints("pw");
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let now = Duration::from_secs(10);
        let mut server = FakeRadius::new(SECRET);
        let mut forger = FakeRadius::new(b"not the secret");
        forger.verify = SECRET.to_vec();
        a.initiate(now, "a", &mut rng).unwrap();
        let mut held = Vec::new();
        pump(&mut a, &mut b, now, &mut rng, &mut |q| {
            held.push(q.to_vec());
            None
        });
        let forged = forger.answer(&held[0]);
        assert_eq!(
            b.handle_radius(now, &forged, &mut rng),
            Err(RadiusDropped::BadAuthenticator)
        );
        let mut other = server.answer(&held[0]);
        let mut stray = other.clone();
        stray[1] = stray[1].wrapping_add(1);
        assert_eq!(b.handle_radius(now, &stray, &mut rng), Err(RadiusDropped::Unmatched));
        assert_eq!(
            b.handle_radius(now, &[2, 0, 0], &mut rng),
            Err(RadiusDropped::Malformed)
        );
        // A flipped byte in the signed answer: its authenticator no longer verifies.
        let last = other.len() - 1;
        other[last] ^= 1;
        assert_eq!(
            b.handle_radius(now, &other, &mut rng),
            Err(RadiusDropped::BadAuthenticator)
        );
        let s = b.radius_stats();
        assert_eq!((s.bad_authenticator, s.unmatched, s.malformed, s.answers), (2, 1, 1, 0));
        assert!(b.poll_transmit().is_none());
        assert_eq!(b.radius_outstanding(), 1);
        assert_eq!(b.status(now)[0].state, "half-open");
        // The server's real answer (a retransmitted request gets it again) goes through.
        let answer = server.answer(&held[0]);
        b.handle_radius(now, &answer, &mut rng).unwrap();
        pump(&mut a, &mut b, now, &mut rng, &mut |q| Some(server.answer(q)));
        assert_eq!(b.status(now)[0].state, "established");
    }

    /// Several servers (strongSwan's eap-radius `servers`): server 0 is silent, so after its
    /// three tries the request goes to server 1 (a new Identifier, signed with server 1's
    /// secret) and the client gets in; server 0 is reported down and skipped by the next
    /// conversation; after the hold-down it is tried again, and reported up when it answers.
    #[test]
    fn a_silent_first_server_fails_over_to_the_second_and_is_retried_after_the_hold_down() {
        const SECOND: &[u8] = b"second server's secret";
        let mut radius = ipsec_eap::radius::client::Config::new(SECRET, b"moon");
        radius.retransmit_after = Duration::from_secs(2);
        radius.max_tries = 3;
        radius.retry_down_after = Duration::from_secs(60);
        radius.fallback_secrets.push(zeroize::Zeroizing::new(SECOND.to_vec()));
        let (mut a, mut b) = crate::test_util::eap_endpoints("pw", Backend::Radius(radius), Arc::new(NoUsers));
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        let mut now = Duration::from_secs(10);
        a.initiate(now, "a", &mut rng).unwrap();
        // Up to the first Access-Request: it goes to server 0, which never answers.
        pump(&mut a, &mut b, now, &mut rng, &mut |_| None);
        let mut to = Vec::new();
        let mut ev = Vec::new();
        for _ in 0..10 {
            now = b.poll_timeout().unwrap();
            b.handle_timeout(now, &mut rng);
            ev.extend(events(&mut b));
            while let Some(t) = b.poll_radius() {
                to.push((t.server, t.data));
            }
            if to.iter().any(|(s, _)| *s == 1) {
                break;
            }
        }
        assert_eq!(now, Duration::from_secs(16), "three tries on server 0, 2 s apart");
        let servers: Vec<usize> = to.iter().map(|(s, _)| *s).collect();
        assert_eq!(servers, [0, 0, 1], "two retransmissions to server 0, then server 1");
        let (_, moved) = to.pop().unwrap();
        auth::verify_request(SECOND, &moved).expect("signed with server 1's secret");
        assert!(ev
            .iter()
            .any(|e| matches!(e, Event::RadiusServer { server: 0, up: false })));
        let s = b.radius_server_stats();
        assert_eq!((s[0].timeouts, s[0].marked_down, s[0].down), (1, 1, true), "{s:?}");
        assert_eq!(s[1].failovers_to, 1);
        // Server 1 answers; the conversation goes on there (later rounds stay on it).
        let mut second = FakeRadius::new(SECOND);
        let answer = second.answer(&moved);
        b.handle_radius_from(now, 1, &answer, &mut rng).unwrap();
        let mut on = Vec::new();
        for _ in 0..100 {
            let mut moved = false;
            while let Some(Transmit { local, remote, payload }) = a.poll_transmit() {
                moved = true;
                let _ = b.handle_datagram(now, remote, local, &payload, &mut rng);
            }
            while let Some(Transmit { local, remote, payload }) = b.poll_transmit() {
                moved = true;
                let _ = a.handle_datagram(now, remote, local, &payload, &mut rng);
            }
            while let Some(t) = b.poll_radius() {
                moved = true;
                on.push(t.server);
                let answer = second.answer(&t.data);
                let _ = b.handle_radius_from(now, t.server, &answer, &mut rng);
            }
            if !moved {
                break;
            }
        }
        assert_eq!(on, [1, 1]);
        assert_eq!(b.status(now)[0].state, "established");
        assert_eq!(b.radius_server_stats()[1].answers, 3);
        // A second client within the hold-down: straight to server 1.
        a.initiate(now, "a", &mut rng).unwrap();
        let mut second_sent = Vec::new();
        pump(&mut a, &mut b, now, &mut rng, &mut |q| {
            second_sent.push(q.to_vec());
            None
        });
        assert_eq!(second_sent.len(), 1);
        assert_eq!(b.radius_server_stats()[0].sent, 3, "server 0 skipped while down");
        assert_eq!(b.radius_server_stats()[1].sent, 4);
        auth::verify_request(SECOND, &second_sent[0]).expect("server 1's secret");
        // After the hold-down, server 0 is tried again, and reported up when it answers.
        now += Duration::from_secs(61);
        let mut zero = FakeRadius::new(SECRET);
        let mut back = Vec::new();
        b.handle_timeout(now, &mut rng);
        a.handle_timeout(now, &mut rng);
        let _ = events(&mut b);
        a.initiate(now, "a", &mut rng).unwrap();
        pump(&mut a, &mut b, now, &mut rng, &mut |q| {
            back.push(q.to_vec());
            None
        });
        let last = back.last().expect("a request to a server");
        auth::verify_request(SECRET, last).expect("server 0 again");
        let answer = zero.answer(last);
        b.handle_radius_from(now, 0, &answer, &mut rng).unwrap();
        assert!(events(&mut b)
            .iter()
            .any(|e| matches!(e, Event::RadiusServer { server: 0, up: true })));
        let s = b.radius_server_stats();
        assert!(!s[0].down);
        assert_eq!(s[0].answers, 1);
    }

    /// Two clients at once on the one socket: their outstanding requests have distinct
    /// Identifiers and each answer reaches its own SA.
    #[test]
    fn outstanding_identifiers_are_distinct_across_sas() {
        let mut t = crate::radius_table::RadiusTable::default();
        let a = t.free_identifier().unwrap();
        t.track(1, Some(a));
        let b = t.free_identifier().unwrap();
        assert_ne!(a, b);
        t.track(2, Some(b));
        for spi in 3..=256u64 {
            let id = t.free_identifier().unwrap();
            t.track(spi, Some(id));
        }
        assert_eq!(t.outstanding(), 256);
        assert_eq!(t.free_identifier(), None, "no Identifier left");
        t.forget(2);
        assert_eq!(t.free_identifier(), Some(b));
        assert_eq!(t.owner(a), Some(1));
    }
}
