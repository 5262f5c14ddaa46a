//! IKE_AUTH with EAP (RFC 7296 2.16, 1.2), both roles. The exchange takes several IKE_AUTH
//! rounds:
//!
//! ```text
//! Initiator                          Responder
//! HDR, SK {IDi, [CERTREQ,] [IDr,]
//!          SAi2, TSi, TSr}  -->      (no AUTH: the initiator wants EAP)
//!                           <--      HDR, SK {IDr, [CERT,] AUTH, EAP(Request/Identity)}
//! HDR, SK {EAP}             -->
//!                           <--      HDR, SK {EAP (Request)}        ... as the method needs
//!                           <--      HDR, SK {EAP (Success)}
//! HDR, SK {AUTH}            -->      (AUTH made with the MSK, crate::eap)
//!                           <--      HDR, SK {AUTH, SAr2, TSi, TSr}
//! ```
//!
//! The responder always proves itself with its certificate in the first response. The child
//! SA proposal and selectors of the first request are kept ([`EapState::first`]) and answered
//! in the last response. The rounds are bounded ([`crate::limits::MAX_EAP_ROUNDS`]); a
//! conversation that stalls ends with the half-open deadline (`half_open_timeout`: the SA
//! stays half-open until the last AUTH); an EAP Response out of order or malformed is
//! dropped and the outstanding EAP Request sent again (RFC 3748 4.1: the authenticator
//! discards it; IKE needs an answer to every request, 2.1), counted in
//! [`crate::IkeSaStats::eap_out_of_order`]. A retransmitted IKE_AUTH request is answered from
//! the kept response as any other (2.1). EAP failure: EAP-Failure with AUTHENTICATION_FAILED,
//! an [`Event::AuthFailed`] with [`Refusal::Eap`], nothing installed. With a RADIUS backend
//! the response to a request whose EAP Response the server has waits for its answer
//! ([`crate::task::eap_radius`]).
use crate::authenticator::{self, Refusal, Signed};
use crate::child::keymat;
use crate::config::{LocalAuth, RemoteAuth};
use crate::eap::{auth_with_msk, peer_identity, verify_with_msk};
use crate::event::{DownReason, Event};
use crate::header::ExchangeType;
use crate::id::Identity;
use crate::ike_sa::{Cx, EndpointEvent, IkeSa, State};
use crate::limits::MAX_EAP_ROUNDS;
use crate::message::{Find, Payload};
use crate::notify::{kind, Notify};
use crate::task::ike_auth::{child_refused, child_up, ike_up, select_connection, IkeAuth};
use crate::task::{child_delete::ChildDelete, Next, Reply, Task};
use alloc::boxed::Box;
use alloc::vec::Vec;
use ipsec_eap::mschapv2::{Peer, PeerStep};
use ipsec_eap::server::{Authenticator, FailureReason, Step};
use ipsec_eap::Msk;
use rand_core::CryptoRngCore;

/// The responder's EAP conversation, kept on the half-open IKE SA between rounds.
pub(crate) struct EapState {
    pub(super) auth: Authenticator,
    /// The body of the first request's IDi: the last AUTH covers it (2.16).
    idi_body: Vec<u8>,
    /// The first request's payloads: its child SA, selectors and notifies are answered
    /// after EAP (a CP request would be too).
    first: Vec<Payload>,
    /// IntAuth with the first IKE_AUTH request's message ID (RFC 9242 3.3.2).
    int_auth: Vec<u8>,
    /// The EAP message last sent (sent again after an out-of-order Response).
    last_sent: Vec<u8>,
    /// After EAP-Success: the MSK, waiting for the initiator's AUTH.
    msk: Option<Msk>,
    /// IKE_AUTH requests of the conversation so far.
    rounds: u8,
}

/// The EAP payload's body (RFC 7296 3.16: the EAP message itself).
fn eap_payload(ps: &[Payload]) -> Option<&[u8]> {
    ps.iter().find_map(|p| match p {
        Payload::Other(k, _, b) if *k == crate::payload::kind::EAP => Some(b.as_slice()),
        _ => None,
    })
}

fn eap(msg: Vec<u8>) -> Payload {
    Payload::Other(crate::payload::kind::EAP, false, msg)
}

/// Refuses the peer: the event, the counter, AUTHENTICATION_FAILED (after `eap_msg`, the
/// EAP-Failure, if there is one); the SA goes after the response.
pub(super) fn refuse(sa: &mut IkeSa, cx: &mut Cx, why: Refusal, eap_msg: Option<Vec<u8>>) -> Reply {
    sa.take_eap();
    sa.stats_mut().eap_failures += 1;
    cx.out.event(Event::AuthFailed {
        conn: sa.conn_name(cx.cfg),
        local: true,
        reason: Some(why),
    });
    let mut payloads: Vec<Payload> = eap_msg.map(eap).into_iter().collect();
    payloads.push(Payload::Notify(Notify::ike(kind::AUTHENTICATION_FAILED, &[])));
    Reply {
        payloads,
        then: Some(DownReason::AuthFailed),
    }
}

