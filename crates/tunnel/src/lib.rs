//! `tunneld`'s core and I/O: the daemon that carries a TUN device's packets to one or more
//! peer hosts through the SA engine (ESP, AH, IPComp), over IPv4 and IPv6 raw sockets or ESP
//! in UDP.
//!
//! - [`tunnel`]: the core, with no I/O of its own: [`Tunnel`] holds the engine behind a mutex
//!   and the daemon's counters; [`run_outbound`] (TUN → engine → underlay) and
//!   [`run_inbound`] (underlay → engine → TUN) are the loops, over the [`TunIo`],
//!   [`UnderlayTx`] and [`UnderlayRx`] traits (tested on in-memory fakes).
//! - [`sys`]: the real devices (the multi-queue TUN device, `socket2` sockets) and the ioctls;
//!   the crate's only `unsafe` code.
//! - [`offload`]: TUN offloads, sans-IO: the virtio-net header, segmentation of TCP and UDP
//!   super-packets (TSO, USO) and coalescing of opened TCP packets (GRO).
//! - [`encap`]: ESP in UDP (RFC 3948) without I/O: classifying datagrams, rebuilding the IP
//!   header in front of a received ESP payload (also for IPv6 raw sockets), splitting UDP GRO
//!   runs.
//! - [`control`]: the control socket (line-delimited JSON; `ipsec sa|policy|show|monitor`)
//!   and SIGHUP reload ([`control::reload`]).
//! - [`daemon`]: wires them together with one worker per core (a TUN queue, an outbound
//!   thread and, for ESP in UDP, an inbound thread on its own socket each), a 1 s ticker
//!   (lifetimes, events, the stats file) and a clean stop.
//!
//! The binary is `tunneld` in the root package (`src/bin/tunneld.rs`), which reads the config
//! file and builds the [`Engine`](ipsec_engine::Engine) this crate is handed.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod control;
pub mod counters;
pub mod daemon;
pub mod encap;
pub mod offload;
pub mod sd_notify;
pub mod stats;
pub mod sys;
pub mod tunnel;

pub use counters::{DaemonCounters, DaemonSnapshot};
pub use daemon::{run, Options};
pub use tunnel::{
    inbound_protocols, run_inbound, run_outbound, tun_mtu_for, Batch, ByFamily, DaemonDrop, Outcome, PacketBuffer,
    PeerReport, Report, RxKind, TunIo, Tunnel, UnderlayRx, UnderlayTx, BATCH,
};
