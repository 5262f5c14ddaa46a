//! Rekeying the IKE SA (RFC 7296 1.3.2, 2.18): a CREATE_CHILD_SA with an SA payload for
//! protocol IKE (the new SPI of its sender), a nonce and a new key exchange makes a new IKE
//! SA whose SKEYSEED is `prf(SK_d (old), g^ir (new) | Ni | Nr)`; the children move to it
//! (they keep their SPIs and keys: nothing changes in the data plane), its message IDs
//! start at 0, the initiator of the rekey is the new SA's initiator, and that initiator
//! deletes the old IKE SA (2.18), whose Delete takes no child with it any more.
use crate::alg::IkeSuite;
use crate::dh::KeyExchange;
use crate::event::{DownReason, Event, IkeKeyLog, IkeSaInfo, Role};
use crate::header::ExchangeType;
use crate::ike_sa::{ChildState, Crypto, Cx, EndpointEvent, IkeSa};
use crate::message::{Find, Payload};
use crate::notify::kind;
use crate::sa::{accept_ike_answer, choose_ike, protocol, Proposal, SaPayload};
use crate::task::child_create::random_nonce;
use crate::task::{lifetimes, Next, Reply, Task};
use alloc::boxed::Box;
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// Our rekey of this IKE SA.
pub(crate) struct IkeRekey {
    /// Our SPI of the new SA.
    spi: u64,
    kex: KeyExchange,
    ni: Vec<u8>,
    retries: u8,
}

fn new_ike_spi(rng: &mut impl CryptoRngCore) -> u64 {
    loop {
        let s = rng.next_u64();
        if s != 0 {
            return s;
        }
    }
}

impl IkeRekey {
    /// A rekey with the group of the SA's own suite.
    pub fn new(sa: &IkeSa, rng: &mut impl CryptoRngCore) -> Option<Self> {
        let g = sa.crypto()?.suite.dh;
        Some(IkeRekey {
            spi: new_ike_spi(rng),
            kex: KeyExchange::generate(g, rng),
            ni: random_nonce(rng),
            retries: 2,
        })
    }

    /// SA (our proposals, our new SPI), Ni, KE.
    pub fn build(
        &mut self,
        sa: &mut IkeSa,
        cx: &mut Cx,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        let spi = self.spi.to_be_bytes();
        let conn = sa.conn(cx.cfg);
        let proposals = conn
            .ike_proposals
            .iter()
            .enumerate()
            .map(|(i, s)| Proposal::from_spec(i as u8 + 1, protocol::IKE, &spi, s, true))
            .collect();
        let p = alloc::vec![
            Payload::Sa(SaPayload { proposals }),
            Payload::Nonce(self.ni.clone()),
            Payload::Ke(crate::ke::KePayload {
                group: self.kex.group().id(),
                data: self.kex.public().to_vec(),
            }),
        ];
        sa.seal(ExchangeType::CreateChildSa, false, id, &p, rng)
    }

