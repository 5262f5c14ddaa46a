//! The devices, one file each: everything here does I/O, and nothing else in the crate
//! opens a descriptor for packets.
//!
//! - [`tun`]: the multi-queue TUN device, its offloads (TSO/USO segmentation and GRO,
//!   [`tun::offload`], sans-IO) behind [`TunPort`](tun::TunPort)'s batch interface, and
//!   io_uring ([`tun::uring`](tun)).
//! - [`raw`]: raw IP sockets (ESP, AH, IPComp as IP protocols).
//! - [`udp`]: the ESP-in-UDP socket (RFC 3948) with UDP GSO/GRO and the peers' endpoints.
//! - [`packet_ring`]: raw ESP/AH/IPComp received through `AF_PACKET` rings fanned out to the
//!   workers; [`packet_tx`]: sent through `AF_PACKET` to the next hop.
//! - [`underlay`]: the traits the loops see the underlay through; [`outer`]: the IP header a
//!   socket took off, put back.
//! - [`sys`]: the system calls the devices share and the interface ioctls;
//!   `rtnetlink`: route, neighbour and tc requests.
//!
//! `unsafe` is allowed in `sys`, `tun`, `udp` (its GSO and GRO files), `packet_ring` and
//! `packet_tx` only, each block with its SAFETY comment.

pub mod outer;
pub mod packet_ring;
pub mod packet_tx;
pub mod raw;
pub(crate) mod rtnetlink;
pub mod sys;
pub mod tun;
pub mod udp;
pub mod underlay;
