//! `tunneld`'s core and I/O: the daemon that carries a TUN device's packets to one or more
//! peer hosts through the SA engine (ESP, AH, IPComp), over IPv4 and IPv6 raw sockets or ESP
//! in UDP.
//!
//! - [`tunnel`]: the core, with no I/O of its own: [`Tunnel`] holds the engine behind a mutex
//!   and the daemon's counters; [`run_outbound`] (TUN → engine → underlay) and
//!   [`run_inbound`] (underlay → engine → TUN) are the loops, over the device traits (tested
//!   on in-memory fakes). They see plain IP packets and each packet's [`Context`]
//!   ([`packet`]: the buffers, the batch, what is known about each packet).
//! - The devices, one file each: [`tun`] (the multi-queue TUN device, with its offloads,
//!   TSO/USO segmentation and GRO, behind [`TunPort`]'s batch interface; [`tun::offload`] is
//!   sans-IO), [`raw`] (raw IP sockets), [`udp`] (the ESP-in-UDP socket with UDP GSO/GRO and
//!   the peers' endpoints), [`packet_ring`] (raw ESP/AH/IPComp received through `AF_PACKET`
//!   rings fanned out to the workers), [`packet_tx`] (and sent through `AF_PACKET` to the
//!   next hop), [`underlay`] (the underlay's traits), [`outer`] (the IP header a
//!   socket took off, put back) and [`sys`] (the system calls they share, the interface
//!   ioctls). `unsafe` is allowed in `sys`, `tun`, `udp`,
//!   `packet_ring` and `packet_tx` only.
//! - The control side: [`daemon`] wires it all together with one worker per core (a TUN
//!   queue, an outbound thread and, for ESP in UDP, an inbound thread on its own socket
//!   each), a ticker that sleeps until the engine's next deadline (lifetimes, events, the
//!   stats file) and a clean stop; [`control`] is the control socket and SIGHUP's reload;
//!   [`counters`] and [`stats`] the daemon's counters and stats file.
//!
//! The binary is `tunneld` in the root package (`src/bin/tunneld.rs`), which reads the config
//! file and builds the [`Engine`](ipsec_engine::Engine) this crate is handed. The crate still
//! depends on `ipsec-config` for one reason: the control side re-reads the config file on
//! SIGHUP and `ipsec sa|policy` commands carry config-format SAs and policies
//! ([`control`]); the data path (`tunnel`, `packet`, the devices) does not use it.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod control;
pub mod counters;
pub mod daemon;
pub mod ike;
pub mod metrics;
pub mod outer;
pub mod packet;
pub mod packet_ring;
pub mod packet_tx;
pub mod raw;
mod rtnetlink;
pub mod sd_notify;
pub mod stats;
pub mod sys;
pub mod tun;
pub mod tunnel;
pub mod udp;
pub mod underlay;

pub use counters::{DaemonCounters, DaemonSnapshot};
pub use daemon::{run, Options};
pub use packet::{Batch, Context, PacketBuffer, RxKind, BATCH};
pub use tun::{TunIo, TunPort};
pub use tunnel::{
    inbound_protocols, run_inbound, run_outbound, tun_mtu_for, DaemonDrop, NonEspSink, Outcome, PeerReport, Report,
    Tunnel,
};
pub use underlay::{ByFamily, UnderlayRx, UnderlayTx};