    pub fn process(mut self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
        if let Some(n) = ps.error_notify() {
            let g = <[u8; 2]>::try_from(n.data.as_slice())
                .ok()
                .map(u16::from_be_bytes)
                .and_then(crate::alg::DhGroup::from_id);
            match (n.kind, g) {
                (kind::INVALID_KE_PAYLOAD, Some(g))
                    if self.retries > 0 && sa.conn(cx.cfg).ike_proposals.iter().any(|s| s.dh.contains(&g)) =>
                {
                    self.retries -= 1;
                    self.kex = KeyExchange::generate(g, rng);
                    return Next::Again(alloc::boxed::Box::new(Task::IkeRekey(self)));
                }
                // TEMPORARY_FAILURE (a collision, 2.25) or a refusal: again later.
                _ => {
                    lifetimes::retry_ike_rekey_later(sa, cx, rng);
                    return Next::Done;
                }
            }
        }
        let answer = (ps.sa(), ps.nonce(), ps.ke());
        let (Some(sa_p), Some(nr), Some(ke)) = answer else {
            lifetimes::retry_ike_rekey_later(sa, cx, rng);
            return Next::Done;
        };
        let conn = sa.conn(cx.cfg);
        let suite = accept_ike_answer(sa_p, &conn.ike_proposals);
        let peer_spi = sa_p
            .proposals
            .first()
            .and_then(|p| <[u8; 8]>::try_from(p.spi.as_slice()).ok())
            .map(u64::from_be_bytes)
            .filter(|s| *s != 0);
        let (Some(suite), Some(peer_spi)) = (suite, peer_spi) else {
            lifetimes::retry_ike_rekey_later(sa, cx, rng);
            return Next::Done;
        };
        if suite.dh != self.kex.group() || ke.group != suite.dh.id() {
            lifetimes::retry_ike_rekey_later(sa, cx, rng);
            return Next::Done;
        }
        let Ok(shared) = self.kex.shared_secret(&ke.data) else {
            lifetimes::retry_ike_rekey_later(sa, cx, rng);
            return Next::Done;
        };
        let todo = crate::task::followup_ke::todo(&suite.addke);
        if !todo.is_empty() {
            // The additional key exchanges follow in IKE_FOLLOWUP_KE (RFC 9370 2.2.4).
            let goal = crate::task::followup_ke::Goal::Ike {
                suite,
                ni: self.ni.clone(),
                nr: nr.clone(),
                our_spi: self.spi,
                peer_spi,
            };
            return match crate::task::followup_ke::FollowupKe::start(ps, shared, todo, goal) {
                Some(f) => Next::Again(Box::new(Task::FollowupKe(f))),
                None => {
                    sa.stats_mut().additional_ke_refused += 1;
                    lifetimes::retry_ike_rekey_later(sa, cx, rng);
                    Next::Done
                }
            };
        }
        if move_to_new(
            sa,
            cx,
            Role::Initiator,
            suite,
            &shared,
            &self.ni,
            nr,
            &[],
            self.spi,
            peer_spi,
        )
        .is_some()
        {
            // The initiator of the rekey deletes the old SA (2.18).
            sa.queue_task(cx, Task::IkeDelete, rng);
        }
        Next::Done
    }
}

/// Makes the new IKE SA (`we` its role, SPIs ours and the peer's), moves the children to
/// it, hands it to the endpoint and leaves this one [`State::Rekeyed`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn move_to_new(
    sa: &mut IkeSa,
    cx: &mut Cx,
    we: Role,
    suite: IkeSuite,
    shared: &[u8],
    ni: &[u8],
    nr: &[u8],
    add: &[u8],
    our_spi: u64,
    peer_spi: u64,
) -> Option<()> {
    let old = sa.crypto()?;
    let (spi_i, spi_r) = match we {
        Role::Initiator => (our_spi, peer_spi),
        Role::Responder => (peer_spi, our_spi),
    };
    let crypto = Crypto::derive_with(we, suite, Some(&old.keys.sk_d), shared, ni, nr, add, spi_i, spi_r).ok()?;
    let remote_id = sa.remote_id()?.clone();
    let conn = sa.conn(cx.cfg);
    let keys = cx.cfg.export_ike_keys.then(|| IkeKeyLog {
        spi_i,
        spi_r,
        suite,
        sk_ei: crypto.keys.sk_ei.clone(),
        sk_er: crypto.keys.sk_er.clone(),
        sk_ai: crypto.keys.sk_ai.clone(),
        sk_ar: crypto.keys.sk_ar.clone(),
    });
    cx.out.event(Event::IkeRekeyed {
        old_spi_i: sa.spi_i(),
        old_spi_r: sa.spi_r(),
        info: IkeSaInfo {
            conn: conn.name.clone(),
            spi_i,
            spi_r,
            role: we,
            local: sa.path().local,
            remote: sa.path().remote,
            suite,
            local_id: conn.local_id.clone(),
            remote_id: remote_id.clone(),
            nat: sa.child_encap(cx.cfg).is_some(),
        },
        keys,
    });
    let mut new = sa.successor(we, spi_i, spi_r, crypto, remote_id, cx.now);
    lifetimes::ike_established(&mut new, cx);
    sa.retire();
    sa.schedule_rekey(None);
    sa.effect(EndpointEvent::Rekeyed(Box::new(new)));
    Some(())
}

