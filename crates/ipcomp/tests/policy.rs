//! The adaptive policy: RFC 3173 back-off and the McGregor-Lee Complete model.
mod common;

use common::*;
use ipsec_core::Mode;
use ipsec_ipcomp::policy::ModelConfig;
use ipsec_ipcomp::{Algorithm, Backoff, CostModel, CryptoOp, IpcompSa, SealOutcome, SkipReason};

#[test]
fn backoff_n_misses_then_m_skips_then_retry() {
    let mut cfg = config(Algorithm::Deflate, Mode::Transport, false);
    cfg.backoff = Backoff {
        after_misses: 3,
        skip: 5,
    };
    let mut sa = IpcompSa::new(cfg).unwrap();
    let random = v4_tcp(&corpus::seeded_random(1000, 1));
    let text = v4_tcp(&b"compressible ".repeat(80));
    let incompressible = SealOutcome::NotCompressed(SkipReason::Incompressible { original: 1020 });
    let backoff = SealOutcome::NotCompressed(SkipReason::Backoff);
    let mut got = Vec::new();
    for _ in 0..3 + 5 + 1 {
        got.push(seal(&mut sa, &random).0);
    }
    let mut want = vec![incompressible; 3];
    want.extend([backoff; 5]);
    want.push(incompressible); // retried after M packets
    assert_eq!(got, want);
    assert_eq!(sa.backoff().misses(), 1);
    // During back-off even a compressible packet is skipped...
    for _ in 0..2 {
        seal(&mut sa, &random);
    }
    assert_eq!(sa.backoff().skipping(), 5);
    assert_eq!(seal(&mut sa, &text).0, backoff);
    for _ in 0..4 {
        seal(&mut sa, &random);
    }
    // ...and a success after it resets the miss count.
    assert!(matches!(seal(&mut sa, &text).0, SealOutcome::Compressed { .. }));
    assert_eq!(sa.backoff().misses(), 0);
    let c = sa.counters();
    assert_eq!((c.skipped_incompressible, c.skipped_backoff, c.compressed), (6, 10, 1));
    // The packets skipped by policy are byte-identical.
    assert_eq!(seal(&mut sa, &random).1, random);
}

/// Rates in Mbit/s as the paper gives them; ns per byte = 8000 / Mbps.
fn model(link_mbps: f64, comp_mbps: f64, decomp_mbps: f64, x: f64, crypto: &[(CryptoOp, f64)]) -> CostModel {
    let mut m = CostModel::new(ModelConfig {
        link_bps: link_mbps * 1e6,
        probe_interval: 0,
        ..ModelConfig::new(0.0)
    });
    let ns = |mbps: f64| (8000.0 / mbps) as u64;
    // 1000 bytes in `ns(rate)` ns per byte.
    m.observe_compress(1000, (1000.0 / x) as usize, ns(comp_mbps) * 1000);
    m.observe_decompress(1000, ns(decomp_mbps) * 1000);
    for &(op, mbps) in crypto {
        m.observe_crypto(op, 1000, ns(mbps) * 1000);
    }
    m
}

