//! IP Authentication Header (RFC 4302), in place on a caller's buffer and sans-IO.
//!
//! An [`AhSa`] is made once from [`SaParams`](ipsec_core::SaParams): the HMAC key is expanded
//! then, never per packet. [`AhSa::seal`] inserts AH into an IP packet (transport mode) or
//! wraps the packet in an outer header and AH (tunnel mode), IPv4 or IPv6; [`AhSa::open`]
//! checks the replay window, verifies the ICV in constant time, and only then updates the
//! window and removes AH. A packet that fails is left untouched. Nothing allocates per packet:
//! the zeroed copy of the IP header the ICV needs lives in a stack buffer of
//! [`MAX_ICV_HEADER`] bytes.
//!
//! The ICV covers the IP header with its mutable fields zeroed ([`mutable_fields`], with
//! [`ipv4_options`] and [`ipv6_ext`] for options and extension headers), the AH header with a
//! zero ICV, and the payload; with ESN, then the high 32 bits of the sequence number.
//!
//! # Example
//!
//! Authenticate one IPv4 packet with a transport-mode HMAC-SHA-256-128 SA; the receiver
//! accepts it although a router lowered its TTL on the way (a mutable field), and refuses it
//! once a byte of the payload changes:
//!
//! ```
//! use ipsec_ah::AhSa;
//! use ipsec_core::ip::{self, ipv4_field, proto, Ipv4Repr};
//! use ipsec_core::sa::{Keyed, Proto};
//! use ipsec_core::{Error, IntegAlg, PacketBuf, SaParams};
//!
//! let mut params = SaParams::new(Proto::Ah, 0x2000); // transport mode by default
//! params.integ = Some(Keyed::new(IntegAlg::HmacSha256, &[0x24; 32], 16));
//! let mut sender = AhSa::new(&params)?; // the HMAC key is expanded here, once
//! let mut receiver = AhSa::new(&params)?;
//!
//! let mut packet = vec![0u8; 20 + 64];
//! Ipv4Repr {
//!     src: "192.0.2.1".parse()?,
//!     dst: "192.0.2.2".parse()?,
//!     protocol: proto::UDP,
//!     payload_len: 64,
//!     tos: 0,
//!     ident: 1,
//!     dont_frag: false,
//!     ttl: 64,
//! }
//! .emit(&mut packet)?;
//!
//! // The caller's buffer, with the headroom AH needs in front of the packet.
//! let room = sender.room();
//! let mut raw = vec![0u8; room.headroom + packet.len() + room.tailroom];
//! raw[room.headroom..][..packet.len()].copy_from_slice(&packet);
//! let mut buf = PacketBuf::new(&mut raw, room.headroom, packet.len())?;
//! assert_eq!(sender.seal(&mut buf)?, 1);
//! assert_eq!(buf.packet()[ipv4_field::PROTOCOL], proto::AH);
//! assert_eq!(buf.len(), packet.len() + 12 + 16, "AH's fixed part and the 16-byte ICV");
//!
//! // In transit a router decrements the TTL (and fixes the header checksum).
//! buf.packet_mut()[ipv4_field::TTL] -= 1;
//! ip::fix_length(buf.packet_mut())?;
//! let opened = receiver.open(&mut buf)?;
//! assert_eq!((opened.seq, opened.next_header), (1, proto::UDP));
//! assert_eq!(&buf.packet()[20..], &packet[20..], "AH removed, payload as sent");
//!
//! // Sealed again (sequence number 2), one payload byte changed: the ICV no longer matches.
//! let mut raw = vec![0u8; room.headroom + packet.len()];
//! raw[room.headroom..].copy_from_slice(&packet);
//! let mut buf = PacketBuf::new(&mut raw, room.headroom, packet.len())?;
//! sender.seal(&mut buf)?;
//! let last = buf.len() - 1;
//! buf.packet_mut()[last] ^= 1;
//! assert_eq!(receiver.open(&mut buf).unwrap_err(), Error::BadIcv);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Where scapy 2.6 (`scapy.layers.ipsec`) differs from RFC 4302, this crate follows the RFC:
//! - IPv4 fragment offset: zeroed here (section 3.3.3.1.1.1); scapy zeroes only the flags.
//!   AH never covers fragments, so the offset is 0 at both ends and the ICVs agree.
//! - IPv4 options: matched here on the whole option-type octet as Appendix A.1 lists them;
//!   scapy matches only the 5-bit option number (so, e.g., type 0x02 counts as Security).
//! - IPv4 Loose/Strict Source Route: the sender's ICV here uses the final destination (the
//!   last route address) as destination address (section 3.3.3.1.1.1); scapy uses the
//!   header's destination.
//! - IPv6 Routing header with Segments Left smaller than the number of addresses: the ICV
//!   here sees the header as it will be at the destination (Appendix A.2, as Linux); scapy
//!   rotates the whole address list regardless of Segments Left. With Segments Left equal to
//!   the number of addresses (a fresh packet) both agree. scapy also does not rearrange on
//!   receipt, which is right at the final destination (Segments Left 0) and is what this
//!   crate's rearrangement reduces to there.
//!
//! # Features and `no_std`
//!
//! The crate is `no_std` (with `alloc`, which `ipsec-core` needs for the zeroized key buffers)
//! and forbids `unsafe`. The default feature `std` only turns on `ipsec-core`'s (the OS
//! entropy source and `std::error::Error` for [`Error`](ipsec_core::Error)); AH itself draws
//! no random numbers.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ipv4_options;
pub mod ipv6_ext;
pub mod mutable_fields;
pub mod sa;
pub mod wire;

pub use mutable_fields::MAX_ICV_HEADER;
pub use sa::{Ah, AhSa, Opened, Room};
pub use wire::{AhPacket, AhRepr};
