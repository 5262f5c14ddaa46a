//! `rekey_by` (issue #36): a responder that leaves the rekeys to its client. The Windows
//! client behind a NAT answers a server's CREATE_CHILD_SA with errors or not at all; with
//! `rekey_by = auto` (the default) a server that sees Windows' vendor ID (RFC 7296 3.12) and
//! a NAT in front of the client (2.23) starts no rekey of the IKE SA or its children, answers
//! the client's, and still deletes a child at its hard lifetime. This crate on both sides:
//! A the client (behind a NAT when asked, sending Windows' vendor ID when asked), B the server.
mod common;
use common::*;
use ipsec_ike::*;
use std::time::Duration;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";

/// Client A and server B. The server rekeys the IKE SA at 100 s and the child at 60 s
/// (hard lifetime 90 s); the client never on its own.
fn net(windows: bool, nat: bool, rekey_by: RekeyBy) -> Net {
    let (mut a, mut b) = pair(IKE, IKE, ESP, ESP);
    let ca = &mut a.connections[0];
    ca.rekey_time = None;
    ca.children[0].lifetimes.rekey_time = Duration::ZERO;
    ca.children[0].lifetimes.life_time = Duration::ZERO;
    if windows {
        ca.vendor_ids = vec![vendor::windows(9).to_vec()];
    }
    let cb = &mut b.connections[0];
    cb.remote_addr = None; // the client shows up from anywhere (the NAT's address)
    cb.rekey_by = rekey_by;
    cb.rekey_time = Some(Duration::from_secs(100));
    cb.rand_time = Some(Duration::ZERO);
    let l = &mut cb.children[0].lifetimes;
    l.rekey_time = Duration::from_secs(60);
    l.life_time = Duration::from_secs(90);
    l.rand_time = Duration::ZERO;
    let mut n = Net::new(a, b);
    if nat {
        n.nat_port_offset = Some(30000);
    }
    n.up();
    assert_eq!(child_up(&n.events_b).len(), 1);
    n
}

/// CREATE_CHILD_SA requests the server sent.
fn server_rekeys(n: &Net) -> usize {
    n.sent
        .iter()
        .filter(|s| !s.from_a && kind_of(&s.t) == (36, false))
        .count()
}

fn run_until(n: &mut Net, t: Duration) {
    while n.advance(t) {}
    n.now = n.now.max(t);
}

#[test]
fn a_windows_client_behind_a_nat_does_its_own_rekeys() {
    let mut n = net(true, true, RekeyBy::Auto);
    let start = n.now;
    let st = &n.b.status(n.now)[0];
    assert!(st.nat);
    assert_eq!(st.rekey_in, None, "no IKE rekey of ours planned");
    assert_eq!(st.children[0].rekey_in, None, "no child rekey of ours planned");
    assert_eq!(
        st.children[0].expires_in,
        Some(Duration::from_secs(90)),
        "the hard lifetime stays"
    );
    // Past the server's rekey times: it started none.
    run_until(&mut n, start + Duration::from_secs(80));
    assert_eq!(server_rekeys(&n), 0);
    // The client's rekeys are answered: the child's, then the IKE SA's.
    let spi = n.a.status(n.now)[0].children[0].spi_in;
    n.a.rekey_child(n.now, spi, &mut n.rng).unwrap();
    n.pump();
    let rekeyed = child_up(&n.events_b).into_iter().filter(|c| c.rekeys.is_some()).count();
    assert_eq!(rekeyed, 1, "{:?}", n.events_b);
    n.a.rekey_ike(n.now, "a2b", &mut n.rng).unwrap();
    n.pump();
    assert!(n.events_b.iter().any(|e| matches!(e, Event::IkeRekeyed { .. })));
    assert!(n.drops.is_empty(), "{:?}", n.drops);
    // The new IKE SA (the client its initiator) and child: still none of ours.
    let st = n.b.status(n.now);
    let st = st.iter().find(|s| s.state == "established").unwrap();
    assert_eq!(st.rekey_in, None);
    assert!(st.children.iter().all(|c| c.rekey_in.is_none()));
    // The rekeyed child's hard lifetime: the server deletes it 90 s after the rekey.
    let rekeyed_at = n.now;
    let before = downs_of_children(&n.events_a);
    run_until(&mut n, rekeyed_at + Duration::from_secs(89));
    assert_eq!(downs_of_children(&n.events_a), before, "not before its life_time");
    run_until(&mut n, rekeyed_at + Duration::from_secs(95));
    assert_eq!(downs_of_children(&n.events_a), before + 1, "{:?}", n.events_a);
    assert_eq!(server_rekeys(&n), 0);
}

fn downs_of_children(ev: &[Event]) -> usize {
    ev.iter()
        .filter(|e| {
            matches!(
                e,
                Event::ChildDown {
                    reason: DownReason::Peer,
                    ..
                }
            )
        })
        .count()
}

#[test]
fn the_server_rekeys_other_clients_and_windows_without_a_nat() {
    // Windows not behind a NAT, another client behind one, and Windows behind a NAT with
    // `rekey_by = both`: the server rekeys the child at 60 s (RFC 7296 2.8).
    for (windows, nat, by) in [
        (true, false, RekeyBy::Auto),
        (false, true, RekeyBy::Auto),
        (true, true, RekeyBy::Both),
    ] {
        let mut n = net(windows, nat, by);
        let start = n.now;
        assert!(n.b.status(n.now)[0].children[0].rekey_in.is_some());
        run_until(&mut n, start + Duration::from_secs(80));
        assert_eq!(server_rekeys(&n), 1, "windows {windows}, nat {nat}, {by:?}");
        assert_eq!(child_up(&n.events_a).len(), 2, "rekeyed");
    }
}

#[test]
fn rekey_by_client_leaves_every_rekey_to_the_initiator() {
    let mut n = net(false, false, RekeyBy::Client);
    let start = n.now;
    run_until(&mut n, start + Duration::from_secs(85));
    assert_eq!(server_rekeys(&n), 0);
    assert!(n.b.rekeys_left_to_peer(n.b.status(n.now)[0].children[0].spi_in));
    // Its hard lifetime: deleted at 90 s.
    run_until(&mut n, start + Duration::from_secs(95));
    assert_eq!(downs_of_children(&n.events_a), 1);
    // The client rekeys its own: `rekey_by` is the responder's.
    let n = net(false, false, RekeyBy::Client);
    assert!(!n.a.rekeys_left_to_peer(n.a.status(n.now)[0].children[0].spi_in));
    assert!(
        n.a.status(n.now)[0].rekey_in.is_none(),
        "(A's own rekey_time is None here)"
    );
}