/// The responder's hook in IKE_AUTH: `None` when the request is not part of an EAP exchange
/// (it has AUTH and no conversation runs).
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Option<Reply> {
    if !matches!(sa.state(), State::HalfOpen { .. }) {
        return None;
    }
    if sa.eap().is_some() {
        return Some(next_round(sa, cx, ps, rng));
    }
    if ps.auth().is_some() || ps.id_i().is_none() {
        return None;
    }
    Some(first_round(sa, cx, ps, rng))
}

/// The first request, without AUTH: a connection whose peer authenticates with EAP, our
/// IDr, CERT and AUTH (signature), and the EAP-Request/Identity.
fn first_round(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Reply {
    let State::HalfOpen { hs, crypto } = sa.state() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let Some((idi, idi_body)) = ps.id_i() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    if !super::ike_intermediate::all_done(hs, crypto) {
        sa.stats_mut().invalid_syntax += 1;
        let mut r = Reply::notify(kind::INVALID_SYNTAX);
        r.then = Some(DownReason::PeerError(kind::INVALID_SYNTAX));
        return r;
    }
    let Some(ci) = select_connection(sa, cx.cfg, crypto, idi, ps.id_r().map(|(i, _)| i), None) else {
        return refuse(sa, cx, Refusal::NoConnection, None);
    };
    let conn = &cx.cfg.connections[ci];
    let RemoteAuth::Eap { backend, .. } = &conn.remote_auth else {
        return refuse(sa, cx, Refusal::NoConnection, None);
    };
    // This IKE_AUTH request's message ID (the window moved past it).
    let int_auth = hs.int.octets(sa.last_peer_request_id());
    let idr = conn.local_id.to_body();
    let signed = Signed {
        prf: crypto.suite.prf,
        message: &hs.init_resp,
        nonce: &hs.ni,
        sk_p: &crypto.keys.sk_pr,
        id_body: &idr,
        int_auth: &int_auth,
    };
    let peer_asked = hs.peer_certreq || ps.iter().any(|p| matches!(p, Payload::CertReq(_)));
    let eap_only = eap_only(conn, backend, ps);
    // EAP-only: no signature at all (the MSK's AUTH at the end proves us, RFC 5998 3).
    let our_auth = (!eap_only).then(|| authenticator::build(&conn.local_auth, &signed, hs.peer_hashes.as_deref()));
    let idi_body = idi_body.clone();
    sa.switch_conn(ci);
    let our_auth = match our_auth {
        None => None,
        Some(Ok(a)) => Some(a),
        // Our key cannot sign for this peer (or we have no key): the server must prove
        // itself before the client gives its password.
        Some(Err(_)) => return refuse(sa, cx, Refusal::NoConnection, None),
    };
    let (auth, request) = Authenticator::start(backend.clone(), rng);
    // 1.2, 2.16: IDr, [CERT,] AUTH, EAP; RFC 5998 3 (EAP-only): IDr, EAP.
    let mut resp = alloc::vec![Payload::IdR(conn.local_id.clone(), idr)];
    if let Some(our_auth) = our_auth {
        resp.extend(authenticator::cert_payloads(&conn.local_auth, peer_asked));
        resp.push(Payload::Auth(our_auth));
    } else {
        sa.stats_mut().eap_only += 1;
    }
    resp.push(eap(request.clone()));
    sa.start_eap(EapState {
        auth,
        idi_body,
        first: ps.to_vec(),
        int_auth,
        last_sent: request,
        msk: None,
        rounds: 1,
    });
    Reply::with(resp)
}

/// Whether the first response leaves out our CERT and AUTH (RFC 5998 3): the client asked
/// (EAP_ONLY_AUTHENTICATION), the connection allows it (`eap_only`), and the method is safe
/// in RFC 5998 section 4's sense — mutual, key generating and resistant to dictionary
/// attacks. Of ours only EAP-TLS is (it is on section 4's list; the server proves itself
/// with the TLS certificate inside EAP). EAP-MSCHAPv2 is not: not on the list, and an
/// offline dictionary attack on its challenge/response is well known (strongSwan's client
/// calls it not mutual and refuses EAP-only with it); a RADIUS backend's method is not
/// known when the first response goes. Otherwise the notify is ignored and we sign as
/// usual (section 3: a responder that does not use the extension ignores it, and the
/// client gets what RFC 7296 2.16 gives it: the certificate).
fn eap_only(conn: &crate::config::Connection, backend: &ipsec_eap::server::Backend, ps: &[Payload]) -> bool {
    ps.notify(kind::EAP_ONLY_AUTHENTICATION).is_some() && conn.eap_only && safe_method(backend)
}

/// RFC 5998 section 4's test for the methods this crate runs as server.
pub(crate) fn safe_method(backend: &ipsec_eap::server::Backend) -> bool {
    use ipsec_eap::server::Backend;
    match backend {
        Backend::Tls(_) => true,
        Backend::Local | Backend::Radius(_) => false,
    }
}

/// A later request: an EAP Response, or, after EAP-Success, the AUTH made with the MSK.
fn next_round(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Reply {
    let creds = match &sa.conn(cx.cfg).remote_auth {
        RemoteAuth::Eap { creds, .. } => creds.clone(),
        _ => return refuse(sa, cx, Refusal::NoConnection, None),
    };
    let Some(st) = sa.eap_mut() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    st.rounds = st.rounds.saturating_add(1);
    if st.rounds > MAX_EAP_ROUNDS {
        return refuse(sa, cx, Refusal::Eap(FailureReason::TooManyRounds), None);
    }
    if st.msk.is_some() {
        if let Some(auth) = ps.auth().cloned() {
            return finish(sa, cx, &auth, rng);
        }
        // Not the AUTH yet: EAP-Success again.
        let again = eap(st.last_sent.clone());
        sa.stats_mut().eap_out_of_order += 1;
        return Reply::with(alloc::vec![again]);
    }
    if ps.auth().is_some() {
        // AUTH before EAP-Success: there is no key to check it with.
        return refuse(sa, cx, Refusal::EapProtocol, None);
    }
    // A RADIUS backend: the Access-Request this Response makes gets an Identifier of its
    // own on the shared socket.
    if let Err(refused) = super::eap_radius::prepare(sa, cx) {
        return refused;
    }
    let Some(st) = sa.eap_mut() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    // EAP-TLS checks the client's certificate at the wall-clock time.
    st.auth.set_unix_time(cx.unix);
    let step = match eap_payload(ps) {
        Some(msg) => st.auth.handle_response(msg, creds.as_ref(), cx.now, rng),
        None => Err(ipsec_eap::Error::Unexpected("no EAP payload")),
    };
    match step {
        Ok(step) => {
            let reply = step_reply(sa, cx, step);
            super::eap_radius::sync(sa, cx, false);
            // Pending: the RADIUS server has it; the response waits (task/eap_radius.rs).
            reply.unwrap_or_else(|| super::eap_radius::defer(sa))
        }
        Err(_) => {
            // Out of order, a wrong Identifier, malformed: dropped (RFC 3748 4.1), the
            // outstanding Request again.
            let again = eap(st.last_sent.clone());
            sa.stats_mut().eap_out_of_order += 1;
            Reply::with(alloc::vec![again])
        }
    }
}

/// What the peer gets for a step of the authenticator: the next EAP Request, EAP-Success
/// (the MSK kept for its AUTH), or the refusal with EAP-Failure; None while the RADIUS
/// server has the conversation ([`Step::Pending`]).
pub(super) fn step_reply(sa: &mut IkeSa, cx: &mut Cx, step: Step) -> Option<Reply> {
    match step {
        Step::Send(req) => {
            if let Some(st) = sa.eap_mut() {
                st.last_sent = req.clone();
            }
            Some(Reply::with(alloc::vec![eap(req)]))
        }
        Step::Success { msk, eap: success } => {
            if let Some(st) = sa.eap_mut() {
                st.msk = Some(msk);
                st.last_sent = success.clone();
            }
            Some(Reply::with(alloc::vec![eap(success)]))
        }
        Step::Failure { reason, eap: failure } => Some(refuse(sa, cx, Refusal::Eap(reason), Some(failure))),
        Step::Pending => None,
    }
}

/// An INFORMATIONAL request with AUTHENTICATION_FAILED while the conversation runs: the
/// client ended it (strongSwan's does so on an MSCHAPv2 Failure-Request instead of sending
/// the Failure-Response; RFC 7296 2.21.2 lets the initiator report an authentication failure
/// in a separate INFORMATIONAL exchange). Answered empty; the SA goes, with the reason the
/// method knows (wrong password, unknown user) in the event.
pub(crate) fn informational(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload]) -> Option<Reply> {
    let st = sa.eap()?;
    ps.notify(kind::AUTHENTICATION_FAILED)?;
    let why = st.auth.pending_failure().map_or(Refusal::EapAbandoned, Refusal::Eap);
    let mut r = refuse(sa, cx, why, None);
    r.payloads.clear();
    Some(r)
}

/// The EAP method a responder's connection runs, in swanctl's words, for `ipsec ike list`:
/// `eap-mschapv2` here, `eap-tls` here, `eap-radius` passed to a RADIUS server.
pub(crate) fn method_word(conn: &crate::config::Connection) -> &'static str {
    match &conn.remote_auth {
        RemoteAuth::Eap { backend, .. } => backend.method_name(),
        _ => "eap",
    }
}

