//! What a half-open IKE SA holds, counted by a global allocator (docs/ike-dos.md's figure;
//! issue #39 item 5): unauthenticated initiators, each with its own IKE_SA_INIT, each then
//! sending fragment 1 of 2 of an "IKE_AUTH" sealed with the keys of that IKE_SA_INIT (no
//! authentication needed). Before authentication a partly reassembled message may hold
//! at most `limits::MAX_PREAUTH_MESSAGE_LEN` octets; before, 65,000 were held 30 s.
//! One test in its own binary: the counter sees every thread.
mod common;
use common::*;
use ipsec_ike::header::{ExchangeType, HeaderRepr};
use ipsec_ike::message::{build_plain, Find, Message, Payload};
use ipsec_ike::payload::kind as pkind;
use ipsec_ike::sk::SkCipher;
use ipsec_ike::*;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed unchanged to the system allocator; the wrapper only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const IKE: &str = "aes128gcm16-prfsha256-x25519";
const ESP: &str = "aes128gcm16";
const N: usize = 25;

/// One unauthenticated initiator's IKE SA with B: the cipher of its messages to B.
struct Half {
    from: SocketAddr,
    spi_i: u64,
    spi_r: u64,
    seal: SkCipher,
}

/// IKE_SA_INIT with B from `from` (an initiator's request with our own SPI, nonce and key
/// share), and the keys that follow (RFC 7296 2.14).
fn half_open(b: &mut Endpoint, now: Duration, template: &Message, from: SocketAddr, rng: &mut ChaCha20Rng) -> Half {
    let ike = &b.config().connections[0].ike_proposals.clone();
    let kex = dh::KeyExchange::generate(alg::DhGroup::Curve25519, rng);
    let mut ni = vec![0u8; 32];
    rng.fill_bytes(&mut ni);
    let spi_i = rng.next_u64() | 1;
    let mut h = template.header;
    h.spi_i = spi_i;
    let ps: Vec<Payload> = template
        .chain
        .payloads
        .iter()
        .map(|p| match p {
            Payload::Ke(k) => Payload::Ke(ke::KePayload {
                group: k.group,
                data: kex.public().to_vec(),
            }),
            Payload::Nonce(_) => Payload::Nonce(ni.clone()),
            p => p.clone(),
        })
        .collect();
    let req = build_plain(&h, &ps).unwrap();
    let local = SocketAddr::new(ip(B_IP), 500);
    b.handle_datagram(now, local, from, &req, rng).unwrap();
    let resp = b.poll_transmit().unwrap();
    let m = Message::parse(&resp.payload).unwrap();
    let suite = sa::accept_ike_answer(m.chain.payloads.sa().unwrap(), ike).unwrap();
    assert!(m
        .chain
        .payloads
        .notify(notify::kind::IKEV2_FRAGMENTATION_SUPPORTED)
        .is_some());
    let nr = m.chain.payloads.nonce().unwrap().to_vec();
    let shared = kex.shared_secret(&m.chain.payloads.ke().unwrap().data).unwrap();
    let seed = keys::skeyseed(suite.prf, &ni, &nr, &shared);
    let k = keys::derive_ike_keys(&suite, &seed, &ni, &nr, spi_i, m.header.spi_r);
    Half {
        from,
        spi_i,
        spi_r: m.header.spi_r,
        seal: SkCipher::new(suite.encr, suite.integ, &k.sk_ei, &k.sk_ai).unwrap(),
    }
}

/// Fragment 1 of `total` of the IKE_AUTH request, `n` octets of plaintext.
fn first_fragment(h: &mut Half, total: u8, n: usize, rng: &mut ChaCha20Rng) -> Vec<u8> {
    let hdr = HeaderRepr {
        spi_i: h.spi_i,
        spi_r: h.spi_r,
        next_payload: 0,
        exchange: ExchangeType::IkeAuth,
        initiator: true,
        response: false,
        message_id: 1,
        length: 0,
    };
    h.seal
        .seal_payload(&hdr, pkind::SKF, pkind::IDI, &[0, 1, 0, total], &vec![0; n], rng)
        .unwrap()
}

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[test]
fn what_a_half_open_sa_holds_before_authentication() {
    let (a, _) = pair(IKE, IKE, ESP, ESP);
    let mut bc = conn("b-any", B_IP, None, b"correct horse", IKE);
    bc.children
        .push(ChildConfig::new("net", "10.2.0.0/16", "10.1.0.0/16", ESP).unwrap());
    let mut cfg = Config::new(vec![bc]);
    cfg.cookie_threshold = 10_000;
    let mut b = Endpoint::new(cfg);
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let now = Duration::from_secs(1000);
    let template = {
        let mut e = Endpoint::new(a);
        e.initiate(now, "a2b", &mut rng).unwrap();
        Message::parse(&e.poll_transmit().unwrap().payload).unwrap()
    };
    let from = |i: usize| SocketAddr::new(format!("10.9.{}.{}", i / 200, 1 + i % 200).parse().unwrap(), 500);
    // Warm up whatever is allocated once.
    let mut warm = half_open(&mut b, now, &template, from(N), &mut rng);
    let d = first_fragment(&mut warm, 2, 100, &mut rng);
    let _ = b.handle_datagram(now, SocketAddr::new(ip(B_IP), 500), warm.from, &d, &mut rng);
    let before = live();
    let mut halves: Vec<Half> = (0..N)
        .map(|i| half_open(&mut b, now, &template, from(i), &mut rng))
        .collect();
    let after_init = live();
    assert_eq!(b.half_open_count(), N + 1);
    // The probe's fragment: 65,000 octets. Refused now, before it is kept.
    let mut refused = 0;
    for h in &mut halves {
        let d = first_fragment(h, 2, 65_000, &mut rng);
        match b.handle_datagram(now, SocketAddr::new(ip(B_IP), 500), h.from, &d, &mut rng) {
            Err(Dropped::Fragment(fragment::FragmentError::TooLong)) => refused += 1,
            r => r.unwrap(),
        }
    }
    let after_probe = live();
    // The most a fragment may bring before authentication (of 3: a higher Total Fragments
    // starts the message anew, RFC 7383 2.6).
    let most = limits::MAX_PREAUTH_MESSAGE_LEN - 64;
    for h in &mut halves {
        let d = first_fragment(h, 3, most, &mut rng);
        b.handle_datagram(now, SocketAddr::new(ip(B_IP), 500), h.from, &d, &mut rng)
            .unwrap();
    }
    let after_most = live();
    while b.poll_transmit().is_some() {}
    while b.poll_event().is_some() {}
    let per = |x: isize, y: isize| (y - x) as f64 / N as f64;
    let (init, probe, full) = (
        per(before, after_init),
        per(after_init, after_probe),
        per(before, after_most),
    );
    println!(
        "per half-open SA: {init:.0} octets after IKE_SA_INIT; +{probe:.0} with the probe's 65,000-octet \
         fragment ({refused} of {N} refused); {full:.0} at most before authentication \
         (a first fragment of {most} octets); x 1,024 half-open SAs: {:.1} MB",
        full * 1024.0 / 1e6
    );
    assert_eq!(refused, N, "the probe's fragments are refused");
    assert!(probe < 1_000.0, "{probe} octets kept per refused fragment");
    assert!(
        full < (limits::MAX_PREAUTH_MESSAGE_LEN + 12 * 1024) as f64,
        "{full} octets per half-open SA"
    );
}
