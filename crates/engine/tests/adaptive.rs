//! Adaptive IPComp through the data plane: the worker's clock times compression and the
//! bundle's ESP, the model decides per link rate, and the snapshot shows its inputs.

mod common;
use common::*;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Proto, SaParams};
use ipsec_core::{AeadAlg, PacketBuf};
use ipsec_engine::*;
use ipsec_ipcomp::{Adaptive, AdaptiveMode, Algorithm};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fake clock: every call advances it by 10 us, so each timed operation "takes" 10 us.
static FAKE: AtomicU64 = AtomicU64::new(0);
fn fake_clock() -> u64 {
    FAKE.fetch_add(10_000, Ordering::Relaxed)
}

fn run(mode: AdaptiveMode, link_bps: u64, n: usize) -> SaSnapshot {
    let mut comp = SaConfig::new("comp", SaParams::new(Proto::Comp, 0x4000), Some(Algorithm::Deflate));
    comp.adaptive = Adaptive {
        mode,
        link_bps,
        ..Default::default()
    };
    let mut p = SaParams::new(Proto::Esp, 0x300);
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x33; 20], 16));
    let esp = SaConfig::new("esp", p, None);
    let (a, _b, _) = pair(&[comp, esp], sel("10.0.0.0/24", "10.0.0.0/24"));
    let plane = a.data_plane();
    let mut w = Worker::with_rng(IvRng::from_seed([1; 32])).with_clock(fake_clock);
    let text = b"adaptive compression pays on slow links ".repeat(30);
    for _ in 0..n {
        let mut pkt = udp("10.0.0.1", "10.0.0.2", text.len());
        let l = pkt.len();
        pkt[28..].copy_from_slice(&text);
        let mut raw = vec![0u8; HEAD + l + TAIL];
        raw[HEAD..HEAD + l].copy_from_slice(&pkt);
        let mut buf = PacketBuf::new(&mut raw, HEAD, l).unwrap();
        assert!(matches!(
            plane.outbound(&mut w, &mut buf, secs(0)),
            Ok(Verdict::Protected(_))
        ));
    }
    a.snapshot(secs(0)).sas.into_iter().find(|s| s.name == "comp").unwrap()
}

#[test]
fn model_decides_by_link_rate_and_shows_its_inputs() {
    // 10 us per ~1.2 KB: ~8 ns/B to compress (and, assumed, to decompress); ESP "takes"
    // the same per run. At 56 kbit/s the link costs 143 us/B: compress every packet.
    let slow = run(AdaptiveMode::Model, 56_000, 200);
    let c = slow.comp.as_ref().unwrap();
    let m = c.model.as_ref().unwrap();
    assert_eq!((c.mode, m.decision, m.flips), ("model", "compress", 0), "{c:?}");
    assert_eq!(c.compressed, 200);
    assert!(m.ratio.unwrap() > 3.0 && m.comp_mbps.unwrap() > 100.0, "{m:?}");
    assert!(m.enc_mbps.is_some(), "ESP was timed: {m:?}");
    assert_eq!(m.link_mbps, Some(0.056));
    assert_eq!(m.link_source, "configured");
    // Unknown link rate, not estimated yet (every packet at the same instant): the model
    // does not compress (it measures the link uncompressed first), except its probes.
    let fast = run(AdaptiveMode::Model, 0, 200);
    let c = fast.comp.as_ref().unwrap();
    let m = c.model.as_ref().unwrap();
    assert_eq!((m.decision, m.flips, m.link_source), ("skip", 0, "unknown"), "{c:?}");
    assert!(c.skipped_model > 150 && c.compressed < 20, "{c:?}");
    assert_eq!(c.compressed, m.probes, "{c:?}");
    assert!(m.on_ns_per_byte.is_none(), "{m:?}");
    // Off: nothing compressed, every packet counted as uncompressed by choice.
    let off = run(AdaptiveMode::Off, 0, 10);
    let c = off.comp.as_ref().unwrap();
    assert_eq!(
        (c.compressed, c.uncompressed_by_choice, c.model.is_none()),
        (0, 10, true)
    );
    assert_eq!(off.outbound.not_compressed, 10);
    // The snapshot serializes (the stats file).
    let j = serde_json::to_value(&fast).unwrap();
    assert_eq!(j["comp"]["model"]["decision"], "skip");
}

// ---- the model's inputs, in ns per byte, on every path (issue #23) ----------------------

use std::cell::Cell;

