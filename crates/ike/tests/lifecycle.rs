//! CREATE_CHILD_SA in memory (RFC 7296 1.3, 2.8, 2.18): further children, child rekeying
//! from either side and from the lifetimes, with PFS, collisions, IKE SA rekeying, and the
//! answers every request gets (INVALID_SYNTAX for an authenticated malformed one).
mod common;
use common::*;
use ipsec_ike::*;
use std::collections::BTreeMap;
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";

/// The child pairs each side has now (by the events): inbound SPI -> info.
fn installed(ev: &[Event]) -> BTreeMap<u32, ChildSaInfo> {
    let mut m = BTreeMap::new();
    for e in ev {
        match e {
            Event::ChildUp(c) => {
                m.insert(c.spi_in, c.clone());
            }
            Event::ChildDown { spi_in, .. } => {
                m.remove(spi_in);
            }
            _ => {}
        }
    }
    m
}

/// Each of A's pairs is one of B's, mirrored, with the same keys.
fn assert_mirrored(net: &Net) -> Vec<(u32, u32)> {
    let a = installed(&net.events_a);
    let b = installed(&net.events_b);
    assert_eq!(a.len(), b.len(), "A {a:?}\nB {b:?}");
    let mut pairs = Vec::new();
    for (spi, ca) in &a {
        let cb = b
            .get(&ca.spi_out)
            .unwrap_or_else(|| panic!("B has no pair for A's {spi:08x}: {b:?}"));
        assert_eq!(cb.spi_out, *spi);
        assert_eq!(*ca.encr_out, *cb.encr_in);
        assert_eq!(*ca.encr_in, *cb.encr_out);
        assert_eq!(ca.local_ts, cb.remote_ts);
        pairs.push((*spi, ca.spi_out));
    }
    pairs
}

#[test]
fn a_further_child_comes_up_with_create_child_sa() {
    let (mut a, mut b) = pair(IKE, IKE, ESP, ESP);
    a.connections[0]
        .children
        .push(ChildConfig::new("other", "10.5.0.0/16", "10.6.0.0/16", ESP).unwrap());
    b.connections[0]
        .children
        .push(ChildConfig::new("other", "10.6.0.0/16", "10.5.0.0/16", ESP).unwrap());
    let mut net = Net::new(a, b);
    net.up();
    let pkt = PacketSelectors {
        src: ip("10.5.0.1"),
        dst: ip("10.6.0.1"),
        protocol: 1,
        src_port: 0,
        dst_port: 0,
    };
    net.a
        .acquire(net.now, net.a.child_id("a2b", "other").unwrap(), pkt, &mut net.rng)
        .unwrap();
    net.pump();
    let pairs = assert_mirrored(&net);
    assert_eq!(pairs.len(), 2);
    let other: Vec<_> = child_up(&net.events_a)
        .into_iter()
        .filter(|c| c.child == "other")
        .collect();
    assert_eq!(other.len(), 1);
    assert_eq!(
        other[0].local_ts[0].to_string(),
        "10.5.0.0/16",
        "B narrows to its policy"
    );
    assert_eq!(net.a.ike_sa_count(), 1);
    // Again while it is up: nothing.
    net.a
        .acquire(net.now, net.a.child_id("a2b", "other").unwrap(), pkt, &mut net.rng)
        .unwrap();
    net.pump();
    assert_eq!(child_up(&net.events_a).len(), 2);
    // A child B has no configuration for: TS_UNACCEPTABLE, the IKE SA stays.
    let (mut a, b) = pair(IKE, IKE, ESP, ESP);
    a.connections[0]
        .children
        .push(ChildConfig::new("nope", "10.7.0.0/16", "10.8.0.0/16", ESP).unwrap());
    let mut net = Net::new(a, b);
    net.up();
    net.a
        .initiate_child(net.now, net.a.child_id("a2b", "nope").unwrap(), &mut net.rng)
        .unwrap();
    net.pump();
    assert!(net
        .events_a
        .iter()
        .any(|e| matches!(e, Event::TsUnacceptable { child, .. } if child == "nope")));
    assert_eq!(assert_mirrored(&net).len(), 1);
    assert!(downs(&net.events_a).is_empty());
}

