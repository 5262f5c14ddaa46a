//! The data plane's multi-core and batch figures, each comparing two things in one run:
//!
//! - `engine_threads`: outbound + inbound of 1400-byte packets on ONE ESP AES-128-GCM SA pair
//!   through the shared `DataPlane`, from 1 thread and from 2 threads (aggregate bytes per
//!   second; criterion's time is wall time per packet over all threads), one packet per call
//!   and in batches of 32. The target: 2 threads ≥ 1.8× the 1-thread rate.
//! - `batch`: the same 32 packets sealed and opened one at a time (`outbound`/`inbound`) and as
//!   one batch (`outbound_batch`/`inbound_batch`), at 64 and 1400 bytes, for AES-GCM and for
//!   AES-CBC + HMAC-SHA1 (where the batch also interleaves the CBC chains).
//!
//! Run: `cargo bench --bench dataplane` (about a minute).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ipsec_core::ip;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Proto, SaParams};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg, PacketBuf};
use ipsec_engine::{Action, DataPlane, Direction, Engine, Policy, SaConfig, Selector, Verdict, Worker};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const HEAD: usize = 128;
const ROOM: usize = HEAD + 1500 + 128;
const MAX_BATCH: usize = 32;

fn packet(len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
    for (i, b) in p[28..].iter_mut().enumerate() {
        *b = i as u8;
    }
    ip::fix_length(&mut p).expect("IPv4");
    p
}

fn gcm() -> SaParams {
    let mut p = SaParams::new(Proto::Esp, 0x1000);
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[7; 20], 16));
    p.replay_window = 4096;
    p
}

fn cbc_sha1() -> SaParams {
    let mut p = SaParams::new(Proto::Esp, 0x1001);
    p.enc = Some(Keyed::new(EncAlg::AesCbc, &[7; 16], 0));
    p.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[8; 20], 12));
    p.replay_window = 4096;
    p
}

/// A sender's and a receiver's data plane for one SA protecting everything.
fn planes(params: &SaParams) -> (Arc<DataPlane>, Arc<DataPlane>) {
    let make = |dir| {
        let mut e = Engine::new();
        let id = e
            .add_sa(SaConfig::new("esp", params.clone(), None), Duration::ZERO)
            .expect("SA");
        e.add_policy(Policy {
            dir,
            selector: Selector::default(),
            action: Action::Protect(vec![id]),
        })
        .expect("policy");
        e.data_plane()
    };
    (make(Direction::Out), make(Direction::In))
}

fn worker(seed: u8) -> Worker {
    Worker::with_rng(IvRng::from_seed([seed; 32]))
}

/// Seals and opens `n` packets on this thread, one at a time or in batches of [`MAX_BATCH`].
fn round_trips(tx: &DataPlane, rx: &DataPlane, w: &mut Worker, pkt: &[u8], n: u64, batched: bool) {
    let mut raws: Vec<Vec<u8>> = (0..MAX_BATCH).map(|_| vec![0u8; ROOM]).collect();
    if !batched {
        let raw = &mut raws[0];
        for _ in 0..n {
            raw[HEAD..HEAD + pkt.len()].copy_from_slice(pkt);
            let mut b = PacketBuf::new(raw, HEAD, pkt.len()).expect("room");
            let v = tx.outbound(w, &mut b, Duration::ZERO);
            debug_assert_eq!(v, Ok(Verdict::Protected(1)));
            let v = rx.inbound(w, &mut b, Duration::ZERO);
            debug_assert_eq!(v, Ok(Verdict::Protected(1)));
            black_box(b.len());
        }
        return;
    }
    let mut verdicts = [Ok(Verdict::Protected(1)); MAX_BATCH];
    for _ in 0..n.div_ceil(MAX_BATCH as u64) {
        let mut it = raws.iter_mut();
        let mut bufs: [PacketBuf; MAX_BATCH] = core::array::from_fn(|_| {
            let raw = it.next().expect("MAX_BATCH buffers");
            raw[HEAD..HEAD + pkt.len()].copy_from_slice(pkt);
            PacketBuf::new(raw, HEAD, pkt.len()).expect("room")
        });
        tx.outbound_batch(w, &mut bufs, &mut verdicts, Duration::ZERO);
        rx.inbound_batch(w, &mut bufs, &mut verdicts, Duration::ZERO);
        debug_assert!(verdicts.iter().all(|v| *v == Ok(Verdict::Protected(1))));
        black_box(&verdicts);
    }
}

