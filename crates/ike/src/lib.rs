//! Sans-IO IKEv2 (RFC 7296).
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod alg;
pub mod auth;
pub mod authenticator;
pub mod cookie;
pub mod delete;
pub mod dh;
pub mod error;
pub mod fragment;
pub mod header;
pub mod id;
pub mod ke;
pub mod kem;
pub mod keys;
pub mod limits;
pub mod narrowing;
pub mod nat;
pub mod nonce;
pub mod notify;
pub mod payload;
pub mod pki;
pub mod prf;
pub mod sa;
pub mod sk;
pub mod ts;

pub use error::{CommandError, Error};
pub(crate) mod child;
pub mod config;
pub mod endpoint;
pub mod event;
pub(crate) mod ike_sa;
pub mod keylog;
pub mod message;
pub mod retransmit;
pub mod status;
pub(crate) mod task;
#[cfg(test)]
mod test_util;

pub use config::{
    ChildConfig, ChildLifetimes, Config, Connection, DeadAction, LocalAuth, Mode, Psk, RemoteAuth, SendCert,
    StartAction,
};
pub use cookie::DosStats;
pub use endpoint::{ConnId, Dropped, Endpoint, PacketSelectors, SaHandle};
pub use event::{ChildSaInfo, DownReason, Event, IkeKeyLog, IkeSaInfo, Role, Transmit, UdpEncap};
pub use id::Identity;
pub use ike_sa::NON_ESP_MARKER;
pub use pki::{CertError, Certificate, Dn, IdPattern, PkiError, PrivateKey, RingSigner, Signer, TrustStore};
pub use status::{ChildSaStatus, IkeSaStats, IkeSaStatus};