fn rekey_by(from_a: bool, pfs: bool) {
    let esp = if pfs { "aes128gcm16-x25519" } else { ESP };
    let (a, b) = pair(IKE, IKE, esp, esp);
    let mut net = Net::new(a, b);
    net.up();
    let before = assert_mirrored(&net);
    let (old_a, old_b) = before[0];
    if from_a {
        net.a.rekey_child(net.now, old_a, &mut net.rng).unwrap();
    } else {
        net.b.rekey_child(net.now, old_b, &mut net.rng).unwrap();
    }
    net.pump();
    let after = assert_mirrored(&net);
    assert_eq!(after.len(), 1, "the old pair is deleted after the rekey");
    assert_ne!(after[0], before[0]);
    // Both sides announced the new pair as replacing the old one before it went.
    for (ev, old) in [(&net.events_a, old_a), (&net.events_b, old_b)] {
        let up = ev
            .iter()
            .position(|e| matches!(e, Event::ChildUp(c) if c.rekeys == Some(old)))
            .expect("new pair names the old one");
        let down = ev
            .iter()
            .position(|e| matches!(e, Event::ChildDown { spi_in, .. } if *spi_in == old))
            .expect("old pair goes");
        assert!(up < down, "make before break");
    }
    // The new pair has new keys.
    let a_new = installed(&net.events_a);
    let first = child_up(&net.events_a)[0].clone();
    assert_ne!(*a_new.values().next().unwrap().encr_out, *first.encr_out);
    // The rekey exchange carried a KE payload exactly when PFS is configured.
    let ccsa: Vec<_> = net.sent.iter().filter(|s| kind_of(&s.t).0 == 36).collect();
    assert_eq!(ccsa.len(), 2, "one CREATE_CHILD_SA request and response");
    assert!(downs(&net.events_a).is_empty() && downs(&net.events_b).is_empty());
}

#[test]
fn child_rekeyed_by_the_initiator_make_before_break() {
    rekey_by(true, false);
}

#[test]
fn child_rekeyed_by_the_responder() {
    rekey_by(false, false);
}

#[test]
fn child_rekeyed_with_a_new_key_exchange() {
    rekey_by(true, true);
    rekey_by(false, true);
}

#[test]
fn children_are_rekeyed_at_their_rekey_time_and_keep_being_rekeyed() {
    let (mut a, mut b) = pair(IKE, IKE, ESP, ESP);
    for c in [&mut a, &mut b] {
        let l = &mut c.connections[0].children[0].lifetimes;
        l.rekey_time = Duration::from_secs(60);
        l.life_time = Duration::from_secs(90);
        l.rand_time = Duration::from_secs(10);
    }
    let mut net = Net::new(a, b);
    net.up();
    let start = net.now;
    while net.advance(start + Duration::from_secs(600)) {}
    net.now = start + Duration::from_secs(600);
    let ups = child_up(&net.events_a).len();
    // One pair at a time, rekeyed every 50-60 s for 10 minutes: about 10 rekeys.
    assert!((10..=13).contains(&(ups - 1)), "{ups} child_up events");
    assert_eq!(assert_mirrored(&net).len(), 1);
    assert!(child_downs(&net.events_a)
        .iter()
        .all(|(_, r)| *r != DownReason::Timeout));
    assert!(downs(&net.events_a).is_empty(), "the IKE SA stays");
}

#[test]
fn simultaneous_child_rekeys_leave_one_pair() {
    // Both start a rekey of the same pair before either request arrives (2.8.1).
    for seed in 0..8 {
        let (a, b) = pair(IKE, IKE, ESP, ESP);
        let mut net = Net::new(a, b);
        net.rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(seed);
        net.up();
        let (old_a, old_b) = assert_mirrored(&net)[0];
        net.a.rekey_child(net.now, old_a, &mut net.rng).unwrap();
        net.b.rekey_child(net.now, old_b, &mut net.rng).unwrap();
        net.pump();
        let pairs = assert_mirrored(&net);
        assert_eq!(pairs.len(), 1, "seed {seed}: one pair survives: {pairs:?}");
        assert_ne!(pairs[0].0, old_a);
        // Settle the timers too: nothing else goes.
        let t = net.now + Duration::from_secs(120);
        while net.advance(t) {}
        assert_eq!(assert_mirrored(&net), pairs);
    }
}

