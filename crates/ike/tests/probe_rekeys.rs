//! The outside probe of rekeys, collisions and malformed requests (issue #39): each case as
//! the probe did it, against in-memory endpoints. The probe's peer is A's keys in the
//! hands of a forger (`Forger`): it sends what it likes on A's authenticated IKE SA and never
//! answers B's own requests.
mod common;
use common::*;
use ipsec_ike::alg::{ChildSuite, Encr};
use ipsec_ike::header::{ExchangeType, HeaderRepr};
use ipsec_ike::message::{emit_chain, parse_chain, Find, Message, Payload};
use ipsec_ike::notify::{kind, Notify};
use ipsec_ike::sa::{protocol, Proposal, SaPayload};
use ipsec_ike::sk::SkCipher;
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::*;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::net::SocketAddr;
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";

fn ts(s: &str) -> TrafficSelector {
    TrafficSelector::from_str_config(s).unwrap()
}

/// A and B up, A's IKE keys exported (for the forger).
fn up() -> Net {
    let (mut a, b) = pair(IKE, IKE, ESP, ESP);
    a.export_ike_keys = true;
    let mut net = Net::new(a, b);
    net.up();
    net
}

/// A peer with A's IKE SA keys that sends B whatever requests it likes.
struct Forger {
    seal: SkCipher,
    open: SkCipher,
    spi_i: u64,
    spi_r: u64,
    next_id: u32,
    a: SocketAddr,
    b: SocketAddr,
    rng: ChaCha20Rng,
}

impl Forger {
    fn of_a(net: &Net) -> Forger {
        let (info, keys) = net
            .events_a
            .iter()
            .find_map(|e| match e {
                Event::IkeUp { info, keys: Some(k) } => Some((info.clone(), k)),
                _ => None,
            })
            .expect("A's keys exported");
        let st = net.a.status(net.now);
        let next_id = st.iter().find(|s| s.spi_i == info.spi_i).unwrap().next_request_id;
        Forger {
            seal: SkCipher::new(info.suite.encr, info.suite.integ, &keys.sk_ei, &keys.sk_ai).unwrap(),
            open: SkCipher::new(info.suite.encr, info.suite.integ, &keys.sk_er, &keys.sk_ar).unwrap(),
            spi_i: info.spi_i,
            spi_r: info.spi_r,
            next_id,
            a: info.local,
            b: info.remote,
            rng: ChaCha20Rng::seed_from_u64(7),
        }
    }

    fn header(&self, exchange: ExchangeType) -> HeaderRepr {
        HeaderRepr {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            next_payload: 0,
            exchange,
            initiator: true,
            response: false,
            message_id: self.next_id,
            length: 0,
        }
    }

    /// Delivers a sealed request to B; returns B's verdict and its answer's payloads (B's
    /// own requests are dropped: the forger never answers them).
    fn deliver(&mut self, net: &mut Net, req: &[u8]) -> (Result<(), Dropped>, Option<Vec<Payload>>) {
        let id = self.next_id;
        self.next_id += 1;
        let r = net.b.handle_datagram(net.now, self.b, self.a, req, &mut self.rng);
        let mut answer = None;
        while let Some(t) = net.b.poll_transmit() {
            let Ok(m) = Message::parse(&t.payload) else { continue };
            if m.header.response && m.header.message_id == id && m.header.spi_i == self.spi_i {
                let (off, first) = m.chain.sk.unwrap();
                let inner = self.open.open(&t.payload, off).unwrap();
                answer = Some(parse_chain(&inner, first).unwrap().payloads);
            }
        }
        while let Some(e) = net.b.poll_event() {
            net.events_b.push(e);
        }
        (r, answer)
    }

    fn request(
        &mut self,
        net: &mut Net,
        exchange: ExchangeType,
        ps: &[Payload],
    ) -> (Result<(), Dropped>, Option<Vec<Payload>>) {
        let (first, inner) = emit_chain(ps).unwrap();
        let h = self.header(exchange);
        let req = self.seal.seal(&h, first, &inner, &mut self.rng).unwrap();
        self.deliver(net, &req)
    }

