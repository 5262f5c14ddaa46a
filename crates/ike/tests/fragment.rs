//! IKE fragmentation (RFC 7383) between two in-memory endpoints with a small fragment size:
//! IKE_AUTH fragmented both ways, lost, reordered, duplicated and forged fragments, and the
//! bounds on reassembly, each refused with its typed reason.
mod common;
use common::*;
use ipsec_ike::fragment::{FragmentError, FragmentRepr};
use ipsec_ike::header::{ExchangeType, HeaderRepr, IkePacket, HEADER_LEN};
use ipsec_ike::message::{Find, Message};
use ipsec_ike::notify::kind;
use ipsec_ike::payload::kind as pkind;
use ipsec_ike::sk::SkCipher;
use ipsec_ike::*;
use std::cell::RefCell;
use std::rc::Rc;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const IKE_CBC: &str = "aes256-sha256-prfsha256-x25519";
const ESP: &str = "aes128gcm16";
/// Six subnets a side: an IKE_AUTH of some 400 bytes each way, so a 256-byte fragment
/// size cuts both into several fragments.
const A_NETS: &str = "10.1.0.0/16,10.3.0.0/16,10.5.0.0/16,10.7.0.0/16,10.9.0.0/16,10.11.0.0/16";
const B_NETS: &str = "10.2.0.0/16,10.4.0.0/16,10.6.0.0/16,10.8.0.0/16,10.10.0.0/16,10.12.0.0/16";
const SIZE: u16 = 256;

fn frag_pair(ike: &str, size_a: u16, size_b: u16) -> (Config, Config) {
    let mut a = conn("a2b", A_IP, Some(B_IP), b"correct horse", ike);
    a.children.push(ChildConfig::new("net", A_NETS, B_NETS, ESP).unwrap());
    a.fragment_size = size_a;
    let mut b = conn("b2a", B_IP, Some(A_IP), b"correct horse", ike);
    b.children.push(ChildConfig::new("net", B_NETS, A_NETS, ESP).unwrap());
    b.fragment_size = size_b;
    let mut a = Config::new(vec![a]);
    a.export_ike_keys = true;
    (a, Config::new(vec![b]))
}

/// Header of a datagram (IKE on port 500: no marker).
fn header(t: &Transmit) -> HeaderRepr {
    HeaderRepr::parse(&IkePacket::new_checked(&t.payload[..]).unwrap()).unwrap()
}

/// The SKF of a datagram, if it is a fragment.
fn fragment(t: &Transmit) -> Option<FragmentRepr> {
    let h = header(t);
    (h.next_payload == pkind::SKF).then(|| FragmentRepr::parse(&t.payload, &h).unwrap())
}

/// IKE_AUTH datagrams sent, (from A, from B), and whether each was a fragment.
fn ike_auth(net: &Net) -> (Vec<&Transmit>, Vec<&Transmit>) {
    let of = |from_a: bool| {
        net.sent
            .iter()
            .filter(|s| s.from_a == from_a && header(&s.t).exchange == ExchangeType::IkeAuth)
            .map(|s| &s.t)
            .collect::<Vec<_>>()
    };
    (of(true), of(false))
}

fn established(net: &Net) {
    assert_eq!(ike_up(&net.events_a).len(), 1, "A up");
    assert_eq!(ike_up(&net.events_b).len(), 1, "B up");
    assert_eq!(child_up(&net.events_a).len(), 1);
    assert_eq!(child_up(&net.events_b).len(), 1);
}

