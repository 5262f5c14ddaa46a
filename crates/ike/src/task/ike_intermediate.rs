//! IKE_INTERMEDIATE (RFC 9242) carrying the additional key exchanges of RFC 9370.
//!
//! Both sides announce INTERMEDIATE_EXCHANGE_SUPPORTED in IKE_SA_INIT (RFC 9242 3.1). When
//! the agreed IKE proposal has ADDKE transforms, the initiator runs one IKE_INTERMEDIATE
//! exchange per additional key exchange, ADDKE1 first (RFC 9370 2.2.2), before IKE_AUTH:
//!
//! ```text
//! HDR, SK {KEi(n)}  -->
//!                   <--  HDR, SK {KEr(n)}
//! ```
//!
//! each protected with the keys of the exchange before it. After exchange n both sides
//! update the IKE SA's keys (RFC 9370 2.2.2):
//!
//! ```text
//! SKEYSEED(n) = prf(SK_d(n-1), SK(n) | Ni | Nr)
//! {SK_d(n) | SK_ai(n) | SK_ar(n) | SK_ei(n) | SK_er(n) | SK_pi(n) | SK_pr(n)}
//!             = prf+ (SKEYSEED(n), Ni | Nr | SPIi | SPIr)
//! ```
//!
//! and every IKE_INTERMEDIATE message goes into the AUTH payload's signed octets through
//! the IntAuth chain (RFC 9242 3.3.2), computed with the SK_p keys the message was
//! protected with (the keys of exchange n-1, as strongSwan does):
//!
//! ```text
//! IntAuth_i1 = prf(SK_pi, IntAuth_i1_A | IntAuth_i1_P)
//! IntAuth_in = prf(SK_pi, IntAuth_i(n-1) | IntAuth_in_A | IntAuth_in_P)   (and _r with SK_pr)
//! IntAuth    = IntAuth_iN | IntAuth_rN | IKE_AUTH_MID
//! InitiatorSignedOctets = RealMsg1 | NonceRData | MACedIDForI | IntAuth (and so for R)
//! ```
//!
//! where A is the IKE header and the Encrypted payload's header, their lengths as if the
//! Encrypted payload held only the plaintext P (no IV, padding or ICV), and P the inner
//! payloads. A message that came in fragments (RFC 7383) counts as if sent whole.
//!
//! Bad input: a KE of a method other than the one agreed for this exchange is answered
//! with NO_PROPOSAL_CHOSEN, a KE whose data fails the method's checks (ML-KEM: FIPS 203 7.2)
//! or a missing KE with INVALID_SYNTAX (RFC 7296 2.21.2: the half-open SA is gone with
//! either); an IKE_INTERMEDIATE after all additional exchanges ran, or once the SA is up,
//! with INVALID_SYNTAX; IKE_AUTH before they all ran with INVALID_SYNTAX
//! ([`all_done`]). A replayed request gets the kept response (the message-ID window),
//! an out-of-order one is dropped (2.3).
use crate::alg::DhGroup;
use crate::dh::KeyExchange;
use crate::event::{DownReason, Event};
use crate::header::{ExchangeType, HeaderRepr, HEADER_LEN};
use crate::ike_sa::{Crypto, Cx, Handshake, IkeSa, Opened, State};
use crate::message::{emit_chain, Find, Payload};
use crate::notify::kind;
use crate::payload::{kind as pkind, GENERIC_HEADER_LEN};
use crate::prf::{prf, KeyBytes};
use crate::task::{Next, Reply};
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

/// What IKE_INTERMEDIATE adds to the handshake: the IntAuth chains and the additional key
/// exchanges that ran.
#[derive(Default)]
pub(crate) struct Intermediate {
    int_auth_i: Option<KeyBytes>,
    int_auth_r: Option<KeyBytes>,
    /// The additional key exchanges done, in order: (ADDKE number, method).
    pub done: Vec<(usize, DhGroup)>,
    /// Responder: the keys after the exchange just answered, used once the response is out.
    pending: Option<Crypto>,
}

impl Intermediate {
    /// IntAuth = IntAuth_iN | IntAuth_rN | IKE_AUTH_MID (RFC 9242 3.3.2); empty when no
    /// IKE_INTERMEDIATE ran (the signed octets are then RFC 7296's).
    pub fn octets(&self, ike_auth_mid: u32) -> Vec<u8> {
        let (Some(i), Some(r)) = (&self.int_auth_i, &self.int_auth_r) else {
            return Vec::new();
        };
        let mut v = Vec::with_capacity(i.len() + r.len() + 4);
        v.extend_from_slice(i);
        v.extend_from_slice(r);
        v.extend_from_slice(&ike_auth_mid.to_be_bytes());
        v
    }
}