/// Each call of [`step_clock`] advances this thread's clock by this much: every timed
/// operation "takes" exactly STEP ns, so the model's inputs are STEP / bytes.
const STEP: u64 = 12_000;
thread_local! {
    static NOW: Cell<u64> = const { Cell::new(0) };
}
fn step_clock() -> u64 {
    NOW.with(|c| {
        let t = c.get() + STEP;
        c.set(t);
        t
    })
}

/// An IPComp (model, `link_bps`) + AES-GCM ESP bundle each way.
fn model_pair(link_bps: u64) -> (Engine, Engine) {
    let mut comp = SaConfig::new("comp", SaParams::new(Proto::Comp, 0x4000), Some(Algorithm::Deflate));
    comp.adaptive = Adaptive {
        mode: AdaptiveMode::Model,
        link_bps,
        ..Default::default()
    };
    let mut p = SaParams::new(Proto::Esp, 0x300);
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x33; 20], 16));
    let esp = SaConfig::new("esp", p, None);
    let (a, b, _) = pair(&[comp, esp], sel("10.0.0.0/24", "10.0.0.0/24"));
    (a, b)
}

/// A UDP packet whose payload compresses (`text`) or not.
fn packet_of(text: bool, seed: u8) -> Vec<u8> {
    let body: Vec<u8> = if text {
        b"adaptive compression pays on slow links ".repeat(30)
    } else {
        let mut x = 0x2545_f491_4f6c_dd1du64 ^ u64::from(seed);
        (0..1200)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let mut pkt = udp("10.0.0.1", "10.0.0.2", body.len());
    pkt[28..].copy_from_slice(&body);
    pkt
}

fn model_of(e: &Engine) -> ModelSnapshot {
    let snap = e.snapshot(secs(0));
    let s = snap.sas.into_iter().find(|s| s.name == "comp").unwrap();
    s.comp.unwrap().model.unwrap()
}

fn ns_per_byte(mbps: Option<f64>) -> f64 {
    8000.0 / mbps.expect("measured")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

/// The bytes IPComp compresses (the UDP header and payload, transport mode) and the length
/// of the packet ESP then encrypts, for the text packet.
fn text_lengths() -> (usize, usize) {
    let pkt = packet_of(true, 0);
    let mut sa = ipsec_ipcomp::IpcompSa::new(ipsec_ipcomp::IpcompConfig::new(Algorithm::Deflate)).unwrap();
    let mut raw = vec![0u8; HEAD + pkt.len() + TAIL];
    raw[HEAD..HEAD + pkt.len()].copy_from_slice(&pkt);
    let mut buf = PacketBuf::new(&mut raw, HEAD, pkt.len()).unwrap();
    sa.seal(&mut buf).unwrap();
    (pkt.len() - 20, buf.len())
}

/// Seals `n` text packets through `plane` with `w`, one at a time or in batches of 16.
fn send(plane: &DataPlane, w: &mut Worker, n: usize, batched: bool) {
    let pkt = packet_of(true, 0);
    let l = pkt.len();
    let mut raws: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; HEAD + l + TAIL]).collect();
    let mut done = 0;
    while done < n {
        let k = if batched { 16.min(n - done) } else { 1 };
        let mut bufs: Vec<PacketBuf> = raws[..k]
            .iter_mut()
            .map(|raw| {
                raw[HEAD..HEAD + l].copy_from_slice(&pkt);
                PacketBuf::new(raw, HEAD, l).unwrap()
            })
            .collect();
        if batched {
            let mut out = vec![Ok(Verdict::Bypass); k];
            plane.outbound_batch(w, &mut bufs, &mut out, secs(0));
            assert!(out.iter().all(|o| matches!(o, Ok(Verdict::Protected(2)))), "{out:?}");
        } else {
            assert_eq!(plane.outbound(w, &mut bufs[0], secs(0)), Ok(Verdict::Protected(2)));
        }
        done += k;
    }
}