/// The initiator's AUTH made with the MSK: checked, ours made the same way, then the child
/// of the first request (2.16).
fn finish(sa: &mut IkeSa, cx: &mut Cx, peer_auth: &crate::auth::AuthPayload, rng: &mut impl CryptoRngCore) -> Reply {
    let Some(st) = sa.take_eap() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let Some(msk) = st.msk.as_ref() else {
        return refuse(sa, cx, Refusal::EapProtocol, None);
    };
    // The peer's AUTH checked and ours made while the handshake is borrowed (the state
    // changes only in ike_up, ike_sa/state.rs).
    let made = {
        let State::HalfOpen { hs, crypto } = sa.state() else {
            return Reply::notify(kind::INVALID_SYNTAX);
        };
        let signed_i = Signed {
            prf: crypto.suite.prf,
            message: &hs.init_req,
            nonce: &hs.nr,
            sk_p: &crypto.keys.sk_pi,
            id_body: &st.idi_body,
            int_auth: &st.int_auth,
        };
        verify_with_msk(msk, &signed_i, peer_auth).then(|| {
            let idr = sa.conn(cx.cfg).local_id.to_body();
            let signed_r = Signed {
                prf: crypto.suite.prf,
                message: &hs.init_resp,
                nonce: &hs.ni,
                sk_p: &crypto.keys.sk_pr,
                id_body: &idr,
                int_auth: &st.int_auth,
            };
            (
                auth_with_msk(msk, &signed_r),
                crypto.suite.prf,
                crypto.keys.sk_d.clone(),
            )
        })
    };
    let Some((our_auth, prf, sk_d)) = made else {
        return refuse(sa, cx, Refusal::EapAuth, None);
    };
    // The EAP identity (EAP-TLS: the certificate's) is the client's identity from here on
    // (leases, caps, `ike list`).
    let remote_id = match peer_identity(&st.auth) {
        Some(i) => i,
        None => st
            .first
            .id_i()
            .map(|(i, _)| i.clone())
            .unwrap_or(Identity::KeyId(Vec::new())),
    };
    let method = method_word(sa.conn(cx.cfg));
    sa.set_eap_method(method);
    let first = &st.first;
    // The uniqueness policy and the cap per identity, by the EAP identity (as for any
    // IKE_AUTH, task/ike_auth.rs).
    let peers = cx.peers_of.map_or(0, |n| n(&remote_id));
    let replacing = match super::config_payload::unique(sa.conn(cx.cfg), first, peers) {
        Ok(r) => r,
        Err(why) => return refuse(sa, cx, why, None),
    };
    // The first request's CFG_REQUEST answered from the pools, the lease filed under the
    // EAP identity (3.15.4), before the child whose `dynamic` selectors become the lease.
    let cp = super::config_payload::respond(sa, cx, &remote_id, first, replacing);
    // 2.16: AUTH, SAr2, TSi, TSr (IDr and CERT went in the first response).
    let resp = alloc::vec![Payload::Auth(our_auth)];
    if replacing {
        let delete = super::config_payload::replace_tells_the_old(sa.conn(cx.cfg));
        sa.effect(EndpointEvent::InitialContact { delete });
    }
    super::ike_auth::establish_with_child(sa, cx, first, cp, resp, remote_id, (prf, &sk_d), rng)
}

