//! MSS clamping in the loops: a SYN read from the TUN device is clamped before it is sealed,
//! a SYN opened is clamped before it is written to the TUN device, one packet at a time and
//! in batches; other packets pass untouched; clamping off changes nothing.

use super::*;
use crate::dataplane::mss::MssClamp;

/// A scapy case's input and expected packets (../mss/scapy.txt).
fn scapy(name: &str) -> (Vec<u8>, Vec<u8>) {
    let l = include_str!("../mss/scapy.txt")
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap();
    let f: Vec<&str> = l.split_whitespace().collect();
    (hex::decode(f[3]).unwrap(), hex::decode(f[4]).unwrap())
}

#[test]
fn syns_are_clamped_both_ways_one_by_one() {
    let (mut a, b) = pair(bundle_esp);
    a.set_mss_clamp(MssClamp::auto(1400));
    let (syn, syn_clamped) = scapy("v4-syn");
    let (synack, synack_clamped) = scapy("v6-synack");
    assert_ne!(syn, syn_clamped);
    // A (clamping) to B (not): clamped before sealing.
    let (o, got) = open(&b, &seal(&a, &syn));
    assert_eq!((o, got), (Outcome::Forwarded, Some(syn_clamped)));
    // B to A: clamped after opening.
    let (o, got) = open(&a, &seal(&b, &synack));
    assert_eq!((o, got), (Outcome::Forwarded, Some(synack_clamped)));
    // Not a SYN: untouched.
    let p = ping4(1, 100);
    assert_eq!(open(&a, &seal(&b, &p)).1, Some(p.clone()));
    assert_eq!(open(&b, &seal(&a, &p)).1, Some(p));
    assert_eq!(a.counters().snapshot().mss_clamped, 2);
    assert_eq!(b.counters().snapshot().mss_clamped, 0);
}

#[test]
fn syns_are_clamped_both_ways_in_batches() {
    let (mut a, b) = pair(bundle_esp);
    a.set_mss_clamp(MssClamp::fixed(1000));
    let (syn4, _) = scapy("v4-synack");
    let (syn6, _) = scapy("v6-syn");
    let (hbh, _) = scapy("v6-hop-by-hop");
    let inner = [ping4(1, 56), syn4.clone(), syn6.clone(), hbh.clone()];
    let mss_of = |p: &[u8]| {
        let tcp = if p[0] >> 4 == 4 { 20 } else { 40 };
        u16::from_be_bytes([p[tcp + 22], p[tcp + 23]])
    };
    for (from, to) in [(&a, &b), (&b, &a)] {
        let mut batch = Batch::new();
        load(&mut batch, inner.iter().map(Vec::as_slice));
        let wire = FakeWire::default();
        from.outbound_batch(&mut batch, inner.len(), &wire);
        let sent = wire.take();
        assert_eq!(sent.len(), 4);
        let rx = FakeBatchRx::default();
        rx.datagrams
            .lock()
            .unwrap()
            .extend(sent.into_iter().map(|(p, _)| (p, RxKind::Packet)));
        let tun = FakeTun::default();
        let n = rx.recv_batch(&mut batch).unwrap();
        to.inbound_batch(&mut batch, n, &rx, &mut TunPort::new(&tun));
        let w = tun.written();
        assert_eq!(w.len(), 4);
        assert_eq!(w[0], inner[0]);
        assert_eq!((mss_of(&w[1]), mss_of(&w[2])), (1000, 1000));
        // With a hop-by-hop header: left alone.
        assert_eq!(w[3], hbh);
        // Only the MSS and the checksum changed.
        for (got, was) in w[1..3].iter().zip([&syn4, &syn6]) {
            let diff = got.iter().zip(was.iter()).filter(|(x, y)| x != y).count();
            assert!((1..=4).contains(&diff), "{diff} bytes changed");
        }
    }
    assert_eq!(a.counters().snapshot().mss_clamped, 4);
}
