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
    comp.adaptive = Adaptive { mode, link_bps };
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
    // Unlimited link: no transmission time to save; after the first packet the model skips
    // and only probes.
    let fast = run(AdaptiveMode::Model, 0, 200);
    let c = fast.comp.as_ref().unwrap();
    let m = c.model.as_ref().unwrap();
    assert_eq!((m.decision, m.flips), ("skip", 1), "{c:?}");
    assert!(c.skipped_model > 150 && c.compressed < 20, "{c:?}");
    assert_eq!(c.compressed, 1 + m.probes, "{c:?}");
    assert!(m.gain_ns_per_byte.unwrap() < m.cost_ns_per_byte.unwrap());
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