#[test]
fn ike_sa_rekeyed_from_either_side_keeps_the_children() {
    for from_a in [true, false] {
        let (a, b) = pair(IKE, IKE, ESP, ESP);
        let mut net = Net::new(a, b);
        net.up();
        let before = assert_mirrored(&net);
        if from_a {
            net.a.rekey_ike(net.now, "a2b", &mut net.rng).unwrap();
        } else {
            net.b.rekey_ike(net.now, "b2a", &mut net.rng).unwrap();
        }
        net.pump();
        for ev in [&net.events_a, &net.events_b] {
            assert!(ev.iter().any(|e| matches!(e, Event::IkeRekeyed { .. })));
            assert_eq!(downs(ev), [DownReason::Rekeyed]);
            assert!(child_downs(ev).is_empty(), "children moved, none went down");
        }
        assert_eq!((net.a.ike_sa_count(), net.b.ike_sa_count()), (1, 1));
        assert_eq!(assert_mirrored(&net), before);
        // The new SA works: a child rekey and a Delete over it.
        let (spi, _) = before[0];
        net.a.rekey_child(net.now, spi, &mut net.rng).unwrap();
        net.pump();
        assert_eq!(assert_mirrored(&net).len(), 1);
        net.a.terminate(net.now, "a2b", &mut net.rng).unwrap();
        net.pump();
        assert_eq!((net.a.ike_sa_count(), net.b.ike_sa_count()), (0, 0));
    }
}

/// The commands by connection handle (a name resolved once, `Endpoint::conn_id`) do what
/// their by-name forms do: initiate, rekey the IKE SA, rekey a child's pairs, terminate; an
/// unknown name or handle is refused.
#[test]
fn commands_by_connection_handle() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    assert_eq!(net.a.conn_id("nope"), Err(CommandError::UnknownConnection));
    assert_eq!(
        net.a.terminate_conn(net.now, ConnId(7), &mut net.rng),
        Err(CommandError::UnknownConnection)
    );
    let id = net.a.conn_id("a2b").unwrap();
    assert_eq!(net.a.conn_ids().collect::<Vec<_>>(), [id]);
    assert_eq!(
        net.a.rekey_ike_conn(net.now, id, &mut net.rng),
        Err(CommandError::NotEstablished)
    );
    net.a.initiate_conn(net.now, id, &mut net.rng).unwrap();
    net.pump();
    let before = assert_mirrored(&net);
    let child = child_up(&net.events_a)[0].child.clone();
    assert_eq!(net.a.child_spis(id, &child), [before[0].0]);
    assert!(net.a.child_spis(id, "other").is_empty());
    net.a.rekey_ike_conn(net.now, id, &mut net.rng).unwrap();
    net.pump();
    assert_eq!(downs(&net.events_a), [DownReason::Rekeyed]);
    assert_eq!(assert_mirrored(&net), before);
    for spi in net.a.child_spis(id, &child) {
        net.a.rekey_child(net.now, spi, &mut net.rng).unwrap();
    }
    net.pump();
    let after = assert_mirrored(&net);
    assert_eq!(after.len(), 1);
    assert_ne!(after, before);
    net.a.terminate_conn(net.now, id, &mut net.rng).unwrap();
    net.pump();
    assert_eq!((net.a.ike_sa_count(), net.b.ike_sa_count()), (0, 0));
}