#[test]
fn model_decides_as_the_inequality_says() {
    use CryptoOp::*;
    // Slow link, 56 kbit/s: 1/R_SECNET = 8000/0.056 = 142857 ns/B. DEFLATE at 20 Mbit/s
    // (400 ns/B) compress, 80 Mbit/s (100 ns/B) decompress, X = 2; 3DES 20 Mbit/s (400 ns/B
    // each way), HMAC 100 Mbit/s (80 ns/B each way).
    // Gain: (1 - 1/2)(400 + 400 + 80 + 80 + 142857) = 71908.5; cost: 400 + 100 = 500.
    // 71908.5 >= 500: compress.
    let slow = model(
        0.056,
        20.0,
        80.0,
        2.0,
        &[
            (Encrypt, 20.0),
            (Decrypt, 20.0),
            (IntegrityCompute, 100.0),
            (IntegrityVerify, 100.0),
        ],
    );
    let (gain, cost) = slow.sides().unwrap();
    assert!(
        (gain - 71908.5).abs() < 1.0 && (cost - 500.0).abs() < 1e-9,
        "{gain} {cost}"
    );
    assert!(slow.pays());

    // 1 Gbit/s link: 8 ns/B. AES at 1 Gbit/s (8 ns/B each way), HMAC at 2 Gbit/s (4 ns/B
    // each way), slow DEFLATE: 100 Mbit/s (80 ns/B) compress, 400 Mbit/s (20 ns/B)
    // decompress, X = 2. Gain: 0.5 (8 + 8 + 4 + 4 + 8) = 16; cost: 80 + 20 = 100. Skip.
    let mut fast = model(
        1000.0,
        100.0,
        400.0,
        2.0,
        &[
            (Encrypt, 1000.0),
            (Decrypt, 1000.0),
            (IntegrityCompute, 2000.0),
            (IntegrityVerify, 2000.0),
        ],
    );
    let (gain, cost) = fast.sides().unwrap();
    assert!(
        (gain - 16.0).abs() < 1e-9 && (cost - 100.0).abs() < 1e-9,
        "{gain} {cost}"
    );
    assert!(!fast.pays());
    assert!(!fast.should_compress());

    // 10 Mbit/s (800 ns/B), X = 2.5 (1/X = 0.4), DEFLATE 20/80 Mbit/s (400 + 100 = 500),
    // no crypto observed (0). The paper's form: gain 0.6 * 800 = 480 < 500: skip. But the
    // stages overlap: with compression the slowest is the compressor, 400 ns/B (link 320,
    // receiver 100), without it the link, 800 ns/B: compressing doubles the throughput, and
    // the pipelined form, which decides, says so.
    let m = model(10.0, 20.0, 80.0, 2.5, &[]);
    let (gain, cost) = m.sides().unwrap();
    assert!(gain < cost, "{gain} {cost}");
    let st = m.stages().unwrap();
    assert_eq!((st.on(), st.off()), (400.0, 800.0));
    assert!(m.pays());
    // At 20 Mbit/s (400 ns/B) the compressor is as slow as the link: no gain, skip.
    let m = model(20.0, 20.0, 80.0, 2.5, &[]);
    let st = m.stages().unwrap();
    assert_eq!((st.on(), st.off()), (400.0, 400.0));
    assert!(!m.pays());
    // The fast link above: the sender's stage, 80 + 12 × 0.5 = 86 ns/B with compression,
    // against 12 (AES + HMAC) without.
    let st = fast.stages().unwrap();
    assert_eq!((st.send_on, st.on(), st.off()), (86.0, 86.0, 12.0));

    // Decryption and verification default to the forward rates: same as giving them.
    let half = model(
        1000.0,
        100.0,
        400.0,
        2.0,
        &[(Encrypt, 1000.0), (IntegrityCompute, 2000.0)],
    );
    assert_eq!(half.sides(), fast.sides());

    // No observation yet, link configured: compress (to measure).
    assert!(CostModel::new(ModelConfig {
        link_bps: 1e9,
        probe_interval: 0,
        ..ModelConfig::new(0.0)
    })
    .pays());
    // No observation, link unknown: do not (it is measured uncompressed first).
    assert!(!CostModel::new(ModelConfig::new(0.0)).pays());
}

#[test]
fn model_skips_in_the_sa_and_probes() {
    let mut cfg = config(Algorithm::Deflate, Mode::Transport, false);
    cfg.model = Some(ModelConfig {
        link_bps: 1e9,
        probe_interval: 4,
        ..ModelConfig::new(0.0)
    });
    let mut sa = IpcompSa::new(cfg).unwrap();
    let text = v4_tcp(&b"compressible ".repeat(80));
    // First packet: no data, so it compresses; report it as very slow (1 us per byte).
    let (o, _) = seal(&mut sa, &text);
    assert!(matches!(o, SealOutcome::Compressed { .. }));
    sa.observe_seal(&o, 1000 * 1040);
    // With compression the sender's stage is 1000 ns/B, without it the link's 8: skip. A probe
    // costs 125 skipped packets' time, so the 0.5% budget asks for one in 25000 packets, at
    // most 4096 (more than the configured interval, 4).
    let budget = sa.model().unwrap().probe_budget();
    assert_eq!(budget, 4096);
    let outcomes: Vec<_> = (0..2 * budget).map(|_| seal(&mut sa, &text).0).collect();
    let skip = SealOutcome::NotCompressed(SkipReason::Model);
    let probes: Vec<usize> = (0..outcomes.len()).filter(|&i| outcomes[i] != skip).collect();
    assert_eq!(probes, [4095, 8191]);
    assert!(matches!(outcomes[4095], SealOutcome::Compressed { .. }), "probe");
    assert_eq!(sa.counters().skipped_model, 2 * 4095);
    // A slow link makes it pay.
    let mut cfg = config(Algorithm::Deflate, Mode::Transport, false);
    cfg.model = Some(ModelConfig {
        link_bps: 56e3,
        probe_interval: 0,
        ..ModelConfig::new(0.0)
    });
    let mut sa = IpcompSa::new(cfg).unwrap();
    let (o, _) = seal(&mut sa, &text);
    sa.observe_seal(&o, 1000 * 1040);
    assert!(matches!(seal(&mut sa, &text).0, SealOutcome::Compressed { .. }));
}

