//! Additional key exchanges in CREATE_CHILD_SA (RFC 9370 2.2.4): a new child, a child rekey
//! or an IKE SA rekey whose agreed proposal has ADDKE transforms runs its first key exchange
//! in the CREATE_CHILD_SA exchange itself and each additional one in an IKE_FOLLOWUP_KE
//! exchange (type 44), linked by the responder's ADDITIONAL_KEY_EXCHANGE notify:
//!
//! ```text
//! HDR(CREATE_CHILD_SA), SK {SA, Ni, KEi, [N(REKEY_SA)], [TSi, TSr]}  -->
//!          <--  HDR(CREATE_CHILD_SA), SK {SA, Nr, KEr, [TSi, TSr], N(ADDITIONAL_KEY_EXCHANGE)(link1)}
//! HDR(IKE_FOLLOWUP_KE), SK {KEi(1), N(ADDITIONAL_KEY_EXCHANGE)(link1)}  -->
//!          <--  HDR(IKE_FOLLOWUP_KE), SK {KEr(1), [N(ADDITIONAL_KEY_EXCHANGE)(link2)]}
//! ```
//!
//! Nothing is installed until the last exchange; then the keys come from every shared
//! secret (2.2.4): a child's `KEYMAT = prf+(SK_d, SK(0) | Ni | Nr | SK(1) | ... | SK(n))`,
//! a rekeyed IKE SA's `SKEYSEED = prf(SK_d (old), SK(0) | Ni | Nr | SK(1) | ... | SK(n))`
//! (the nonces between the first and the additional secrets, as strongSwan does too).
//!
//! Bad input: an IKE_FOLLOWUP_KE whose link is not the one we gave (or when none is
//! pending) is answered with STATE_NOT_FOUND, a KE of another method or failing the
//! method's checks with INVALID_SYNTAX (the pending state is dropped with either); a
//! responder's state whose follow-up never comes is dropped after [`PENDING_TIMEOUT`]; all
//! counted in [`crate::status::IkeSaStats::additional_ke_refused`]. An initiator whose
//! responder's answer lacks the link, or whose follow-up is refused, installs nothing (a
//! rekey is tried again later).
use crate::alg::{DhGroup, IkeSuite};
use crate::child::Agreed;
use crate::dh::KeyExchange;
use crate::event::Role;
use crate::header::ExchangeType;
use crate::ike_sa::{ChildState, Cx, IkeSa};
use crate::message::{Find, Payload};
use crate::notify::{kind, Notify};
use crate::prf::KeyBytes;
use crate::task::{child_rekey, ike_auth::child_up, ike_rekey, lifetimes, Next, Reply, Task};
use alloc::vec::Vec;
use core::time::Duration;
use rand_core::CryptoRngCore;

/// How long a responder keeps the state of an exchange waiting for its IKE_FOLLOWUP_KE.
pub const PENDING_TIMEOUT: Duration = Duration::from_secs(30);

/// What the additional key exchanges are for.
pub(crate) enum Goal {
    /// A child (`rekeys`: the inbound SPI of the pair it replaces).
    Child {
        agreed: Agreed,
        ni: Vec<u8>,
        nr: Vec<u8>,
        rekeys: Option<u32>,
    },
    /// The IKE SA's successor.
    Ike {
        suite: IkeSuite,
        ni: Vec<u8>,
        nr: Vec<u8>,
        our_spi: u64,
        peer_spi: u64,
    },
}

/// The exchanges' progress, on either side.
pub(crate) struct Chain {
    /// SK(0), of the CREATE_CHILD_SA exchange.
    secret: KeyBytes,
    /// SK(1) | SK(2) | ... so far.
    add: KeyBytes,
    /// The exchanges still to run, the next first: (ADDKE number, method).
    todo: Vec<(usize, DhGroup)>,
    /// The responder's ADDITIONAL_KEY_EXCHANGE data for the next exchange.
    link: Vec<u8>,
    goal: Goal,
}

/// The additional exchanges of an agreed proposal, in order (ADDKE1 first, NONE skipped).
pub(crate) fn todo(addke: &[Option<DhGroup>; 7]) -> Vec<(usize, DhGroup)> {
    addke
        .iter()
        .enumerate()
        .filter_map(|(i, g)| g.map(|g| (i + 1, g)))
        .collect()
}