#[test]
fn ike_auth_is_fragmented_both_ways_and_completes() {
    for ike in [IKE, IKE_CBC] {
        let (a, b) = frag_pair(ike, SIZE, SIZE);
        let mut net = Net::new(a, b);
        net.up();
        established(&net);
        // IKE_SA_INIT announced it both ways (2.3) and was not fragmented (2.5).
        for s in net
            .sent
            .iter()
            .filter(|s| header(&s.t).exchange == ExchangeType::IkeSaInit)
        {
            let m = Message::parse(&s.t.payload).unwrap();
            assert!(m.chain.payloads.notify(kind::IKEV2_FRAGMENTATION_SUPPORTED).is_some());
        }
        let (from_a, from_b) = ike_auth(&net);
        for (who, ds) in [("A", &from_a), ("B", &from_b)] {
            assert!(ds.len() >= 2, "{ike}: {who} sent {} IKE_AUTH datagram(s)", ds.len());
            let fs: Vec<FragmentRepr> = ds.iter().map(|t| fragment(t).expect("a fragment")).collect();
            let total = fs[0].total as usize;
            assert_eq!(total, ds.len());
            assert_eq!(
                fs.iter().map(|f| f.number as usize).collect::<Vec<_>>(),
                (1..=total).collect::<Vec<_>>()
            );
            // 2.5.1: each fits the IP datagram of SIZE bytes (IPv4 20 + UDP 8).
            assert!(ds.iter().all(|t| t.payload.len() + 28 <= SIZE as usize), "{who}");
            // 2.5: Next Payload of fragment 1 is the first inner payload (IDi / IDr), 0 after.
            assert_eq!(fs[0].next_payload, if who == "A" { pkind::IDI } else { pkind::IDR });
            assert!(fs[1..].iter().all(|f| f.next_payload == 0));
        }
        let st = net.a.totals();
        assert_eq!(st.fragments_sent, from_a.len() as u64);
        assert_eq!(
            (st.fragments_received, st.fragmented_messages),
            (from_b.len() as u64, 1)
        );
        assert_eq!(net.b.totals().fragmented_messages, 1);
        assert!(net.drops.is_empty(), "{:?}", net.drops);
        // Later exchanges too: a liveness check is small and goes whole, a child rekey is
        // large (six selectors a side) and goes in fragments.
        let before = net.sent.len();
        net.a.check_liveness(net.now, "a2b", &mut net.rng).unwrap();
        net.pump();
        assert!(net.sent[before..].iter().all(|s| fragment(&s.t).is_none()));
        let spi = child_up(&net.events_a)[0].spi_in;
        net.a.rekey_child(net.now, spi, &mut net.rng).unwrap();
        net.pump();
        let rekey: Vec<_> = net.sent[before..]
            .iter()
            .filter(|s| header(&s.t).exchange == ExchangeType::CreateChildSa)
            .collect();
        assert!(rekey.iter().filter(|s| s.from_a).count() >= 2);
        assert!(rekey.iter().filter(|s| !s.from_a).count() >= 2);
        assert_eq!(net.a.totals().child_rekeys, 1, "{ike}");
        assert!(net.drops.is_empty(), "{:?}", net.drops);
    }
}

#[test]
fn without_support_on_one_side_nothing_is_fragmented() {
    for no_a in [true, false] {
        let (mut a, mut b) = frag_pair(IKE, SIZE, SIZE);
        if no_a {
            a.connections[0].fragmentation = false;
        } else {
            b.connections[0].fragmentation = false;
        }
        let mut net = Net::new(a, b);
        net.up();
        established(&net);
        let (from_a, from_b) = ike_auth(&net);
        assert_eq!((from_a.len(), from_b.len()), (1, 1));
        assert!(fragment(from_a[0]).is_none() && fragment(from_b[0]).is_none());
        // The one that does not support it did not announce it.
        let silent = net
            .sent
            .iter()
            .find(|s| s.from_a == no_a && header(&s.t).exchange == ExchangeType::IkeSaInit)
            .unwrap();
        let m = Message::parse(&silent.t.payload).unwrap();
        assert!(m.chain.payloads.notify(kind::IKEV2_FRAGMENTATION_SUPPORTED).is_none());
    }
}

/// Drops the first datagram for which `pick(from_a, fragment)` holds, once.
fn drop_once(net: &mut Net, pick: impl Fn(bool, &FragmentRepr) -> bool + 'static) -> Rc<RefCell<bool>> {
    let done = Rc::new(RefCell::new(false));
    let d = done.clone();
    net.drop = Box::new(move |from_a, t| {
        if *d.borrow() {
            return false;
        }
        match fragment(t) {
            Some(f) if pick(from_a, &f) => {
                *d.borrow_mut() = true;
                true
            }
            _ => false,
        }
    });
    done
}

