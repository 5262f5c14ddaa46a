//! Each transform beside the bare primitives it runs, in one run: `cargo bench --bench vs_bare`.
//!
//! | group | functions | parameter | throughput (bytes per iteration) |
//! |---|---|---|---|
//! | `gcm128` | `esp`, `esp-shared`, `aead-ring`, `aead-rustcrypto`, `bare-ring` | IPv4 packet size | the packet |
//! | `cbc_sha1`, `cbc_sha256` | `esp`, `bare` | IPv4 packet size | the packet |
//! | `ah_sha1` | `ah`, `bare` | IPv4 packet size | the packet |
//!
//! One iteration is a seal **and** an open of one packet (64 and 1400 bytes):
//! - `esp`: `EspSa::seal` of an IPv4/UDP packet in tunnel mode (the packet becomes the inner
//!   packet; the buffer has head- and tailroom), then `EspSa::open` of the result by a second SA
//!   built from the same parameters. The receiver's replay window sees sequence numbers 1, 2, 3…
//!   in order, so every packet is new and the window check and update are in the timed path.
//!   `EspSa` owns its SA (`&mut self`): it takes sequence numbers and updates the replay
//!   window without atomic operations.
//! - `esp-shared` (`gcm128`): the same with `Esp::seal` and `Esp::open` on SAs shared by
//!   reference, as the engine and tunneld use them from several threads: the sequence number
//!   is an atomic compare-and-swap and the replay window is locked for its check and again
//!   for its update.
//! - `bare-ring` (`gcm128`): ring's `LessSafeKey` AES-128-GCM, keyed once, seals and opens the
//!   bytes ESP encrypts (the inner packet, padding and the 2-byte trailer) with a 12-byte AAD.
//! - `aead-ring`, `aead-rustcrypto` (`gcm128`): `ipsec_core::aead::Aead::seal_in_place` and
//!   `open_in_place` on the same bytes and AAD, forced to each backend: the core wrapper over
//!   ring, and the hand-built CTR + GHASH GCM it replaces for AES-128/256-GCM.
//! - `bare` (`cbc_*`): `cbc` + `aes` (expanded once) encrypt the bytes ESP encrypts, `hmac`
//!   (keyed once, cloned per packet) computes the truncated ICV over ESP header + IV +
//!   ciphertext; then verifies it and decrypts.
//! - `bare` (`ah_sha1`): HMAC-SHA1-96 over the packet plus the 24-byte AH header, computed
//!   twice (seal and open). `ah` is `AhSa::seal` (transport) then `AhSa::open`.
//!
//! `esp / bare` is the cost of ESP's framing (headers, padding, tunnel header, replay window,
//! sequence numbers) and of whatever ipsec-core adds around the primitive.
//!
//! Every input is a fresh copy of a template made in the untimed setup (`iter_batched_ref`);
//! each pairing is checked once (open gives back what was sealed) before it is timed.
//!
//! Settings as `benches/throughput`: 10 samples, 100 ms warm-up, 300 ms measurement, no plots.

mod common;

use common::{framed, key, patterned_packet, ROOM};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use hmac::{Hmac, Mac};
use ipsec_ah::AhSa;
use ipsec_core::aead::{Aead, Backend};
use ipsec_core::sa::{Keyed, Proto};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg, Mode, PacketBuf, SaParams, Tunnel};
use ipsec_esp::{Esp, EspSa};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use aes::cipher::{block_padding::NoPadding, BlockDecryptMut, BlockEncryptMut, InnerIvInit, KeyInit};

/// Packet sizes benched.
const SIZES: [usize; 2] = [64, 1400];
/// The AAD of the bare AEAD runs: ESP's SPI || ESN high || sequence number (RFC 4106 section 5).
const AAD: [u8; 12] = [0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// ESP header (SPI, sequence number).
const ESP_HDR: usize = ipsec_esp::packet::HEADER_LEN;

/// Bytes ESP encrypts for an inner packet of `size` bytes in tunnel mode: the packet, padding
/// to `block` (and to 4 bytes, RFC 4303 section 2.4) and the 2-byte trailer.
fn esp_enc_len(size: usize, block: usize) -> usize {
    size + ipsec_esp::padding::pad_len(size, block) + ipsec_esp::padding::TRAILER_LEN
}

fn quick() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(300))
        .nresamples(2000)
        .without_plots()
}