/// The initiator's EAP conversation (carried by the IKE_AUTH task between its rounds).
pub(crate) struct PeerRound {
    peer: Peer,
    /// The first IKE_AUTH request's message ID (IntAuth, RFC 9242 3.3.2).
    first_id: u32,
    /// The responder's identity and IDr body from the first response.
    idr: Identity,
    idr_body: Vec<u8>,
    /// What the next request carries: an EAP Response, or our AUTH made with the MSK.
    send: Vec<Payload>,
    /// After EAP-Success: the MSK (our AUTH is out; the responder's is checked with it).
    msk: Option<Msk>,
    rounds: u8,
}

/// The next request of the conversation.
pub(crate) fn build_round(
    round: &PeerRound,
    sa: &mut IkeSa,
    id: u32,
    rng: &mut impl CryptoRngCore,
) -> Result<Vec<u8>, crate::Error> {
    sa.seal(ExchangeType::IkeAuth, false, id, &round.send, rng)
}

/// The initiator refused the responder (or the conversation): the event, the SA gone.
fn give_up(sa: &mut IkeSa, cx: &mut Cx, local: bool, why: Option<Refusal>) -> Next {
    cx.out.event(Event::AuthFailed {
        conn: sa.conn_name(cx.cfg),
        local,
        reason: why,
    });
    if local {
        sa.stats_mut().eap_failures += 1;
    }
    sa.kill(cx, DownReason::AuthFailed);
    Next::Done
}

