//! IP Payload Compression (IPComp, RFC 3173) for the userspace IPsec data plane, with DEFLATE
//! (RFC 2394, CPI 2), LZS (RFC 2395, CPI 3) and LZF (private CPI [`CPI_LZF`] = 61440).
//!
//! `no_std` with `alloc`, sans-IO, no `unsafe`. Feature `std` adds `std::error::Error`.
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
    Adaptive, AdaptiveMode, Backoff, CostModel, Counters, CryptoOp, LinkEstimator, ModelConfig, ModelStatus, Stages,
};
pub use sa::{
    transport_placement, Codec, IpcompConfig, IpcompSa, IpcompState, OpenOutcome, SealOutcome, SharedIpcomp,
    SkipReason, DECOMPRESS_SAMPLE, DEFAULT_MIN_SIZE, OUTER_TTL,
};
