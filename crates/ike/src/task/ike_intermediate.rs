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

fn handshake(state: &mut State) -> Option<(&mut Handshake, &mut Crypto)> {
    match state {
        State::HalfOpen { hs, crypto } | State::AuthSent { hs, crypto } => Some((hs, crypto)),
        _ => None,
    }
}

/// Adds one IKE_INTERMEDIATE message to its sender's IntAuth chain, with the sender's SK_p
/// of the keys that protect the message.
fn add(sa: &mut IkeSa, from_initiator: bool, data: &[u8]) {
    let Some((hs, crypto)) = handshake(&mut sa.state) else {
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
        sa.role,
        crypto.suite,
        Some(&crypto.keys.sk_d),
        shared,
        &hs.ni,
        &hs.nr,
        sa.spi_i,
        sa.spi_r,
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
            sa.stats.invalid_syntax += 1;
            sa.kill(cx, DownReason::PeerError(kind::INVALID_SYNTAX));
            return Next::Done;
        };
        let State::AuthSent { hs, crypto } = &sa.state else {
            return Next::Done;
        };
        let Ok(new) = next_keys(sa, crypto, hs, &shared) else {
            sa.kill(cx, DownReason::PeerError(kind::INVALID_SYNTAX));
            return Next::Done;
        };
        if let State::AuthSent { hs, crypto } = &mut sa.state {
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
    let role = sa.role;
    let (spi_i, spi_r) = (sa.spi_i, sa.spi_r);
    let State::HalfOpen { hs, crypto } = &mut sa.state else {
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
    if let State::HalfOpen { hs, crypto } = &mut sa.state {
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
        sa.tasks
            .queue_front(crate::task::Task::IkeIntermediate(IkeIntermediate::new(n, g)));
    }
}

/// Whether the peer said it supports IKE_INTERMEDIATE in IKE_SA_INIT.
pub(crate) fn peer_supports(ps: &[Payload]) -> bool {
    ps.notify(kind::INTERMEDIATE_EXCHANGE_SUPPORTED).is_some()
}
