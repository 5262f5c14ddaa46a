//! Deleting a child SA pair (RFC 7296 1.4.1): an INFORMATIONAL with a Delete of our inbound
//! SPI; the peer answers with the Delete of its half. The responder's side is in
//! [`super::informational`].
use crate::delete::Delete;
use crate::event::DownReason;
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa};
use crate::message::Payload;
use crate::task::Next;
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// Our Delete of the child we receive on `spi_in`.
pub(crate) struct ChildDelete {
    pub spi_in: u32,
}

impl ChildDelete {
    pub fn build(&self, sa: &mut IkeSa, id: u32, rng: &mut impl CryptoRngCore) -> Result<Vec<u8>, crate::Error> {
        if let Some(c) = sa.children.iter_mut().find(|c| c.spi_in() == self.spi_in) {
            c.state = crate::ike_sa::ChildState::Deleting;
        }
        sa.seal(
            ExchangeType::Informational,
            false,
            id,
            &[Payload::Delete(Delete::Esp(alloc::vec![self.spi_in]))],
            rng,
        )
    }

    pub fn process(self, sa: &mut IkeSa, cx: &mut Cx) -> super::Next {
        sa.child_down(cx, self.spi_in, DownReason::Local);
        Next::Done
    }
}