/// A response to one of our IKE_AUTH requests of an EAP connection.
pub(crate) fn process_response(
    task: IkeAuth,
    sa: &mut IkeSa,
    cx: &mut Cx,
    ps: &[Payload],
    rng: &mut impl CryptoRngCore,
) -> Next {
    if ps.notify(kind::AUTHENTICATION_FAILED).is_some() {
        return give_up(sa, cx, false, None);
    }
    let IkeAuth { child, eap: round } = task;
    let mut round = match round {
        Some(r) => *r,
        None => match first_response(sa, cx, ps) {
            Ok(r) => r,
            Err(next) => return next,
        },
    };
    if round.msk.is_some() {
        return last_response(round, child, sa, cx, ps, rng);
    }
    let Some(msg) = eap_payload(ps) else {
        let err = ps.error_notify().map_or(kind::INVALID_SYNTAX, |n| n.kind);
        sa.kill(cx, DownReason::PeerError(err));
        return Next::Done;
    };
    round.rounds = round.rounds.saturating_add(1);
    if round.rounds > MAX_EAP_ROUNDS {
        return give_up(sa, cx, true, Some(Refusal::EapProtocol));
    }
    match round.peer.handle(msg, rng) {
        Ok(PeerStep::Send(resp)) => round.send = alloc::vec![eap(resp)],
        Ok(PeerStep::Success(msk)) => {
            let State::AuthSent { hs, crypto } = sa.state() else {
                return Next::Done;
            };
            let conn = sa.conn(cx.cfg);
            let idi = conn.local_id.to_body();
            let int_auth = hs.int.octets(round.first_id);
            let signed = Signed {
                prf: crypto.suite.prf,
                message: &hs.init_req,
                nonce: &hs.nr,
                sk_p: &crypto.keys.sk_pi,
                id_body: &idi,
                int_auth: &int_auth,
            };
            round.send = alloc::vec![Payload::Auth(auth_with_msk(&msk, &signed))];
            round.msk = Some(msk);
        }
        Ok(PeerStep::Failure) => return give_up(sa, cx, false, None),
        Err(_) => return give_up(sa, cx, true, Some(Refusal::EapProtocol)),
    }
    Next::Again(Box::new(Task::IkeAuth(IkeAuth {
        child,
        eap: Some(Box::new(round)),
    })))
}

/// The first response: IDr, CERT, the responder's AUTH (its signature, checked as for any
/// connection), and the first EAP Request.
fn first_response(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload]) -> Result<PeerRound, Next> {
    let (Some((idr, idr_body)), Some(auth), Some(_)) = (ps.id_r(), ps.auth(), eap_payload(ps)) else {
        let err = ps.error_notify().map_or(kind::INVALID_SYNTAX, |n| n.kind);
        sa.kill(cx, DownReason::PeerError(err));
        return Err(Next::Done);
    };
    let State::AuthSent { hs, crypto } = sa.state() else {
        return Err(Next::Done);
    };
    let conn = sa.conn(cx.cfg);
    let first_id = sa.last_request_id();
    let checked = super::ike_auth::check_responder_auth(sa, cx, hs, crypto, (idr, idr_body), auth, ps);
    if let Err(why) = checked {
        return Err(give_up(sa, cx, true, Some(why)));
    }
    let LocalAuth::Eap { identity, password } = &conn.local_auth else {
        return Err(Next::Done);
    };
    let peer = core::str::from_utf8(password.expose())
        .ok()
        .and_then(|pw| Peer::new(identity, pw).ok());
    let Some(peer) = peer else {
        return Err(give_up(sa, cx, true, Some(Refusal::EapProtocol)));
    };
    Ok(PeerRound {
        peer,
        first_id,
        idr: idr.clone(),
        idr_body: idr_body.clone(),
        send: Vec::new(),
        msk: None,
        rounds: 1,
    })
}

