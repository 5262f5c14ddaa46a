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