fn tunnel_params(enc: Option<(EncAlg, usize)>, auth: Option<IntegAlg>, aead: Option<(AeadAlg, usize)>) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, 0x1000);
    p.mode = Mode::Tunnel;
    p.tunnel = Some(Tunnel {
        src: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)),
    });
    p.enc = enc.map(|(a, k)| Keyed::new(a, &key(k, 1), 0));
    p.integ = auth.map(|a| Keyed::new(a, &key(a.digest_len(), 3), a.default_icv_len()));
    p.aead = aead.map(|(a, k)| Keyed::new(a, &key(k + AeadAlg::SALT_LEN, 2), 16));
    p
}

/// ESP seal then open of `v`'s packet (at [`ROOM`], `size` bytes).
fn esp_round_trip(tx: &mut EspSa, rx: &mut EspSa, v: &mut [u8], size: usize) -> usize {
    let mut pb = PacketBuf::new(v, ROOM, size).expect("buffer");
    tx.seal(&mut pb).expect("seal");
    rx.open(&mut pb).expect("open");
    pb.len()
}

/// Adds the `esp` function for `params` to group `g`, after checking one round trip.
fn bench_esp(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, params: &SaParams, size: usize) {
    let mut tx = EspSa::new(params).expect("ESP SA");
    let mut rx = EspSa::new(params).expect("ESP SA");
    let packet = patterned_packet(size);
    let template = framed(&packet, ROOM);
    let mut check = template.clone();
    let mut pb = PacketBuf::new(&mut check, ROOM, size).expect("buffer");
    tx.seal(&mut pb).expect("seal");
    assert_ne!(pb.packet(), &packet[..], "ESP sealed nothing");
    rx.open(&mut pb).expect("open");
    assert_eq!(pb.packet(), &packet[..], "ESP round trip");
    g.bench_function(BenchmarkId::new("esp", size), |b| {
        b.iter_batched_ref(
            || template.clone(),
            |v| esp_round_trip(&mut tx, &mut rx, v, size),
            BatchSize::SmallInput,
        )
    });
}

/// Adds the `esp-shared` function: [`bench_esp`] through the shared face ([`Esp`], `&self`,
/// atomic sequence counter, locked replay window).
fn bench_esp_shared(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    params: &SaParams,
    size: usize,
) {
    let (tx, mut rng) = EspSa::new(params).expect("ESP SA").into_parts();
    let rx = Esp::new(params).expect("ESP SA");
    let packet = patterned_packet(size);
    let template = framed(&packet, ROOM);
    let mut check = template.clone();
    let mut pb = PacketBuf::new(&mut check, ROOM, size).expect("buffer");
    tx.seal(&mut rng, &mut pb).expect("seal");
    assert_ne!(pb.packet(), &packet[..], "ESP sealed nothing");
    rx.open(&mut pb).expect("open");
    assert_eq!(pb.packet(), &packet[..], "ESP round trip");
    g.bench_function(BenchmarkId::new("esp-shared", size), |b| {
        b.iter_batched_ref(
            || template.clone(),
            |v| {
                let mut pb = PacketBuf::new(v, ROOM, size).expect("buffer");
                tx.seal(&mut rng, &mut pb).expect("seal");
                rx.open(&mut pb).expect("open");
                pb.len()
            },
            BatchSize::SmallInput,
        )
    });
}