/// IntAuth_A | IntAuth_P of an IKE_INTERMEDIATE message (RFC 9242 3.3.2): its header with
/// Next Payload = SK and the length of A | P, the Encrypted payload's generic header with
/// the first inner payload's type and a length of 4 + |P|, then P.
pub(crate) fn int_auth_data(h: &HeaderRepr, first: u8, inner: &[u8]) -> Vec<u8> {
    let total = HEADER_LEN + GENERIC_HEADER_LEN + inner.len();
    let mut v = alloc::vec![0u8; HEADER_LEN + GENERIC_HEADER_LEN];
    let hdr = HeaderRepr {
        next_payload: pkind::SK,
        length: total as u32,
        ..*h
    };
    // 28 bytes into a 32-byte buffer, and the generic header's four: neither can fail.
    let _ = hdr.emit(&mut v);
    let _ = crate::payload::emit_generic_header(&mut v[HEADER_LEN..], first, false, GENERIC_HEADER_LEN + inner.len());
    v.extend_from_slice(inner);
    v
}

/// Adds one IKE_INTERMEDIATE message to its sender's IntAuth chain, with the sender's SK_p
/// of the keys that protect the message.
fn add(sa: &mut IkeSa, from_initiator: bool, data: &[u8]) {
    let Some((hs, crypto)) = sa.handshake_mut() else {
        return;
    };
    let p = crypto.suite.prf;
    let (key, chain) = if from_initiator {
        (&crypto.keys.sk_pi, &mut hs.int.int_auth_i)
    } else {
        (&crypto.keys.sk_pr, &mut hs.int.int_auth_r)
    };
    let prev: &[u8] = chain.as_deref().map_or(&[], |v| &v[..]);
    let next = prf(p, key, &[prev, data]);
    *chain = Some(next);
}

/// An authenticated IKE_INTERMEDIATE message from the peer (whole, or reassembled).
pub(crate) fn collect_received(sa: &mut IkeSa, h: &HeaderRepr, opened: &Opened) {
    let data = int_auth_data(h, opened.first(), opened.inner());
    add(sa, h.initiator, &data);
}

/// An IKE_INTERMEDIATE message of ours, before it is sealed.
pub(crate) fn collect_sent(sa: &mut IkeSa, response: bool, id: u32, payloads: &[Payload]) -> Result<(), crate::Error> {
    let (first, inner) = emit_chain(payloads)?;
    let h = sa.header(ExchangeType::IkeIntermediate, response, id);
    let data = int_auth_data(&h, first, &inner);
    add(sa, sa.is_initiator(), &data);
    Ok(())
}

/// Whether every additional key exchange of the agreed suite ran (IKE_AUTH may follow).
pub(crate) fn all_done(hs: &Handshake, crypto: &Crypto) -> bool {
    hs.int.done.len() == crypto.suite.additional().count()
}

/// The next additional key exchange to run, if any.
fn next_addke(hs: &Handshake, crypto: &Crypto) -> Option<(usize, DhGroup)> {
    crypto.suite.additional().nth(hs.int.done.len())
}

/// The keys after additional exchange `n` with shared secret `shared` (RFC 9370 2.2.2).
fn next_keys(sa: &IkeSa, crypto: &Crypto, hs: &Handshake, shared: &[u8]) -> Result<Crypto, crate::Error> {
    Crypto::derive(
        sa.role(),
        crypto.suite,
        Some(&crypto.keys.sk_d),
        shared,
        &hs.ni,
        &hs.nr,
        sa.spi_i(),
        sa.spi_r(),
    )
}

/// Our IKE_INTERMEDIATE with additional key exchange `n` (the initiator's task).
pub(crate) struct IkeIntermediate {
    /// The ADDKE number (1..=7).
    pub n: usize,
    group: DhGroup,
    kex: Option<KeyExchange>,
}

impl IkeIntermediate {
    pub fn new(n: usize, group: DhGroup) -> Self {
        IkeIntermediate { n, group, kex: None }
    }