fn engine_threads(c: &mut Criterion) {
    let pkt = packet(1400);
    let mut g = c.benchmark_group("engine_threads");
    g.throughput(Throughput::Bytes(pkt.len() as u64));
    for batched in [false, true] {
        for threads in [1usize, 2] {
            // Fresh SAs per case, so each starts from sequence number 1.
            let (tx, rx) = planes(&gcm());
            let name = if batched {
                "gcm128-1400-batch32"
            } else {
                "gcm128-1400-single"
            };
            g.bench_function(BenchmarkId::new(name, format!("{threads}-threads")), |b| {
                b.iter_custom(|iters| {
                    // Whole batches per thread when batched.
                    let unit = if batched { MAX_BATCH as u64 } else { 1 };
                    let per = iters.div_ceil(threads as u64).div_ceil(unit) * unit;
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for t in 0..threads {
                            let (tx, rx, pkt) = (&tx, &rx, &pkt);
                            s.spawn(move || round_trips(tx, rx, &mut worker(t as u8), pkt, per, batched));
                        }
                    });
                    // Wall time per packet over all threads: `per * threads` packets were done.
                    start.elapsed().mul_f64(iters as f64 / (per * threads as u64) as f64)
                })
            });
        }
    }
    g.finish();
}

fn batch(c: &mut Criterion) {
    for (suite, params) in [("gcm128", gcm()), ("cbc-sha1", cbc_sha1())] {
        let mut g = c.benchmark_group(format!("batch/{suite}"));
        for size in [64usize, 1400] {
            let pkt = packet(size);
            g.throughput(Throughput::Bytes((size * MAX_BATCH) as u64));
            let mut raws: Vec<Vec<u8>> = (0..MAX_BATCH).map(|_| vec![0u8; ROOM]).collect();
            let (tx, rx) = planes(&params);
            let mut w = worker(1);
            g.bench_function(BenchmarkId::new("one-at-a-time", size), |b| {
                b.iter(|| {
                    for raw in raws.iter_mut() {
                        raw[HEAD..HEAD + size].copy_from_slice(&pkt);
                        let mut buf = PacketBuf::new(raw, HEAD, size).expect("room");
                        black_box(tx.outbound(&mut w, &mut buf, Duration::ZERO).is_ok());
                        black_box(rx.inbound(&mut w, &mut buf, Duration::ZERO).is_ok());
                    }
                })
            });
            let (tx, rx) = planes(&params);
            let mut verdicts = [Ok(Verdict::Protected(1)); MAX_BATCH];
            g.bench_function(BenchmarkId::new("batch", size), |b| {
                b.iter(|| {
                    let mut it = raws.iter_mut();
                    let mut bufs: [PacketBuf; MAX_BATCH] = core::array::from_fn(|_| {
                        let raw = it.next().expect("MAX_BATCH buffers");
                        raw[HEAD..HEAD + size].copy_from_slice(&pkt);
                        PacketBuf::new(raw, HEAD, size).expect("room")
                    });
                    tx.outbound_batch(&mut w, &mut bufs, &mut verdicts, Duration::ZERO);
                    rx.inbound_batch(&mut w, &mut bufs, &mut verdicts, Duration::ZERO);
                    black_box(&verdicts);
                })
            });
            assert!(verdicts.iter().all(|v| *v == Ok(Verdict::Protected(1))), "{verdicts:?}");
        }
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(1500))
        .nresamples(2000)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = engine_threads, batch
}
criterion_main!(benches);
