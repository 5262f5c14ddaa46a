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
pub mod cp;
pub mod dh;
pub mod dropped;
pub mod eap;
pub mod error;
pub mod fragment;
pub mod kem;
pub mod keys;
pub mod limits;
pub mod narrowing;
pub mod nat;
pub mod pki;
pub mod pool;
pub mod prf;
mod radius_table;
pub mod sk;
pub mod vendor;
pub mod wire;
// The wire modules keep their paths at the crate's root too (`ipsec_ike::header`, ...).
pub use wire::{delete, header, id, ke, message, nonce, notify, payload, sa, ts};

pub use error::{CommandError, Error};
pub(crate) mod child;
pub mod config;
pub mod endpoint;
pub mod event;
pub(crate) mod ike_sa;
pub mod keylog;
pub mod retransmit;
pub mod status;
pub(crate) mod task;
#[cfg(test)]
mod test_util;

pub use config::{
    ChildConfig, ChildLifetimes, Config, Connection, DeadAction, EapCredentials, LocalAuth, Mode, Psk, RekeyBy,
    RemoteAuth, SendCert, StartAction,
};
pub use cookie::DosStats;
pub use dropped::Dropped;
pub use endpoint::{
    ChildId, ConnId, Endpoint, PacketSelectors, RadiusDropped, RadiusServerStats, RadiusStats, RadiusTransmit, SaHandle,
};
pub use event::{ChildSaInfo, DownReason, EncapPorts, Event, IkeKeyLog, IkeSaInfo, MobikeRefusal, Role, Transmit};
pub use id::Identity;
pub use ipsec_core::nat_t::NON_ESP_MARKER;
/// The EAP crate this one drives (its Credentials trait, NT hashes, failure reasons).
pub use ipsec_eap;
pub use pki::{CertError, Certificate, Dn, IdPattern, PkiError, PrivateKey, RingSigner, Signer, TrustStore};
pub use pool::{PoolConfig, PoolStats, Unique};
pub use status::{ChildSaStatus, IkeSaStats, IkeSaStatus};