fn link_of(ps: &[Payload]) -> Option<Vec<u8>> {
    ps.notify(kind::ADDITIONAL_KEY_EXCHANGE)
        .map(|n| n.data.clone())
        .filter(|d| !d.is_empty() && d.len() <= 64)
}

/// Our IKE_FOLLOWUP_KE (the initiator's task).
pub(crate) struct FollowupKe {
    chain: Chain,
    kex: Option<KeyExchange>,
}

impl FollowupKe {
    /// After the CREATE_CHILD_SA response (`ps`) agreed on ADDKE: the first follow-up, or
    /// `None` when the responder gave no link (RFC 9370 2.2.4: it must).
    pub fn start(ps: &[Payload], shared: KeyBytes, todo: Vec<(usize, DhGroup)>, goal: Goal) -> Option<Self> {
        let link = link_of(ps)?;
        Some(FollowupKe {
            chain: Chain {
                secret: shared,
                add: KeyBytes::default(),
                todo,
                link,
                goal,
            },
            kex: None,
        })
    }

    /// SK {KEi(n), N(ADDITIONAL_KEY_EXCHANGE)(link)}.
    pub fn build(
        &mut self,
        sa: &mut IkeSa,
        _cx: &mut Cx,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        let &(_, g) = self.chain.todo.first().ok_or(crate::Error::BadKeyExchange)?;
        let kex = KeyExchange::generate(g, rng);
        let p = alloc::vec![
            Payload::Ke(crate::ke::KePayload {
                group: g.id(),
                data: kex.public().to_vec(),
            }),
            Payload::Notify(Notify::ike(kind::ADDITIONAL_KEY_EXCHANGE, &self.chain.link)),
        ];
        self.kex = Some(kex);
        sa.seal(ExchangeType::IkeFollowupKe, false, id, &p, rng)
    }