#[test]
fn a_lost_request_fragment_is_retransmitted_with_all_the_others() {
    let (a, b) = frag_pair(IKE, SIZE, SIZE);
    let mut net = Net::new(a, b);
    let dropped = drop_once(&mut net, |from_a, f| from_a && f.number == 1);
    net.up();
    assert!(*dropped.borrow());
    assert!(ike_up(&net.events_a).is_empty(), "not up without fragment 1");
    let limit = net.now + std::time::Duration::from_secs(10);
    while ike_up(&net.events_a).is_empty() && net.advance(limit) {}
    established(&net);
    let (from_a, _) = ike_auth(&net);
    let total = fragment(from_a[0]).unwrap().total as usize;
    assert_eq!(from_a.len(), 2 * total, "2.8: every fragment sent again");
    assert_eq!(net.a.totals().retransmits, 1);
}

#[test]
fn a_lost_response_fragment_brings_the_whole_response_again() {
    let (a, b) = frag_pair(IKE, SIZE, SIZE);
    let mut net = Net::new(a, b);
    let dropped = drop_once(&mut net, |from_a, f| !from_a && f.number == 2);
    net.up();
    assert!(*dropped.borrow());
    let limit = net.now + std::time::Duration::from_secs(10);
    while ike_up(&net.events_a).is_empty() && net.advance(limit) {}
    established(&net);
    let (from_a, from_b) = ike_auth(&net);
    let total_b = fragment(from_b[0]).unwrap().total as usize;
    assert_eq!(from_b.len(), 2 * total_b, "the kept response, all of it, once");
    // 2.6.1: only fragment 1 of the retransmitted request made B answer; the others were
    // refused as such.
    let not_first = net
        .drops
        .iter()
        .filter(|(at_a, d)| !at_a && *d == Dropped::Fragment(FragmentError::NotFirst))
        .count();
    assert_eq!(not_first, from_a.len() / 2 - 1);
}

/// A's IKE_AUTH fragments, held back from B.
fn held_request() -> (Net, Vec<Transmit>) {
    let (a, b) = frag_pair(IKE, SIZE, SIZE);
    let mut net = Net::new(a, b);
    let held = Rc::new(RefCell::new(Vec::new()));
    let h = held.clone();
    net.drop = Box::new(move |from_a, t| {
        let hold = from_a && fragment(t).is_some();
        if hold {
            h.borrow_mut().push(t.clone());
        }
        hold
    });
    net.up();
    net.drop = Box::new(|_, _| false);
    let held = held.borrow().clone();
    assert!(held.len() >= 2, "{} fragments", held.len());
    (net, held)
}

fn deliver_to_b(net: &mut Net, t: &Transmit) -> Result<(), Dropped> {
    net.b
        .handle_datagram(net.now, t.remote, t.local, &t.payload, &mut net.rng)
}

#[test]
fn fragments_out_of_order_are_reassembled() {
    let (mut net, held) = held_request();
    for t in held.iter().rev() {
        deliver_to_b(&mut net, t).unwrap();
    }
    net.pump();
    established(&net);
}

#[test]
fn duplicate_fragments_are_ignored() {
    let (mut net, held) = held_request();
    deliver_to_b(&mut net, &held[1]).unwrap();
    assert_eq!(
        deliver_to_b(&mut net, &held[1]),
        Err(Dropped::Fragment(FragmentError::Duplicate))
    );
    for (i, t) in held.iter().enumerate() {
        if i != 1 {
            deliver_to_b(&mut net, t).unwrap();
        }
    }
    net.pump();
    established(&net);
    assert_eq!(net.b.totals().fragments_dropped, 1, "the second copy of fragment 2");
}

#[test]
fn a_forged_fragment_is_dropped_and_reassembly_goes_on() {
    let (mut net, held) = held_request();
    deliver_to_b(&mut net, &held[0]).unwrap();
    // The same fragment 2 with a ciphertext byte changed: its ICV fails (2.6).
    let mut forged = held[1].clone();
    let at = forged.payload.len() - 20;
    forged.payload[at] ^= 1;
    assert_eq!(
        deliver_to_b(&mut net, &forged),
        Err(Dropped::Fragment(FragmentError::BadIntegrity))
    );
    // It was not kept: the real fragment 2 is no duplicate.
    for t in &held[1..] {
        deliver_to_b(&mut net, t).unwrap();
    }
    net.pump();
    established(&net);
    let st = net.b.totals();
    assert_eq!((st.fragments_dropped, st.fragments_received), (1, held.len() as u64));
}

