//! A userspace IPsec data plane: ESP (RFC 4303/2406) transforms that work in place on a
//! caller's buffer, and the pieces of the `ipsec` offline tool (SA specs in `ip xfrm` words,
//! bundles, pcap processing).
//!
//! The transforms live in their own `no_std` crates, re-exported here: [`core`] (shared SA
//! parameters, algorithms, anti-replay), [`esp`].

pub use ipsec_ah as ah;
pub use ipsec_core as core;
pub use ipsec_engine as engine;
pub use ipsec_engine::bundle;
pub use ipsec_esp as esp;

pub mod check_config;
pub mod config;
pub mod model;
pub mod overhead_cmd;
pub mod pcapio;
pub mod spec;
pub mod tool;
