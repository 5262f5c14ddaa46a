//! IP Payload Compression (IPComp, RFC 3173) for the userspace IPsec data plane, with DEFLATE
//! (RFC 2394, CPI 2), LZS (RFC 2395, CPI 3) and LZF (private CPI [`CPI_LZF`] = 61440).
//!
//! `no_std` with `alloc`, sans-IO, no `unsafe`. The default feature `std` adds
//! `std::error::Error` (and `ipsec-core`'s); the codecs and the SA are the same without it.
//!
//! # Example
//!
//! Compress one IPv4 packet with a transport-mode DEFLATE SA and decompress it on the other
//! side; a packet that does not shrink goes out as it was (non-expansion):
//!
//! ```
//! use ipsec_core::ip::{proto, Ipv4Repr};
//! use ipsec_core::PacketBuf;
//! use ipsec_ipcomp::{Algorithm, IpcompConfig, IpcompSa, OpenOutcome, SealOutcome, SkipReason};
//!
//! fn ipv4(payload: &[u8]) -> Vec<u8> {
//!     let mut p = vec![0u8; 20];
//!     Ipv4Repr {
//!         src: "192.0.2.1".parse().unwrap(),
//!         dst: "192.0.2.2".parse().unwrap(),
//!         protocol: proto::UDP,
//!         payload_len: payload.len(),
//!         tos: 0,
//!         ident: 1,
//!         dont_frag: true,
//!         ttl: 64,
//!     }
//!     .emit(&mut p)
//!     .unwrap();
//!     p.extend_from_slice(payload);
//!     p
//! }
//!
//! // Transport mode, CPI 2 (DEFLATE's), Linux's 2 KB window, packets under 90 bytes skipped.
//! let mut sender = IpcompSa::new(IpcompConfig::new(Algorithm::Deflate))?;
//! let mut receiver = IpcompSa::new(IpcompConfig::new(Algorithm::Deflate))?;
//!
//! let text = ipv4(&b"all work and no play makes jack a dull boy. ".repeat(30));
//! // Decompression grows the packet again: the buffer has room behind it.
//! let mut raw = vec![0u8; text.len() + 64];
//! raw[..text.len()].copy_from_slice(&text);
//! let mut buf = PacketBuf::new(&mut raw, 0, text.len())?;
//! let SealOutcome::Compressed { original, compressed } = sender.seal(&mut buf)? else {
//!     panic!("text compresses");
//! };
//! assert_eq!(original, text.len() - 20);
//! assert_eq!(buf.len(), 20 + 4 + compressed, "IPv4 header, IPComp header, DEFLATE stream");
//! assert_eq!(buf.packet()[9], proto::COMP);
//! assert!(buf.len() < text.len() / 4);
//!
//! assert!(matches!(receiver.open(&mut buf)?, OpenOutcome::Decompressed { .. }));
//! assert_eq!(buf.packet(), &text[..], "the round trip gives the packet back");
//!
//! // Bytes that do not compress: sent without an IPComp header, byte for byte.
//! let mut x = 0x2545_f491_u32; // xorshift32
//! let noise: Vec<u8> = (0..600)
//!     .map(|_| {
//!         x ^= x << 13;
//!         x ^= x >> 17;
//!         x ^= x << 5;
//!         x as u8
//!     })
//!     .collect();
//! let random = ipv4(&noise);
//! let mut raw = random.clone();
//! let mut buf = PacketBuf::new(&mut raw, 0, random.len())?;
//! let outcome = sender.seal(&mut buf)?;
//! assert!(matches!(outcome, SealOutcome::NotCompressed(SkipReason::Incompressible { .. })));
//! assert_eq!(buf.packet(), &random[..]);
//! assert_eq!(receiver.open(&mut buf)?, OpenOutcome::NotCompressed);
//! assert_eq!((sender.counters().compressed, sender.counters().skipped_incompressible), (1, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Use
//! An [`IpcompSa`] compresses an outbound packet in place ([`IpcompSa::seal`]) and
//! decompresses an inbound one ([`IpcompSa::open`]), in transport or tunnel mode, IPv4 or
//! IPv6. Ordering with ESP/AH is the caller's job: **compress before ESP/AH on output,
//! decompress after ESP/AH on input**. Every packet is compressed on its own.
//!
//! - Non-expansion: when compressed size + 4 ≥ the original payload, the packet is sent
//!   uncompressed without an IPComp header ([`SealOutcome::NotCompressed`]).
//! - Packets below [`IpcompConfig::min_size`] (default 90 bytes) are not compressed.
//! - Decompressed output is bounded by the IP packet size and [`IpcompConfig::mtu`]
//!   ([`Error::DecompressedTooBig`]).
//! - Adaptive policy: the RFC 3173 back-off ([`Backoff`]) and the McGregor–Lee Complete
//!   model ([`CostModel`]), fed by the caller's measurements. [`Counters`] count each outcome.
//!
//! # Memory
//! The codec state (hash chains, DEFLATE token buffer, inflater) and a 64 KB scratch buffer
//! are allocated when the SA is created. Compression writes into the scratch buffer and is
//! copied back into the [`PacketBuf`](ipsec_core::PacketBuf); nothing is allocated per packet.
//!
//! # DEFLATE and Linux's 2 KB window
//! Linux's IPComp inflates with `windowBits` 11, so a stream whose matches reach back more than
//! 2048 bytes fails there. miniz_oxide's compressor has a fixed 32 KB window, so this crate
//! compresses with its own DEFLATE encoder ([`deflate::DeflateCodec`]): the crate's hash-chain
//! LZ77 parser (lazy matching) with a hard distance limit, then dynamic or fixed Huffman blocks.
//! The setting is [`IpcompConfig::deflate_window`] (default [`deflate::LINUX_WINDOW`] = 2048;
//! up to 32768). Decompression is miniz_oxide's raw inflate (any window up to 32 KB) into a
//! bounded slice. The encoder is the same with and without `std`.
//!
//! # LZS and LZF
//! Both are implemented here ([`lzs`], [`lzf`]): no maintained crate exists for LZS, and the
//! `lzf` crate is deprecated and wraps C; LZF's format is tiny.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod compressor;
pub mod deflate;
pub mod error;
pub mod header;
mod lz77;
pub mod lzf;
pub mod lzs;
pub mod policy;
pub mod sa;

pub use compressor::{Algorithm, Compressor, CPI_DEFLATE, CPI_LZF, CPI_LZS};
pub use error::{DecompressError, Error};
pub use header::{IpcompPacket, IpcompRepr, HEADER_LEN};
pub use policy::{
    Adaptive, AdaptiveMode, AlgorithmStatus, Alternative, Backoff, CostModel, Counters, CryptoOp, LinkEstimator,
    ModelConfig, ModelStatus, Stages, MAX_ALGORITHMS,
};
pub use sa::{
    transport_placement, Codec, Codecs, IpcompConfig, IpcompSa, IpcompState, OpenOutcome, SealOutcome, SharedIpcomp,
    SkipReason, DECOMPRESS_SAMPLE, DEFAULT_MIN_SIZE, OUTER_TTL,
};
