//! Deleting a child SA pair (RFC 7296 1.4.1): an INFORMATIONAL with a Delete of our inbound
//! SPI; the peer answers with the Delete of its half. Both roles: [`ChildDelete`] ours,
//! [`respond`] the peer's.
use crate::delete::Delete;
use crate::event::DownReason;
use crate::header::ExchangeType;
use crate::ike_sa::{ChildState, Cx, IkeSa};
use crate::message::Payload;
use crate::task::{Next, Reply, Task};
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// Our Delete of the child we receive on `spi_in`.
pub(crate) struct ChildDelete {
    pub spi_in: u32,
}

impl ChildDelete {
    pub fn build(&self, sa: &mut IkeSa, id: u32, rng: &mut impl CryptoRngCore) -> Result<Vec<u8>, crate::Error> {
        if let Some(c) = sa.child_mut(self.spi_in) {
            c.state = ChildState::Deleting;
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

/// The peer's Deletes of child SAs (in `ps`): answered with the Deletes of their pairs
/// (1.4.1), except those we are deleting ourselves.
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload]) -> Reply {
    let mut our_spis = Vec::new();
    for p in ps {
        if let Payload::Delete(Delete::Esp(spis)) = p {
            for s in spis {
                // The peer names the SPIs it receives on: our outbound ones.
                if let Some(c) = sa.child_by_spi_out(*s) {
                    our_spis.push(c.spi_in());
                }
            }
        }
    }
    let mut resp = Vec::new();
    if !our_spis.is_empty() && sa.is_established() {
        // Our half of each pair, unless we are deleting it ourselves (1.4.1).
        let answer: Vec<u32> = our_spis.iter().copied().filter(|s| !deleting(sa, *s)).collect();
        for s in &our_spis {
            sa.child_down(cx, *s, DownReason::Peer);
        }
        if !answer.is_empty() {
            resp.push(Payload::Delete(Delete::Esp(answer)));
        }
    }
    Reply::with(resp)
}

/// Whether our own Delete of the child is under way.
fn deleting(sa: &IkeSa, spi_in: u32) -> bool {
    sa.child(spi_in).is_some_and(|c| c.state == ChildState::Deleting)
        || sa
            .active_task()
            .is_some_and(|t| matches!(t, Task::ChildDelete(d) if d.spi_in == spi_in))
}