/// The last response: the responder's AUTH made with the MSK, and our first child.
fn last_response(
    round: PeerRound,
    child: Option<crate::child::Offer>,
    sa: &mut IkeSa,
    cx: &mut Cx,
    ps: &[Payload],
    rng: &mut impl CryptoRngCore,
) -> Next {
    let Some(auth) = ps.auth() else {
        let err = ps.error_notify().map_or(kind::INVALID_SYNTAX, |n| n.kind);
        sa.kill(cx, DownReason::PeerError(err));
        return Next::Done;
    };
    let ok = {
        let State::AuthSent { hs, crypto } = sa.state() else {
            return Next::Done;
        };
        let int_auth = hs.int.octets(round.first_id);
        let signed = Signed {
            prf: crypto.suite.prf,
            message: &hs.init_resp,
            nonce: &hs.ni,
            sk_p: &crypto.keys.sk_pr,
            id_body: &round.idr_body,
            int_auth: &int_auth,
        };
        round.msk.as_ref().is_some_and(|m| verify_with_msk(m, &signed, auth))
    };
    if !ok {
        return give_up(sa, cx, true, Some(Refusal::EapAuth));
    }
    let (prf, sk_d) = match sa.state() {
        State::AuthSent { crypto, .. } => (crypto.suite.prf, crypto.keys.sk_d.clone()),
        _ => return Next::Done,
    };
    let Some(hs) = ike_up(sa, cx, round.idr) else {
        return Next::Done;
    };
    if !super::config_payload::process_reply(sa, cx, ps) {
        // Virtual addresses asked for and none given (as task/ike_auth.rs).
        sa.queue_task(cx, Task::IkeDelete, rng);
        return Next::Done;
    }
    let Some(offer) = child else { return Next::Done };
    let conn = sa.conn(cx.cfg);
    match offer.accept(conn, ps) {
        Ok((a, _)) => {
            let keys = keymat(prf, &sk_d, None, &hs.ni, &hs.nr, &a.suite);
            child_up(sa, cx, &a, &keys, None);
        }
        Err(r) => {
            child_refused(sa, cx, Some(offer.cfg), r);
            if ps.sa().is_some() && ps.error_notify().is_none() {
                sa.queue_task(cx, Task::ChildDelete(ChildDelete { spi_in: offer.spi_in }), rng);
            }
        }
    }
    Next::Done
}

#[cfg(test)]
mod tests {
    //! Out-of-order and malformed EAP inside the encryption (what the integration tests in
    //! tests/eap.rs cannot forge): the outstanding EAP Request again, counted, the SA kept,
    //! and the conversation completes after; AUTH before EAP-Success refused.
    use super::*;
    use crate::config::Psk;
    use crate::endpoint::Endpoint;
    use crate::event::Transmit;
    use alloc::sync::Arc;
    use core::time::Duration;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    use crate::test_util::{Alice, EAP_NOW_UNIX as NOW_UNIX};

    fn endpoints() -> (Endpoint, Endpoint) {
        crate::test_util::eap_endpoints("pw", ipsec_eap::server::Backend::Local, Arc::new(Alice))
    }

    /// Moves datagrams until none are left; `drop_a(n)` drops A's n-th datagram (0-based).
    fn pump(
        a: &mut Endpoint,
        b: &mut Endpoint,
        now: Duration,
        rng: &mut ChaCha20Rng,
        drop_a: &mut dyn FnMut(usize) -> bool,
        sent: &mut usize,
    ) {
        for _ in 0..100 {
            let mut moved = false;
            while let Some(Transmit { local, remote, payload }) = a.poll_transmit() {
                moved = true;
                *sent += 1;
                if !drop_a(*sent - 1) {
                    let _ = b.handle_datagram(now, remote, local, &payload, rng);
                }
            }
            while let Some(Transmit { local, remote, payload }) = b.poll_transmit() {
                moved = true;
                let _ = a.handle_datagram(now, remote, local, &payload, rng);
            }
            if !moved {
                return;
            }
        }
    }

    fn events(e: &mut Endpoint) -> Vec<Event> {
        core::iter::from_fn(|| e.poll_event()).collect()
    }

