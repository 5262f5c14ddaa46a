//! Throughput of the data plane on this machine: `cargo bench --bench throughput`.
//!
//! Results land where criterion puts them (`$CARGO_TARGET_DIR/criterion`, else
//! `target/criterion`), together with `ipsec-ratios.csv`, the compression ratios of the data sets
//! sampled below. `ipsec model --from-criterion <that dir>` turns both into model inputs.
//!
//! # Benchmark ids (the model reads the first three; see `ipsec::model::criterion`)
//!
//! | group | functions | parameter | throughput (bytes per iteration) |
//! |---|---|---|---|
//! | `cipher/<xfrm name>/<key bits>` | `encrypt`, `decrypt` | buffer size | the buffer, rounded up to the cipher block (1400 → 1408 for AES-CBC) |
//! | `integrity/<xfrm name>` | `compute`, `verify` | buffer size | the buffer |
//! | `compression/<algorithm>/<data set>` | `compress`, `decompress` | block size: 1024, 4096, 64512 | uncompressed bytes of all sampled blocks (`decompress`: of those that compressed) |
//! | `esp/<enc>/<key bits>[+<auth>]`, `ah/<auth>`, `ipcomp/<algorithm>` | `primitive-seal`, `seal`, `primitive-open`, `open` | IPv4 packet size | the packet |
//! | `engine/<enc>/<key bits>` | `sa-seal`, `outbound`, `sa-open`, `inbound` | IPv4 packet size | the packet |
//!
//! Sizes: 64, 576, 1024, 1400, 4096 and 64512 bytes. Names are `ip xfrm`'s; keys are fixed
//! bytes, expanded once outside the timed code, with ipsec-core's `CbcCipher`, `Aead` and
//! `Integrity`. AEADs (RFC 4106 AES-GCM, RFC 7539 ChaCha20-Poly1305) take an 8-byte AAD and a
//! 16-byte ICV, HMACs their RFC truncation.
//!
//! # Framing beside the primitives
//!
//! Each framing group benches the full transform and, on copies of the same buffers, the bare
//! primitive work it does, so `seal / primitive-seal` is the framing overhead as a ratio:
//! - ESP (transport mode, IPv4/UDP): `primitive-seal` encrypts the bytes ESP encrypts (payload,
//!   padding, trailer) and computes the ICV over the bytes ESP authenticates (header, IV,
//!   ciphertext), or runs the AEAD over them; `primitive-open` verifies and decrypts.
//! - AH (transport, IPv4): the HMAC over packet + AH header (`compute`, then `verify`).
//! - IPComp (transport, IPv4, text payload: the corpus's paper2 or its generated stand-in):
//!   compress the payload into scratch space; decompress it. 64-byte packets are below the
//!   90-byte threshold (RFC 2394/2395), where an SA sends the packet as it is: IPComp starts
//!   at 576.
//!
//! All four use `iter_batched_ref`: the setup (untimed) copies a template into a fresh buffer
//! with head- and tailroom, and the buffers are dropped outside the timing.
//!
//! **Opening and the replay window.** An ESP or AH packet opens once: the receiving SA's
//! 64-packet window refuses a replay. So the setup of `open` seals a *fresh* packet with the
//! sending SA (next sequence number, untimed) and the timed routine opens it with a receiving SA
//! that keeps its window, as deployed: batches are built in order, so every packet is new and in
//! order, and the measured path includes the replay check and the window update. (A window of 0
//! would skip both; a fresh SA per batch would time key expansion's cache effects.) IPComp has no
//! sequence numbers: `open` decompresses copies of one sealed packet.
//!
//! # The SA engine beside the bare SA
//!
//! `engine/...` puts `Engine::outbound` (flow extraction, SPD lookup through a bypass policy
//! to the protect policy, lifetime checks, counters) beside `EspSa::seal` of the same suite,
//! and `Engine::inbound` (SAD lookup, open, policy check on the decapsulated packet) beside
//! `EspSa::open`, fresh in-order packets as for `open` above.
//!
//! # Compression, sampled as the paper did
//!
//! McGregor and Lee average the first 40 1-KB blocks of a file (1k), the first 10 4-KB blocks
//! (4k) and the first 63-KB block (63k). One `compress` iteration compresses all sampled blocks
//! of a data set with the SA's output limit (compressed + 4-byte header must be smaller than
//! the block), so a block that does not shrink costs its wasted attempt; `decompress`
//! decompresses those that shrank (none: no `decompress` bench, rate 0 in the model). Each
//! round trip is checked once before timing. Ratio = mean over the blocks of
//! original / (compressed + 4), 1.0 for a block sent as it is.
//!
//! # Settings
//!
//! 10 samples, 100 ms warm-up, 300 ms measurement, 2000 bootstrap resamples, no plots: means
//! good to a few percent, and the whole bench, compile included, in a few minutes on two cores.
//! Override on the command line as usual (`cargo bench --bench throughput -- --measurement-time 2`).