    /// The request: SK {KEi(n)}.
    pub fn build(
        &mut self,
        sa: &mut IkeSa,
        _cx: &mut Cx,
        id: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<Vec<u8>, crate::Error> {
        let kex = KeyExchange::generate(self.group, rng);
        let p = alloc::vec![Payload::Ke(crate::ke::KePayload {
            group: self.group.id(),
            data: kex.public().to_vec(),
        })];
        collect_sent(sa, false, id, &p)?;
        self.kex = Some(kex);
        sa.seal(ExchangeType::IkeIntermediate, false, id, &p, rng)
    }

    /// The response (its IntAuth already collected): KEr(n), then the new keys.
    pub fn process(self, sa: &mut IkeSa, cx: &mut Cx, ps: &[Payload]) -> Next {
        let name = sa.conn_name(cx.cfg);
        if let Some(n) = ps.error_notify() {
            if n.kind == kind::NO_PROPOSAL_CHOSEN || n.kind == kind::INVALID_KE_PAYLOAD {
                cx.out.event(Event::ProposalMismatch {
                    conn: name,
                    child: None,
                });
            }
            sa.kill(cx, DownReason::PeerError(n.kind));
            return Next::Done;
        }
        let ke = ps.ke().filter(|ke| ke.group == self.group.id());
        let shared = match (ke, &self.kex) {
            (Some(ke), Some(kex)) => kex.shared_secret(&ke.data).ok(),
            _ => None,
        };
        let Some(shared) = shared else {
            // No KE, another method, or a ciphertext of the wrong length: the exchange
            // failed and the half-made SA with it (RFC 9370 2.2.2).
            sa.stats_mut().invalid_syntax += 1;
            sa.kill(cx, DownReason::PeerError(kind::INVALID_SYNTAX));
            return Next::Done;
        };
        let State::AuthSent { hs, crypto } = sa.state() else {
            return Next::Done;
        };
        let Ok(new) = next_keys(sa, crypto, hs, &shared) else {
            sa.kill(cx, DownReason::PeerError(kind::INVALID_SYNTAX));
            return Next::Done;
        };
        // (AuthSent, as checked above.)
        if let Some((hs, crypto)) = sa.handshake_mut() {
            hs.int.done.push((self.n, self.group));
            *crypto = new;
        }
        Next::Done
    }
}

/// The responder's answer to an IKE_INTERMEDIATE request: the next additional key
/// exchange of the agreed suite, its new keys kept until the response is sent
/// ([`after_response`]).
pub(crate) fn respond(sa: &mut IkeSa, _cx: &mut Cx, ps: &[Payload], rng: &mut impl CryptoRngCore) -> Reply {
    let fail = |notify: u16| {
        let mut r = Reply::notify(notify);
        r.then = Some(DownReason::PeerError(notify));
        r
    };
    let role = sa.role();
    let (spi_i, spi_r) = (sa.spi_i(), sa.spi_r());
    let (true, Some((hs, crypto))) = (sa.is_half_open(), sa.handshake_mut()) else {
        // Only between IKE_SA_INIT and IKE_AUTH (RFC 9242 3).
        return Reply::notify(kind::INVALID_SYNTAX);
    };
    let Some((n, group)) = next_addke(hs, crypto) else {
        // Nothing left to exchange: an empty IKE_INTERMEDIATE is allowed (RFC 9242 3.2),
        // a key exchange is not.
        if ps.ke().is_some() {
            return fail(kind::INVALID_SYNTAX);
        }
        return Reply::with(Vec::new());
    };
    let Some(ke) = ps.ke() else {
        return fail(kind::INVALID_SYNTAX);
    };
    if ke.group != group.id() {
        // Not the method agreed for ADDKE n (RFC 9370 2.2.2).
        return fail(kind::NO_PROPOSAL_CHOSEN);
    }
    let Ok((ours, shared)) = KeyExchange::respond(group, &ke.data, rng) else {
        return fail(kind::INVALID_SYNTAX);
    };
    let Ok(new) = Crypto::derive(
        role,
        crypto.suite,
        Some(&crypto.keys.sk_d),
        &shared,
        &hs.ni,
        &hs.nr,
        spi_i,
        spi_r,
    ) else {
        return fail(kind::INVALID_SYNTAX);
    };
    hs.int.done.push((n, group));
    hs.int.pending = Some(new);
    Reply::with(alloc::vec![Payload::Ke(crate::ke::KePayload {
        group: group.id(),
        data: ours,
    })])
}

/// The responder's IKE_INTERMEDIATE response went out (sealed with the old keys): the
/// keys of the exchange take over.
pub(crate) fn after_response(sa: &mut IkeSa) {
    if !sa.is_half_open() {
        return;
    }
    if let Some((hs, crypto)) = sa.handshake_mut() {
        if let Some(new) = hs.int.pending.take() {
            *crypto = new;
        }
    }
}

/// The initiator's queue after IKE_SA_INIT: one task per additional key exchange, in
/// order, ahead of IKE_AUTH.
pub(crate) fn queue(sa: &mut IkeSa, suite: &crate::alg::IkeSuite) {
    let v: Vec<_> = suite.additional().collect();
    for (n, g) in v.into_iter().rev() {
        sa.queue_first(crate::task::Task::IkeIntermediate(IkeIntermediate::new(n, g)));
    }
}

/// Whether the peer said it supports IKE_INTERMEDIATE in IKE_SA_INIT.
pub(crate) fn peer_supports(ps: &[Payload]) -> bool {
    ps.notify(kind::INTERMEDIATE_EXCHANGE_SUPPORTED).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alg::{parse_proposal, ProposalKind};
    use crate::config::Config;
    use crate::ike_sa::Output;
    use crate::ke::KePayload;
    use core::net::SocketAddr;
    use core::time::Duration;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    const PROP: &str = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";

    fn config() -> Config {
        crate::test_util::psk_config(PROP)
    }

    /// A responder's half-open SA right after IKE_SA_INIT agreed on x25519 + ke1 ML-KEM-768.
    fn half_open() -> IkeSa {
        let spec = parse_proposal(PROP, ProposalKind::Ike).unwrap();
        let offered = [crate::sa::Proposal::from_spec(
            1,
            crate::sa::protocol::IKE,
            &[],
            &spec,
            true,
        )];
        let (_, suite) = crate::sa::choose_ike(&offered, &[spec]).unwrap();
        let crypto = Crypto::derive(Role::Responder, suite, None, &[7; 32], &[1; 32], &[2; 32], 11, 22).unwrap();
        let hs = Handshake {
            ni: alloc::vec![1; 32],
            nr: alloc::vec![2; 32],
            init_req: alloc::vec![3; 100],
            init_resp: alloc::vec![4; 100],
            peer_hashes: None,
            peer_certreq: false,
            int: Default::default(),
        };
        let a: SocketAddr = "10.0.0.2:500".parse().unwrap();
        let b: SocketAddr = "10.0.0.1:500".parse().unwrap();
        IkeSa::new(
            0,
            Role::Responder,
            11,
            22,
            a,
            b,
            State::HalfOpen {
                hs: alloc::boxed::Box::new(hs),
                crypto,
            },
            Duration::ZERO,
        )
    }

    use crate::event::Role;

    fn ke(group: DhGroup, data: Vec<u8>) -> Vec<Payload> {
        alloc::vec![Payload::Ke(KePayload {
            group: group.id(),
            data
        })]
    }

    fn answer(sa: &mut IkeSa, ps: &[Payload]) -> (Reply, Option<u16>) {
        let cfg = config();
        let mut out = Output::default();
        let mut cx = Cx::new(&cfg, &mut out, Duration::ZERO, None);
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let r = respond(sa, &mut cx, ps, &mut rng);
        let n = r.payloads.first().and_then(|p| match p {
            Payload::Notify(n) => Some(n.kind),
            _ => None,
        });
        (r, n)
    }

    fn ek() -> Vec<u8> {
        crate::kem::Decapsulator::from_seed(crate::kem::MlKem::MlKem768, &[5; 64])
            .ek()
            .to_vec()
    }

    fn sk_d(sa: &IkeSa) -> Vec<u8> {
        sa.crypto().unwrap().keys.sk_d.to_vec()
    }

    /// RFC 9370 2.2.2: the agreed method's KE is answered with a ciphertext and the keys
    /// change only once the response is out; a second KE after the last ADDKE is refused.
    #[test]
    fn the_additional_exchange_and_then_no_more() {
        let mut sa = half_open();
        let before = sk_d(&sa);
        let (r, n) = answer(&mut sa, &ke(DhGroup::MlKem768, ek()));
        assert_eq!(n, None);
        assert!(matches!(&r.payloads[0], Payload::Ke(k) if k.data.len() == 1088));
        assert_eq!(sk_d(&sa), before, "the response is sealed with the old keys");
        after_response(&mut sa);
        assert_ne!(sk_d(&sa), before, "SKEYSEED(1) took over");
        let State::HalfOpen { hs, crypto } = sa.state() else {
            panic!()
        };
        assert!(all_done(hs, crypto));
        // Another KE: INVALID_SYNTAX, the SA goes; an empty IKE_INTERMEDIATE is answered.
        let (r, n) = answer(&mut sa, &ke(DhGroup::MlKem768, ek()));
        assert_eq!((n, r.then.is_some()), (Some(kind::INVALID_SYNTAX), true));
        let (r, n) = answer(&mut sa, &[]);
        assert_eq!((n, r.payloads.len()), (None, 0));
    }

    /// Bad input (#37): a KE of another method is NO_PROPOSAL_CHOSEN; none, an encapsulation
    /// key of the wrong length or failing the modulus check is INVALID_SYNTAX; each ends the
    /// half-open SA and changes no key.
    #[test]
    fn bad_key_exchanges_are_refused() {
        let mut bad_mod = ek();
        bad_mod[0] = 0x01;
        bad_mod[1] = (bad_mod[1] & 0xf0) | 0x0d;
        for (ps, want) in [
            (ke(DhGroup::MlKem1024, alloc::vec![0; 1568]), kind::NO_PROPOSAL_CHOSEN),
            (ke(DhGroup::Curve25519, alloc::vec![9; 32]), kind::NO_PROPOSAL_CHOSEN),
            (Vec::new(), kind::INVALID_SYNTAX),
            (ke(DhGroup::MlKem768, ek()[..1183].to_vec()), kind::INVALID_SYNTAX),
            (
                ke(DhGroup::MlKem768, [ek(), alloc::vec![0]].concat()),
                kind::INVALID_SYNTAX,
            ),
            (ke(DhGroup::MlKem768, bad_mod), kind::INVALID_SYNTAX),
        ] {
            let mut sa = half_open();
            let before = sk_d(&sa);
            let (r, n) = answer(&mut sa, &ps);
            assert_eq!(n, Some(want), "{ps:?}");
            assert_eq!(r.then, Some(DownReason::PeerError(want)));
            after_response(&mut sa);
            assert_eq!(sk_d(&sa), before, "nothing derived");
            let State::HalfOpen { hs, .. } = sa.state() else {
                panic!()
            };
            assert!(hs.int.done.is_empty());
        }
    }

    /// IKE_INTERMEDIATE once the SA is up is INVALID_SYNTAX (RFC 9242 3: only before IKE_AUTH).
    #[test]
    fn not_after_ike_auth() {
        let mut sa = half_open();
        assert!(sa
            .establish(crate::Identity::from_str_config("10.0.0.1").unwrap())
            .is_some());
        let (r, n) = answer(&mut sa, &ke(DhGroup::MlKem768, ek()));
        assert_eq!((n, r.then), (Some(kind::INVALID_SYNTAX), None));
    }

    /// IKE_AUTH before the additional exchange ran: INVALID_SYNTAX, the SA is gone.
    #[test]
    fn ike_auth_before_the_additional_exchange_is_refused() {
        let mut sa = half_open();
        let cfg = config();
        let mut out = Output::default();
        let mut cx = Cx::new(&cfg, &mut out, Duration::ZERO, None);
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let id = crate::Identity::from_str_config("10.0.0.1").unwrap();
        let ps = alloc::vec![
            Payload::IdI(id.clone(), id.to_body()),
            Payload::Auth(crate::auth::AuthPayload {
                method: crate::auth::method::SHARED_KEY,
                data: alloc::vec![0; 48],
            }),
        ];
        let r = crate::task::ike_auth::respond(&mut sa, &mut cx, &ps, &mut rng);
        assert!(matches!(&r.payloads[0], Payload::Notify(n) if n.kind == kind::INVALID_SYNTAX));
        assert_eq!(r.then, Some(DownReason::PeerError(kind::INVALID_SYNTAX)));
        assert_eq!(sa.stats().invalid_syntax, 1);
    }

    /// IntAuth_A | P: the header says SK and the length of A | P; the SK header names the
    /// first inner payload with a length of 4 + |P| (RFC 9242 3.3.2).
    #[test]
    fn int_auth_data_layout() {
        let h = HeaderRepr {
            spi_i: 1,
            spi_r: 2,
            next_payload: pkind::SKF,
            exchange: ExchangeType::IkeIntermediate,
            initiator: true,
            response: false,
            message_id: 1,
            length: 9999,
        };
        let d = int_auth_data(&h, pkind::KE, &[0xaa; 10]);
        assert_eq!(d.len(), 28 + 4 + 10);
        assert_eq!(d[16], pkind::SK, "Next Payload: SK even for a fragmented message");
        assert_eq!(d[18], 43);
        assert_eq!(u32::from_be_bytes(d[24..28].try_into().unwrap()), 42);
        assert_eq!(&d[28..32], &[pkind::KE, 0, 0, 14]);
        assert_eq!(&d[32..], &[0xaa; 10]);
    }
}
