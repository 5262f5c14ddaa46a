//! Rekeying a child SA pair (RFC 7296 1.3.3, 2.8), make before break: a CREATE_CHILD_SA
//! with N(REKEY_SA) naming the old pair makes a new pair with the same selectors and fresh
//! keys (a new key exchange if the child's proposals have one); the initiator of the rekey
//! switches its outbound traffic to the new pair when the response arrives and then deletes
//! the old pair (2.8: the initiator deletes); the responder keeps sending on the old pair
//! until that Delete comes (strongSwan's responders do the same), so no packet goes to an SA
//! the other side does not have yet.
//!
//! Collisions (2.8.1): when both sides rekey the same pair at once, both exchanges complete;
//! the new pair made by the exchange with the lowest of the four nonces is redundant and
//! its initiator deletes it, and the other exchange's initiator deletes the old pair.
use crate::child::Offer;
use crate::event::DownReason;
use crate::header::ExchangeType;
use crate::ike_sa::{ChildState, Cx, IkeSa};
use crate::message::{Find, Payload};
use crate::notify::{kind, Notify};
use crate::sa::protocol;
use crate::task::child_create::{make_child, with_nonce, Answer, ChildCreate};
use crate::task::ike_auth::{child_refused, child_up};
use crate::task::{child_delete::ChildDelete, lifetimes, Next, Reply, Task};
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// Our rekey of the pair we receive on `old_spi_in`: a new child's request
/// ([`ChildCreate`]) with N(REKEY_SA).
pub(crate) struct ChildRekey {
    pub old_spi_in: u32,
    pub create: ChildCreate,
}

/// The peer's rekey of a pair we are rekeying too, as we answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerRekey {
    /// The new pair it made (our inbound SPI).
    pub new_spi_in: u32,
    /// The lowest of its two nonces.
    pub min_nonce: Vec<u8>,
}

impl ChildRekey {
    /// A rekey of our child `old_spi_in` (None if there is no such installed child).
    pub fn new(sa: &IkeSa, cfg: &crate::config::Config, old_spi_in: u32, rng: &mut impl CryptoRngCore) -> Option<Self> {
        // Only an installed pair: one being rekeyed, replaced or deleted is not rekeyed again.
        let old = sa
            .children()
            .iter()
            .find(|c| c.spi_in() == old_spi_in && c.state == ChildState::Installed)?;
        let offer = Offer::new(
            sa.conn(cfg),
            old.cfg,
            old.info.local_ts.clone(),
            old.info.remote_ts.clone(),
            true,
            rng,
        );
        Some(ChildRekey {
            old_spi_in,
            create: ChildCreate::new(offer, rng),
        })
    }

    /// N(REKEY_SA) with our inbound SPI of the old pair, SA, Ni, [KE], TSi, TSr.
    pub fn build(
        &mut self,
        sa: &mut IkeSa,
        cx: &mut Cx,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        if let Some(c) = sa.child_mut(self.old_spi_in) {
            if c.state == ChildState::Installed {
                c.state = ChildState::Rekeying { peer: None };
            }
        }
        let mut p = alloc::vec![Payload::Notify(Notify {
            protocol: protocol::ESP,
            spi: self.old_spi_in.to_be_bytes().to_vec(),
            kind: kind::REKEY_SA,
            data: Vec::new(),
        })];
        p.extend(with_nonce(self.create.offer.payloads(sa.conn(cx.cfg)), &self.create.ni));
        sa.seal(ExchangeType::CreateChildSa, false, id, &p, rng)
    }

