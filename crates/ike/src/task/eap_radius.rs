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
use crate::endpoint::RadiusDropped;
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa};
use alloc::vec::Vec;
use core::time::Duration;
use ipsec_eap::server::{Backend, FailureReason, Step};
use rand_core::CryptoRngCore;

fn is_radius(sa: &IkeSa, cx: &Cx) -> bool {
    matches!(
        &sa.conn(cx.cfg).remote_auth,
        crate::config::RemoteAuth::Eap {
            backend: Backend::Radius(_),
            ..
        }
    )
}

/// Before the authenticator takes an EAP Response: a RADIUS Identifier free on the shared
/// socket for the Access-Request it makes. None free (256 outstanding: the server is not
/// keeping up): refused as if the server were down, counted (`no_identifier`).
pub(crate) fn prepare(sa: &mut IkeSa, cx: &mut Cx) -> Result<(), Reply> {
    if !is_radius(sa, cx) {
        return Ok(());
    }
    match cx.out.radius.free_identifier() {
        Some(id) => {
            if let Some(st) = sa.eap.as_mut() {
                st.auth.use_radius_identifier(id);
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
    let Some(st) = sa.eap.as_mut() else {
        cx.out.radius.forget(spi);
        return;
    };
    cx.out.radius.track(spi, st.auth.radius_identifier());
    while let Some(d) = st.auth.poll_radius_transmit() {
        cx.out.radius.transmit(spi, d, retransmission);
    }
}

/// The request being answered waits for the RADIUS server: no response now.
pub(crate) fn defer(sa: &mut IkeSa) -> Reply {
    // This request's ID: the window moved past it (task/mod.rs, handle_request).
    sa.window.deferred = Some(sa.window.expected.wrapping_sub(1));
    Reply::with(Vec::new())
}

/// When the RADIUS client must retransmit or give up.
pub(crate) fn deadline(sa: &IkeSa) -> Option<Duration> {
    sa.eap.as_ref()?.auth.poll_timeout()
}

/// The RADIUS client's timer: a retransmission, or the server is down (the deferred
/// request answered with EAP-Failure, the SA gone).
pub(crate) fn handle_timeout(sa: &mut IkeSa, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
    let Some(st) = sa.eap.as_mut() else { return };
    if st.auth.poll_timeout().is_none_or(|t| cx.now < t) {
        return;
    }
    match st.auth.handle_timeout(cx.now) {
        Some(step) => answered(sa, cx, step, rng),
        None => sync(sa, cx, true),
    }
}

/// A datagram from the RADIUS server for this SA (the endpoint matched its Identifier).
pub(crate) fn answer(
    sa: &mut IkeSa,
    cx: &mut Cx,
    datagram: &[u8],
    rng: &mut impl CryptoRngCore,
) -> Result<(), RadiusDropped> {
    let Some(st) = sa.eap.as_mut() else {
        return Err(RadiusDropped::Unmatched);
    };
    match st.auth.handle_radius(datagram) {
        Ok(step) => {
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
    let Some(id) = sa.window.deferred.take() else {
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