#[path = "../common/mod.rs"]
mod common;
mod data;

use common::{framed, ipv4_packet, key, IP_HDR, ROOM};

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use ipsec::model::criterion::{self as ids, RatioRow};
use ipsec_ah::AhSa;
use ipsec_core::aead::Aead;
use ipsec_core::cipher::CbcCipher;
use ipsec_core::integrity::Integrity;
use ipsec_core::ip::proto;
use ipsec_core::sa::{Keyed, Proto};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg, PacketBuf, SaParams};
use ipsec_engine::{Action, Direction, Engine, Policy, PortRange, SaConfig, Selector};
use ipsec_esp::EspSa;
use ipsec_ipcomp::{Algorithm, Compressor, IpcompConfig, IpcompSa, SealOutcome};
use std::hint::black_box;
use std::time::Duration;

/// Buffer and packet sizes benched.
const SIZES: [usize; 6] = [64, 576, 1024, 1400, 4096, 64512];
/// The AEAD ICV.
const AEAD_ICV: usize = 16;
/// Compression samples: payload label, block size, number of blocks.
const SAMPLES: [(&str, usize, usize); 3] = [("1k", 1024, 40), ("4k", 4096, 10), ("63k", 63 * 1024, 1)];

fn filler(n: usize) -> Vec<u8> {
    data::seeded_random(n, 0x1234)
}

// ---------------------------------------------------------------------------------------------
// Primitives

fn ciphers(c: &mut Criterion) {
    let cbc = [
        (EncAlg::Null, 0),
        (EncAlg::DesCbc, 8),
        (EncAlg::Des3Cbc, 24),
        (EncAlg::AesCbc, 16),
        (EncAlg::AesCbc, 24),
        (EncAlg::AesCbc, 32),
    ];
    for (alg, klen) in cbc {
        let cipher = CbcCipher::new(alg, &key(klen, 1)).expect("cipher key");
        let iv = vec![0x5a; alg.iv_len()];
        let mut g = c.benchmark_group(format!("{}/{}/{}", ids::CIPHER_GROUP, alg.name(), klen * 8));
        for size in SIZES {
            let n = size.next_multiple_of(alg.block_size());
            g.throughput(Throughput::Bytes(n as u64));
            let mut buf = filler(n);
            g.bench_function(BenchmarkId::new("encrypt", size), |b| {
                b.iter(|| cipher.encrypt(black_box(&iv), black_box(&mut buf)).expect("encrypt"))
            });
            g.bench_function(BenchmarkId::new("decrypt", size), |b| {
                b.iter(|| cipher.decrypt(black_box(&iv), black_box(&mut buf)).expect("decrypt"))
            });
        }
        g.finish();
    }
    let aeads = [
        (AeadAlg::AesGcm, 16),
        (AeadAlg::AesGcm, 24),
        (AeadAlg::AesGcm, 32),
        (AeadAlg::ChaCha20Poly1305, 32),
    ];
    let (iv, aad) = ([7u8; 8], [9u8; 8]);
    for (alg, klen) in aeads {
        let aead = Aead::new(alg, &key(klen + AeadAlg::SALT_LEN, 2), AEAD_ICV).expect("AEAD key");
        let mut g = c.benchmark_group(format!("{}/{}/{}", ids::CIPHER_GROUP, alg.name(), klen * 8));
        for size in SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            let mut buf = filler(size);
            let mut icv = [0u8; AEAD_ICV];
            g.bench_function(BenchmarkId::new("encrypt", size), |b| {
                b.iter(|| {
                    aead.seal(black_box(&iv), &aad, black_box(&mut buf), &mut icv)
                        .expect("seal")
                })
            });
            // Opening checks the tag: every iteration needs intact ciphertext.
            let mut ct = filler(size);
            aead.seal(&iv, &aad, &mut ct, &mut icv).expect("seal");
            g.bench_function(BenchmarkId::new("decrypt", size), |b| {
                b.iter_batched_ref(
                    || ct.clone(),
                    |d| aead.open(&iv, &aad, d, &icv).expect("open"),
                    BatchSize::SmallInput,
                )
            });
        }
        g.finish();
    }
}

