//! Zero heap allocations per packet: seal and open of every transform, and the engine's
//! outbound and inbound paths (one at a time and batched), counted by a global allocator
//! over a few thousand packets per suite. Set-up (keying, buffers, workers) happens before
//! counting starts.

use core::time::Duration;
use ipsec_ah::AhSa;
use ipsec_core::ip;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg, PacketBuf};
use ipsec_engine::*;
use ipsec_esp::{Esp, EspSa};
use ipsec_ipcomp::{Algorithm, IpcompConfig, IpcompSa};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.with(|c| c.get()) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed unchanged to the system allocator; the wrapper only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations `f` makes on this thread.
fn allocations(f: impl FnOnce()) -> usize {
    let before = ALLOCS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.load(Ordering::Relaxed) - before
}

const HEAD: usize = 256;
const ROOM: usize = HEAD + 2048 + 256;
const PACKETS: usize = 2000;
/// IPComp compresses slowly in debug builds: fewer packets, still every code path.
const IPCOMP_PACKETS: usize = 200;

/// A UDP packet of `len` payload bytes, text-like (so IPComp compresses it) or not.
fn packet(len: usize, text: bool) -> Vec<u8> {
    let mut p = vec![0u8; 28 + len];
    p[0] = 0x45;
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p[24..26].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    for (i, b) in p[28..].iter_mut().enumerate() {
        *b = if text {
            b"allocation-free packets "[i % 24]
        } else {
            (i as u32).wrapping_mul(2654435761).to_be_bytes()[0]
        };
    }
    ip::fix_length(&mut p).unwrap();
    p
}

fn esp_suites() -> Vec<SaParams> {
    let mut v = Vec::new();
    for (enc, k, integ) in [
        (EncAlg::AesCbc, 16, IntegAlg::HmacSha1),
        (EncAlg::AesCbc, 32, IntegAlg::HmacSha256),
        (EncAlg::Des3Cbc, 24, IntegAlg::HmacMd5),
    ] {
        let mut p = SaParams::new(Proto::Esp, 0x100);
        p.enc = Some(Keyed::new(enc, &vec![1; k], 0));
        p.integ = Some(Keyed::new(integ, &vec![2; integ.digest_len()], integ.default_icv_len()));
        v.push(p);
    }
    for (alg, k, icv) in [
        (AeadAlg::AesGcm, 20, 16),
        (AeadAlg::AesGcm, 36, 16),
        (AeadAlg::AesGcm, 28, 8),
        (AeadAlg::ChaCha20Poly1305, 36, 16),
    ] {
        let mut p = SaParams::new(Proto::Esp, 0x100);
        p.aead = Some(Keyed::new(alg, &vec![3; k], icv));
        v.push(p);
    }
    for p in v.iter_mut() {
        p.replay_window = 4096;
    }
    let mut t = v[0].clone();
    t.mode = Mode::Tunnel;
    t.tunnel = Some(Tunnel {
        src: "192.0.2.1".parse().unwrap(),
        dst: "192.0.2.2".parse().unwrap(),
    });
    t.esn = true;
    v.push(t);
    v
}