/// The compression, decompression and encryption timings reach the model as STEP / bytes, on
/// the one-packet path and the batch path, from every worker (two threads sharing the SA),
/// and inbound decompressions reach the inbound SA's model: the inputs a unit test can check
/// against a known workload.
#[test]
fn model_inputs_are_ns_per_byte_on_every_path() {
    let (comp_in, esp_in) = text_lengths();
    for batched in [false, true] {
        let (a, b) = model_pair(10_000_000);
        let plane = a.data_plane();
        std::thread::scope(|s| {
            for seed in 0..2u8 {
                let plane = &plane;
                s.spawn(move || {
                    let mut w = Worker::with_rng(IvRng::from_seed([seed; 32])).with_clock(step_clock);
                    send(plane, &mut w, 64, batched);
                });
            }
        });
        let m = model_of(&a);
        assert_eq!((m.decision, m.samples, m.untimed), ("compress", 128, 0), "{m:?}");
        let comp = ns_per_byte(m.comp_mbps);
        assert!(
            close(comp, STEP as f64 / comp_in as f64),
            "batched {batched}: {comp} ns/B, {m:?}"
        );
        // A sampled decompression of the SA's own output: the same STEP over the same bytes.
        assert!(m.decomp_measured, "{m:?}");
        assert!(close(ns_per_byte(m.decomp_mbps), STEP as f64 / comp_in as f64), "{m:?}");
        // ESP after IPComp, one run in CRYPTO_SAMPLE: STEP over the compressed packets of the run.
        let enc = ns_per_byte(m.enc_mbps);
        let run = if batched { 16 } else { 1 };
        assert!(
            close(enc, STEP as f64 / (run * esp_in) as f64),
            "batched {batched}: {enc} ns/B, {m:?}"
        );
        assert_eq!(m.link_source, "configured");
        assert!(close(m.link_mbps.unwrap(), 10.0));

        // Inbound, timed: B's inbound IPComp SA (also "comp") measures its decompressions.
        let mut wb = Worker::with_rng(IvRng::from_seed([9; 32])).with_clock(step_clock);
        let mut wa = Worker::with_rng(IvRng::from_seed([8; 32]));
        let pkt = packet_of(true, 0);
        let l = pkt.len();
        let mut raw = vec![0u8; HEAD + 2 * l + TAIL];
        raw[HEAD..HEAD + l].copy_from_slice(&pkt);
        let mut buf = PacketBuf::new(&mut raw, HEAD, l).unwrap();
        plane.outbound(&mut wa, &mut buf, secs(0)).unwrap();
        let pb = b.data_plane();
        if batched {
            let mut out = [Ok(Verdict::Bypass)];
            pb.inbound_batch(&mut wb, core::slice::from_mut(&mut buf), &mut out, secs(0));
            assert!(out[0].is_ok(), "{out:?}");
        } else {
            pb.inbound(&mut wb, &mut buf, secs(0)).unwrap();
        }
        assert_eq!(buf.packet(), &pkt[..]);
        let mb = model_of(&b);
        assert!(mb.decomp_measured, "{mb:?}");
        assert!(
            close(ns_per_byte(mb.decomp_mbps), STEP as f64 / comp_in as f64),
            "{mb:?}"
        );
    }
}

/// A worker made by `Worker::new` has a clock: nothing the daemon builds can leave the
/// model without timings.
#[test]
fn workers_have_a_clock_by_default() {
    assert!(Worker::new().unwrap().has_clock());
    assert!(!Worker::with_rng(IvRng::from_seed([1; 32])).has_clock());
    // Without one, the snapshot says the model is deciding blind.
    let (a, _) = model_pair(10_000_000);
    let mut w = Worker::with_rng(IvRng::from_seed([1; 32]));
    send(&a.data_plane(), &mut w, 4, true);
    let m = model_of(&a);
    assert_eq!((m.samples, m.untimed), (0, 4), "{m:?}");
}

/// With no link rate configured, the model estimates it from the rate its bundle's packets
/// leave at: sends paced at a known rate (the engine's `now` advancing by each packet's time
/// on the link) give that rate back.
#[test]
fn an_unknown_link_rate_is_estimated_from_the_sending_rate() {
    for rate in [10e6, 100e6] {
        let (a, _) = model_pair(0);
        let plane = a.data_plane();
        let mut w = Worker::with_rng(IvRng::from_seed([3; 32])).with_clock(step_clock);
        let mut raw = vec![0u8; HEAD + 1500 + TAIL];
        let mut now = 1_000_000_000f64;
        // 100 ms of sending random (incompressible) packets.
        let mut i = 0u8;
        while now < 1.1e9 {
            let pkt = packet_of(false, i);
            i = i.wrapping_add(1);
            let l = pkt.len();
            raw[HEAD..HEAD + l].copy_from_slice(&pkt);
            let mut buf = PacketBuf::new(&mut raw, HEAD, l).unwrap();
            plane
                .outbound(&mut w, &mut buf, core::time::Duration::from_nanos(now as u64))
                .unwrap();
            now += buf.len() as f64 * 8e9 / rate;
        }
        let m = model_of(&a);
        assert_eq!((m.decision, m.link_source), ("skip", "estimated"), "{m:?}");
        let est = m.link_estimate_mbps.unwrap() * 1e6;
        assert!(
            (est / rate - 1.0).abs() < 0.02,
            "estimated {est} bit/s for {rate}: {m:?}"
        );
        assert_eq!(m.link_mbps, m.link_estimate_mbps);
    }
}