    fn nonce(&mut self) -> Vec<u8> {
        let mut n = vec![0u8; 32];
        self.rng.fill_bytes(&mut n);
        n
    }

    /// A CREATE_CHILD_SA for a child on `spi` (ours, inbound), rekeying the pair we receive
    /// on `rekeys` if given (N(REKEY_SA)).
    fn child(&mut self, net: &mut Net, spi: u32, rekeys: Option<u32>) -> (Result<(), Dropped>, Option<Vec<Payload>>) {
        let suite = ChildSuite {
            encr: Encr::AesGcm16_128,
            integ: None,
            esn: false,
        };
        let mut ps = Vec::new();
        if let Some(old) = rekeys {
            ps.push(Payload::Notify(Notify {
                protocol: protocol::ESP,
                spi: old.to_be_bytes().to_vec(),
                kind: kind::REKEY_SA,
                data: vec![],
            }));
        }
        ps.push(Payload::Sa(SaPayload {
            proposals: vec![Proposal::from_child_suite(1, spi, &suite)],
        }));
        ps.push(Payload::Nonce(self.nonce()));
        ps.push(Payload::TsI(vec![ts("10.1.0.0/16")]));
        ps.push(Payload::TsR(vec![ts("10.2.0.0/16")]));
        self.request(net, ExchangeType::CreateChildSa, &ps)
    }
}

fn error_kind(ps: &[Payload]) -> Option<u16> {
    ps.error_notify().map(|n| n.kind)
}

/// A's inbound SPI of its one child.
fn a_child(net: &Net) -> u32 {
    child_up(&net.events_a)[0].spi_in
}

fn b_children(net: &Net) -> Vec<&'static str> {
    net.b
        .status(net.now)
        .iter()
        .flat_map(|s| s.children.iter().map(|c| c.state))
        .collect()
}

/// Item 11: an ESP SPI of 0 (RFC 4303 2.1: reserved, never sent) offered in CREATE_CHILD_SA
/// is refused with NO_PROPOSAL_CHOSEN and nothing is agreed; before, B answered SA, Nr, TSi,
/// TSr and reported the child up (its installation then failed).
#[test]
fn an_esp_spi_of_zero_is_refused_and_nothing_agreed() {
    let mut net = up();
    let mut f = Forger::of_a(&net);
    let ups = child_up(&net.events_b).len();
    let (r, answer) = f.child(&mut net, 0, None);
    assert_eq!(r, Ok(()));
    let answer = answer.expect("answered");
    assert_eq!(error_kind(&answer), Some(kind::NO_PROPOSAL_CHOSEN), "{answer:?}");
    assert!(answer.sa().is_none());
    assert_eq!(child_up(&net.events_b).len(), ups, "no child reported up");
    // A rekey offering SPI 0 for the new pair: the same, and the old pair stays as it was.
    let old = a_child(&net);
    let (_, answer) = f.child(&mut net, 0, Some(old));
    assert_eq!(error_kind(&answer.unwrap()), Some(kind::NO_PROPOSAL_CHOSEN));
    assert_eq!(b_children(&net), ["installed"]);
    // A valid SPI still makes a child.
    let (_, answer) = f.child(&mut net, 0x1000, None);
    assert!(answer.unwrap().sa().is_some());
    assert_eq!(child_up(&net.events_b).len(), ups + 1);
}

