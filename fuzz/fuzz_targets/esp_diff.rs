//! Differential ESP (RFC 4106 AES-GCM, RFC 7634 ChaCha20-Poly1305): a packet sealed by our
//! `EspSa` (transport mode, fuzzer payload) is decrypted by the RustCrypto `aes-gcm` and
//! `chacha20poly1305` crates directly, and the plaintext must be our payload, padding
//! (1, 2, 3...), pad length and next header (RFC 4303 section 2).
//!
//! Backend switch: when `ipsec_core::aead::Backend` offers ring beside RustCrypto, seal with
//! one backend and open with the other here (and keep the direct RustCrypto check).
#![no_main]
use aes_gcm::aead::{Aead, KeyInit, Payload};
use ipsec_esp::EspSa;
use ipsec_fuzz::{esp_params, in_buf, rng, udp_packet, MAX_INPUT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() || data.len() > MAX_INPUT {
        return;
    }
    // AEAD suites 1 (GCM-128/16), 3 (ChaCha20) and 10 (GCM-192/12), transport mode, no ESN.
    // (Suite 7's 8-byte GCM ICV is below what the `aes-gcm` crate supports.)
    let sel = [1u8, 3, 10][usize::from(data[0] % 3)];
    let params = esp_params(sel);
    let aead = params.aead.clone().expect("an AEAD suite");
    let mut tx = EspSa::with_rng(&params, rng()).expect("valid SA");
    let payload = &data[1..];
    let inner = udp_packet(data[0] & 4 != 0, payload);
    let ip_len = if data[0] & 4 != 0 { 40 } else { 20 };
    let sealed = in_buf(&inner, |b| tx.seal(b).map(|_| ())).expect("a valid packet seals");
    let esp = &sealed[ip_len..];
    let (aad, iv, ct) = (&esp[..8], &esp[8..16], &esp[16..]);
    let key = &aead.key[..aead.key.len() - 4];
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&aead.key[aead.key.len() - 4..]);
    nonce[4..].copy_from_slice(iv);
    let msg = Payload { msg: ct, aad };
    let plain = match (sel, key.len()) {
        (3, _) => chacha20poly1305::ChaCha20Poly1305::new_from_slice(key)
            .unwrap()
            .decrypt(&nonce.into(), msg),
        (10, 24) => {
            aes_gcm::AesGcm::<aes::Aes192, aes_gcm::aead::consts::U12, aes_gcm::aead::consts::U12>::new_from_slice(key)
                .unwrap()
                .decrypt(&nonce.into(), msg)
        }
        (1, 16) => aes_gcm::Aes128Gcm::new_from_slice(key)
            .unwrap()
            .decrypt(&nonce.into(), msg),
        other => panic!("suite table changed: {other:?}"),
    }
    .expect("RustCrypto opens what we sealed");
    let udp = &inner[ip_len..];
    assert_eq!(&plain[..udp.len()], udp, "payload");
    let (pad, trailer) = plain[udp.len()..].split_at(plain.len() - udp.len() - 2);
    assert!(
        pad.iter().enumerate().all(|(i, &b)| b as usize == i + 1),
        "RFC 4303 2.4 padding"
    );
    assert_eq!(usize::from(trailer[0]), pad.len(), "pad length");
    assert_eq!(trailer[1], 17, "next header");
});
