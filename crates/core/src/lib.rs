//! What ESP and AH share: SA parameters, the algorithm registry, keyed integrity and cipher
//! state (expanded once per SA), anti-replay with extended sequence numbers, IP header views
//! and the in-place packet buffer the transforms work on.
//!
//! # Example
//!
//! An SA is a [`SaParams`]; its algorithms come from the registry ([`EncAlg`], [`IntegAlg`],
//! [`AeadAlg`]) under the names `ip xfrm` uses, with the key and ICV lengths their RFCs fix.
//! [`SaParams::validate`] checks the whole SA (the ESP and AH constructors call it):
//!
//! ```
//! use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
//! use ipsec_core::{AeadAlg, EncAlg, Error, IntegAlg, SaParams};
//!
//! // `ip xfrm state` words: enc 'cbc(aes)' KEY auth 'hmac(sha256)' KEY
//! let enc = EncAlg::from_name("cbc(aes)").unwrap();
//! let auth = IntegAlg::from_name("hmac(sha256)").unwrap();
//! assert_eq!((enc.block_size(), enc.iv_len(), enc.rfc()), (16, 16, "RFC 3602"));
//! assert_eq!((auth.digest_len(), auth.default_icv_len()), (32, 16), "HMAC-SHA-256-128, RFC 4868");
//! assert_eq!(auth.check_icv_bits(96), Ok(12), "Linux's 96-bit truncation is allowed too");
//! assert!(EncAlg::from_name("cbc(twofish)").is_none());
//!
//! let mut sa = SaParams::new(Proto::Esp, 0x1000); // transport, 1024-packet window, no ESN
//! sa.mode = Mode::Tunnel;
//! sa.tunnel = Some(Tunnel { src: "2001:db8::1".parse()?, dst: "2001:db8::2".parse()? });
//! sa.enc = Some(Keyed::new(enc, &[0x11; 16], 0));
//! sa.integ = Some(Keyed::new(auth, &[0x22; 32], auth.default_icv_len()));
//! sa.validate()?;
//! assert!(!format!("{sa:?}").contains("17, 17"), "Debug shows key lengths, never key bytes");
//!
//! // A 12-byte AES-GCM key material is refused with the lengths that would do.
//! let mut gcm = SaParams::new(Proto::Esp, 0x1001);
//! gcm.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0; 12], 16));
//! assert!(matches!(gcm.validate(), Err(Error::KeyLength { got: 12, .. })));
//! // ESP takes an AEAD or a cipher with an integrity algorithm, never both.
//! gcm.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0; 20], 16));
//! gcm.integ = sa.integ.clone();
//! assert!(matches!(gcm.validate(), Err(Error::InvalidSa(_))));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The transforms work on a [`PacketBuf`]: the caller's byte slice with the packet at an
//! offset, so headers go into the headroom in front and trailers into the tailroom behind,
//! without copying the packet or allocating.
//!
//! # Features and `no_std`
//!
//! The crate is sans-IO and `no_std` (with `alloc`: keys are held in zeroized heap buffers,
//! allocated once per SA); nothing here allocates per packet, and `unsafe` is forbidden.
//! Default features:
//! - `std`: [`rng::IvRng::from_os`] (seeded by `getrandom`) and `std::error::Error` for
//!   [`Error`]; without it, seed [`rng::IvRng::from_seed`] yourself.
//! - `ring`: AES-128/256-GCM with a 16-byte ICV and ChaCha20-Poly1305 on `ring` (see
//!   [`aead`]); without it every AEAD runs on the RustCrypto path.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod aead;
pub mod alg;
pub mod buf;
pub mod cbc_multi;
pub mod cipher;
pub mod error;
pub mod esn;
pub mod integrity;
pub mod ip;
pub mod nat_t;
pub mod replay;
pub mod rng;
pub mod sa;
pub mod sa_core;
pub mod tunnel;

pub use alg::{AeadAlg, EncAlg, IntegAlg};
pub use buf::PacketBuf;
pub use error::Error;
pub use sa::{Mode, SaParams, Tunnel};
