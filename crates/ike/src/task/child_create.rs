//! CREATE_CHILD_SA (RFC 7296 1.3) for a further child SA (1.3.1): the [`ChildCreate`] task
//! (a trap's acquire or `ipsec ike initiate CONN/CHILD` on an established IKE SA) and the
//! responder's side ([`respond`]). The task manager sends the exchange's other two uses to
//! their tasks: a child rekey ([`super::child_rekey`]) and an IKE SA rekey ([`super::ike_rekey`]).
use crate::child::{keymat, Offer, Refusal};
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa};
use crate::limits::MAX_CHILD_SAS;
use crate::message::{Find, Payload};
use crate::nonce::OUR_NONCE_LEN;
use crate::notify::kind;
use crate::task::ike_auth::{child_refused, child_up};
use crate::task::{child_delete::ChildDelete, followup_ke, Next, Reply, Task};
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

    /// The response: the agreed child with its keys, a retry (INVALID_KE_PAYLOAD with a
    /// group we offer, twice at most), or a refusal (reported; a pair the responder made
    /// that we cannot take is deleted, 2.9). Shared with [`super::child_rekey`].
    pub fn answer(&mut self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Answer {
        let conn = sa.conn(cx.cfg);
        let Some(crypto) = sa.crypto() else {
            return Answer::Refused(Refusal::NoProposal);
        };
        let (prf, sk_d) = (crypto.suite.prf, crypto.keys.sk_d.clone());
        match (self.offer.accept(conn, ps), ps.nonce()) {
            (Ok((a, Some(shared))), Some(nr)) if a.addke.iter().any(Option::is_some) => {
                // Additional key exchanges follow (RFC 9370 2.2.4): nothing is keyed yet.
                Answer::Followup(a, shared, nr.clone())
            }
            (Ok((a, shared)), Some(nr)) => {
                let keys = keymat(prf, &sk_d, shared.as_deref().map(|s| &s[..]), &self.ni, nr, &a.suite);
                let min_nonce = if self.ni.as_slice() <= nr.as_slice() {
                    &self.ni
                } else {
                    nr
                }
                .clone();
                Answer::Agreed(a, keys, min_nonce)
            }
            (Err(Refusal::InvalidKe(g)), _) if self.retries > 0 && self.offer.retry_with(conn, g, rng) => {
                self.retries -= 1;
                Answer::Retry
            }
            (r, _) => {
                let r = r.err().unwrap_or(Refusal::NoProposal);
                if ps.error_notify().is_none() {
                    child_refused(sa, cx, Some(self.offer.cfg), r);
                }
                if ps.sa().is_some() && ps.error_notify().is_none() {
                    self.delete_made(sa, cx, rng);
                }
                Answer::Refused(r)
            }
        }
    }

    /// Deletes the pair the responder made for us (one we cannot or need not take).
    pub fn delete_made(&self, sa: &mut IkeSa, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
        let spi_in = self.offer.spi_in;
        sa.queue_task(cx, Task::ChildDelete(ChildDelete { spi_in }), rng);
    }

    pub fn process(mut self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
        match self.answer(sa, cx, ps, rng) {
            Answer::Agreed(a, keys, _) => child_up(sa, cx, &a, &keys, None),
            Answer::Followup(a, shared, nr) => {
                let cfg = a.cfg;
                let todo = followup_ke::todo(&a.addke);
                let goal = followup_ke::Goal::Child {
                    agreed: a,
                    ni: self.ni.clone(),
                    nr,
                    rekeys: None,
                };
                match followup_ke::FollowupKe::start(ps, shared, todo, goal) {
                    Some(f) => return Next::Again(alloc::boxed::Box::new(Task::FollowupKe(f))),
                    None => {
                        sa.stats_mut().additional_ke_refused += 1;
                        child_refused(sa, cx, Some(cfg), Refusal::NoProposal);
                    }
                }
            }
            Answer::Retry => return Next::Again(alloc::boxed::Box::new(Task::ChildCreate(self))),
            Answer::Refused(r) => {
                if ps.error_notify().is_some() {
                    child_refused(sa, cx, Some(self.offer.cfg), r);
                }
            }
        }
        Next::Done
    }
}

/// What the responder's answer to a child request came to.
pub(crate) enum Answer {
    /// The child, its keys, and the lowest of the exchange's two nonces (2.8.1).
    Agreed(crate::child::Agreed, crate::keys::ChildKeys, Vec<u8>),
    /// The child, once its additional key exchanges ran (RFC 9370 2.2.4): the first
    /// exchange's shared secret and the responder's nonce.
    Followup(crate::child::Agreed, crate::prf::KeyBytes, Vec<u8>),
    /// Send the request again (another key exchange group).
    Retry,
    /// No child (already reported unless the peer's notify said why).
    Refused(Refusal),
}

