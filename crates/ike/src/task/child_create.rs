//! CREATE_CHILD_SA (RFC 7296 1.3) for a further child SA (1.3.1): the [`ChildCreate`] task
//! (a trap's acquire or `ipsec ike initiate CONN/CHILD` on an established IKE SA) and the
//! responder's side. [`respond`] also dispatches the other two uses of the exchange: a
//! child rekey (N(REKEY_SA), [`super::child_rekey`]) and an IKE SA rekey (an SA payload for
//! protocol IKE, [`super::ike_rekey`]).
use crate::child::{keymat, Offer, Refusal};
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa, State};
use crate::limits::MAX_CHILD_SAS;
use crate::message::{Find, Payload};
use crate::nonce::OUR_NONCE_LEN;
use crate::notify::kind;
use crate::sa::protocol;
use crate::task::ike_auth::{child_refused, child_up};
use crate::task::{child_delete::ChildDelete, child_rekey, ike_rekey, Next, Reply, Task};
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

pub(crate) fn random_nonce(rng: &mut impl CryptoRngCore) -> Vec<u8> {
    let mut v = alloc::vec![0u8; OUR_NONCE_LEN];
    rng.fill_bytes(&mut v);
    v
}

/// Our request for a further child.
pub(crate) struct ChildCreate {
    pub offer: Offer,
    pub ni: Vec<u8>,
    /// INVALID_KE_PAYLOAD retries left.
    pub retries: u8,
}

impl ChildCreate {
    pub fn new(offer: Offer, rng: &mut impl CryptoRngCore) -> Self {
        ChildCreate {
            offer,
            ni: random_nonce(rng),
            retries: 2,
        }
    }

    /// SA, Ni, [KE], TSi, TSr (and N(USE_TRANSPORT_MODE) for transport mode).
    pub fn build(
        &mut self,
        sa: &mut IkeSa,
        cx: &mut Cx,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        let p = with_nonce(self.offer.payloads(sa.conn(cx.cfg)), &self.ni);
        sa.seal(ExchangeType::CreateChildSa, false, id, &p, rng)
    }

    pub fn process(mut self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
        let conn = sa.conn(cx.cfg);
        let Some(crypto) = sa.state.crypto() else {
            return Next::Done;
        };
        let (prf, sk_d) = (crypto.suite.prf, crypto.keys.sk_d.clone());
        match (self.offer.accept(conn, ps), ps.nonce()) {
            (Ok((a, shared)), Some(nr)) => {
                let keys = keymat(prf, &sk_d, shared.as_deref().map(|s| &s[..]), &self.ni, nr, &a.suite);
                child_up(sa, cx, &a, &keys, None);
                Next::Done
            }
            (Err(Refusal::InvalidKe(g)), _) if self.retries > 0 && self.offer.retry_with(conn, g, rng) => {
                self.retries -= 1;
                Next::Again(alloc::boxed::Box::new(Task::ChildCreate(self)))
            }
            (r, _) => {
                let r = r.err().unwrap_or(Refusal::NoProposal);
                child_refused(sa, cx, Some(self.offer.cfg), r);
                if ps.sa().is_some() && ps.error_notify().is_none() {
                    sa.queue_task(
                        cx,
                        Task::ChildDelete(ChildDelete {
                            spi_in: self.offer.spi_in,
                        }),
                        rng,
                    );
                }
                Next::Done
            }
        }
    }
}

/// Inserts Ni/Nr after the SA payload (RFC 7296 1.3's order: SA, Ni, [KE], TSi, TSr).
pub(crate) fn with_nonce(mut p: Vec<Payload>, nonce: &[u8]) -> Vec<Payload> {
    let at = p.iter().position(|x| matches!(x, Payload::Sa(_))).map_or(0, |i| i + 1);
    p.insert(at, Payload::Nonce(nonce.to_vec()));
    p
}

/// The responder's answer to a CREATE_CHILD_SA request.
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Reply {
    if !matches!(sa.state, State::Established { .. }) {
        // A rekeyed IKE SA makes nothing new (2.18); one not yet up cannot (1.3).
        return Reply::notify(if matches!(sa.state, State::Rekeyed { .. }) {
            kind::TEMPORARY_FAILURE
        } else {
            kind::INVALID_SYNTAX
        });
    }
    let Some(ni) = ps.nonce() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    if ps.notify(kind::REKEY_SA).is_some() {
        return child_rekey::respond(sa, cx, ps, ni, rng);
    }
    if ps
        .sa()
        .is_some_and(|s| s.proposals.first().is_some_and(|p| p.protocol == protocol::IKE))
    {
        return ike_rekey::respond(sa, cx, ps, ni, rng);
    }
    if sa.children.len() >= MAX_CHILD_SAS {
        return Reply::notify(kind::NO_ADDITIONAL_SAS);
    }
    let Some(crypto) = sa.state.crypto() else {
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let (prf, sk_d) = (crypto.suite.prf, crypto.keys.sk_d.clone());
    match crate::child::choose(sa, cx.cfg, ps, None, true, cx.others, rng) {
        Ok(choice) => match choice.answer(ps, rng) {
            Ok((payloads, shared)) => {
                let nr = random_nonce(rng);
                let keys = keymat(
                    prf,
                    &sk_d,
                    shared.as_deref().map(|s| &s[..]),
                    ni,
                    &nr,
                    &choice.agreed.suite,
                );
                child_up(sa, cx, &choice.agreed, &keys, None);
                Reply::with(with_nonce(payloads, &nr))
            }
            Err(r) => {
                child_refused(sa, cx, Some(choice.agreed.cfg), r);
                Reply::with(alloc::vec![Payload::Notify(r.notify())])
            }
        },
        Err((r, cfg)) => {
            child_refused(sa, cx, cfg, r);
            Reply::with(alloc::vec![Payload::Notify(r.notify())])
        }
    }
}
