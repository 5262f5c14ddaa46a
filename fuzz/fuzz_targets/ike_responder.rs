//! A sequence of datagrams (`ipsec_fuzz::ike::split`) into an IKEv2 responder whose RNG is
//! seeded as the seed corpus's recording was, so recorded IKE_AUTH and INFORMATIONAL
//! requests still verify and mutations reach the exchange handlers. Then the timers run.
#![no_main]
use ipsec_fuzz::{ike, MAX_INPUT};
use ipsec_ike::Endpoint;
use libfuzzer_sys::fuzz_target;
use rand_chacha::rand_core::SeedableRng;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let mut r = Endpoint::new(ike::responder());
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(ike::RESPONDER_SEED);
    let mut now = Duration::from_secs(1000);
    for (flags, d) in ike::split(data) {
        if flags & 2 != 0 {
            now += Duration::from_secs(60);
            r.handle_timeout(now, &mut rng);
        }
        let (local, remote) = ike::addrs(flags & 1 != 0);
        let _ = r.handle_datagram(now, local, remote, d, &mut rng);
        while r.poll_transmit().is_some() {}
        while r.poll_event().is_some() {}
    }
    for _ in 0..8 {
        match r.poll_timeout() {
            Some(t) => {
                now = now.max(t);
                r.handle_timeout(now, &mut rng);
            }
            None => break,
        }
    }
});