fn integrity(c: &mut Criterion) {
    let algs = [
        IntegAlg::HmacMd5,
        IntegAlg::HmacSha1,
        IntegAlg::HmacSha256,
        IntegAlg::HmacSha384,
        IntegAlg::HmacSha512,
    ];
    for alg in algs {
        let n_icv = alg.default_icv_len();
        let integ = Integrity::new(alg, &key(alg.digest_len(), 3), n_icv).expect("HMAC key");
        let mut g = c.benchmark_group(format!("{}/{}", ids::INTEGRITY_GROUP, alg.name()));
        for size in SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            let buf = filler(size);
            let mut icv = vec![0u8; n_icv];
            g.bench_function(BenchmarkId::new("compute", size), |b| {
                b.iter(|| integ.compute(&[black_box(&buf)], &mut icv).expect("compute"))
            });
            integ.compute(&[&buf], &mut icv).expect("compute");
            g.bench_function(BenchmarkId::new("verify", size), |b| {
                b.iter(|| integ.verify(&[black_box(&buf)], black_box(&icv)).expect("verify"))
            });
        }
        g.finish();
    }
}

// ---------------------------------------------------------------------------------------------
// Framing beside the primitives

/// The crypto an ESP SA does, keyed the same way, for the bare-primitive benches.
#[allow(clippy::large_enum_variant)] // one per suite
enum EspCrypto {
    Cbc {
        cipher: CbcCipher,
        integ: Integrity,
        block: usize,
        iv: Vec<u8>,
    },
    Aead(Aead),
}

impl EspCrypto {
    fn new(p: &SaParams) -> Self {
        match (&p.enc, &p.integ, &p.aead) {
            (_, _, Some(a)) => EspCrypto::Aead(Aead::new(a.alg, &a.key, a.icv_len).expect("AEAD")),
            (Some(e), Some(i), None) => EspCrypto::Cbc {
                cipher: CbcCipher::new(e.alg, &e.key).expect("cipher"),
                integ: Integrity::new(i.alg, &i.key, i.icv_len).expect("HMAC"),
                block: e.alg.block_size(),
                iv: vec![0x5a; e.alg.iv_len()],
            },
            _ => panic!("bench ESP suites have enc+auth or aead"),
        }
    }

    /// (encrypted, authenticated) byte counts of a transport-mode packet of `size` bytes.
    fn lens(&self, size: usize) -> (usize, usize) {
        let payload = size - IP_HDR;
        let (block, iv) = match self {
            EspCrypto::Cbc { block, iv, .. } => (*block, iv.len()),
            EspCrypto::Aead(_) => (1, 8),
        };
        let enc = payload + ipsec_esp::padding::pad_len(payload, block) + ipsec_esp::padding::TRAILER_LEN;
        (enc, ipsec_esp::packet::HEADER_LEN + iv + enc)
    }

    fn seal(&self, buf: &mut [u8], size: usize, icv: &mut [u8]) {
        let (enc, auth) = self.lens(size);
        match self {
            EspCrypto::Cbc { cipher, integ, iv, .. } => {
                cipher.encrypt(iv, &mut buf[ROOM..ROOM + enc]).expect("encrypt");
                integ.compute(&[&buf[ROOM..ROOM + auth]], icv).expect("ICV");
            }
            EspCrypto::Aead(a) => a.seal(&[7; 8], &[9; 8], &mut buf[ROOM..ROOM + enc], icv).expect("seal"),
        }
    }

