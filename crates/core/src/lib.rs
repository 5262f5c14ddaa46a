//! What ESP and AH share: SA parameters, the algorithm registry, keyed integrity and cipher
//! state (expanded once per SA), anti-replay with extended sequence numbers, IP header views
//! and the in-place packet buffer the transforms work on.
//!
//! The crate is sans-IO and `no_std` (with `alloc`). Nothing here allocates per packet.
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
pub mod replay;
pub mod rng;
pub mod sa;
pub mod sa_core;
pub mod tunnel;

pub use alg::{AeadAlg, EncAlg, IntegAlg};
pub use buf::PacketBuf;
pub use error::Error;
pub use sa::{Mode, SaParams, Tunnel};
