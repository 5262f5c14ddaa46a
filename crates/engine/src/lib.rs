//! The SA engine of the userspace IPsec data plane (RFC 4301): a Security Policy Database
//! ([`spd`]), a Security Association Database ([`sad`]) with SA bundles ([`bundle`]),
//! lifetimes ([`lifetime`]), per-SA counters ([`counters`]), the overhead/MTU calculator
//! ([`overhead`]) and ESP-in-UDP framing ([`udp_encap`]).
//!
//! Sans-IO: [`Engine::outbound`] and [`Engine::inbound`] work in place on the caller's
//! [`PacketBuf`](ipsec_core::PacketBuf) and take the time as an argument; nothing is
//! allocated per packet.
//!
//! # Example
//!
//! Two hosts' engines with one ESP tunnel SA from A to B and one policy each: A's outbound
//! policy protects 10.1.0.0/16 → 10.2.0.0/16 with the SA, B's inbound policy requires it.
//! One packet goes out through A and back in through B; one that no policy covers is
//! discarded and counted:
//!
//! ```
//! use core::time::Duration;
//! use ipsec_core::ip::{proto, Ipv4Repr};
//! use ipsec_core::sa::{Keyed, Mode, Proto, Tunnel};
//! use ipsec_core::{AeadAlg, PacketBuf, SaParams};
//! use ipsec_engine::{Action, Direction, DropReason, Engine, Policy, SaConfig, Selector, Verdict};
//!
//! let mut params = SaParams::new(Proto::Esp, 0x1001);
//! params.mode = Mode::Tunnel;
//! params.tunnel = Some(Tunnel { src: "192.0.2.1".parse()?, dst: "192.0.2.2".parse()? });
//! params.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0x11; 20], 16));
//! let selector = Selector {
//!     src: Some("10.1.0.0/16".parse().unwrap()),
//!     dst: Some("10.2.0.0/16".parse().unwrap()),
//!     ..Selector::default()
//! };
//! let now = Duration::ZERO; // the caller's monotonic clock
//!
//! let mut a = Engine::new();
//! let esp = a.add_sa(SaConfig::new("esp-ab", params.clone(), None), now)?; // keyed here
//! a.add_policy(Policy { dir: Direction::Out, selector, action: Action::Protect(vec![esp]) })?;
//! let mut b = Engine::new();
//! let esp = b.add_sa(SaConfig::new("esp-ab", params, None), now)?;
//! b.add_policy(Policy { dir: Direction::In, selector, action: Action::Protect(vec![esp]) })?;
//!
//! let ipv4 = |src: &str, dst: &str| -> Vec<u8> {
//!     let mut p = vec![0u8; 20 + 32];
//!     Ipv4Repr {
//!         src: src.parse().unwrap(),
//!         dst: dst.parse().unwrap(),
//!         protocol: proto::UDP,
//!         payload_len: 32,
//!         tos: 0,
//!         ident: 1,
//!         dont_frag: true,
//!         ttl: 64,
//!     }
//!     .emit(&mut p)
//!     .unwrap();
//!     p
//! };
//!
//! // A buffer with head- and tailroom for the bundle's headers and trailer.
//! let inner = ipv4("10.1.0.5", "10.2.0.7");
//! let mut raw = vec![0u8; 128 + inner.len() + 128];
//! raw[128..][..inner.len()].copy_from_slice(&inner);
//! let mut buf = PacketBuf::new(&mut raw, 128, inner.len())?;
//!
//! assert_eq!(a.outbound(&mut buf, now), Ok(Verdict::Protected(1)));
//! assert_eq!(buf.packet()[9], proto::ESP);
//! assert_eq!(&buf.packet()[16..20], &[192, 0, 2, 2], "to B's tunnel address");
//! assert_eq!(b.inbound(&mut buf, now), Ok(Verdict::Protected(1)));
//! assert_eq!(buf.packet(), &inner[..]);
//!
//! // No outbound policy covers 10.9.0.1: discarded (RFC 4301 5.1), counted by the engine.
//! let stray = ipv4("10.9.0.1", "10.2.0.7");
//! let mut raw = vec![0u8; 128 + stray.len() + 128];
//! raw[128..][..stray.len()].copy_from_slice(&stray);
//! let mut buf = PacketBuf::new(&mut raw, 128, stray.len())?;
//! assert_eq!(a.outbound(&mut buf, now).unwrap_err().reason, DropReason::PolicyDiscard);
//!
//! let snap = a.snapshot(now);
//! assert_eq!((snap.sas[0].outbound.packets, snap.outbound_drops.policy_discard), (1, 1));
//! assert_eq!(b.snapshot(now).sas[0].inbound.bytes_after, inner.len() as u64);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! For many threads, [`Engine::plane_handle`] gives the workers the current [`DataPlane`]
//! (lock-free, following every change of the control side), which seals and opens by `&self`
//! with a per-thread [`Worker`], one packet or a batch at a time.
//!
//! # Features and `no_std`
//!
//! The crate is `no_std` with `alloc` and forbids `unsafe`. Default features:
//! - `std`: [`Engine::add_sa`] seeds IV generators from the operating system, and
//!   [`Engine::plane_handle`] (an `arc-swap` pointer) lets worker threads follow the control
//!   side; without it, use [`Engine::add_sa_with_rng`] and [`Engine::data_plane`].
//! - `serde`: [`Snapshot`] (every counter) serializes, e.g. to JSON.
//! - `ring`: the AEADs on `ring` (see `ipsec_core::aead`).
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod bundle;
pub mod counters;
pub mod engine;
pub mod left_right;
pub mod lifetime;
pub mod overhead;
pub mod sad;
pub mod spd;
pub mod udp_encap;

pub use bundle::{AnySa, Bundle, PacketError};
pub use counters::{CompSnapshot, Counters, DropReason, Drops, ModelSnapshot};
#[cfg(feature = "std")]
pub use engine::monotonic_ns;
#[cfg(feature = "std")]
pub use engine::PlaneHandle;
pub use engine::{
    Arrival, DataPlane, Dropped, Engine, Event, Framing, Retired, Route, SaSnapshot, Snapshot, Verdict, Worker,
    CRYPTO_SAMPLE, MAX_BATCH, MAX_DEPTH,
};
pub use lifetime::{Lifetime, Limit, Limits, State, Usage};
pub use sad::{Codecs, InstallError, LayerOpened, SaConfig, SaEntry, SaId, Sad, SharedSa};
pub use spd::{Action, Direction, Flow, Policy, PortRange, Prefix, Selector, Spd};
pub use udp_encap::{EncapError, UdpEncap};