/// The responder's answer to a rekey of this IKE SA.
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], ni: &[u8], rng: &mut impl CryptoRngCore) -> Reply {
    // Our own rekey of it is under way: one of the two is redundant (2.8.2); we keep this
    // simple and let the peer's wait (it retries after TEMPORARY_FAILURE, 2.25).
    if sa.has_task(|t| matches!(t, Task::IkeRekey(_))) {
        return Reply::notify(kind::TEMPORARY_FAILURE);
    }
    // An exchange of ours about a child is outstanding, or a child is in the middle of our
    // rekey: its answer comes on this SA, and the children would have moved away (issue #39:
    // the child stayed `rekeying` for good); or we are deleting this SA. Again later (2.25:
    // TEMPORARY_FAILURE; strongSwan answers the same while a child is half-open).
    let child_exchange = sa
        .active_task()
        .is_some_and(|t| matches!(t, Task::ChildCreate(_) | Task::ChildRekey(_) | Task::ChildDelete(_)));
    if child_exchange
        || sa
            .children()
            .iter()
            .any(|c| matches!(c.state, ChildState::Rekeying { .. }))
        || sa.has_task(|t| matches!(t, Task::IkeDelete))
    {
        return Reply::notify(kind::TEMPORARY_FAILURE);
    }
    // The caps, the SAs this peer's rekeys replaced and has not deleted counted too (issue
    // #39: 4,300 chained rekeys whose Deletes never came made 4,601 IKE SAs and locked every
    // other peer out): per identity, this SA and the new one included; in all, with room
    // left for half-open SAs. NO_ADDITIONAL_SAS may refuse an IKE SA rekey (3.10.1).
    let room = crate::limits::MAX_IKE_SAS.saturating_sub(cx.cfg.half_open_max);
    let census = sa.census();
    if census.same_identity + 2 > crate::limits::MAX_IKE_SAS_PER_IDENTITY || census.ike_sas + 1 > room {
        return Reply::notify(kind::NO_ADDITIONAL_SAS);
    }
    let (Some(sa_p), Some(ke)) = (ps.sa(), ps.ke()) else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let conn = sa.conn(cx.cfg);
    let Some((num, suite)) = choose_ike(&sa_p.proposals, &conn.ike_proposals) else {
        return Reply::notify(kind::NO_PROPOSAL_CHOSEN);
    };
    if ke.group != suite.dh.id() {
        return Reply::with(alloc::vec![Payload::Notify(crate::notify::Notify::ike(
            kind::INVALID_KE_PAYLOAD,
            &suite.dh.id().to_be_bytes()
        ))]);
    }
    let peer_spi = sa_p
        .proposals
        .iter()
        .find(|p| p.num == num)
        .and_then(|p| <[u8; 8]>::try_from(p.spi.as_slice()).ok())
        .map(u64::from_be_bytes)
        .filter(|s| *s != 0);
    let Some(peer_spi) = peer_spi else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let Ok((our_ke, shared)) = KeyExchange::respond(suite.dh, &ke.data, rng) else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let our_spi = new_ike_spi(rng);
    let nr = random_nonce(rng);
    let todo = crate::task::followup_ke::todo(&suite.addke);
    if !todo.is_empty() {
        // Additional key exchanges (RFC 9370 2.2.4): the new SA is made after the last.
        if sa.followup().is_some() {
            return Reply::notify(kind::TEMPORARY_FAILURE);
        }
        let goal = crate::task::followup_ke::Goal::Ike {
            suite,
            ni: ni.to_vec(),
            nr: nr.clone(),
            our_spi,
            peer_spi,
        };
        let link = crate::task::followup_ke::begin(sa, cx, shared, todo, goal, rng);
        return Reply::with(alloc::vec![
            Payload::Sa(SaPayload {
                proposals: alloc::vec![Proposal::from_ike_suite(num, &our_spi.to_be_bytes(), &suite)],
            }),
            Payload::Nonce(nr),
            Payload::Ke(crate::ke::KePayload {
                group: suite.dh.id(),
                data: our_ke,
            }),
            link,
        ]);
    }
    if move_to_new(sa, cx, Role::Responder, suite, &shared, ni, &nr, &[], our_spi, peer_spi).is_none() {
        return Reply::notify(kind::NO_PROPOSAL_CHOSEN);
    }
    Reply::with(alloc::vec![
        Payload::Sa(SaPayload {
            proposals: alloc::vec![Proposal::from_ike_suite(num, &our_spi.to_be_bytes(), &suite)],
        }),
        Payload::Nonce(nr),
        Payload::Ke(crate::ke::KePayload {
            group: suite.dh.id(),
            data: our_ke,
        }),
    ])
}

/// The old SA after its Delete: gone, its children live on in the new one.
pub(crate) fn old_deleted(sa: &mut IkeSa, cx: &mut Cx) {
    sa.kill(cx, DownReason::Rekeyed);
}
