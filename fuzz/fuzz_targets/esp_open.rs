//! Feeds arbitrary bytes to `EspSa::open` for a few suites and modes: it must return an error
//! or a packet, never panic. Run: `cargo +nightly fuzz run esp_open` from the repository root.
#![no_main]
use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg, PacketBuf, SaParams};
use ipsec_esp::EspSa;
use libfuzzer_sys::fuzz_target;

fn sa(which: u8) -> EspSa {
    let mut p = SaParams::new(Proto::Esp, 0x1000);
    match which % 3 {
        0 => {
            p.enc = Some(Keyed::new(EncAlg::AesCbc, &[1; 16], 0));
            p.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[2; 20], 12));
        }
        1 => p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[3; 20], 16)),
        _ => p.enc = Some(Keyed::new(EncAlg::Des3Cbc, &[4; 24], 0)),
    }
    if which & 4 != 0 {
        p.mode = Mode::Tunnel;
        p.tunnel = Some(Tunnel { src: "192.0.2.1".parse().unwrap(), dst: "192.0.2.2".parse().unwrap() });
    }
    p.esn = which & 8 != 0;
    EspSa::with_rng(&p, ipsec_core::rng::IvRng::from_seed([0; 32])).unwrap()
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let mut sa = sa(data[0]);
    let mut buf = data[1..].to_vec();
    let len = buf.len();
    if let Ok(mut b) = PacketBuf::new(&mut buf, 0, len) {
        let _ = sa.open(&mut b);
    }
});
