//! Deleting the IKE SA (RFC 7296 1.4.1): an INFORMATIONAL with a Delete of the IKE SA, which
//! takes its children with it; the response is empty, and the SA is gone on both sides once
//! it is sent or received. Both roles: [`build`] and [`process`] ours, [`respond`] the peer's;
//! [`tell_and_forget`] ours when the SA is forgotten at once (`unique = replace`).
use crate::delete::Delete;
use crate::event::DownReason;
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa, State};
use crate::message::Payload;
use crate::task::{Next, Reply};
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// Why the SA goes down when its Delete is done: the Delete of an IKE SA that was rekeyed
/// takes no child, they moved (2.18); else `otherwise`.
fn reason(sa: &IkeSa, otherwise: DownReason) -> DownReason {
    if matches!(sa.state(), State::Rekeyed { .. }) {
        DownReason::Rekeyed
    } else {
        otherwise
    }
}

/// Our request.
pub(crate) fn build(sa: &mut IkeSa, id: u32, rng: &mut impl CryptoRngCore) -> Result<Vec<u8>, crate::Error> {
    sa.seal(
        ExchangeType::Informational,
        false,
        id,
        &[Payload::Delete(Delete::Ike)],
        rng,
    )
}

/// Our Delete of the SA sent once, not waited for (the SA is forgotten right after:
/// `unique = replace`, [`crate::task::config_payload::replace_tells_the_old`]). Its message
/// ID is the next one of ours, after a request of ours still outstanding.
pub(crate) fn tell_and_forget(sa: &mut IkeSa, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
    let id = sa.spare_request_id();
    if let Ok(bytes) = build(sa, id, rng) {
        sa.stats_mut().requests_sent += 1;
        sa.send(cx, &bytes);
    }
}

/// The (empty) response to ours: the SA is gone.
pub(crate) fn process(sa: &mut IkeSa, cx: &mut Cx) -> Next {
    let why = reason(sa, DownReason::Local);
    sa.kill(cx, why);
    Next::Done
}

/// The peer's Delete of the IKE SA: answered empty, then the SA is gone.
pub(crate) fn respond(sa: &IkeSa) -> Reply {
    Reply {
        payloads: Vec::new(),
        then: Some(reason(sa, DownReason::Peer)),
    }
}