fn gcm128(c: &mut Criterion) {
    let params = tunnel_params(None, None, Some((AeadAlg::AesGcm, 16)));
    let keymat = &params.aead.as_ref().expect("AEAD").key;
    let (k, salt) = keymat.split_at(16);
    let ring_key =
        ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(&ring::aead::AES_128_GCM, k).expect("ring key"));
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(salt);
    nonce[4..].copy_from_slice(&[7; 8]);
    let iv = [7u8; 8];
    let aeads = [Backend::Ring, Backend::RustCrypto]
        .map(|b| (b, Aead::with_backend(AeadAlg::AesGcm, keymat, 16, b).expect("AEAD")));

    let mut g = c.benchmark_group("gcm128");
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        bench_esp(&mut g, &params, size);
        bench_esp_shared(&mut g, &params, size);

        // The bytes ESP encrypts, followed by the 16-byte ICV.
        let n = esp_enc_len(size, 1);
        let template = framed(&patterned_packet(n + 16), ROOM);
        let body = ROOM..ROOM + n + 16;
        let plain = template[body.clone()][..n].to_vec();

        let bare = |v: &mut Vec<u8>| {
            let buf = &mut v[body.clone()];
            let (data, icv) = buf.split_at_mut(n);
            let n_ = ring::aead::Nonce::assume_unique_for_key;
            let tag = ring_key
                .seal_in_place_separate_tag(n_(nonce), ring::aead::Aad::from(AAD), data)
                .expect("seal");
            icv.copy_from_slice(tag.as_ref());
            ring_key
                .open_in_place(n_(nonce), ring::aead::Aad::from(AAD), buf)
                .expect("open")
                .len()
        };
        for (backend, a) in &aeads {
            let round_trip = |v: &mut Vec<u8>| {
                let buf = &mut v[body.clone()];
                a.seal_in_place(&iv, &AAD, buf).expect("seal");
                a.open_in_place(&iv, &AAD, buf).expect("open");
            };
            // Checked against bare ring: same ciphertext and ICV, and the plaintext comes back.
            let (mut mine, mut theirs) = (template.clone(), template.clone());
            a.seal_in_place(&iv, &AAD, &mut mine[body.clone()]).expect("seal");
            let tag = ring_key
                .seal_in_place_separate_tag(
                    ring::aead::Nonce::assume_unique_for_key(nonce),
                    ring::aead::Aad::from(AAD),
                    &mut theirs[ROOM..ROOM + n],
                )
                .expect("seal");
            theirs[ROOM + n..ROOM + n + 16].copy_from_slice(tag.as_ref());
            assert_eq!(mine, theirs, "{backend:?} against ring");
            let mut v = template.clone();
            round_trip(&mut v);
            assert_eq!(v[ROOM..ROOM + n], plain[..], "{backend:?} round trip");
            let name = match backend {
                Backend::Ring => "aead-ring",
                Backend::RustCrypto => "aead-rustcrypto",
            };
            g.bench_function(BenchmarkId::new(name, size), |b| {
                b.iter_batched_ref(|| template.clone(), |v| round_trip(black_box(v)), BatchSize::SmallInput)
            });
        }
        let mut v = template.clone();
        assert_eq!(bare(&mut v), n);
        assert_eq!(v[ROOM..ROOM + n], plain[..], "ring round trip");
        g.bench_function(BenchmarkId::new("bare-ring", size), |b| {
            b.iter_batched_ref(|| template.clone(), |v| bare(black_box(v)), BatchSize::SmallInput)
        });
    }
    g.finish();
}

