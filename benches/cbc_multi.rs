//! Multi-buffer AES-CBC encryption (`ipsec_core::cbc_multi::encrypt_many`) against the same
//! packets encrypted one chain after another (`CbcCipher::encrypt`), in one run:
//! `cargo bench --bench cbc_multi`.
//!
//! Groups `cbc_multi/aes<bits>/<packet bytes>`, functions `multi` and `single`, parameter the
//! batch size (8 or 32 packets). Packet sizes are 1408 bytes (a 1400-byte payload rounded up to
//! the AES block, as the throughput bench does) and 64 bytes. Throughput is the batch's bytes,
//! so criterion prints MB/s. Each iteration re-encrypts the same buffers in place (each pass
//! encrypts the previous ciphertext), so nothing is allocated or copied in the timed code.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ipsec_core::cbc_multi::{encrypt_many, CbcJob};
use ipsec_core::cipher::CbcCipher;
use ipsec_core::EncAlg;
use std::hint::black_box;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    for key_len in [16usize, 32] {
        let key: Vec<u8> = (0..key_len as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        let cipher = CbcCipher::new(EncAlg::AesCbc, &key).expect("key");
        for size in [1408usize, 64] {
            let mut g = c.benchmark_group(format!("cbc_multi/aes{}/{size}", key_len * 8));
            for batch in [8usize, 32] {
                let ivs: Vec<[u8; 16]> = (0..batch).map(|i| [i as u8 ^ 0xa5; 16]).collect();
                let mut bufs: Vec<Vec<u8>> = (0..batch).map(|i| vec![i as u8; size]).collect();
                let mut jobs: Vec<CbcJob<'_>> = ivs
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(iv, d)| CbcJob { iv, data: d })
                    .collect();
                g.throughput(Throughput::Bytes((batch * size) as u64));
                g.bench_function(BenchmarkId::new("multi", batch), |b| {
                    b.iter(|| encrypt_many(&cipher, black_box(&mut jobs)).expect("encrypt_many"))
                });
                g.bench_function(BenchmarkId::new("single", batch), |b| {
                    b.iter(|| {
                        for job in black_box(&mut jobs).iter_mut() {
                            cipher.encrypt(job.iv, job.data).expect("encrypt");
                        }
                    })
                });
            }
            g.finish();
        }
        // Mixed sizes, IMIX-like (7 x 64 B, 4 x 576 B, 1 x 1408 B per 12 packets), 36 packets:
        // lanes finish at different times, so this exercises the refill scheduler and the
        // drain at the end of the batch.
        let sizes: Vec<usize> = (0..36)
            .map(|i| match i % 12 {
                0..=6 => 64,
                7..=10 => 576,
                _ => 1408,
            })
            .collect();
        let total: usize = sizes.iter().sum();
        let mut g = c.benchmark_group(format!("cbc_multi/aes{}/imix", key_len * 8));
        let ivs: Vec<[u8; 16]> = (0..sizes.len()).map(|i| [i as u8 ^ 0x3c; 16]).collect();
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![n as u8; n]).collect();
        let mut jobs: Vec<CbcJob<'_>> = ivs
            .iter()
            .zip(bufs.iter_mut())
            .map(|(iv, d)| CbcJob { iv, data: d })
            .collect();
        g.throughput(Throughput::Bytes(total as u64));
        g.bench_function(BenchmarkId::new("multi", sizes.len()), |b| {
            b.iter(|| encrypt_many(&cipher, black_box(&mut jobs)).expect("encrypt_many"))
        });
        g.bench_function(BenchmarkId::new("single", sizes.len()), |b| {
            b.iter(|| {
                for job in black_box(&mut jobs).iter_mut() {
                    cipher.encrypt(job.iv, job.data).expect("encrypt");
                }
            })
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_millis(300));
    targets = bench
}
criterion_main!(benches);
