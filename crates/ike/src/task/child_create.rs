//! CREATE_CHILD_SA (RFC 7296 1.3): further child SAs, child rekeying (1.3.3) and IKE SA
//! rekeying (1.3.2). For now a request is answered with NO_ADDITIONAL_SAS (1.3: the
//! responder is unwilling to create more), which leaves the IKE SA and its children as
//! they are.
use crate::ike_sa::{Cx, IkeSa};
use crate::message::Payload;
use crate::notify::kind;
use crate::task::Reply;
use rand_core::CryptoRngCore;

/// The responder's answer.
pub(crate) fn respond(sa: &mut IkeSa, _cx: &mut Cx, _ps: &[Payload], _rng: &mut impl CryptoRngCore) -> Reply {
    if !sa.state.is_established() {
        return Reply::notify(kind::INVALID_SYNTAX);
    }
    Reply::notify(kind::NO_ADDITIONAL_SAS)
}
