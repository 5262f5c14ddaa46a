//! ESP's framing cost against bare ring, measured the way issue #30's independent harness
//! does it: A and B alternated in one process, many rounds, the median of the per-round
//! ratios. `cargo bench --bench esp_framing` (about 15 s; `-- --rounds N --iters M` to change
//! the shape, `-- --quick` for a 1-second smoke run, a word such as `transport/owned` for the
//! cases whose name contains it, `--only esp|bare` to run one side alone under a profiler).
//!
//! One operation of each side:
//! - **A, ESP**: a 1,400-byte IPv4/UDP packet copied into a buffer with headroom and tailroom,
//!   sealed by one AES-128-GCM SA and opened by a second SA with the same parameters (sequence
//!   numbers 1, 2, 3… so the receiver's window check and update are in the path).
//! - **B, bare ring**: the same packet copied into a buffer of the same shape, then ring's
//!   `LessSafeKey` (AES-128-GCM, keyed once) seals and opens the bytes ESP encrypts (the
//!   part ESP protects, its padding and the 2-byte trailer) with ESP's 8-byte AAD and a fresh
//!   nonce per operation (salt, then a counter, as ESP's IV is its sequence number).
//!
//! The copy is in both sides (it is what a data plane does with each packet it receives into
//! its own buffer), so its cost counts for neither. A round is `iters` operations of A and
//! `iters` of B on hot buffers, A first in even rounds and B first in odd ones (so a slow
//! stretch of the shared machine lands on both); its ratio is B's time per operation over
//! A's (1.0 = ESP costs nothing beyond the AEAD). Printed per case: median time per operation
//! of each side, the median ratio and its quartiles over the rounds.
//!
//! Cases (`transport/owned` is the shape; the others show what moves the ratio):
//! - `transport/owned`: transport mode, `EspSa` (`&mut self`: no atomics, no lock).
//! - `transport/shared`: transport mode, `Esp` by `&self` as the engine and tunneld use it
//!   (atomic sequence counter, the replay window locked for its check and its update).
//! - `tunnel/owned`: tunnel mode (the shape of the criterion group `gcm128` in
//!   `benches/vs_bare.rs`), the bare side sealing the tunnel-mode plaintext.
//! - `*/64`: the same at 64 bytes.

mod common;

use common::{key, patterned_packet, IP_HDR, ROOM};
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Keyed, Proto};
use ipsec_core::{AeadAlg, Mode, PacketBuf, SaParams, Tunnel};
use ipsec_esp::{Esp, EspSa};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

const SPI: u32 = 0x1000;

fn params(mode: Mode) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, SPI);
    p.mode = mode;
    if mode == Mode::Tunnel {
        p.tunnel = Some(Tunnel {
            src: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)),
        });
    }
    p.aead = Some(Keyed::new(AeadAlg::AesGcm, &key(20, 2), 16));
    p
}

/// One side of a case: `run(n)` does `n` operations.
type Side<'a> = Box<dyn FnMut(u64) + 'a>;

/// The ESP side: copy, seal, open, with the owned (`EspSa`) or the shared (`Esp`) face.
fn esp_side(mode: Mode, size: usize, shared: bool) -> Side<'static> {
    let packet = patterned_packet(size);
    let mut buf = vec![0u8; ROOM + size + ROOM];
    let p = params(mode);
    // Checked once: the round trip gives the packet back and the sealed form is ESP.
    let mut tx = EspSa::with_rng(&p, IvRng::from_seed([1; 32])).expect("SA");
    let mut rx = EspSa::with_rng(&p, IvRng::from_seed([2; 32])).expect("SA");
    {
        buf[ROOM..ROOM + size].copy_from_slice(&packet);
        let mut pb = PacketBuf::new(&mut buf, ROOM, size).expect("buffer");
        tx.seal(&mut pb).expect("seal");
        assert_ne!(pb.packet(), &packet[..]);
        rx.open(&mut pb).expect("open");
        assert_eq!(pb.packet(), &packet[..], "ESP round trip");
    }
    if shared {
        let (tx, mut rng) = tx.into_parts();
        let (rx, _) = rx.into_parts();
        let (tx, rx): (Esp, Esp) = (tx, rx);
        Box::new(move |n| {
            for _ in 0..n {
                buf[ROOM..ROOM + size].copy_from_slice(&packet);
                let mut pb = PacketBuf::new(&mut buf, ROOM, size).expect("buffer");
                tx.seal(&mut rng, &mut pb).expect("seal");
                rx.open(&mut pb).expect("open");
                black_box(pb.len());
            }
        })
    } else {
        Box::new(move |n| {
            for _ in 0..n {
                buf[ROOM..ROOM + size].copy_from_slice(&packet);
                let mut pb = PacketBuf::new(&mut buf, ROOM, size).expect("buffer");
                tx.seal(&mut pb).expect("seal");
                rx.open(&mut pb).expect("open");
                black_box(pb.len());
            }
        })
    }
}