/// ESP AES-128-CBC + `auth` beside `aes`/`cbc` and the keyed HMAC `M` over the same lengths.
fn cbc_hmac<M: Mac + KeyInit + Clone>(c: &mut Criterion, group: &str, auth: IntegAlg) {
    let params = tunnel_params(Some((EncAlg::AesCbc, 16)), Some(auth), None);
    let enc_key = &params.enc.as_ref().expect("enc").key;
    let integ = params.integ.as_ref().expect("auth");
    let icv_len = integ.icv_len;
    let aes = aes::Aes128::new_from_slice(enc_key).expect("AES key");
    let mac = <M as KeyInit>::new_from_slice(&integ.key).expect("HMAC key");
    let iv = [0x5au8; 16];

    let mut g = c.benchmark_group(group);
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        bench_esp(&mut g, &params, size);

        // ESP header, IV, ciphertext, ICV.
        let n = esp_enc_len(size, 16);
        let auth_len = ESP_HDR + 16 + n;
        let template = framed(&patterned_packet(auth_len + icv_len), ROOM);
        let body = ROOM..ROOM + auth_len + icv_len;
        let plain = template[ROOM + ESP_HDR + 16..ROOM + auth_len].to_vec();
        let bare = |v: &mut Vec<u8>| {
            let buf = &mut v[body.clone()];
            let (authed, icv) = buf.split_at_mut(auth_len);
            let e = cbc::Encryptor::<aes::Aes128>::inner_iv_slice_init(aes.clone(), &iv).expect("IV");
            e.encrypt_padded_mut::<NoPadding>(&mut authed[ESP_HDR + 16..], n)
                .expect("encrypt");
            let mut m = mac.clone();
            m.update(authed);
            icv.copy_from_slice(&m.finalize().into_bytes()[..icv_len]);

            let mut m = mac.clone();
            m.update(authed);
            m.verify_truncated_left(icv).expect("ICV");
            let d = cbc::Decryptor::<aes::Aes128>::inner_iv_slice_init(aes.clone(), &iv).expect("IV");
            d.decrypt_padded_mut::<NoPadding>(&mut authed[ESP_HDR + 16..])
                .expect("decrypt")
                .len()
        };
        let mut v = template.clone();
        assert_eq!(bare(&mut v), n);
        assert_eq!(v[ROOM + ESP_HDR + 16..ROOM + auth_len], plain[..], "bare round trip");
        g.bench_function(BenchmarkId::new("bare", size), |b| {
            b.iter_batched_ref(|| template.clone(), |v| bare(black_box(v)), BatchSize::SmallInput)
        });
    }
    g.finish();
}

fn cbc_sha1(c: &mut Criterion) {
    cbc_hmac::<Hmac<sha1::Sha1>>(c, "cbc_sha1", IntegAlg::HmacSha1);
}

fn cbc_sha256(c: &mut Criterion) {
    cbc_hmac::<Hmac<sha2::Sha256>>(c, "cbc_sha256", IntegAlg::HmacSha256);
}

fn ah_sha1(c: &mut Criterion) {
    let alg = IntegAlg::HmacSha1;
    let mut params = SaParams::new(Proto::Ah, 0x2000);
    params.integ = Some(Keyed::new(alg, &key(alg.digest_len(), 3), alg.default_icv_len()));
    let icv_len = alg.default_icv_len();
    let mac = <Hmac<sha1::Sha1> as KeyInit>::new_from_slice(&key(alg.digest_len(), 3)).expect("HMAC key");
    let mut tx = AhSa::new(&params).expect("AH SA");
    let mut rx = AhSa::new(&params).expect("AH SA");
    let ah_len = tx.header_len(false);

    let mut g = c.benchmark_group("ah_sha1");
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let packet = patterned_packet(size);
        let template = framed(&packet, ROOM);
        let mut check = template.clone();
        let mut pb = PacketBuf::new(&mut check, ROOM, size).expect("buffer");
        tx.seal(&mut pb).expect("seal");
        assert_eq!(pb.len(), size + ah_len);
        rx.open(&mut pb).expect("open");
        assert_eq!(pb.packet(), &packet[..], "AH round trip");
        g.bench_function(BenchmarkId::new("ah", size), |b| {
            b.iter_batched_ref(
                || template.clone(),
                |v| {
                    let mut pb = PacketBuf::new(v, ROOM, size).expect("buffer");
                    tx.seal(&mut pb).expect("seal");
                    rx.open(&mut pb).expect("open");
                    pb.len()
                },
                BatchSize::SmallInput,
            )
        });

        // HMAC over the packet and the AH header (ICV field zeroed), computed to seal and
        // again to verify.
        let covered = ROOM..ROOM + size + ah_len;
        let bare = |v: &mut Vec<u8>| {
            let mut icv = [0u8; 12];
            let mut m = mac.clone();
            m.update(&v[covered.clone()]);
            icv.copy_from_slice(&m.finalize().into_bytes()[..icv_len]);
            let mut m = mac.clone();
            m.update(&v[covered.clone()]);
            m.verify_truncated_left(&icv).expect("ICV");
        };
        g.bench_function(BenchmarkId::new("bare", size), |b| {
            b.iter_batched_ref(|| template.clone(), |v| bare(black_box(v)), BatchSize::SmallInput)
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = quick();
    targets = gcm128, cbc_sha1, cbc_sha256, ah_sha1
}
criterion_main!(benches);