/// Item 10: an authenticated request (its AES-GCM tag verifies) whose Pad Length (200)
/// exceeds its 9-octet plaintext is answered INVALID_SYNTAX (RFC 7296 2.21.3, 3.10.1) and
/// uses up its message ID; before, it was dropped as if its integrity check had failed.
#[test]
fn an_authenticated_request_with_bad_padding_is_answered_invalid_syntax() {
    use aes_gcm::aead::{AeadInPlace, KeyInit};
    let mut net = up();
    let sk_ei = net
        .events_a
        .iter()
        .find_map(|e| match e {
            Event::IkeUp { keys: Some(k), .. } => Some(k.sk_ei[..].to_vec()),
            _ => None,
        })
        .unwrap();
    let mut f = Forger::of_a(&net);
    let id = f.next_id;
    // HDR, SK { 8 octets of "payload", Pad Length 200 }: the tag over it is valid.
    let iv = [1u8; 8];
    let pt_len = 9;
    let total = 28 + 4 + 8 + pt_len + 16;
    let mut msg = vec![0u8; total];
    let mut h = f.header(ExchangeType::Informational);
    h.next_payload = 46;
    h.length = total as u32;
    h.emit(&mut msg).unwrap();
    msg[28] = 0; // no inner payload
    msg[30..32].copy_from_slice(&((total - 28) as u16).to_be_bytes());
    msg[32..40].copy_from_slice(&iv);
    let mut pt = vec![0u8; pt_len];
    pt[pt_len - 1] = 200;
    let cipher = aes_gcm::Aes128Gcm::new_from_slice(&sk_ei[..16]).unwrap();
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&sk_ei[16..20]);
    nonce[4..].copy_from_slice(&iv);
    let tag = cipher
        .encrypt_in_place_detached(&nonce.into(), &msg[..32], &mut pt)
        .unwrap();
    msg[40..40 + pt_len].copy_from_slice(&pt);
    msg[40 + pt_len..].copy_from_slice(&tag);
    let (r, answer) = f.deliver(&mut net, &msg);
    assert!(matches!(r, Err(Dropped::InvalidSyntax(Error::BadPadding))), "{r:?}");
    let answer = answer.expect("answered");
    assert!(
        matches!(&answer[..], [Payload::Notify(n)] if n.kind == kind::INVALID_SYNTAX),
        "{answer:?}"
    );
    let st = &net.b.status(net.now)[0];
    assert_eq!(st.expected_peer_id, id + 1, "its message ID is used up");
    assert_eq!(st.stats.invalid_syntax, 1);
    // The same with a broken tag: not from the peer, dropped unanswered.
    let mut forged = msg.clone();
    forged[total - 1] ^= 1;
    forged[..28].copy_from_slice(&msg[..28]);
    f.next_id = id + 1;
    let mut h2 = h;
    h2.message_id = id + 1;
    h2.emit(&mut forged).unwrap();
    let (r, answer) = f.deliver(&mut net, &forged);
    assert!(matches!(r, Err(Dropped::Malformed(_))), "{r:?}");
    assert!(answer.is_none());
}

/// Delivers one datagram to the other side.
fn deliver(net: &mut Net, from_a: bool, t: &Transmit) -> Result<(), Dropped> {
    let to = if from_a { &mut net.b } else { &mut net.a };
    to.handle_datagram(net.now, t.remote, t.local, &t.payload, &mut net.rng)
}

fn take(e: &mut Endpoint) -> Vec<Transmit> {
    std::iter::from_fn(|| e.poll_transmit()).collect()
}

/// Item 2: A rekeys its child; before answering, B rekeys the IKE SA, then answers the
/// child rekey on the old IKE SA. A answers the IKE SA rekey with TEMPORARY_FAILURE while
/// its child rekey is outstanding (RFC 7296 2.25.2), so the child rekey completes on the SA
/// it began on; B rekeys the IKE SA again later. Before, the child moved to the new IKE SA
/// and stayed `rekeying` for good.
#[test]
fn a_child_rekey_answered_after_an_ike_rekey_completes() {
    let mut net = up();
    let old = a_child(&net);
    net.a.rekey_child(net.now, old, &mut net.rng).unwrap();
    let child_req = take(&mut net.a);
    assert_eq!(child_req.len(), 1);
    net.b.rekey_ike(net.now, "b2a", &mut net.rng).unwrap();
    let ike_req = take(&mut net.b);
    assert_eq!(ike_req.len(), 1);
    // B's IKE SA rekey reaches A first; A's answer waits on the way.
    let _ = deliver(&mut net, false, &ike_req[0]);
    let a_answer = take(&mut net.a);
    // A's child rekey reaches B, still on the old IKE SA, and is answered there.
    let _ = deliver(&mut net, true, &child_req[0]);
    let b_answer = take(&mut net.b);
    for t in &a_answer {
        let _ = deliver(&mut net, true, t);
    }
    for t in &b_answer {
        let _ = deliver(&mut net, false, t);
    }
    net.pump();
    // Whatever else happens, within a minute the child is rekeyed on both sides, nothing
    // is left `rekeying`, and both IKE SAs work.
    let end = net.now + Duration::from_secs(60);
    while net.advance(end) {}
    net.now = end;
    for side in [&net.a, &net.b] {
        let st = side.status(net.now);
        let states: Vec<&str> = st.iter().flat_map(|s| s.children.iter().map(|c| c.state)).collect();
        assert_eq!(states, ["installed"], "{st:#?}");
        assert_eq!(st.len(), 1, "{st:#?}");
    }
    assert!(child_up(&net.events_a).iter().any(|c| c.rekeys == Some(old)));
    let new = net.a.children("a2b")[0].1;
    assert_ne!(new, old);
    net.a.rekey_child(net.now, new, &mut net.rng).unwrap();
    net.pump();
    assert!(child_up(&net.events_a).iter().any(|c| c.rekeys == Some(new)));
}

