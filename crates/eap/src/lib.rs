//! Sans-IO EAP (RFC 3748) for IKEv2 remote access (RFC 7296 §2.16).
//!
//! - [`packet`]: the EAP packet codec (RFC 3748 §4, §5.1 Identity, §5.3 Nak).
//! - [`mschapv2`]: EAP-MSCHAPv2 (draft-kamath-pppext-eap-mschapv2-02) with the RFC 2759
//!   algorithms ([`ms_chap`]) and the RFC 3079 §3 master keys ([`mppe_keys`]); the
//!   authenticator ([`mschapv2::Server`]) and the peer ([`mschapv2::Peer`]).
//! - [`radius`]: a RADIUS client (RFC 2865) passing EAP through to a RADIUS server
//!   (RFC 3579), MPPE keys (RFC 2548) turned into the MSK.
//! - [`tls`] (feature `tls`, with std): EAP-TLS (RFC 5216, RFC 9190) on rustls, both roles.
//! - [`server`]: what the IKE responder drives: EAP-Identity, then a local method or RADIUS.
//!
//! Nothing here opens a socket or a file, reads a clock or draws random bytes: time
//! (a [`core::time::Duration`] since any fixed epoch) and randomness are passed in.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod error;
pub mod mppe_keys;
pub mod ms_chap;
pub mod mschapv2;
pub mod msk;
pub mod packet;
pub mod radius;
pub mod server;
#[cfg(feature = "tls")]
pub mod tls;

pub use error::Error;
pub use msk::Msk;
