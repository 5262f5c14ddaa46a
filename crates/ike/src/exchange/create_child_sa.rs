//! CREATE_CHILD_SA (RFC 7296 1.3): part 2 (rekeying, more child SAs). For now a request is
//! answered with NO_ADDITIONAL_SAS (1.3: the responder is unwilling to create more), which
//! leaves the IKE SA and its children as they are.
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa, State};
use crate::message::Payload;
use crate::notify::{kind, Notify};
use rand_core::CryptoRngCore;

impl IkeSa {
    pub(crate) fn on_create_child_request(
        &mut self,
        cx: &mut Cx,
        id: u32,
        _payloads: &[Payload],
        rng: &mut impl CryptoRngCore,
    ) {
        if self.state != State::Established {
            return;
        }
        self.respond(
            cx,
            ExchangeType::CreateChildSa,
            id,
            &[Payload::Notify(Notify::ike(kind::NO_ADDITIONAL_SAS, &[]))],
            rng,
        );
    }
}