#[test]
fn modes_off_and_always() {
    use ipsec_ipcomp::{Adaptive, AdaptiveMode};
    let random = v4_tcp(&corpus::seeded_random(1000, 2));
    let text = v4_tcp(&b"compressible ".repeat(80));
    let cfg = |mode| {
        config(Algorithm::Deflate, Mode::Transport, false).with_adaptive(Adaptive {
            mode,
            link_bps: 0,
            ..Default::default()
        })
    };
    let mut off = IpcompSa::new(cfg(AdaptiveMode::Off)).unwrap();
    assert_eq!(
        seal(&mut off, &text),
        (SealOutcome::NotCompressed(SkipReason::Off), text.clone())
    );
    assert_eq!(off.counters().skipped_off, 1);
    assert!(!off.wants_timing());
    // Always: no back-off however many packets do not compress.
    let mut always = IpcompSa::new(cfg(AdaptiveMode::Always)).unwrap();
    for _ in 0..40 {
        seal(&mut always, &random);
    }
    assert_eq!(always.counters().skipped_incompressible, 40);
    assert_eq!(always.counters().skipped_backoff, 0);
    assert!(matches!(seal(&mut always, &text).0, SealOutcome::Compressed { .. }));
    // The default is the RFC 3173 back-off.
    let mut backoff = IpcompSa::new(config(Algorithm::Deflate, Mode::Transport, false)).unwrap();
    for _ in 0..40 {
        seal(&mut backoff, &random);
    }
    assert!(backoff.counters().skipped_backoff > 0);
    assert_eq!(AdaptiveMode::from_name("model"), Some(AdaptiveMode::Model));
    assert_eq!(AdaptiveMode::from_name("sometimes"), None);
}

/// Model mode follows the data: random data stops compression (probes grow sparser), text
/// brings it back through a probe, and each change counts as one flip.
#[test]
fn model_switches_with_the_data_and_back() {
    use ipsec_ipcomp::{Adaptive, AdaptiveMode};
    // 10 Mbit/s: 800 ns/B on the link. Compression timed at 10 ns/B.
    let cfg = config(Algorithm::Deflate, Mode::Transport, false).with_adaptive(Adaptive {
        mode: AdaptiveMode::Model,
        link_bps: 10_000_000,
        ..Default::default()
    });
    let mut sa = IpcompSa::new(cfg).unwrap();
    assert!(sa.wants_timing());
    let random = v4_tcp(&corpus::seeded_random(1000, 3));
    let text = v4_tcp(&b"compressible ".repeat(80));
    let run = |sa: &mut IpcompSa, p: &[u8], n: usize| {
        let mut compressed_or_tried = 0;
        for _ in 0..n {
            let (o, _) = seal(sa, p);
            if let Some((i, _)) = o.attempt() {
                sa.observe_seal(&o, 10 * i as u64);
                compressed_or_tried += 1;
            }
        }
        compressed_or_tried
    };
    assert_eq!(run(&mut sa, &text, 50), 50);
    assert!(sa.model_status().unwrap().compressing);
    // Random data: the ratio EWMA reaches 1 and the model stops trying, probing ever more
    // sparsely (16, 32, ... 256 packets apart).
    let tried = run(&mut sa, &random, 2000);
    let st = sa.model_status().unwrap();
    assert!(!st.compressing, "{st:?}");
    assert_eq!(st.flips, 1);
    assert!(tried < 40, "{tried} attempts on random data");
    assert!(sa.counters().skipped_model > 1900);
    // Text again: a probe sees it pay, probes come every 16 packets, the EWMA follows and
    // the decision flips back within a few hundred packets.
    run(&mut sa, &text, 600);
    let st = sa.model_status().unwrap();
    assert!(st.compressing, "{st:?}");
    assert_eq!(st.flips, 2);
    // A fast link (unlimited): compressing never pays, whatever the data.
    let mut fast = IpcompSa::new(
        config(Algorithm::Deflate, Mode::Transport, false).with_adaptive(Adaptive {
            mode: AdaptiveMode::Model,
            link_bps: 0,
            ..Default::default()
        }),
    )
    .unwrap();
    run(&mut fast, &text, 100);
    assert!(!fast.model_status().unwrap().compressing);
}