/// Item 2, the queued form: a child rekey of A's still waiting for the window when A
/// answers B's IKE SA rekey moves with the children to the new IKE SA and is sent there;
/// before, it stayed queued on the old SA, which sends nothing but its Delete.
#[test]
fn a_queued_child_rekey_moves_to_the_new_ike_sa() {
    let mut net = up();
    let old = a_child(&net);
    // A's liveness check is outstanding (its answer held back), so the rekey queues.
    net.a.check_liveness(net.now, "a2b", &mut net.rng).unwrap();
    let dpd = take(&mut net.a);
    net.a.rekey_child(net.now, old, &mut net.rng).unwrap();
    assert!(take(&mut net.a).is_empty(), "queued behind the liveness check");
    net.b.rekey_ike(net.now, "b2a", &mut net.rng).unwrap();
    net.pump();
    for t in &dpd {
        let _ = deliver(&mut net, true, t);
    }
    net.pump();
    assert!(
        child_up(&net.events_a).iter().any(|c| c.rekeys == Some(old)),
        "the child rekey went out on the new IKE SA"
    );
    let st = net.a.status(net.now);
    let states: Vec<&str> = st.iter().flat_map(|s| s.children.iter().map(|c| c.state)).collect();
    assert_eq!(states, ["installed"], "{st:#?}");
}

/// Item 3: two replaced pairs whose Deletes the peer never sends, and which it never lets
/// B delete (no answer): after REKEYED_GRACE B deletes them itself, one Delete at a time.
/// The second pair's deadline must not stay in the past while its Delete waits for the
/// window (the IKE thread re-ran the same timer with a 0 ms sleep, 100 % of a core).
#[test]
fn no_deadline_stays_in_the_past_while_a_delete_waits() {
    let mut net = up();
    let mut f = Forger::of_a(&net);
    let c1 = a_child(&net);
    let (_, r) = f.child(&mut net, 0x2000, Some(c1));
    assert!(r.unwrap().sa().is_some());
    let (_, r) = f.child(&mut net, 0x3000, Some(0x2000));
    assert!(r.unwrap().sa().is_some());
    assert_eq!(b_children(&net), ["rekeyed", "rekeyed", "installed"]);
    // Past the grace time B deletes both replaced pairs: the first Delete is sent, the
    // second waits for the window; the forger answers neither.
    let mut timeouts = 0;
    let end = net.now + Duration::from_secs(200);
    while let Some(d) = net.b.poll_timeout().filter(|d| *d <= end) {
        let now = net.now.max(d);
        net.now = now;
        net.b.handle_timeout(now, &mut net.rng);
        take(&mut net.b);
        timeouts += 1;
        assert!(
            net.b.poll_timeout().is_none_or(|d| d > now),
            "deadline {:?} not advanced at {now:?} after {timeouts} timeouts",
            net.b.poll_timeout()
        );
        assert!(timeouts < 1000, "the timer loop spins");
    }
}