    #[test]
    fn out_of_order_eap_gets_the_outstanding_request_again_and_the_sa_lives() {
        let (mut a, mut b) = endpoints();
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let mut now = Duration::from_secs(10);
        let mut sent = 0;
        a.initiate(now, "a", &mut rng).unwrap();
        // A's datagrams: 0 IKE_SA_INIT, 1 first IKE_AUTH, 2 EAP-Identity Response: lost.
        pump(&mut a, &mut b, now, &mut rng, &mut |n| n == 2, &mut sent);
        let spi = b.spis()[0];
        let bad = |st: &EapState| {
            // The Identity Response with the next Identifier: not the outstanding one.
            let id = st.last_sent[1].wrapping_add(1);
            alloc::vec![2u8, id, 0, 10, 1, b'a', b'l', b'i', b'c', b'e']
        };
        for forged in 0..3 {
            b.with_sa(spi, now, |sa, cx| {
                let outstanding = sa.eap().unwrap().last_sent.clone();
                let ps = match forged {
                    0 => alloc::vec![eap(bad(sa.eap().unwrap()))],
                    1 => alloc::vec![eap(alloc::vec![2, 0, 0])],
                    _ => alloc::vec![Payload::Notify(Notify::ike(kind::INITIAL_CONTACT, &[]))],
                };
                let r = respond(sa, cx, &ps, &mut ChaCha20Rng::seed_from_u64(1)).unwrap();
                assert_eq!(r.payloads, alloc::vec![eap(outstanding)], "case {forged}");
                assert!(r.then.is_none(), "case {forged}: the SA must live");
                assert!(sa.eap().is_some() && matches!(sa.state(), State::HalfOpen { .. }));
                assert_eq!(sa.stats().eap_out_of_order, forged + 1);
            })
            .unwrap();
        }
        // A retransmits its lost Identity Response: the conversation goes on to the end.
        while events(&mut b).iter().all(|e| !matches!(e, Event::IkeUp { .. })) {
            now = a.poll_timeout().unwrap().max(now);
            assert!(
                now < Duration::from_secs(40),
                "not established after the retransmission"
            );
            a.handle_timeout(now, &mut rng);
            pump(&mut a, &mut b, now, &mut rng, &mut |_| false, &mut sent);
        }
        assert_eq!(b.status(now)[0].state, "established");
        assert_eq!(b.totals().eap_out_of_order, 3);
        assert_eq!(b.totals().eap_failures, 0);
    }

    /// strongSwan's client answers the Failure-Request of a wrong password with an
    /// INFORMATIONAL carrying AUTHENTICATION_FAILED: the SA goes with the real reason.
    #[test]
    fn the_clients_authentication_failed_informational_ends_the_conversation() {
        let (a0, mut b) = endpoints();
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let now = Duration::from_secs(10);
        let mut sent = 0;
        // A with the wrong password; its Failure-Response (datagram 4) is lost.
        let mut cfg = a0.config().clone();
        cfg.connections[0].local_auth = LocalAuth::Eap {
            identity: b"alice".to_vec(),
            password: Psk::new(b"not pw"),
        };
        let mut a = Endpoint::new(cfg);
        a.set_unix_time(Duration::ZERO, NOW_UNIX);
        a.initiate(now, "a", &mut rng).unwrap();
        pump(&mut a, &mut b, now, &mut rng, &mut |n| n == 4, &mut sent);
        let spi = b.spis()[0];
        b.with_sa(spi, now, |sa, cx| {
            assert!(sa.eap().is_some());
            let ps = [Payload::Notify(Notify::ike(kind::AUTHENTICATION_FAILED, &[]))];
            let r = sa.answer(
                cx,
                crate::header::ExchangeType::Informational,
                &ps,
                &mut ChaCha20Rng::seed_from_u64(1),
            );
            assert_eq!(r.then, Some(DownReason::AuthFailed));
            assert!(r.payloads.is_empty() && sa.eap().is_none());
        })
        .unwrap();
        let ev = events(&mut b);
        assert!(
            ev.iter().any(|e| matches!(
                e,
                Event::AuthFailed {
                    local: true,
                    reason: Some(Refusal::Eap(FailureReason::WrongPassword)),
                    ..
                }
            )),
            "{ev:?}"
        );
    }