    pub fn process(mut self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
        let old = self.old_spi_in;
        if sa.child(old).is_none() {
            // Gone meanwhile (the peer deleted it): what we made is not wanted.
            if ps.sa().is_some() && ps.error_notify().is_none() {
                self.create.delete_made(sa, cx, rng);
            }
            return Next::Done;
        }
        match self.create.answer(sa, cx, ps, rng) {
            Answer::Followup(a, shared, nr) => {
                let todo = crate::task::followup_ke::todo(&a.addke);
                let goal = crate::task::followup_ke::Goal::Child {
                    agreed: a,
                    ni: self.create.ni.clone(),
                    nr,
                    rekeys: Some(old),
                };
                match crate::task::followup_ke::FollowupKe::start(ps, shared, todo, goal) {
                    Some(f) => return Next::Again(alloc::boxed::Box::new(Task::FollowupKe(f))),
                    None => {
                        // No link for the follow-up (RFC 9370 2.2.4): nothing made; later.
                        sa.stats_mut().additional_ke_refused += 1;
                        if let Some(c) = sa.child_mut(old) {
                            c.state = ChildState::Installed;
                        }
                        lifetimes::retry_rekey_later(sa, cx, old, rng);
                    }
                }
            }
            Answer::Agreed(a, keys, ours_min) => {
                let peer = sa.child(old).and_then(|c| match &c.state {
                    ChildState::Rekeying { peer } => peer.clone(),
                    _ => None,
                });
                child_up(sa, cx, &a, &keys, Some(old));
                match peer {
                    // A collision (2.8.1) that our exchange lost: ours is redundant, the peer
                    // deletes the old pair.
                    Some(p) if ours_min < p.min_nonce => {
                        sa.queue_task(cx, Task::ChildDelete(ChildDelete { spi_in: a.spi_in }), rng);
                        mark_rekeyed(sa, cx, old, false);
                    }
                    _ => {
                        mark_rekeyed(sa, cx, old, true);
                        sa.queue_task(cx, Task::ChildDelete(ChildDelete { spi_in: old }), rng);
                    }
                }
            }
            Answer::Retry => return Next::Again(alloc::boxed::Box::new(Task::ChildRekey(self))),
            Answer::Refused(r) => {
                if let Some(c) = sa.child_mut(old) {
                    if c.state != ChildState::Deleting {
                        c.state = ChildState::Installed;
                    }
                }
                match ps.error_notify().map(|n| n.kind) {
                    // The peer no longer has it (2.25): it is gone.
                    Some(kind::CHILD_SA_NOT_FOUND) => sa.child_down(cx, old, DownReason::Peer),
                    // The peer is busy with it (a collision, 2.25): again a little later.
                    Some(kind::TEMPORARY_FAILURE) => lifetimes::retry_rekey_later(sa, cx, old, rng),
                    // Refused (reported already when the refusal is ours): again later.
                    other => {
                        if other.is_some() {
                            child_refused(sa, cx, Some(self.create.offer.cfg), r);
                        }
                        lifetimes::retry_rekey_later(sa, cx, old, rng);
                    }
                }
            }
        }
        Next::Done
    }
}

/// Our rekey of `old` made its successor after additional key exchanges (RFC 9370
/// 2.2.4): the old pair is replaced and we delete it (no collision handling there: the
/// peer's own rekey of it, if any, completes on its own).
pub(crate) fn replaced(sa: &mut IkeSa, cx: &mut Cx, old: u32, rng: &mut impl CryptoRngCore) {
    mark_rekeyed(sa, cx, old, true);
    sa.queue_task(cx, Task::ChildDelete(ChildDelete { spi_in: old }), rng);
}

/// The old pair is replaced: it stays installed until its Delete (ours when `we_delete`).
pub(crate) fn mark_rekeyed(sa: &mut IkeSa, cx: &Cx, old_spi_in: u32, we_delete: bool) {
    if let Some(c) = sa.child_mut(old_spi_in) {
        c.state = ChildState::Rekeyed {
            until: cx.now + lifetimes::REKEYED_GRACE,
            we_delete,
        };
        c.timers.rekey_at = None;
    }
}

/// The responder's answer to a rekey of the pair named in N(REKEY_SA).
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], ni: &[u8], rng: &mut impl CryptoRngCore) -> Reply {
    let Some(n) = ps.notify(kind::REKEY_SA) else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    // The peer names the SPI it receives on: our outbound one.
    let spi = <[u8; 4]>::try_from(n.spi.as_slice()).ok().map(u32::from_be_bytes);
    let Some(old) = spi.and_then(|s| sa.child_by_spi_out(s)) else {
        return Reply::with(alloc::vec![Payload::Notify(Notify {
            protocol: protocol::ESP,
            spi: n.spi.clone(),
            kind: kind::CHILD_SA_NOT_FOUND,
            data: Vec::new(),
        })]);
    };
    let (old_spi_in, old_cfg, old_state) = (old.spi_in(), old.cfg, old.state.clone());
    // One we are deleting, or already replaced, is not rekeyed again (2.25).
    if matches!(old_state, ChildState::Deleting | ChildState::Rekeyed { .. }) {
        return Reply::notify(kind::TEMPORARY_FAILURE);
    }
    // Rekeys that never delete the pairs they replace do not grow the SA without bound
    // (issue #39: 1,000 chained rekeys made 1,001 children): the replaced pairs count.
    if sa.children().len() >= crate::limits::MAX_CHILD_SAS_WITH_REPLACED {
        return Reply::notify(kind::NO_ADDITIONAL_SAS);
    }
    let (payloads, new_spi_in, min_nonce, pending) = match make_child(sa, cx, ps, ni, Some((old_spi_in, old_cfg)), rng)
    {
        Ok(x) => x,
        Err(r) => return r,
    };
    if pending {
        // Replaced once its additional key exchanges ran (followup_ke).
        return Reply::with(payloads);
    }
    match old_state {
        // Both sides rekey it (2.8.1): remember the peer's exchange for when ours completes.
        ChildState::Rekeying { .. } => {
            let peer = PeerRekey { new_spi_in, min_nonce };
            if let Some(c) = sa.child_mut(old_spi_in) {
                c.state = ChildState::Rekeying { peer: Some(peer) };
            }
        }
        _ => mark_rekeyed(sa, cx, old_spi_in, false),
    }
    Reply::with(payloads)
}