/// A child's handle is resolved once from the names (as tunneld's traps hold it); an unknown
/// name, or a handle outside the configuration, is refused and starts nothing; the handle
/// starts its child.
#[test]
fn children_by_handle() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    assert_eq!(net.a.child_id("nope", "net"), Err(CommandError::UnknownConnection));
    assert_eq!(net.a.child_id("a2b", "nope"), Err(CommandError::UnknownChild));
    let id = net.a.child_id("a2b", "net").unwrap();
    assert_eq!(
        id,
        ChildId {
            conn: net.a.conn_id("a2b").unwrap(),
            child: 0
        }
    );
    assert_eq!(net.a.child_names(id), Some(("a2b", "net")));
    let stray = ChildId { child: 1, ..id };
    assert_eq!(net.a.child_names(stray), None);
    assert_eq!(
        net.a.initiate_child(net.now, stray, &mut net.rng),
        Err(CommandError::UnknownChild)
    );
    let pkt = PacketSelectors {
        src: "10.1.0.7".parse().unwrap(),
        dst: "10.2.0.9".parse().unwrap(),
        protocol: 1,
        src_port: 0,
        dst_port: 0,
    };
    let elsewhere = ChildId {
        conn: ConnId(7),
        child: 0,
    };
    assert_eq!(
        net.a.acquire(net.now, elsewhere, pkt, &mut net.rng),
        Err(CommandError::UnknownConnection)
    );
    assert_eq!(net.a.ike_sa_count(), 0);
    net.a.acquire(net.now, id, pkt, &mut net.rng).unwrap();
    net.pump();
    assert_eq!(assert_mirrored(&net).len(), 1);
    assert_eq!(child_up(&net.events_a)[0].child, "net");
}

#[test]
fn a_rekey_of_a_pair_being_deleted_is_refused_and_changes_nothing() {
    let (a, b) = pair(IKE, IKE, ESP, ESP);
    let mut net = Net::new(a, b);
    net.up();
    let (old_a, old_b) = assert_mirrored(&net)[0];
    // B's Delete of the pair is under way (lost on the way to A) when A's rekey arrives:
    // B answers TEMPORARY_FAILURE (2.25) and no new pair is made on either side.
    net.drop = Box::new(|from_a, _| !from_a);
    net.b.delete_child(net.now, old_b, &mut net.rng).unwrap();
    net.pump();
    net.drop = Box::new(|_, _| false);
    net.a.rekey_child(net.now, old_a, &mut net.rng).unwrap();
    net.pump();
    assert!(child_up(&net.events_a).iter().all(|c| c.rekeys.is_none()));
    assert!(child_up(&net.events_b).iter().all(|c| c.rekeys.is_none()));
    // B's Delete, retransmitted, then removes the pair on both sides.
    let t = net.now + Duration::from_secs(30);
    while net.advance(t) {}
    assert!(installed(&net.events_a).is_empty() && installed(&net.events_b).is_empty());
}

/// An authenticated request whose inner payloads are malformed is answered with
/// INVALID_SYNTAX (2.21.3), counted as such, and its message ID is used up; before, it was
/// counted as an integrity failure and got no answer.
#[test]
fn an_authenticated_malformed_request_is_answered_invalid_syntax() {
    use ipsec_ike::header::{ExchangeType, HeaderRepr};
    use ipsec_ike::sk::SkCipher;
    let (mut a, b) = pair(IKE, IKE, ESP, ESP);
    a.export_ike_keys = true;
    let mut net = Net::new(a, b);
    net.up();
    let (info, keys) = net
        .events_a
        .iter()
        .find_map(|e| match e {
            Event::IkeUp { info, keys: Some(k) } => Some((info.clone(), k)),
            _ => None,
        })
        .expect("keys exported");
    let mut seal = SkCipher::new(info.suite.encr, info.suite.integ, &keys.sk_ei, &keys.sk_ai).unwrap();
    let open = SkCipher::new(info.suite.encr, info.suite.integ, &keys.sk_er, &keys.sk_ar).unwrap();
    let h = HeaderRepr {
        spi_i: info.spi_i,
        spi_r: info.spi_r,
        next_payload: 0,
        exchange: ExchangeType::Informational,
        initiator: true,
        response: false,
        message_id: 2,
        length: 0,
    };
    // A Notify whose payload length (5) is shorter than its generic header.
    let req = seal.seal(&h, 41, &[0, 0, 0, 5, 0], &mut net.rng).unwrap();
    let (from, to) = (info.local, info.remote);
    let r = net.b.handle_datagram(net.now, to, from, &req, &mut net.rng);
    assert!(matches!(r, Err(Dropped::InvalidSyntax(_))), "{r:?}");
    let resp = net.b.poll_transmit().expect("answered");
    let m = message::Message::parse(&resp.payload).unwrap();
    assert!(m.header.response && m.header.message_id == 2);
    let (off, first) = m.chain.sk.unwrap();
    let inner = open.open(&resp.payload, off).unwrap();
    let ps = message::parse_chain(&inner, first).unwrap().payloads;
    assert!(
        matches!(&ps[..], [message::Payload::Notify(n)] if n.kind == notify::kind::INVALID_SYNTAX),
        "{ps:?}"
    );
    // Its retransmission gets the same answer; the SA stays.
    let again = net.b.handle_datagram(net.now, to, from, &req, &mut net.rng);
    assert!(again.is_ok());
    assert_eq!(net.b.poll_transmit().unwrap().payload, resp.payload);
    assert_eq!(net.b.ike_sa_count(), 1);
    // A broken ICV is still dropped without an answer.
    let mut bad = seal
        .seal(&HeaderRepr { message_id: 3, ..h }, 41, &[0, 0, 0, 5, 0], &mut net.rng)
        .unwrap();
    let n = bad.len();
    bad[n - 1] ^= 1;
    assert!(matches!(
        net.b.handle_datagram(net.now, to, from, &bad, &mut net.rng),
        Err(Dropped::Malformed(_))
    ));
    assert!(net.b.poll_transmit().is_none());
}

