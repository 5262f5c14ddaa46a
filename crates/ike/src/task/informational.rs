//! The responder's side of INFORMATIONAL (RFC 7296 1.4): Deletes of child SAs (answered
//! with the Deletes of their pairs, 1.4.1), of the IKE SA (answered empty, then the SA is
//! gone), and empty requests, the peer's liveness checks (2.4).
use crate::delete::Delete;
use crate::event::DownReason;
use crate::ike_sa::{ChildState, Cx, IkeSa, State};
use crate::message::Payload;
use crate::task::{Reply, Task};
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// The answer to a request.
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], _rng: &mut impl CryptoRngCore) -> Reply {
    // The client gave up its EAP conversation (RFC 7296 2.21.2).
    if let Some(r) = super::ike_auth_eap::informational(sa, cx, ps) {
        return r;
    }
    let mut delete_ike = false;
    let mut our_spis = Vec::new();
    for p in ps {
        match p {
            Payload::Delete(Delete::Ike) => delete_ike = true,
            Payload::Delete(Delete::Esp(spis)) => {
                for s in spis {
                    // The peer names the SPIs it receives on: our outbound ones.
                    if let Some(c) = sa.children.iter().find(|c| c.info.spi_out == *s) {
                        our_spis.push(c.spi_in());
                    }
                }
            }
            _ => {}
        }
    }
    if delete_ike {
        // The Delete of an IKE SA that was rekeyed takes no child: they moved (2.18).
        let why = if matches!(sa.state, State::Rekeyed { .. }) {
            DownReason::Rekeyed
        } else {
            DownReason::Peer
        };
        return Reply {
            payloads: Vec::new(),
            then: Some(why),
        };
    }
    let mut resp = Vec::new();
    if !our_spis.is_empty() && sa.state.is_established() {
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
    sa.children
        .iter()
        .any(|c| c.spi_in() == spi_in && c.state == ChildState::Deleting)
        || sa
            .tasks
            .active
            .as_ref()
            .is_some_and(|a| matches!(&a.task, Task::ChildDelete(d) if d.spi_in == spi_in))
}
