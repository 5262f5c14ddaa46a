//! A userspace IPsec data plane: ESP (RFC 4303/2406), AH (RFC 4302/2402) and IPComp (RFC 3173)
//! transforms that work in place on a caller's buffer, an RFC 4301 SA engine, and the pieces
//! of the `ipsec` offline tool (SA specs in `ip xfrm` words, config files, pcap processing,
//! overhead figures, speedup models).
//!
//! The transforms and the engine live in their own `no_std` crates, re-exported here:
//! [`core`] (shared SA parameters, algorithms, anti-replay), [`esp`], [`ah`], [`ipcomp`],
//! [`engine`] (SPD, SAD, bundles, lifetimes, counters); the speedup models are the `std` crate
//! [`model`].

pub use ipsec_ah as ah;
/// The config loaders (TOML, setkey) and SA specs, their own crate `ipsec-config`.
pub use ipsec_config as config;
pub use ipsec_config::spec;
pub use ipsec_core as core;
pub use ipsec_engine as engine;
pub use ipsec_engine::bundle;
pub use ipsec_esp as esp;
pub use ipsec_ipcomp as ipcomp;
pub use ipsec_model as model;

pub mod check_config;
pub mod cli;
pub mod ctl_cmd;
pub mod model_cmd;
pub mod overhead_cmd;
pub mod pcapio;
pub mod pki_cmd;
pub mod process_cmd;
pub mod profile_cmd;
pub mod tool;
