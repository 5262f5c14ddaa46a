//! Multi-buffer CBC (`ipsec_core::cbc_multi`) against the one-chain path `CbcCipher::encrypt`
//! (the RustCrypto `cbc` crate) and the RFC 3602 section 4 AES-128-CBC vectors.

use ipsec_core::cbc_multi::{encrypt_many, CbcJob, LANES};
use ipsec_core::cipher::CbcCipher;
use ipsec_core::{EncAlg, Error};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// One packet of a test: IV and plaintext (owned), block counts chosen by the shape.
struct Packet {
    iv: Vec<u8>,
    plain: Vec<u8>,
}

fn random_bytes(rng: &mut ChaCha20Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

fn below(rng: &mut ChaCha20Rng, n: u32) -> u32 {
    rng.next_u32() % n
}

/// Block counts for one job set, in one of several shapes.
fn shape(rng: &mut ChaCha20Rng, kind: u32) -> Vec<usize> {
    let n = 1 + below(rng, 20) as usize;
    match kind {
        // Mixed lengths 0..=600 blocks, some zero.
        0 => (0..n)
            .map(|_| match below(rng, 5) {
                0 => 0,
                1 => 1 + below(rng, 3) as usize,
                _ => below(rng, 601) as usize,
            })
            .collect(),
        // All the same length.
        1 => {
            let len = below(rng, 601) as usize;
            vec![len; n]
        }
        // One long job (at a random place) among many short ones.
        2 => {
            let mut v: Vec<usize> = (0..n).map(|_| below(rng, 4) as usize).collect();
            let at = below(rng, n as u32) as usize;
            v[at] = 400 + below(rng, 201) as usize;
            v
        }
        // Zero-length jobs between random ones.
        _ => (0..n)
            .map(|i| if i % 2 == 0 { 0 } else { below(rng, 601) as usize })
            .collect(),
    }
}

fn packets(rng: &mut ChaCha20Rng, block: usize, blocks: &[usize]) -> Vec<Packet> {
    blocks
        .iter()
        .map(|&b| Packet {
            iv: random_bytes(rng, block),
            plain: random_bytes(rng, b * block),
        })
        .collect()
}

/// Runs `encrypt_many` over `pkts` and returns the ciphertexts.
fn multi(cipher: &CbcCipher, pkts: &[Packet]) -> Result<Vec<Vec<u8>>, Error> {
    let mut out: Vec<Vec<u8>> = pkts.iter().map(|p| p.plain.clone()).collect();
    let mut jobs: Vec<CbcJob<'_>> = pkts
        .iter()
        .zip(out.iter_mut())
        .map(|(p, d)| CbcJob { iv: &p.iv, data: d })
        .collect();
    encrypt_many(cipher, &mut jobs)?;
    Ok(out)
}

/// Every job's ciphertext equals the one-chain result, and decrypts back to its plaintext.
fn check_against_single(cipher: &CbcCipher, pkts: &[Packet]) {
    let got = multi(cipher, pkts).unwrap();
    for (i, (p, ct)) in pkts.iter().zip(&got).enumerate() {
        let mut want = p.plain.clone();
        cipher.encrypt(&p.iv, &mut want).unwrap();
        assert_eq!(
            ct,
            &want,
            "job {i} of {} ({} bytes), {cipher:?}",
            pkts.len(),
            p.plain.len()
        );
        if !p.plain.is_empty() {
            assert_ne!(ct, &p.plain, "job {i} was not encrypted");
        }
        let mut back = ct.clone();
        cipher.decrypt(&p.iv, &mut back).unwrap();
        assert_eq!(back, p.plain, "job {i} does not decrypt back");
    }
}

#[test]
fn aes_matches_single_chain_on_random_job_sets() {
    let mut rng = ChaCha20Rng::seed_from_u64(0x3602);
    for key_len in [16, 24, 32] {
        for round in 0..24 {
            let key = random_bytes(&mut rng, key_len);
            let cipher = CbcCipher::new(EncAlg::AesCbc, &key).unwrap();
            let blocks = shape(&mut rng, round % 4);
            let pkts = packets(&mut rng, 16, &blocks);
            check_against_single(&cipher, &pkts);
        }
    }
}

#[test]
fn aes_lane_counts_around_the_lane_width() {
    // 1..=2*LANES+1 jobs of equal and of staggered lengths: every fill level of the lanes,
    // refills, and the drain down to the last lane.
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let cipher = CbcCipher::new(EncAlg::AesCbc, &random_bytes(&mut rng, 16)).unwrap();
    for n in 1..=2 * LANES + 1 {
        let equal = vec![5; n];
        check_against_single(&cipher, &packets(&mut rng, 16, &equal));
        let staggered: Vec<usize> = (0..n).map(|i| 1 + (i * 3) % 11).collect();
        check_against_single(&cipher, &packets(&mut rng, 16, &staggered));
        let descending: Vec<usize> = (0..n).map(|i| n - i).collect();
        check_against_single(&cipher, &packets(&mut rng, 16, &descending));
    }
}

#[test]
fn only_empty_jobs_and_no_jobs() {
    let cipher = CbcCipher::new(EncAlg::AesCbc, &[9; 16]).unwrap();
    encrypt_many(&cipher, &mut []).unwrap();
    let iv = [1u8; 16];
    let (mut a, mut b) = ([0u8; 0], [0u8; 0]);
    let mut jobs = [CbcJob { iv: &iv, data: &mut a }, CbcJob { iv: &iv, data: &mut b }];
    encrypt_many(&cipher, &mut jobs).unwrap();
}

fn h(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

/// (key, IV, plaintext, ciphertext)
type Vector = (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>);

/// RFC 3602 section 4, cases #1..#4 (AES-128-CBC).
fn rfc3602_cases() -> [Vector; 4] {
    [
        (
            h("06a9214036b8a15b512e03d534120006"),
            h("3dafba429d9eb430b422da802c9fac41"),
            b"Single block msg".to_vec(),
            h("e353779c1079aeb82708942dbe77181a"),
        ),
        (
            h("c286696d887c9aa0611bbb3e2025a45a"),
            h("562e17996d093d28ddb3ba695a2e6f58"),
            h("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"),
            h("d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1"),
        ),
        (
            h("6c3ea0477630ce21a2ce334aa746c2cd"),
            h("c782dc4c098c66cbd9cd27d825682c81"),
            b"This is a 48-byte message (exactly 3 AES blocks)".to_vec(),
            h("d0a02b3836451753d493665d33f0e8862dea54cdb293abc7506939276772f8d5021c19216bad525c8579695d83ba2684"),
        ),
        (
            h("56e47a38c5598974bc46903dba290349"),
            h("8ce82eefbea0da3c44699ed7db51b7d9"),
            (0xa0..=0xdf).collect(),
            h(concat!(
                "c30e32ffedc0774e6aff6af0869f71aa0f3af07a9a31a9c684db207eb0ef8e4e",
                "35907aa632c3ffdf868bb7b29d3d46ad83ce9f9a102ee99d49a53e87f4c3da55"
            )),
        ),
    ]
}

#[test]
fn rfc3602_vectors_as_lanes_among_random_jobs() {
    // Each case has its own key, so each is one multi-buffer call under that key, with the
    // vector placed first, in the middle or last among random jobs (and the other three cases'
    // plaintexts as extra jobs, checked against the one-chain path).
    let mut rng = ChaCha20Rng::seed_from_u64(3602);
    let cases = rfc3602_cases();
    for (key, iv, plain, ct) in &cases {
        let cipher = CbcCipher::new(EncAlg::AesCbc, key).unwrap();
        for at in [0usize, 5, 11] {
            let blocks: Vec<usize> = (0..11).map(|_| below(&mut rng, 40) as usize).collect();
            let mut pkts = packets(&mut rng, 16, &blocks);
            for (_, other_iv, other_plain, _) in &cases {
                pkts.push(Packet {
                    iv: other_iv.clone(),
                    plain: other_plain.clone(),
                });
            }
            pkts.insert(
                at,
                Packet {
                    iv: iv.clone(),
                    plain: plain.clone(),
                },
            );
            let got = multi(&cipher, &pkts).unwrap();
            assert_eq!(&got[at], ct, "RFC 3602 vector as job {at}");
            check_against_single(&cipher, &pkts);
        }
    }
}

#[test]
fn rfc3602_all_four_cases_in_one_call_with_case_keys_mixed() {
    // The four vectors at once under one key (case #4's), so lanes of 1, 2, 3 and 4 blocks run
    // together; only case #4 must match its RFC ciphertext, the rest match the one-chain path.
    let cases = rfc3602_cases();
    let cipher = CbcCipher::new(EncAlg::AesCbc, &cases[3].0).unwrap();
    let pkts: Vec<Packet> = cases
        .iter()
        .map(|(_, iv, plain, _)| Packet {
            iv: iv.clone(),
            plain: plain.clone(),
        })
        .collect();
    let got = multi(&cipher, &pkts).unwrap();
    assert_eq!(got[3], cases[3].3);
    check_against_single(&cipher, &pkts);
}

#[test]
fn des_and_3des_fall_back_to_one_chain() {
    let mut rng = ChaCha20Rng::seed_from_u64(2451);
    for (alg, key_len) in [(EncAlg::DesCbc, 8), (EncAlg::Des3Cbc, 24)] {
        for round in 0..8 {
            let cipher = CbcCipher::new(alg, &random_bytes(&mut rng, key_len)).unwrap();
            let blocks: Vec<usize> = shape(&mut rng, round % 4).into_iter().map(|b| b / 4).collect();
            check_against_single(&cipher, &packets(&mut rng, 8, &blocks));
        }
    }
    // FIPS 81 DES-CBC example as the middle job of three.
    let cipher = CbcCipher::new(EncAlg::DesCbc, &h("0123456789abcdef")).unwrap();
    let mut pkts = packets(&mut rng, 8, &[3, 5]);
    pkts.insert(
        1,
        Packet {
            iv: h("1234567890abcdef"),
            plain: b"Now is the time for all ".to_vec(),
        },
    );
    let got = multi(&cipher, &pkts).unwrap();
    assert_eq!(got[1], h("e5c7cdde872bf27c43e934008c389c0f683788499a7c05f6"));
}

#[test]
fn null_cipher_changes_nothing() {
    let cipher = CbcCipher::new(EncAlg::Null, &[]).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(2410);
    let pkts = packets(&mut rng, 16, &[3, 0, 7]);
    let got = multi(&cipher, &pkts).unwrap();
    for (p, g) in pkts.iter().zip(&got) {
        assert_eq!(&p.plain, g);
    }
}

/// A job set where job `bad` has a bad IV or data length: the call fails and no job changed.
fn assert_rejected(cipher: &CbcCipher, pkts: &[Packet], want: Error) {
    let mut out: Vec<Vec<u8>> = pkts.iter().map(|p| p.plain.clone()).collect();
    let mut jobs: Vec<CbcJob<'_>> = pkts
        .iter()
        .zip(out.iter_mut())
        .map(|(p, d)| CbcJob { iv: &p.iv, data: d })
        .collect();
    assert_eq!(encrypt_many(cipher, &mut jobs), Err(want));
    drop(jobs);
    for (i, (p, o)) in pkts.iter().zip(&out).enumerate() {
        assert_eq!(&p.plain, o, "job {i} changed although the call failed");
    }
}

#[test]
fn bad_lengths_are_rejected_before_any_job_is_touched() {
    let mut rng = ChaCha20Rng::seed_from_u64(4303);
    let aes = CbcCipher::new(EncAlg::AesCbc, &random_bytes(&mut rng, 32)).unwrap();
    let des3 = CbcCipher::new(EncAlg::Des3Cbc, &random_bytes(&mut rng, 24)).unwrap();
    for (cipher, block) in [(&aes, 16usize), (&des3, 8)] {
        for bad in [0usize, 4, 9] {
            // Data one byte short of whole blocks, as the first, a middle or the last job.
            let mut pkts = packets(&mut rng, block, &[3; 10]);
            pkts[bad].plain.pop();
            assert_rejected(cipher, &pkts, Error::BadAlignment);
            // Half a block of data.
            let mut pkts = packets(&mut rng, block, &[3; 10]);
            pkts[bad].plain = random_bytes(&mut rng, block / 2);
            assert_rejected(cipher, &pkts, Error::BadAlignment);
            // IV too short and too long.
            for iv_len in [block - 1, block + 1, 0] {
                let mut pkts = packets(&mut rng, block, &[3; 10]);
                pkts[bad].iv = random_bytes(&mut rng, iv_len);
                assert_rejected(cipher, &pkts, Error::InvalidSa("IV length"));
            }
        }
    }
    // An AES cipher given a DES-sized IV.
    let pkts = packets(&mut rng, 8, &[2, 2]);
    assert_rejected(&aes, &pkts, Error::InvalidSa("IV length"));
}