/// Item 4 (children): chained child rekeys that never delete the pairs they replace stop
/// at the cap on children, replaced ones included (NO_ADDITIONAL_SAS); before, 1,000 of
/// them made 1,001 children. Deleting the replaced pairs makes room again.
#[test]
fn chained_child_rekeys_stop_at_the_cap() {
    let mut net = up();
    let mut f = Forger::of_a(&net);
    let mut old = a_child(&net);
    let mut refused = 0;
    for i in 0..300u32 {
        let spi = 0x10_000 + i;
        let (_, r) = f.child(&mut net, spi, Some(old));
        let r = r.unwrap();
        match error_kind(&r) {
            None => old = spi,
            Some(k) => {
                assert_eq!(k, kind::NO_ADDITIONAL_SAS);
                refused += 1;
            }
        }
    }
    let n = b_children(&net).len();
    assert!(n <= limits::MAX_CHILD_SAS * 2, "{n} children");
    assert!(refused > 0);
    // So are new children (the replaced ones count).
    let (_, r) = f.child(&mut net, 0x9999, None);
    assert_eq!(error_kind(&r.unwrap()), Some(kind::NO_ADDITIONAL_SAS));
}

/// Item 4 (IKE SAs): chained IKE SA rekeys whose Deletes never arrive stop at the cap of
/// IKE SAs per peer identity, replaced ones included (NO_ADDITIONAL_SAS); before, 4,300 of
/// them made 4,601 IKE SAs, past `MAX_IKE_SAS`, and locked every other peer out.
#[test]
fn chained_ike_rekeys_stop_at_the_cap_per_identity() {
    let mut net = up();
    // A's Deletes of the replaced IKE SAs never arrive.
    net.drop = Box::new(|from_a, t| from_a && kind_of(t) == (37, false));
    let cap = limits::MAX_IKE_SAS_PER_IDENTITY;
    for _ in 0..cap + 10 {
        net.a.rekey_ike(net.now, "a2b", &mut net.rng).unwrap();
        net.pump();
    }
    let n = net.b.ike_sa_count();
    assert!(n <= cap, "{n} IKE SAs of one identity (cap {cap})");
    // B answered the rekeys past the cap with NO_ADDITIONAL_SAS and stays up.
    let st = net.b.status(net.now);
    assert_eq!(st.iter().filter(|s| s.state == "established").count(), 1, "{st:#?}");
}

/// Item 4 (IKE SAs, new ones): one identity's fresh IKE_SA_INIT + IKE_AUTH handshakes
/// without INITIAL_CONTACT stop at the same cap (AUTHENTICATION_FAILED, as strongSwan's
/// uniqueness policy `keep` answers); with INITIAL_CONTACT the peer's other SAs go (2.4) and
/// it gets in. Before, every handshake made one more IKE SA, up to `MAX_IKE_SAS`.
#[test]
fn fresh_handshakes_of_one_identity_stop_at_the_cap() {
    let (mut a, b) = pair(IKE, IKE, ESP, ESP);
    a.connections[0].initial_contact = false;
    let mut net = Net::new(a.clone(), b);
    let cap = limits::MAX_IKE_SAS_PER_IDENTITY;
    for i in 0..cap + 4 {
        // A new initiator each time (A's own endpoint would not start a second SA).
        net.a = Endpoint::new(a.clone());
        net.a.initiate(net.now, "a2b", &mut net.rng).unwrap();
        net.pump();
        let up = net
            .b
            .status(net.now)
            .iter()
            .filter(|s| s.state == "established")
            .count();
        assert_eq!(up, (i + 1).min(cap), "after {} handshakes", i + 1);
    }
    assert!(net.events_a.iter().any(|e| matches!(
        e,
        Event::IkeDown {
            reason: DownReason::AuthFailed,
            ..
        }
    )));
    // With INITIAL_CONTACT the old ones go and the new one is in.
    a.connections[0].initial_contact = true;
    net.a = Endpoint::new(a);
    net.a.initiate(net.now, "a2b", &mut net.rng).unwrap();
    net.pump();
    let st = net.b.status(net.now);
    assert_eq!(st.iter().filter(|s| s.state == "established").count(), 1, "{st:#?}");
}