/// The link goes dead: the liveness check is given up after `dpd_timeout`, the SA goes
/// down, and with `dpd_action = restart` the connection is started again and comes back up
/// when the link does.
#[test]
fn a_dead_peer_is_noticed_within_dpd_timeout_and_restarted() {
    for (action, restarts) in [(DeadAction::Restart, true), (DeadAction::Clear, false)] {
        let (mut a, b) = pair(IKE, IKE, ESP, ESP);
        let c = &mut a.connections[0];
        c.dpd_delay = Some(Duration::from_secs(10));
        c.dpd_timeout = Some(Duration::from_secs(30));
        c.dpd_action = action;
        let mut net = Net::new(a, b);
        net.up();
        let cut = net.now;
        net.drop = Box::new(|_, _| true);
        while net.advance(cut + Duration::from_secs(45)) {
            if !downs(&net.events_a).is_empty() {
                break;
            }
        }
        assert_eq!(downs(&net.events_a), [DownReason::Timeout]);
        // Checked after 10 s of silence, given up 30 s later (not after the retransmissions'
        // minutes).
        assert!(net.now <= cut + Duration::from_secs(41), "down at {:?}", net.now - cut);
        net.drop = Box::new(|_, _| false);
        let t = net.now + Duration::from_secs(60);
        while net.advance(t) {}
        assert_eq!(ike_up(&net.events_a).len(), if restarts { 2 } else { 1 }, "{action:?}");
        if restarts {
            // B replaced its old SA (INITIAL_CONTACT) and both have one pair again.
            assert_eq!(installed_now(&net), (1, 1));
        }
    }
}

/// The peer deletes the IKE SA: with `close_action = restart` the connection comes back.
#[test]
fn close_action_restart_brings_the_connection_back() {
    let (mut a, b) = pair(IKE, IKE, ESP, ESP);
    a.connections[0].close_action = DeadAction::Restart;
    let mut net = Net::new(a, b);
    net.up();
    net.b.terminate(net.now, "b2a", &mut net.rng).unwrap();
    net.pump();
    assert_eq!(downs(&net.events_a), [DownReason::Peer]);
    assert_eq!(ike_up(&net.events_a).len(), 2);
    assert_eq!(installed_now(&net), (1, 1));
}

fn installed_now(net: &Net) -> (usize, usize) {
    (installed(&net.events_a).len(), installed(&net.events_b).len())
}

/// A child's lifetimes: rekey at `rekey` s (0: never), no jitter, hard expiry at `life` s
/// (the shape of `scripts/ci/ike-lifecycle.sh collide`: 8 s and 12 s).
fn lifetimes(c: &mut Config, rekey: u64, life: u64) {
    let l = &mut c.connections[0].children[0].lifetimes;
    l.rekey_time = Duration::from_secs(rekey);
    l.life_time = Duration::from_secs(life);
    l.rand_time = Duration::ZERO;
}

/// The first `n` CREATE_CHILD_SA responses sent by A (`from_a`) or B are lost: the peer
/// retransmits its request (4 s, then 7.2 s later) and takes the answer late.
fn lose_ccsa_answers(from: bool, n: usize) -> DropFn {
    let mut left = n;
    Box::new(move |from_a, t| {
        if from_a == from && kind_of(t) == (36, true) && left > 0 {
            left -= 1;
            return true;
        }
        false
    })
}