    fn open(&self, buf: &mut [u8], size: usize, icv: &[u8]) {
        let (enc, auth) = self.lens(size);
        match self {
            EspCrypto::Cbc { cipher, integ, iv, .. } => {
                integ.verify(&[&buf[ROOM..ROOM + auth]], icv).expect("ICV");
                cipher.decrypt(iv, &mut buf[ROOM..ROOM + enc]).expect("decrypt");
            }
            EspCrypto::Aead(a) => a.open(&[7; 8], &[9; 8], &mut buf[ROOM..ROOM + enc], icv).expect("open"),
        }
    }

    fn icv_len(&self) -> usize {
        match self {
            EspCrypto::Cbc { integ, .. } => integ.icv_len(),
            EspCrypto::Aead(a) => a.icv_len(),
        }
    }
}

fn esp_params(enc: Option<(EncAlg, usize)>, auth: Option<IntegAlg>, aead: Option<(AeadAlg, usize)>) -> SaParams {
    let mut p = SaParams::new(Proto::Esp, 0x1000);
    p.enc = enc.map(|(a, k)| Keyed::new(a, &key(k, 1), 0));
    p.integ = auth.map(|a| Keyed::new(a, &key(a.digest_len(), 3), a.default_icv_len()));
    p.aead = aead.map(|(a, k)| Keyed::new(a, &key(k + AeadAlg::SALT_LEN, 2), AEAD_ICV));
    p
}

/// Sealed copies of `packet` from `tx`, as (buffer, head, len): the input of an `open` bench.
fn sealed_by<E>(
    packet: &[u8],
    mut seal: impl FnMut(&mut PacketBuf) -> Result<u64, E>,
) -> impl FnMut() -> (Vec<u8>, usize, usize)
where
    E: std::fmt::Debug,
{
    let (template, len) = (framed(packet, ROOM), packet.len());
    move || {
        let mut v = template.clone();
        let (h, l) = {
            let mut pb = PacketBuf::new(&mut v, ROOM, len).expect("buffer");
            seal(&mut pb).expect("seal");
            (pb.head(), pb.len())
        };
        (v, h, l)
    }
}

fn esp(c: &mut Criterion) {
    let suites = [
        (
            "cbc(aes)/128+hmac(sha256)",
            esp_params(Some((EncAlg::AesCbc, 16)), Some(IntegAlg::HmacSha256), None),
        ),
        (
            "cbc(des3_ede)/192+hmac(sha1)",
            esp_params(Some((EncAlg::Des3Cbc, 24)), Some(IntegAlg::HmacSha1), None),
        ),
        (
            "rfc4106(gcm(aes))/128",
            esp_params(None, None, Some((AeadAlg::AesGcm, 16))),
        ),
        (
            "rfc7539esp(chacha20,poly1305)/256",
            esp_params(None, None, Some((AeadAlg::ChaCha20Poly1305, 32))),
        ),
    ];
    for (label, params) in suites {
        let prim = EspCrypto::new(&params);
        let mut tx = EspSa::new(&params).expect("ESP SA");
        let mut rx = EspSa::new(&params).expect("ESP SA");
        let mut g = c.benchmark_group(format!("esp/{label}"));
        for size in SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            let packet = ipv4_packet(size, &filler(size));
            let template = framed(&packet, ROOM);
            let mut icv = vec![0u8; prim.icv_len()];
            g.bench_function(BenchmarkId::new("primitive-seal", size), |b| {
                b.iter_batched_ref(
                    || template.clone(),
                    |v| prim.seal(v, size, &mut icv),
                    BatchSize::SmallInput,
                )
            });
            g.bench_function(BenchmarkId::new("seal", size), |b| {
                b.iter_batched_ref(
                    || template.clone(),
                    |v| {
                        tx.seal(&mut PacketBuf::new(v, ROOM, size).expect("buffer"))
                            .expect("seal")
                    },
                    BatchSize::SmallInput,
                )
            });
            let mut sealed = template.clone();
            prim.seal(&mut sealed, size, &mut icv);
            g.bench_function(BenchmarkId::new("primitive-open", size), |b| {
                b.iter_batched_ref(|| sealed.clone(), |v| prim.open(v, size, &icv), BatchSize::SmallInput)
            });
            g.bench_function(BenchmarkId::new("open", size), |b| {
                b.iter_batched_ref(
                    sealed_by(&packet, |pb| tx.seal(pb)),
                    |(v, h, l)| rx.open(&mut PacketBuf::new(v, *h, *l).expect("buffer")).expect("open"),
                    BatchSize::SmallInput,
                )
            });
        }
        g.finish();
    }
}