/// The link estimate and the pipelined decision on a known workload: compression at
/// 10 ns/B with X = 2.5, AES at 1 ns/B; packets of 1000 wire bytes paced at the link rate.
#[test]
fn unknown_link_rate_is_estimated_and_decides() {
    fn paced(m: &mut CostModel, t: &mut u64, bps: f64, ms: u64) {
        let end = *t + ms * 1_000_000;
        while *t < end {
            m.observe_sent(1000, *t);
            *t += (1000.0 * 8e9 / bps) as u64;
        }
    }
    for (bps, want) in [(10e6, true), (100e6, true), (1e9, false), (10e9, false)] {
        let mut m = CostModel::new(ModelConfig {
            probe_interval: 0,
            ..ModelConfig::new(0.0)
        });
        m.observe_compress(1000, 400, 10_000);
        m.observe_crypto(CryptoOp::Encrypt, 1000, 1000);
        assert!(!m.compressing() && m.stages().is_none(), "unknown link: measure first");
        let mut t = 5_000_000_000;
        paced(&mut m, &mut t, bps, 50);
        let est = m.link_estimator().estimate().unwrap();
        assert!((est / bps - 1.0).abs() < 0.01, "{est} for {bps}");
        // 10 Mbit/s: link 800 ns/B off, 320 on, compressor 10.4: compress. 1 Gbit/s: link
        // 8 off, compressor 10.4 on: skip.
        assert_eq!(m.compressing(), want, "{bps}: {:?}", m.stages());
    }
    // A window in which compression kept the sender busy says only "at least this fast":
    // it does not lower the estimate made from free windows.
    let mut m = CostModel::new(ModelConfig::new(0.0));
    let mut t = 1_000_000_000;
    paced(&mut m, &mut t, 1e9, 30);
    for _ in 0..20 {
        // 10 ms windows moving 100 Mbit/s while compressing 9 ms of each.
        for k in 0..125u64 {
            m.observe_attempt(2500, 1000, 72_000);
            m.observe_sent(1000, t + k * 80_000);
        }
        t += 10_000_000;
    }
    let est = m.link_estimator().estimate().unwrap();
    assert!((est / 1e9 - 1.0).abs() < 0.01, "{est}");
    // An idle gap is not a slow link.
    m.observe_sent(1000, t + 1_000_000_000);
    m.observe_sent(1000, t + 1_000_100_000);
    assert!((m.link_estimator().estimate().unwrap() / 1e9 - 1.0).abs() < 0.01);
}

/// A timing estimate forgets one preempted (slow) first sample within a few samples, and a
/// single slow sample later moves it by at most 1/64.
#[test]
fn a_slow_timing_sample_does_not_decide() {
    use ipsec_ipcomp::policy::Ewma;
    let mut e = Ewma::default();
    e.update_time(500.0);
    for _ in 0..8 {
        e.update_time(3.0);
    }
    assert!(e.get().unwrap() < 5.0, "{:?}", e.get());
    let before = e.get().unwrap();
    e.update_time(1000.0);
    assert!(
        (e.get().unwrap() - before * (1.0 + 1.0 / 64.0)).abs() < 1e-9,
        "{:?}",
        e.get()
    );
}

/// A known workload: an operation of 25 ns/B (±4%), half of whose timings carry interference
/// of 10% to 350% on top (work of other threads and softirqs charged to it, as tunneld's
/// compressions at 100 Mbit/s showed). The estimate stays near the operation's own cost
/// (an average weighing the excess reached 68 on these samples), yet follows a real change
/// of the cost both ways.
#[test]
fn timings_with_interference_estimate_the_operations_own_cost() {
    use ipsec_ipcomp::policy::Ewma;
    let mut seed = 12345u64;
    let mut rnd = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut e = Ewma::default();
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    for i in 0..20_000 {
        let own = 25.0 * (1.0 + 0.08 * (rnd() - 0.5));
        let extra = if rnd() < 0.5 { 0.0 } else { 0.1 + 3.4 * rnd() };
        e.update_time(own * (1.0 + extra));
        if i >= 100 {
            lo = lo.min(e.get().unwrap());
            hi = hi.max(e.get().unwrap());
        }
    }
    assert!(lo > 23.0 && hi < 25.0 * 1.3, "{lo}..{hi}");
    // The operation really becomes twice as slow: followed within 40 samples...
    let mut n = 0;
    while e.get().unwrap() < 45.0 {
        e.update_time(50.0);
        n += 1;
    }
    assert!(n <= 40, "{n}");
    // ...and back within 4.
    for _ in 0..4 {
        e.update_time(25.0);
    }
    assert!(e.get().unwrap() < 28.0, "{:?}", e.get());
}