    /// B with EAP-TLS (the test PKI of crates/eap) or EAP-MSCHAPv2, `eap_only` as given,
    /// after IKE_SA_INIT with A (A's first IKE_AUTH lost); B's answer to a first IKE_AUTH
    /// request with or without EAP_ONLY_AUTHENTICATION.
    fn first_response(tls: bool, allow: bool, asked: bool) -> (Vec<Payload>, u64) {
        extern crate std;
        use ipsec_eap::tls::rustls::pki_types::pem::PemObject;
        use ipsec_eap::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use ipsec_eap::tls::{ServerConfig, Versions};
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../eap/tests/data/tls/");
        let read = |n: &str| std::fs::read(alloc::format!("{dir}{n}")).unwrap();
        let backend = if tls {
            let cert = CertificateDer::from_pem_slice(&read("server.pem")).unwrap().to_vec();
            let ca = CertificateDer::from_pem_slice(&read("ca.pem")).unwrap().to_vec();
            let key = PrivateKeyDer::from_pem_slice(&read("server.key")).unwrap();
            ipsec_eap::server::Backend::Tls(ServerConfig::new(&[cert], key, &[ca], &[], Versions::Both).unwrap())
        } else {
            ipsec_eap::server::Backend::Local
        };
        let (mut a, b0) = crate::test_util::eap_endpoints("pw", backend, Arc::new(Alice));
        let mut cfg = b0.config().clone();
        cfg.connections[0].eap_only = allow;
        let mut b = Endpoint::new(cfg);
        b.set_unix_time(Duration::ZERO, NOW_UNIX);
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let now = Duration::from_secs(10);
        a.initiate(now, "a", &mut rng).unwrap();
        // A's datagrams: 0 IKE_SA_INIT, 1 the first IKE_AUTH: lost (B answers ours).
        pump(&mut a, &mut b, now, &mut rng, &mut |n| n >= 1, &mut 0);
        let spi = b.spis()[0];
        let alice = Identity::from_str_config("alice@example.org").unwrap();
        let mut ps = alloc::vec![Payload::IdI(alice.clone(), alice.to_body())];
        if asked {
            ps.push(Payload::Notify(Notify::ike(kind::EAP_ONLY_AUTHENTICATION, &[])));
        }
        b.with_sa(spi, now, |sa, cx| {
            let r = respond(sa, cx, &ps, &mut ChaCha20Rng::seed_from_u64(1)).unwrap();
            assert!(r.then.is_none(), "{:?}", r.payloads);
            assert!(sa.eap().is_some(), "the conversation must run");
            (r.payloads, sa.stats().eap_only)
        })
        .unwrap()
    }

    fn has_auth(ps: &[Payload]) -> bool {
        ps.iter().any(|p| matches!(p, Payload::Auth(_)))
    }
    fn has_cert(ps: &[Payload]) -> bool {
        ps.iter().any(|p| matches!(p, Payload::Cert(_)))
    }

    /// RFC 5998 3: the client asks, the connection allows it, EAP-TLS (section 4's list):
    /// IDr and the EAP Request only, counted.
    #[test]
    fn eap_only_with_eap_tls_leaves_out_cert_and_auth() {
        let (ps, n) = first_response(true, true, true);
        assert!(!has_auth(&ps) && !has_cert(&ps), "{ps:?}");
        assert!(matches!(ps[0], Payload::IdR(..)) && eap_payload(&ps).is_some());
        assert_eq!((ps.len(), n), (2, 1));
    }

    /// Not asked, or not allowed by the connection: the certificate and signature as usual.
    #[test]
    fn eap_only_not_asked_or_not_allowed_signs_as_usual() {
        for (allow, asked) in [(true, false), (false, true)] {
            let (ps, n) = first_response(true, allow, asked);
            assert!(has_auth(&ps) && has_cert(&ps), "allow {allow} asked {asked}: {ps:?}");
            assert_eq!(n, 0);
        }
    }

    /// EAP-MSCHAPv2 is not a safe method (RFC 5998 4): the request is ignored and the
    /// server proves itself with its certificate (RFC 7296 2.16), the conversation goes on.
    #[test]
    fn eap_only_with_mschapv2_falls_back_to_the_certificate() {
        let (ps, n) = first_response(false, true, true);
        assert!(has_auth(&ps) && has_cert(&ps), "{ps:?}");
        assert_eq!(n, 0);
    }

    #[test]
    fn auth_before_eap_success_is_refused() {
        let (mut a, mut b) = endpoints();
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        let now = Duration::from_secs(10);
        let mut sent = 0;
        a.initiate(now, "a", &mut rng).unwrap();
        pump(&mut a, &mut b, now, &mut rng, &mut |n| n == 2, &mut sent);
        let spi = b.spis()[0];
        b.with_sa(spi, now, |sa, cx| {
            let auth = crate::auth::AuthPayload {
                method: crate::auth::method::SHARED_KEY,
                data: alloc::vec![0; 32],
            };
            let r = respond(sa, cx, &[Payload::Auth(auth)], &mut ChaCha20Rng::seed_from_u64(1)).unwrap();
            assert_eq!(r.then, Some(DownReason::AuthFailed));
            assert!(r
                .payloads
                .iter()
                .any(|p| matches!(p, Payload::Notify(n) if n.kind == kind::AUTHENTICATION_FAILED)));
            assert!(sa.eap().is_none());
        })
        .unwrap();
        let ev = events(&mut b);
        assert!(ev.iter().any(|e| matches!(
            e,
            Event::AuthFailed {
                reason: Some(Refusal::EapProtocol),
                ..
            }
        )));
    }
}