/// Fragments of an INFORMATIONAL request from A to B made with A's keys: authentic, so
/// only the bounds can refuse them. `sizes`: each fragment's plaintext length.
fn forge(net: &Net, total: u16, sizes: &[usize]) -> Vec<Vec<u8>> {
    let keys = net
        .events_a
        .iter()
        .find_map(|e| match e {
            Event::IkeUp { keys, .. } => keys.as_ref(),
            _ => None,
        })
        .unwrap();
    let mut out = SkCipher::new(keys.suite.encr, keys.suite.integ, &keys.sk_ei, &keys.sk_ai).unwrap();
    let st = &net.a.status(net.now)[0];
    let h = HeaderRepr {
        spi_i: keys.spi_i,
        spi_r: keys.spi_r,
        next_payload: 0,
        exchange: ExchangeType::Informational,
        initiator: true,
        response: false,
        message_id: st.next_request_id,
        length: 0,
    };
    let mut rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(9);
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let number = i as u16 + 1;
            let mut fields = [0u8; 4];
            fields[..2].copy_from_slice(&number.to_be_bytes());
            fields[2..].copy_from_slice(&total.to_be_bytes());
            let next = if number == 1 { pkind::NOTIFY } else { 0 };
            out.seal_payload(&h, pkind::SKF, next, &fields, &vec![0; n], &mut rng)
                .unwrap()
        })
        .collect()
}

fn to_b(net: &mut Net, d: &[u8]) -> Result<(), Dropped> {
    let (l, r) = (
        std::net::SocketAddr::new(ip(B_IP), 500),
        std::net::SocketAddr::new(ip(A_IP), 500),
    );
    net.b.handle_datagram(net.now, l, r, d, &mut net.rng)
}

#[test]
fn reassembly_bounds_are_refused_with_their_reason() {
    let (a, b) = frag_pair(IKE, SIZE, SIZE);
    let mut net = Net::new(a, b);
    net.up();
    established(&net);
    // Total Fragments above the bound.
    let too_many = forge(&net, 33, &[10]);
    assert_eq!(
        to_b(&mut net, &too_many[0]),
        Err(Dropped::Fragment(FragmentError::TooManyFragments))
    );
    // More bytes than a message may have: 32 fragments of 2100 bytes (67 200 > 65 527).
    let big = forge(&net, 32, &[2100; 32]);
    for d in &big[..31] {
        to_b(&mut net, d).unwrap();
    }
    assert_eq!(to_b(&mut net, &big[31]), Err(Dropped::Fragment(FragmentError::TooLong)));
    // Lower Total Fragments than the fragments kept: dropped; higher: starts anew.
    let three = forge(&net, 3, &[8, 8, 8]);
    to_b(&mut net, &three[0]).unwrap();
    let two = forge(&net, 2, &[8, 8]);
    assert_eq!(
        to_b(&mut net, &two[1]),
        Err(Dropped::Fragment(FragmentError::StaleTotal))
    );
    // Fragment number above the total.
    let mut bad = two[1].clone();
    bad[HEADER_LEN + 4..HEADER_LEN + 6].copy_from_slice(&5u16.to_be_bytes());
    assert_eq!(to_b(&mut net, &bad), Err(Dropped::Fragment(FragmentError::BadNumber)));
    // None of this broke the SA: a real exchange still works.
    let before = net.b.totals().requests_answered;
    net.a.check_liveness(net.now, "a2b", &mut net.rng).unwrap();
    net.pump();
    assert_eq!(net.b.totals().requests_answered, before + 1);
    assert!(downs(&net.events_a).is_empty() && downs(&net.events_b).is_empty());
}

#[test]
fn fragments_without_negotiation_are_refused() {
    let (mut a, b) = frag_pair(IKE, SIZE, SIZE);
    a.connections[0].fragmentation = false;
    let mut net = Net::new(a, b);
    net.up();
    established(&net);
    let f = forge(&net, 2, &[8, 8]);
    assert_eq!(
        to_b(&mut net, &f[0]),
        Err(Dropped::Fragment(FragmentError::NotNegotiated))
    );
}