/// Issue #39 item 7, without a collision: B rekeys the pair, A's answer is lost and B takes
/// it only when it retransmits, after A's copy of the old pair reached its hard lifetime. A
/// must not Delete the old pair while B's rekey of it is in flight (RFC 7296 2.25.1: B takes
/// such a Delete as a rekey/delete collision and drops the pair its rekey made, as charon
/// does): the replaced pair goes quietly at its hard lifetime, B deletes it (2.8), and the
/// new pair stays on both sides.
#[test]
fn a_replaced_pair_at_its_hard_lifetime_is_not_deleted_under_the_peers_rekey() {
    let (mut a, mut b) = pair(IKE, IKE, ESP, ESP);
    // B rekeys at 8 s; A does not rekey, its pairs' hard lifetime is 11 s.
    lifetimes(&mut b, 8, 12);
    lifetimes(&mut a, 0, 11);
    let mut net = Net::new(a, b);
    net.up();
    let start = net.now;
    let (old_a, _) = assert_mirrored(&net)[0];
    // A's answer to B's rekey request (8 s) is lost; B's retransmission (12 s) gets it, after
    // the old pair's hard lifetime on A (11 s).
    net.drop = lose_ccsa_answers(true, 1);
    while net.advance(start + Duration::from_secs(15)) {}
    let pairs = assert_mirrored(&net);
    assert_eq!(pairs.len(), 1, "one pair left on both sides: {pairs:?}");
    assert_ne!(pairs[0].0, old_a, "the new pair");
    // A did not send a Delete of the old pair (B did), and A saw its hard lifetime.
    assert!(
        child_downs(&net.events_a)
            .iter()
            .any(|(s, r)| *s == old_a && *r == DownReason::Expired),
        "{:?}",
        child_downs(&net.events_a)
    );
}

/// Issue #39 item 7 as found against charon under load: both sides rekey the pair at the same
/// time (2.8.1); the loser's answer to the winner's request is lost, so the winner takes it
/// only when it retransmits (4 s later), after the old pair's hard lifetime (3 s after the
/// rekey). The loser deletes its redundant pair and must leave the old one to the winner
/// (2.8.1, 2.25.1): its Delete of it under the winner's rekey left no pair on either side.
#[test]
fn a_lost_collision_leaves_the_old_pair_to_the_winner_past_its_hard_lifetime() {
    let mut checked = [0; 2];
    for seed in 0..12 {
        let run = |lose: Option<bool>| {
            let (mut a, mut b) = pair(IKE, IKE, ESP, ESP);
            lifetimes(&mut a, 8, 11);
            lifetimes(&mut b, 8, 11);
            let mut net = Net::new(a, b);
            net.rng = <rand_chacha::ChaCha20Rng as rand_core::SeedableRng>::seed_from_u64(seed);
            net.up();
            let start = net.now;
            if let Some(from_a) = lose {
                net.drop = lose_ccsa_answers(from_a, 1);
            }
            // The first rekeys (8 s) and the retransmission (12 s), before the next (16 s).
            while net.advance(start + Duration::from_secs(14)) {}
            net
        };
        // Who wins with this seed (the nonces are drawn before anything is lost): the side
        // whose own rekey made the pair that survives.
        let quiet = run(None);
        let pairs = assert_mirrored(&quiet);
        assert_eq!(pairs.len(), 1, "seed {seed}");
        let a_won = installed(&quiet.events_a).values().next().is_some_and(|c| c.initiator);
        checked[usize::from(a_won)] += 1;
        // Again, the loser's answer to the winner's rekey lost once.
        let net = run(Some(!a_won));
        let pairs = assert_mirrored(&net);
        assert_eq!(
            pairs.len(),
            1,
            "seed {seed} (A won: {a_won}): one pair on both sides: {pairs:?}"
        );
        let loser = if a_won { &net.events_b } else { &net.events_a };
        assert!(
            child_downs(loser).iter().any(|(_, r)| *r == DownReason::Expired),
            "seed {seed}: the loser's old pair reached its hard lifetime"
        );
    }
    assert!(checked[0] > 0 && checked[1] > 0, "both sides lost once: {checked:?}");
}
