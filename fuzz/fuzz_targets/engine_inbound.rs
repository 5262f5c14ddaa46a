//! Feeds arbitrary bytes to `Engine::inbound` with an IPComp + ESP (tunnel) + AH bundle
//! installed: every input must come back as a verdict or a counted drop, never a panic.
//! Run: `cargo +nightly fuzz run engine_inbound` from the repository root.
#![no_main]
use core::time::Duration;
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
use ipsec_core::{EncAlg, IntegAlg, PacketBuf, SaParams};
use ipsec_engine::{Action, Direction, Engine, Policy, SaConfig, Selector};
use ipsec_ipcomp::Algorithm;
use libfuzzer_sys::fuzz_target;
use std::sync::Mutex;

fn engine() -> Engine {
    let mut e = Engine::new();
    let comp = SaParams::new(Proto::Comp, 2);
    let mut esp = SaParams::new(Proto::Esp, 0x300);
    esp.mode = Mode::Tunnel;
    esp.tunnel = Some(Tunnel {
        src: "192.0.2.1".parse().unwrap(),
        dst: "192.0.2.2".parse().unwrap(),
    });
    esp.enc = Some(Keyed::new(EncAlg::AesCbc, &[1; 16], 0));
    esp.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[2; 20], 12));
    let mut ah = SaParams::new(Proto::Ah, 0x200);
    ah.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[3; 32], 16));
    let rng = || IvRng::from_seed([0; 32]);
    let t = Duration::ZERO;
    let ids = vec![
        e.add_sa_with_rng(SaConfig::new("comp", comp, Some(Algorithm::Deflate)), rng(), t)
            .unwrap(),
        e.add_sa_with_rng(SaConfig::new("esp", esp, None), rng(), t).unwrap(),
        e.add_sa_with_rng(SaConfig::new("ah", ah, None), rng(), t).unwrap(),
    ];
    let selector = Selector::default();
    e.add_policy(Policy {
        dir: Direction::In,
        selector,
        action: Action::Protect(ids),
    })
    .unwrap();
    e
}

static ENGINE: Mutex<Option<Engine>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    if data.len() > ipsec_fuzz::MAX_INPUT {
        return;
    }
    let mut guard = ENGINE.lock().unwrap();
    let e = guard.get_or_insert_with(engine);
    let mut buf = vec![0u8; data.len() + 70000];
    buf[..data.len()].copy_from_slice(data);
    if let Ok(mut b) = PacketBuf::new(&mut buf, 0, data.len()) {
        let _ = e.inbound(&mut b, Duration::ZERO);
    }
});