#[test]
fn no_allocation_per_packet() {
    // The counter itself counts.
    assert_eq!(allocations(|| drop(std::hint::black_box(vec![0u8; 8]))), 1);
    let plain = packet(1000, false);
    let text = packet(1000, true);
    let mut raws: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; ROOM]).collect();
    let load = |raw: &mut Vec<u8>, p: &[u8]| raw[HEAD..HEAD + p.len()].copy_from_slice(p);

    // ESP, each suite: seal, open, and sealing in batches of 16.
    for params in esp_suites() {
        let mut tx = EspSa::new(&params).unwrap();
        let rx = Esp::new(&params).unwrap();
        let batch_tx = Esp::new(&params).unwrap();
        let mut rng = IvRng::from_seed([9; 32]);
        let mut res = [Ok(0u64); 16];
        let n = allocations(|| {
            for _ in 0..PACKETS {
                let raw = &mut raws[0];
                load(raw, &plain);
                let mut b = PacketBuf::new(raw, HEAD, plain.len()).unwrap();
                tx.seal(&mut b).unwrap();
                rx.open(&mut b).unwrap();
            }
            for _ in 0..PACKETS / 16 {
                let mut it = raws.iter_mut();
                let mut bufs: [PacketBuf; 16] = core::array::from_fn(|_| {
                    let raw = it.next().unwrap();
                    raw[HEAD..HEAD + plain.len()].copy_from_slice(&plain);
                    PacketBuf::new(raw, HEAD, plain.len()).unwrap()
                });
                res = [Ok(0); 16];
                batch_tx.seal_batch(&mut rng, &mut bufs, &mut res);
            }
        });
        assert!(res.iter().all(|r| r.is_ok()));
        assert_eq!(n, 0, "ESP {:?}/{:?}: {n} allocations", params.enc, params.aead);
    }

    // AH.
    for alg in [IntegAlg::HmacSha1, IntegAlg::HmacSha256, IntegAlg::HmacSha512] {
        let mut p = SaParams::new(Proto::Ah, 0x200);
        p.integ = Some(Keyed::new(alg, &vec![4; alg.digest_len()], alg.default_icv_len()));
        p.replay_window = 4096;
        let (mut tx, mut rx) = (AhSa::new(&p).unwrap(), AhSa::new(&p).unwrap());
        let n = allocations(|| {
            for _ in 0..PACKETS {
                let raw = &mut raws[0];
                load(raw, &plain);
                let mut b = PacketBuf::new(raw, HEAD, plain.len()).unwrap();
                tx.seal(&mut b).unwrap();
                rx.open(&mut b).unwrap();
            }
        });
        assert_eq!(n, 0, "AH {alg:?}: {n} allocations");
    }

    // IPComp, compressible and not.
    for alg in [Algorithm::Deflate, Algorithm::Lzs, Algorithm::Lzf] {
        let mut tx = IpcompSa::new(IpcompConfig::new(alg)).unwrap();
        let mut rx = IpcompSa::new(IpcompConfig::new(alg)).unwrap();
        let n = allocations(|| {
            for i in 0..IPCOMP_PACKETS {
                let p = if i % 2 == 0 { &text } else { &plain };
                let raw = &mut raws[0];
                load(raw, p);
                let mut b = PacketBuf::new(raw, HEAD, p.len()).unwrap();
                tx.seal(&mut b).unwrap();
                rx.open(&mut b).unwrap();
            }
        });
        assert_eq!(n, 0, "IPComp {alg:?}: {n} allocations");
    }

    // The engine: IPComp + ESP (CBC) + AH bundle and a GCM SA, one at a time and batched.
    let sel = Selector {
        src: Some("10.0.0.0/24".parse().unwrap()),
        dst: Some("10.0.0.0/24".parse().unwrap()),
        ..Selector::default()
    };
    let mut ah = SaParams::new(Proto::Ah, 0x300);
    ah.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[5; 32], 16));
    ah.replay_window = 4096;
    let bundles: Vec<Vec<SaConfig>> = vec![
        vec![
            SaConfig::new("comp", SaParams::new(Proto::Comp, 2), Some(Algorithm::Deflate)),
            SaConfig::new("esp", esp_suites()[0].clone(), None),
            SaConfig::new("ah", ah, None),
        ],
        vec![SaConfig::new("gcm", esp_suites()[3].clone(), None)],
    ];
    for configs in bundles {
        let mut a = Engine::new();
        let mut b = Engine::new();
        let mut ids = Vec::new();
        for c in &configs {
            ids.push(a.add_sa(c.clone(), Duration::ZERO).unwrap());
            b.add_sa(c.clone(), Duration::ZERO).unwrap();
        }
        for (e, dir) in [(&mut a, Direction::Out), (&mut b, Direction::In)] {
            e.add_policy(Policy {
                dir,
                selector: sel,
                action: Action::Protect(ids.clone()),
            })
            .unwrap();
        }
        let (pa, pb) = (a.data_plane(), b.data_plane());
        let mut w = Worker::with_rng(IvRng::from_seed([1; 32]));
        // The worker's IPComp codecs are made now (set-up), not on its first packet.
        w.prepare(&pa);
        w.prepare(&pb);
        // Warm the engines' own workers up before counting.
        let raw = &mut raws[0];
        load(raw, &text);
        let mut buf = PacketBuf::new(raw, HEAD, text.len()).unwrap();
        a.outbound(&mut buf, Duration::ZERO).unwrap();
        b.inbound(&mut buf, Duration::ZERO).unwrap();
        let mut verdicts = [Ok(Verdict::Bypass); 16];
        let n = allocations(|| {
            for i in 0..IPCOMP_PACKETS {
                let p = if i % 2 == 0 { &text } else { &plain };
                let raw = &mut raws[0];
                load(raw, p);
                let mut b1 = PacketBuf::new(raw, HEAD, p.len()).unwrap();
                a.outbound(&mut b1, Duration::ZERO).unwrap();
                b.inbound(&mut b1, Duration::ZERO).unwrap();
            }
            for _ in 0..IPCOMP_PACKETS / 16 {
                let mut it = raws.iter_mut();
                let mut bufs: [PacketBuf; 16] = core::array::from_fn(|_| {
                    let raw = it.next().unwrap();
                    raw[HEAD..HEAD + text.len()].copy_from_slice(&text);
                    PacketBuf::new(raw, HEAD, text.len()).unwrap()
                });
                pa.outbound_batch(&mut w, &mut bufs, &mut verdicts, Duration::ZERO);
                pb.inbound_batch(&mut w, &mut bufs, &mut verdicts, Duration::ZERO);
            }
        });
        assert!(verdicts.iter().all(|v| v.is_ok()), "{verdicts:?}");
        assert_eq!(
            n,
            0,
            "engine {:?}: {n} allocations",
            configs.iter().map(|c| &c.name).collect::<Vec<_>>()
        );
        assert_eq!(
            b.sad().get(ids[ids.len() - 1]).unwrap().inbound().packets,
            1 + IPCOMP_PACKETS as u64 + (IPCOMP_PACKETS / 16 * 16) as u64
        );
    }
}
