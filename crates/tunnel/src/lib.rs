//! `tunneld`'s core and I/O: the daemon that carries a TUN device's packets to one or more
//! peer hosts through the SA engine (ESP, AH, IPComp), over IPv4 and IPv6 raw sockets or ESP
//! in UDP. The crate is in rooms, one folder each:
//!
//! - [`dataplane`]: the core, with no I/O of its own: [`Tunnel`] holds the engine's data
//!   plane and the daemon's counters; [`run_outbound`] (TUN → engine → underlay) and
//!   [`run_inbound`] (underlay → engine → TUN) are the loops, over the device traits (tested
//!   on in-memory fakes). They see plain IP packets and each packet's [`Context`]
//!   ([`dataplane::packet`]: the buffers, the batch, what is known about each packet).
//! - [`dev`]: the devices, one file each: the TUN device and its offloads, raw IP sockets,
//!   the ESP-in-UDP socket and its peer table, `AF_PACKET` rings in and out, the underlay's
//!   traits and the system calls they share. `unsafe` lives here only (and in
//!   [`obs::sd_notify`]'s one `sendmsg`), each block with its SAFETY comment.
//! - [`control`]: the control socket, its requests and events, the SAs the control side
//!   added and SIGHUP's reload.
//! - [`ike`]: the IKE thread that drives `ipsec-ike`'s sans-IO endpoint: its sockets, the
//!   SAs it installs, traps (acquires) and the key log.
//! - [`obs`]: observability: counters, the stats file, Prometheus metrics, sd_notify.
//! - [`daemon`]: wires it all together with one worker per core (a TUN queue, an outbound
//!   thread and, for ESP in UDP, an inbound thread on its own socket each), a ticker that
//!   sleeps until the engine's next deadline (lifetimes, events, the stats file) and a clean
//!   stop.
//!
//! The binary is `tunneld` in the root package (`src/bin/tunneld.rs`), which reads the config
//! file and builds the [`Engine`](ipsec_engine::Engine) this crate is handed. The crate
//! depends on `ipsec-config` for the control side only: it re-reads the config file on
//! SIGHUP and `ipsec sa|policy` commands carry config-format SAs and policies; the data path
//! (`dataplane`, `dev`) does not use it.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod control;
pub mod daemon;
pub mod dataplane;
pub mod dev;
pub mod ike;
pub mod obs;

pub use daemon::{run, Options};
pub use dataplane::packet::{Batch, Context, PacketBuffer, RxKind, BATCH};
pub use dataplane::{
    inbound_protocols, run_inbound, run_outbound, tun_mtu_for, DaemonDrop, NonEspSink, Outcome, PeerReport, Report,
    Tunnel,
};
pub use dev::tun::{TunIo, TunPort};
pub use dev::underlay::{ByFamily, UnderlayRx, UnderlayTx};
pub use obs::counters::{DaemonCounters, DaemonSnapshot};