    /// SK {KEr(n), [N(ADDITIONAL_KEY_EXCHANGE)(next link)]}: the next follow-up or the end.
    pub fn process(mut self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Next {
        let Some(&(_, g)) = self.chain.todo.first() else {
            return Next::Done;
        };
        let shared = match (ps.error_notify(), ps.ke(), &self.kex) {
            (None, Some(ke), Some(kex)) if ke.group == g.id() => kex.shared_secret(&ke.data).ok(),
            _ => None,
        };
        let Some(shared) = shared else {
            sa.stats_mut().additional_ke_refused += 1;
            failed(sa, cx, self.chain.goal, rng);
            return Next::Done;
        };
        self.chain.add.extend_from_slice(&shared);
        self.chain.todo.remove(0);
        if !self.chain.todo.is_empty() {
            let Some(link) = link_of(ps) else {
                sa.stats_mut().additional_ke_refused += 1;
                failed(sa, cx, self.chain.goal, rng);
                return Next::Done;
            };
            self.chain.link = link;
            self.kex = None;
            return Next::Again(alloc::boxed::Box::new(Task::FollowupKe(self)));
        }
        finish(sa, cx, Role::Initiator, self.chain, rng);
        Next::Done
    }
}

/// The initiator's exchanges failed: nothing is installed; a rekey is tried again later.
fn failed(sa: &mut IkeSa, cx: &mut Cx, goal: Goal, rng: &mut impl CryptoRngCore) {
    match goal {
        Goal::Child { rekeys: Some(old), .. } => {
            if let Some(c) = sa.child_mut(old) {
                if matches!(c.state, ChildState::Rekeying { .. }) {
                    c.state = ChildState::Installed;
                }
            }
            lifetimes::retry_rekey_later(sa, cx, old, rng);
        }
        Goal::Child { agreed, .. } => {
            crate::task::ike_auth::child_refused(sa, cx, Some(agreed.cfg), crate::child::Refusal::NoProposal);
        }
        Goal::Ike { .. } => lifetimes::retry_ike_rekey_later(sa, cx, rng),
    }
}

/// Every exchange ran: the child or the IKE SA with keys from all the shared secrets.
fn finish(sa: &mut IkeSa, cx: &mut Cx, we: Role, chain: Chain, rng: &mut impl CryptoRngCore) -> bool {
    match chain.goal {
        Goal::Child { agreed, ni, nr, rekeys } => {
            let Some(crypto) = sa.crypto() else { return false };
            let keys = crate::keys::derive_child_keys_addke(
                crypto.suite.prf,
                &crypto.keys.sk_d,
                &chain.secret,
                &ni,
                &nr,
                &chain.add,
                &agreed.suite,
            );
            match (we, rekeys) {
                (Role::Initiator, Some(old)) => {
                    child_up(sa, cx, &agreed, &keys, Some(old));
                    child_rekey::replaced(sa, cx, old, rng);
                }
                (Role::Responder, Some(old)) => {
                    child_up(sa, cx, &agreed, &keys, Some(old));
                    child_rekey::mark_rekeyed(sa, cx, old, false);
                }
                (_, None) => child_up(sa, cx, &agreed, &keys, None),
            }
            true
        }
        Goal::Ike {
            suite,
            ni,
            nr,
            our_spi,
            peer_spi,
        } => {
            let ok = ike_rekey::move_to_new(
                sa,
                cx,
                we,
                suite,
                &chain.secret,
                &ni,
                &nr,
                &chain.add,
                our_spi,
                peer_spi,
            )
            .is_some();
            if ok && we == Role::Initiator {
                // The initiator of the rekey deletes the old SA (RFC 7296 2.18).
                sa.queue_task(cx, Task::IkeDelete, rng);
            }
            ok
        }
    }
}

/// The responder's state between CREATE_CHILD_SA and the last IKE_FOLLOWUP_KE.
pub(crate) struct Pending {
    chain: Chain,
    until: Duration,
}

impl Pending {
    /// When it is dropped.
    pub fn deadline(&self) -> Duration {
        self.until
    }
}

/// The responder agreed on ADDKE in CREATE_CHILD_SA: keeps the state and returns the
/// N(ADDITIONAL_KEY_EXCHANGE) for its answer.
pub(crate) fn begin(
    sa: &mut IkeSa,
    cx: &Cx,
    shared: KeyBytes,
    todo: Vec<(usize, DhGroup)>,
    goal: Goal,
    rng: &mut impl CryptoRngCore,
) -> Payload {
    let link = new_link(rng);
    sa.await_followup(Pending {
        chain: Chain {
            secret: shared,
            add: KeyBytes::default(),
            todo,
            link: link.clone(),
            goal,
        },
        until: cx.now + PENDING_TIMEOUT,
    });
    Payload::Notify(Notify::ike(kind::ADDITIONAL_KEY_EXCHANGE, &link))
}

fn new_link(rng: &mut impl CryptoRngCore) -> Vec<u8> {
    let mut l = alloc::vec![0u8; 8];
    rng.fill_bytes(&mut l);
    l
}

/// The responder's answer to an IKE_FOLLOWUP_KE request.
pub(crate) fn respond(sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Reply {
    let link = ps.notify(kind::ADDITIONAL_KEY_EXCHANGE).map(|n| n.data.clone());
    let Some(mut p) = sa.take_followup() else {
        sa.stats_mut().additional_ke_refused += 1;
        return Reply::notify(kind::STATE_NOT_FOUND);
    };
    if link.as_deref() != Some(&p.chain.link[..]) {
        // Not the exchange we wait for (RFC 9370 2.2.4): that state is given up.
        sa.stats_mut().additional_ke_refused += 1;
        return Reply::notify(kind::STATE_NOT_FOUND);
    }
    let Some(&(_, g)) = p.chain.todo.first() else {
        return Reply::notify(kind::STATE_NOT_FOUND);
    };
    let answer = ps
        .ke()
        .filter(|ke| ke.group == g.id())
        .and_then(|ke| KeyExchange::respond(g, &ke.data, rng).ok());
    let Some((ours, shared)) = answer else {
        sa.stats_mut().additional_ke_refused += 1;
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    p.chain.add.extend_from_slice(&shared);
    p.chain.todo.remove(0);
    let ke = Payload::Ke(crate::ke::KePayload {
        group: g.id(),
        data: ours,
    });
    if !p.chain.todo.is_empty() {
        p.chain.link = new_link(rng);
        p.until = cx.now + PENDING_TIMEOUT;
        let n = Payload::Notify(Notify::ike(kind::ADDITIONAL_KEY_EXCHANGE, &p.chain.link));
        sa.await_followup(p);
        return Reply::with(alloc::vec![ke, n]);
    }
    if !finish(sa, cx, Role::Responder, p.chain, rng) {
        return Reply::notify(kind::NO_PROPOSAL_CHOSEN);
    }
    Reply::with(alloc::vec![ke])
}

/// Drops a responder's state whose IKE_FOLLOWUP_KE did not come in time (counted).
pub(crate) fn expire(sa: &mut IkeSa, now: Duration) {
    if sa.followup().is_some_and(|p| now >= p.until) {
        sa.take_followup();
        sa.stats_mut().additional_ke_refused += 1;
    }
}

#[cfg(test)]
mod tests {
    use crate::alg::{ChildSuite, Encr, Prf};
    use crate::keys::{derive_child_keys_addke, rekey_skeyseed};

    fn h(s: &str) -> alloc::vec::Vec<u8> {
        hex::decode(s).unwrap()
    }

    /// The key derivation across several key exchanges against strongSwan 6.1's own dumps
    /// (tests/vectors/strongswan61-pq.txt, scripts/vectors/pq_vectors.py): SKEYSEED after an
    /// IKE_INTERMEDIATE exchange (RFC 9370 2.2.2), after an IKE rekey with IKE_FOLLOWUP_KE and
    /// a child's KEYMAT after one (2.2.4), each from SK_d, the secrets and the nonces.
    #[test]
    fn strongswan_61_vectors() {
        let text = include_str!("../../tests/vectors/strongswan61-pq.txt");
        let mut n = [0; 3];
        let suite = ChildSuite {
            encr: Encr::AesGcm16_256,
            integ: None,
            esn: false,
        };
        for l in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let f: alloc::vec::Vec<alloc::vec::Vec<u8>> = l.split_whitespace().skip(1).map(h).collect();
            match l.split_whitespace().next() {
                Some("intermediate") => {
                    assert_eq!(
                        rekey_skeyseed(Prf::HmacSha384, &f[0], &f[1], &f[2], &f[3], &[])[..],
                        f[4][..]
                    );
                    n[0] += 1;
                }
                Some("ikerekey") => {
                    assert_eq!(
                        rekey_skeyseed(Prf::HmacSha384, &f[0], &f[1], &f[3], &f[4], &f[2])[..],
                        f[5][..]
                    );
                    n[1] += 1;
                }
                Some("child") => {
                    let k = derive_child_keys_addke(Prf::HmacSha384, &f[0], &f[1], &f[3], &f[4], &f[2], &suite);
                    assert_eq!((&k.encr_i[..], &k.encr_r[..]), (&f[5][..], &f[6][..]));
                    n[2] += 1;
                }
                other => panic!("record {other:?}"),
            }
        }
        assert_eq!(n, [1, 2, 2], "every record ran");
    }

    use super::*;
    use crate::config::Config;
    use crate::ike_sa::{Crypto, Output, State};
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    const PROP: &str = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";

    fn established() -> (IkeSa, Config, IkeSuite) {
        let spec = crate::alg::parse_proposal(PROP, crate::alg::ProposalKind::Ike).unwrap();
        let offered = [crate::sa::Proposal::from_spec(
            1,
            crate::sa::protocol::IKE,
            &[],
            &spec,
            true,
        )];
        let (_, suite) = crate::sa::choose_ike(&offered, &[spec]).unwrap();
        let crypto = Crypto::derive(Role::Responder, suite, None, &[7; 32], &[1; 32], &[2; 32], 11, 22).unwrap();
        let id = crate::Identity::from_str_config("10.0.0.1").unwrap();
        let sa = IkeSa::new(
            0,
            Role::Responder,
            11,
            22,
            "10.0.0.2:500".parse().unwrap(),
            "10.0.0.1:500".parse().unwrap(),
            State::Established { crypto, remote_id: id },
            Duration::ZERO,
        );
        (sa, crate::test_util::psk_config(PROP), suite)
    }

    fn run(sa: &mut IkeSa, cfg: &Config, ps: &[Payload], now: Duration) -> Option<u16> {
        let mut out = Output::default();
        let mut cx = Cx::new(cfg, &mut out, now, None);
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let r = respond(sa, &mut cx, ps, &mut rng);
        r.payloads.iter().find_map(|p| match p {
            Payload::Notify(n) if kind::is_error(n.kind) => Some(n.kind),
            _ => None,
        })
    }

    fn pending(sa: &mut IkeSa, cfg: &Config, suite: IkeSuite) -> Vec<u8> {
        let mut out = Output::default();
        let cx = Cx::new(cfg, &mut out, Duration::ZERO, None);
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let goal = Goal::Ike {
            suite,
            ni: alloc::vec![1; 32],
            nr: alloc::vec![2; 32],
            our_spi: 33,
            peer_spi: 44,
        };
        let n = begin(sa, &cx, KeyBytes::default(), todo(&suite.addke), goal, &mut rng);
        match n {
            Payload::Notify(n) => n.data,
            _ => panic!(),
        }
    }

    fn followup(link: &[u8], group: DhGroup, data: Vec<u8>) -> Vec<Payload> {
        alloc::vec![
            Payload::Ke(crate::ke::KePayload {
                group: group.id(),
                data
            }),
            Payload::Notify(Notify::ike(kind::ADDITIONAL_KEY_EXCHANGE, link)),
        ]
    }

    fn ek() -> Vec<u8> {
        crate::kem::Decapsulator::from_seed(crate::kem::MlKem::MlKem768, &[5; 64])
            .ek()
            .to_vec()
    }

    /// Bad input (#37, RFC 9370 2.2.4): no exchange pending or a link not ours is
    /// STATE_NOT_FOUND, a KE of another method or a bad key INVALID_SYNTAX, a follow-up that
    /// never comes is dropped after 30 s; each counted, nothing made.
    #[test]
    fn bad_followups_are_refused_and_counted() {
        let (mut sa, cfg, suite) = established();
        assert_eq!(
            run(
                &mut sa,
                &cfg,
                &followup(&[1; 8], DhGroup::MlKem768, ek()),
                Duration::ZERO
            ),
            Some(kind::STATE_NOT_FOUND)
        );
        let link = pending(&mut sa, &cfg, suite);
        assert_ne!(link, [1; 8]);
        assert_eq!(
            run(
                &mut sa,
                &cfg,
                &followup(&[1; 8], DhGroup::MlKem768, ek()),
                Duration::ZERO
            ),
            Some(kind::STATE_NOT_FOUND)
        );
        assert!(sa.followup().is_none(), "that state is given up");
        let link2 = pending(&mut sa, &cfg, suite);
        assert_eq!(
            run(
                &mut sa,
                &cfg,
                &followup(&link2, DhGroup::MlKem1024, alloc::vec![0; 1568]),
                Duration::ZERO
            ),
            Some(kind::INVALID_SYNTAX)
        );
        let link3 = pending(&mut sa, &cfg, suite);
        assert_eq!(
            run(
                &mut sa,
                &cfg,
                &followup(&link3, DhGroup::MlKem768, ek()[1..].to_vec()),
                Duration::ZERO
            ),
            Some(kind::INVALID_SYNTAX)
        );
        // The missing IKE_FOLLOWUP_KE: dropped at the deadline, not before.
        pending(&mut sa, &cfg, suite);
        expire(&mut sa, PENDING_TIMEOUT - Duration::from_millis(1));
        assert!(sa.followup().is_some());
        expire(&mut sa, PENDING_TIMEOUT);
        assert!(sa.followup().is_none());
        assert_eq!(sa.stats().additional_ke_refused, 5);
        assert!(!sa.has_effects(), "no IKE SA was made");
        assert!(sa.is_established());
    }

    /// The good follow-up ends the exchange: the new IKE SA is handed over.
    #[test]
    fn the_followup_makes_the_new_ike_sa() {
        let (mut sa, cfg, suite) = established();
        let link = pending(&mut sa, &cfg, suite);
        assert_eq!(
            run(&mut sa, &cfg, &followup(&link, DhGroup::MlKem768, ek()), Duration::ZERO),
            None
        );
        assert!(sa.followup().is_none());
        assert!(matches!(
            sa.take_effects().last(),
            Some(crate::ike_sa::EndpointEvent::Rekeyed(_))
        ));
        assert_eq!(sa.stats().additional_ke_refused, 0);
    }
}
