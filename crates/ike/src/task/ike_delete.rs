//! Deleting the IKE SA (RFC 7296 1.4.1): an INFORMATIONAL with a Delete of the IKE SA, which
//! takes its children with it; the response is empty. The responder's side is in
//! [`super::informational`].
use crate::delete::Delete;
use crate::header::ExchangeType;
use crate::ike_sa::IkeSa;
use crate::message::Payload;
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

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
