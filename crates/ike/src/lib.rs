//! Sans-IO IKEv2 (RFC 7296).
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod alg;
pub mod auth;
pub mod delete;
pub mod dh;
pub mod error;
pub mod header;
pub mod id;
pub mod ke;
pub mod keys;
pub mod limits;
pub mod narrowing;
pub mod nat;
pub mod nonce;
pub mod notify;
pub mod payload;
pub mod prf;
pub mod sa;
pub mod sk;
pub mod ts;

pub use error::{CommandError, Error};