/// The bare side: copy the same packet, seal and open what ESP would encrypt.
fn bare_side(mode: Mode, size: usize) -> Side<'static> {
    let packet = patterned_packet(size);
    let mut buf = vec![0u8; ROOM + size + ROOM];
    let km = key(20, 2);
    let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &km[..16]).expect("key"));
    let salt: [u8; 4] = km[16..20].try_into().expect("salt");
    // ESP's plaintext: in transport mode the part after the IP header, in tunnel mode the
    // whole packet; then padding to 4 bytes with the 2-byte trailer (RFC 4303 2.4).
    let start = match mode {
        Mode::Transport => IP_HDR,
        Mode::Tunnel => 0,
    };
    let n = ipsec_esp::padding::pad_len(size - start, 1) + ipsec_esp::padding::TRAILER_LEN + size - start;
    let mut seq = 0u64;
    Box::new(move |ops| {
        for _ in 0..ops {
            seq += 1;
            buf[ROOM..ROOM + size].copy_from_slice(&packet);
            let mut nonce = [0u8; 12];
            nonce[..4].copy_from_slice(&salt);
            nonce[4..].copy_from_slice(&seq.to_be_bytes());
            let mut aad = [0u8; 8];
            aad[..4].copy_from_slice(&SPI.to_be_bytes());
            aad[4..].copy_from_slice(&(seq as u32).to_be_bytes());
            let body = &mut buf[ROOM + start..ROOM + start + n + 16];
            let (data, icv) = body.split_at_mut(n);
            let tag = key
                .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), data)
                .expect("seal");
            icv.copy_from_slice(tag.as_ref());
            let out = key
                .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(aad), body)
                .expect("open");
            black_box(out.len());
        }
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Times `rounds` rounds of `iters` operations of each side, alternating which goes first.
fn run_case(name: &str, mut a: Side<'_>, mut b: Side<'_>, rounds: usize, iters: u64) {
    // Warm-up: caches, branch predictors, the CPU's clock.
    a(iters);
    b(iters);
    let (mut ta, mut tb, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let time = |f: &mut Side<'_>| {
            let t = Instant::now();
            f(iters);
            t.elapsed().as_nanos() as f64 / iters as f64
        };
        let (x, y) = if r % 2 == 0 {
            let x = time(&mut a);
            (x, time(&mut b))
        } else {
            let y = time(&mut b);
            (time(&mut a), y)
        };
        ta.push(x);
        tb.push(y);
        ratio.push(y / x);
    }
    let (ma, mb) = (median(&mut ta), median(&mut tb));
    let mr = median(&mut ratio);
    println!(
        "{name:<22} esp {ma:>7.1} ns  bare-ring {mb:>7.1} ns  ratio {mr:.3} (quartiles {:.3}-{:.3}, min {:.3}, max {:.3}, {rounds} rounds x {iters})",
        quantile(&ratio, 0.25),
        quantile(&ratio, 0.75),
        ratio[0],
        ratio[ratio.len() - 1],
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let quick = args.iter().any(|a| a == "--quick");
    let rounds = get("--rounds").unwrap_or(if quick { 21 } else { 301 }) as usize;
    let iters = get("--iters").unwrap_or(if quick { 500 } else { 2000 });
    // A filter word (as criterion takes one): only cases whose name contains it.
    let filter = args
        .iter()
        .skip(1)
        .enumerate()
        .find(|(i, a)| !a.starts_with("--") && a.parse::<u64>().is_err() && args[*i].as_str() != "--only")
        .map(|(_, a)| a)
        .cloned();
    let cases: [(&str, Mode, usize, bool); 6] = [
        ("transport/owned/1400", Mode::Transport, 1400, false),
        ("transport/shared/1400", Mode::Transport, 1400, true),
        ("tunnel/owned/1400", Mode::Tunnel, 1400, false),
        ("transport/owned/64", Mode::Transport, 64, false),
        ("transport/shared/64", Mode::Transport, 64, true),
        ("tunnel/owned/64", Mode::Tunnel, 64, false),
    ];
    // `--only esp|bare`: one side alone, for a profiler.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    for (name, mode, size, shared) in cases {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        if let Some(side) = &only {
            let mut f = if side == "esp" {
                esp_side(mode, size, shared)
            } else {
                bare_side(mode, size)
            };
            for _ in 0..rounds {
                f(iters);
            }
            println!("{name}: {side} only, {rounds} x {iters}");
            continue;
        }
        run_case(name, esp_side(mode, size, shared), bare_side(mode, size), rounds, iters);
    }
}