/// The lower of two nonces, as 2.8.1 compares them (bytewise).
pub(crate) fn lowest<'a>(a: &'a [u8], b: &'a [u8]) -> &'a [u8] {
    if a <= b {
        a
    } else {
        b
    }
}

/// Inserts Ni/Nr after the SA payload (RFC 7296 1.3's order: SA, Ni, [KE], TSi, TSr).
pub(crate) fn with_nonce(mut p: Vec<Payload>, nonce: &[u8]) -> Vec<Payload> {
    let at = p.iter().position(|x| matches!(x, Payload::Sa(_))).map_or(0, |i| i + 1);
    p.insert(at, Payload::Nonce(nonce.to_vec()));
    p
}

/// The responder's answer to a CREATE_CHILD_SA request for a new child (with nonce `ni`;
/// the task manager has sent a rekey to its own task).
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], ni: &[u8], rng: &mut impl CryptoRngCore) -> Reply {
    if sa.children().len() >= MAX_CHILD_SAS {
        return Reply::notify(kind::NO_ADDITIONAL_SAS);
    }
    match make_child(sa, cx, ps, ni, None, rng) {
        Ok((payloads, _, _, _)) => Reply::with(payloads),
        Err(r) => r,
    }
}

/// The responder's side of a child made by CREATE_CHILD_SA (a new one, or with `rekeys` the
/// successor of that pair, same configuration): chosen, keyed from this exchange's nonces
/// (and key exchange), reported up. Returns the answer's payloads, the child's inbound SPI,
/// the lowest of the two nonces (2.8.1) and whether additional key exchanges are still to
/// come (RFC 9370 2.2.4: then it is keyed and reported by [`followup_ke`] at the end), or
/// the refusal's answer.
pub(crate) fn make_child(
    sa: &mut IkeSa,
    cx: &mut Cx,
    ps: &[Payload],
    ni: &[u8],
    rekeys: Option<(u32, usize)>,
    rng: &mut impl CryptoRngCore,
) -> Result<(Vec<Payload>, u32, Vec<u8>, bool), Reply> {
    let Some(crypto) = sa.crypto() else {
        return Err(Reply::notify(kind::INVALID_SYNTAX));
    };
    if sa.followup().is_some() {
        // One exchange with additional key exchanges at a time (RFC 9370 2.2.4).
        return Err(Reply::notify(kind::TEMPORARY_FAILURE));
    }
    let (prf, sk_d) = (crypto.suite.prf, crypto.keys.sk_d.clone());
    let refuse = |sa: &IkeSa, cx: &mut Cx, cfg: Option<usize>, r: Refusal| {
        child_refused(sa, cx, cfg, r);
        Reply::with(alloc::vec![Payload::Notify(r.notify())])
    };
    let choice = match crate::child::choose(sa, cx.cfg, ps, rekeys.map(|(_, c)| c), true, cx.others, rng) {
        Ok(c) => c,
        Err((r, cfg)) => return Err(refuse(sa, cx, cfg, r)),
    };
    let (payloads, shared) = match choice.answer(ps, rng) {
        Ok(x) => x,
        Err(r) => return Err(refuse(sa, cx, Some(choice.agreed.cfg), r)),
    };
    let nr = random_nonce(rng);
    let min_nonce = lowest(ni, &nr).to_vec();
    let todo = choice.additional();
    if let (false, Some(shared)) = (todo.is_empty(), shared.clone()) {
        let spi_in = choice.agreed.spi_in;
        let goal = followup_ke::Goal::Child {
            agreed: choice.agreed,
            ni: ni.to_vec(),
            nr: nr.clone(),
            rekeys: rekeys.map(|(spi, _)| spi),
        };
        let link = followup_ke::begin(sa, cx, shared, todo, goal, rng);
        let mut payloads = with_nonce(payloads, &nr);
        payloads.push(link);
        return Ok((payloads, spi_in, min_nonce, true));
    }
    let a = &choice.agreed;
    let keys = keymat(prf, &sk_d, shared.as_deref().map(|s| &s[..]), ni, &nr, &a.suite);
    child_up(sa, cx, a, &keys, rekeys.map(|(spi, _)| spi));
    Ok((with_nonce(payloads, &nr), a.spi_in, min_nonce, false))
}