/// A sender and a receiver engine sharing one ESP SA, with an IKE bypass policy in front of
/// the protect policy in each direction.
fn engines(params: &SaParams) -> (Engine, Engine) {
    let make = |dir: Direction| {
        let mut e = Engine::new();
        let id = e
            .add_sa(SaConfig::new("esp", params.clone(), None), Duration::ZERO)
            .expect("SA");
        let ike = Selector {
            proto: Some(proto::UDP),
            src_ports: PortRange::single(500),
            dst_ports: PortRange::single(500),
            ..Selector::default()
        };
        for (selector, action) in [(ike, Action::Bypass), (Selector::default(), Action::Protect(vec![id]))] {
            e.add_policy(Policy { dir, selector, action }).expect("policy");
        }
        e
    };
    (make(Direction::Out), make(Direction::In))
}

fn engine(c: &mut Criterion) {
    let params = esp_params(None, None, Some((AeadAlg::AesGcm, 16)));
    let mut sa_tx = EspSa::new(&params).expect("ESP SA");
    let mut sa_rx = EspSa::new(&params).expect("ESP SA");
    let (mut tx, mut rx) = engines(&params);
    let (mut feed, _) = engines(&params);
    let mut g = c.benchmark_group("engine/rfc4106(gcm(aes))/128");
    let now = Duration::ZERO;
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let packet = ipv4_packet(size, &filler(size));
        let template = framed(&packet, ROOM);
        g.bench_function(BenchmarkId::new("sa-seal", size), |b| {
            b.iter_batched_ref(
                || template.clone(),
                |v| {
                    sa_tx
                        .seal(&mut PacketBuf::new(v, ROOM, size).expect("buffer"))
                        .expect("seal")
                },
                BatchSize::SmallInput,
            )
        });
        g.bench_function(BenchmarkId::new("outbound", size), |b| {
            b.iter_batched_ref(
                || template.clone(),
                |v| {
                    tx.outbound(&mut PacketBuf::new(v, ROOM, size).expect("buffer"), now)
                        .expect("outbound")
                },
                BatchSize::SmallInput,
            )
        });
        g.bench_function(BenchmarkId::new("sa-open", size), |b| {
            b.iter_batched_ref(
                sealed_by(&packet, |pb| sa_tx.seal(pb)),
                |(v, h, l)| {
                    sa_rx
                        .open(&mut PacketBuf::new(v, *h, *l).expect("buffer"))
                        .expect("open")
                },
                BatchSize::SmallInput,
            )
        });
        g.bench_function(BenchmarkId::new("inbound", size), |b| {
            b.iter_batched_ref(
                sealed_by(&packet, |pb| feed.outbound(pb, now).map(|_| 0)),
                |(v, h, l)| {
                    rx.inbound(&mut PacketBuf::new(v, *h, *l).expect("buffer"), now)
                        .expect("inbound")
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn ah(c: &mut Criterion) {
    for alg in [IntegAlg::HmacSha1, IntegAlg::HmacSha256] {
        let mut params = SaParams::new(Proto::Ah, 0x2000);
        params.integ = Some(Keyed::new(alg, &key(alg.digest_len(), 3), alg.default_icv_len()));
        let integ = Integrity::new(alg, &key(alg.digest_len(), 3), alg.default_icv_len()).expect("HMAC");
        let mut tx = AhSa::new(&params).expect("AH SA");
        let mut rx = AhSa::new(&params).expect("AH SA");
        let ah_len = tx.header_len(false);
        let mut g = c.benchmark_group(format!("ah/{}", alg.name()));
        for size in SIZES {
            g.throughput(Throughput::Bytes(size as u64));
            let packet = ipv4_packet(size, &filler(size));
            let template = framed(&packet, ROOM);
            let covered = ROOM..ROOM + size + ah_len;
            let mut icv = vec![0u8; integ.icv_len()];
            g.bench_function(BenchmarkId::new("primitive-seal", size), |b| {
                b.iter_batched_ref(
                    || template.clone(),
                    |v| integ.compute(&[&v[covered.clone()]], &mut icv).expect("ICV"),
                    BatchSize::SmallInput,
                )
            });
            g.bench_function(BenchmarkId::new("seal", size), |b| {
                b.iter_batched_ref(
                    || template.clone(),
                    |v| {
                        tx.seal(&mut PacketBuf::new(v, ROOM, size).expect("buffer"))
                            .expect("seal")
                    },
                    BatchSize::SmallInput,
                )
            });
            integ.compute(&[&template[covered.clone()]], &mut icv).expect("ICV");
            g.bench_function(BenchmarkId::new("primitive-open", size), |b| {
                b.iter_batched_ref(
                    || template.clone(),
                    |v| integ.verify(&[&v[covered.clone()]], &icv).expect("ICV"),
                    BatchSize::SmallInput,
                )
            });
            g.bench_function(BenchmarkId::new("open", size), |b| {
                b.iter_batched_ref(
                    sealed_by(&packet, |pb| tx.seal(pb)),
                    |(v, h, l)| rx.open(&mut PacketBuf::new(v, *h, *l).expect("buffer")).expect("open"),
                    BatchSize::SmallInput,
                )
            });
        }
        g.finish();
    }
}

fn ipcomp(c: &mut Criterion) {
    let sets = data::load();
    for alg in Algorithm::ALL {
        let mut codec = Compressor::new(alg);
        let mut tx = IpcompSa::new(IpcompConfig::new(alg)).expect("IPComp SA");
        let mut rx = IpcompSa::new(IpcompConfig::new(alg)).expect("IPComp SA");
        let mut scratch = vec![0u8; 1 << 16];
        let mut g = c.benchmark_group(format!("ipcomp/{}", alg.name()));
        for size in SIZES
            .into_iter()
            .filter(|&s| s - IP_HDR >= ipsec_ipcomp::DEFAULT_MIN_SIZE)
        {
            g.throughput(Throughput::Bytes(size as u64));
            let payload = size - IP_HDR;
            let packet = ipv4_packet(size, &data::text_payload(&sets, payload));
            // Tailroom for the decompressed packet when opening.
            let template = framed(&packet, size + ROOM);
            let limit = payload - ipsec_ipcomp::HEADER_LEN - 1;
            let body = ROOM + IP_HDR..ROOM + size;
            g.bench_function(BenchmarkId::new("primitive-seal", size), |b| {
                b.iter_batched_ref(
                    || template.clone(),
                    |v| codec.compress(&v[body.clone()], &mut scratch[..limit]),
                    BatchSize::SmallInput,
                )
            });
            g.bench_function(BenchmarkId::new("seal", size), |b| {
                b.iter_batched_ref(
                    || template.clone(),
                    |v| {
                        tx.seal(&mut PacketBuf::new(v, ROOM, size).expect("buffer"))
                            .expect("seal")
                    },
                    BatchSize::SmallInput,
                )
            });
            // One sealed packet; opening does not change the SA, so copies of it will do.
            let mut sealed = template.clone();
            let (outcome, sealed_len) = {
                let mut pb = PacketBuf::new(&mut sealed, ROOM, size).expect("buffer");
                (tx.seal(&mut pb).expect("seal"), pb.len())
            };
            if !matches!(outcome, SealOutcome::Compressed { .. }) {
                eprintln!(
                    "NOTE: ipcomp/{alg} at {size}: the payload did not compress ({outcome:?}); open is a pass-through"
                );
            }
            let compressed = ROOM + IP_HDR + ipsec_ipcomp::HEADER_LEN..ROOM + sealed_len;
            if matches!(outcome, SealOutcome::Compressed { .. }) {
                g.bench_function(BenchmarkId::new("primitive-open", size), |b| {
                    b.iter_batched_ref(
                        || sealed.clone(),
                        |v| {
                            codec
                                .decompress(&v[compressed.clone()], &mut scratch[..payload])
                                .expect("decompress")
                        },
                        BatchSize::SmallInput,
                    )
                });
            }
            g.bench_function(BenchmarkId::new("open", size), |b| {
                b.iter_batched_ref(
                    || sealed.clone(),
                    |v| {
                        rx.open(&mut PacketBuf::new(v, ROOM, sealed_len).expect("buffer"))
                            .expect("open")
                    },
                    BatchSize::SmallInput,
                )
            });
        }
        g.finish();
    }
}

// ---------------------------------------------------------------------------------------------
// Compression and ratios

fn compression(c: &mut Criterion) {
    let sets = data::load();
    let mut rows = Vec::new();
    let mut out = vec![0u8; 1 << 16];
    for alg in Algorithm::ALL {
        let mut codec = Compressor::new(alg);
        for set in &sets {
            let mut g = c.benchmark_group(format!("{}/{}/{}", ids::COMPRESSION_GROUP, alg.name(), set.name));
            for (label, block, count) in SAMPLES {
                let blocks: Vec<&[u8]> = set.data.chunks_exact(block).take(count).collect();
                // Every set is at least one 63 KB block (`data::load` replaces a short file).
                assert!(
                    !blocks.is_empty(),
                    "{} is shorter than one {block}-byte block",
                    set.name
                );
                // Ratios and the compressed blocks, with each round trip checked.
                let mut compressed: Vec<(Vec<u8>, usize)> = Vec::new();
                let mut ratio_sum = 0.0;
                for b in &blocks {
                    match codec.compress(b, &mut out[..b.len() - ipsec_ipcomp::HEADER_LEN - 1]) {
                        Some(n) => {
                            ratio_sum += b.len() as f64 / (n + ipsec_ipcomp::HEADER_LEN) as f64;
                            let z = out[..n].to_vec();
                            let m = codec.decompress(&z, &mut out[..b.len()]).expect("round trip");
                            assert_eq!(&out[..m], *b, "{alg} round trip on {}", set.name);
                            compressed.push((z, b.len()));
                        }
                        None => ratio_sum += 1.0,
                    }
                }
                rows.push(RatioRow {
                    compressor: alg.name().to_string(),
                    dataset: set.name.clone(),
                    payload: label.to_string(),
                    block_bytes: block,
                    blocks: blocks.len(),
                    compressed_blocks: compressed.len(),
                    ratio: ratio_sum / blocks.len() as f64,
                    source: set.source.to_string(),
                });
                let total: usize = blocks.iter().map(|b| b.len()).sum();
                g.throughput(Throughput::Bytes(total as u64));
                g.bench_function(BenchmarkId::new("compress", block), |b| {
                    b.iter(|| {
                        for blk in &blocks {
                            black_box(
                                codec.compress(black_box(blk), &mut out[..blk.len() - ipsec_ipcomp::HEADER_LEN - 1]),
                            );
                        }
                    })
                });
                if compressed.is_empty() {
                    continue;
                }
                let total: usize = compressed.iter().map(|(_, n)| n).sum();
                g.throughput(Throughput::Bytes(total as u64));
                g.bench_function(BenchmarkId::new("decompress", block), |b| {
                    b.iter(|| {
                        for (z, n) in &compressed {
                            black_box(codec.decompress(black_box(z), &mut out[..*n]).expect("decompress"));
                        }
                    })
                });
            }
            g.finish();
        }
    }
    let dir = ids::criterion_dir(std::env::current_exe().ok().as_deref());
    let path = dir.join(ids::RATIOS_FILE);
    match std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, ids::ratios_csv(&rows))) {
        Ok(()) => eprintln!("compression ratios: wrote {}", path.display()),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(300))
        .nresamples(2000)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = ciphers, integrity, esp, engine, ah, ipcomp, compression
}
criterion_main!(benches);
