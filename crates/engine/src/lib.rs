//! The SA engine of the userspace IPsec data plane (RFC 4301): a Security Policy Database
//! ([`spd`]), a Security Association Database ([`sad`]) with SA bundles ([`bundle`]),
//! lifetimes ([`lifetime`]), per-SA counters ([`counters`]), the overhead/MTU calculator
//! ([`overhead`]) and ESP-in-UDP framing ([`udp_encap`]).
//!
//! Sans-IO and `no_std` with `alloc`: [`Engine::outbound`] and [`Engine::inbound`] work in
//! place on the caller's [`PacketBuf`](ipsec_core::PacketBuf) and take the time as an
//! argument; nothing is allocated per packet. Feature `serde` makes [`Snapshot`] serializable.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod bundle;
pub mod counters;
pub mod engine;
pub mod lifetime;
pub mod overhead;
pub mod sad;
pub mod spd;
pub mod udp_encap;

pub use bundle::{AnySa, Bundle, PacketError};
pub use counters::{CompSnapshot, Counters, DropReason, Drops, ModelSnapshot};
#[cfg(feature = "std")]
pub use engine::PlaneHandle;
pub use engine::{
    Arrival, DataPlane, Dropped, Engine, Event, Retired, SaSnapshot, Snapshot, Verdict, Worker, BATCH, MAX_DEPTH,
};
pub use lifetime::{Lifetime, Limit, Limits, State, Usage};
pub use sad::{InstallError, LayerOpened, SaConfig, SaEntry, SaId, Sad, SharedSa};
pub use spd::{Action, Direction, Flow, Policy, PortRange, Prefix, Selector, Spd};
pub use udp_encap::{EncapError, UdpEncap};
