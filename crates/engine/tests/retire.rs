//! Retired SAs are freed (issue #22): an SA taken out leaves the SAD and the snapshot once
//! no worker holds a data plane that has it, its counters added to the snapshot's `retired`
//! totals. Heap in use and snapshot size stay flat across 100,000 rekeys (counted by a
//! global allocator that tracks live bytes), and a packet counted on an SA after it was
//! taken out, by a worker still on an older plane, is not lost.

use ipsec_engine::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

mod common;
use common::*;

struct Tracking;

/// Bytes allocated and not yet freed, by every thread.
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed unchanged to the system allocator; the wrapper only adds up
// the sizes.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Tracking = Tracking;

fn sa(gen: u32) -> SaConfig {
    SaConfig::new("ab", gcm_params(0x1000 + gen), None)
}

/// The sender and receiver rekey (receiver first, make before break), one packet goes on the
/// new SA and one late packet on the old, then both remove the old SA.
fn rekey(a: &mut Engine, b: &mut Engine, old: SaId, gen: u32, pkt: &[u8]) -> SaId {
    let late = process(pkt, |buf| a.outbound(buf, secs(0))).1;
    let nb = b.replace_sa(old, sa(gen), secs(0)).unwrap();
    let na = a.replace_sa(old, sa(gen), secs(0)).unwrap();
    assert_eq!(na, nb);
    let fresh = process(pkt, |buf| a.outbound(buf, secs(0))).1;
    assert_eq!(
        process(&fresh, |buf| b.inbound(buf, secs(0))).0,
        Ok(Verdict::Protected(1))
    );
    assert_eq!(
        process(&late, |buf| b.inbound(buf, secs(0))).0,
        Ok(Verdict::Protected(1))
    );
    a.remove_sa(old).unwrap();
    b.remove_sa(old).unwrap();
    na
}

#[test]
fn memory_and_snapshot_stay_flat_across_100000_rekeys() {
    let (mut a, mut b, ids) = pair(&[sa(0)], sel("10.0.0.0/8", "10.0.0.0/8"));
    let pkt = udp("10.0.0.1", "10.0.0.2", 64);
    let mut id = ids[0];
    const N: u32 = 100_000;
    let mut at = Vec::new();
    for gen in 1..=N {
        id = rekey(&mut a, &mut b, id, gen, &pkt);
        if gen == N / 10 || gen == N {
            a.poll(secs(1));
            b.poll(secs(1));
            let snap = serde_json::to_string(&b.snapshot(secs(1))).unwrap();
            at.push((
                gen,
                LIVE.load(Ordering::Relaxed),
                snap.len(),
                a.sad().len(),
                b.sad().len(),
            ));
        }
    }
    let (g1, heap1, snap1, _, _) = at[0];
    let (g2, heap2, snap2, sad_a, sad_b) = at[1];
    eprintln!("rekeys {g1}: heap {heap1} B, snapshot {snap1} B; rekeys {g2}: heap {heap2} B, snapshot {snap2} B");
    assert_eq!((sad_a, sad_b), (1, 1), "only the live SA is in the SAD");
    // 90,000 more rekeys: before the fix each kept ~4 KB (SA, keys, counters, snapshot entry).
    assert!(
        heap2 - heap1 < 16 * 1024,
        "heap grew {} B over {} rekeys",
        heap2 - heap1,
        g2 - g1
    );
    assert!(snap2 <= snap1 + 64, "snapshot grew from {snap1} to {snap2} bytes");
    // Nothing counted was lost: every packet b opened is in the live SA or the retired total.
    let s = b.snapshot(secs(1));
    assert_eq!(s.retired.sas, u64::from(N));
    assert_eq!(s.retired.held, 0);
    assert_eq!(s.retired.inbound.packets + s.sas[0].inbound.packets, 2 * u64::from(N));
    assert_eq!(s.retired.inbound.drops.total(), 0);
    let s = a.snapshot(secs(1));
    assert_eq!(s.retired.outbound.packets + s.sas[0].outbound.packets, 2 * u64::from(N));
}

#[test]
fn a_plane_still_in_use_holds_the_sa_and_what_it_counts_is_kept() {
    let (mut a, mut b, ids) = pair(&[sa(0)], sel("10.0.0.0/8", "10.0.0.0/8"));
    let pkt = udp("10.0.0.1", "10.0.0.2", 64);
    let old = ids[0];
    let late = process(&pkt, |buf| a.outbound(buf, secs(0))).1;
    // A worker loaded the receiver's plane before the old SA was taken out.
    let held = b.data_plane();
    let mut w = Worker::new().unwrap();
    b.replace_sa(old, sa(1), secs(0)).unwrap();
    b.remove_sa(old).unwrap();
    b.poll(secs(1));
    assert!(b.sad().get(old).is_none());
    assert_eq!(b.snapshot(secs(1)).retired.held, 1, "the worker's plane still has it");
    // The worker's plane finds the old SA, removed: the drop is counted on it, after it
    // left the SAD.
    let r = process(&late, |buf| held.inbound(&mut w, buf, secs(1))).0;
    assert_eq!(r.unwrap_err().sa, Some(old));
    let s = b.snapshot(secs(1));
    assert_eq!(
        (s.retired.sas, s.retired.held, s.retired.inbound.drops.no_sa),
        (1, 1, 1)
    );
    // The worker moves on: the SA is freed at the next poll, what it counted kept.
    drop(held);
    b.poll(secs(2));
    let s = b.snapshot(secs(2));
    assert_eq!(
        (s.retired.sas, s.retired.held, s.retired.inbound.drops.no_sa),
        (1, 0, 1)
    );
    // The id is never given again.
    let next = b.add_sa(sa(2), secs(2)).unwrap();
    assert!(next.0 > old.0 + 1, "{next:?}");
    // On the current plane the old SA is gone.
    assert_eq!(
        process(&late, |buf| b.inbound(buf, secs(2))).0.unwrap_err().reason,
        DropReason::NoSa
    );
}
