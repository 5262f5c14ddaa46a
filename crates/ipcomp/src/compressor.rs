//! The compression algorithms of an IPComp SA, each with its CPI.
use crate::deflate::DeflateCodec;
use crate::error::Error;
use crate::lzf::LzfCodec;
use crate::lzs::LzsCodec;
use alloc::boxed::Box;
use core::fmt;

/// Well-known CPI of DEFLATE (RFC 2394).
pub const CPI_DEFLATE: u16 = 2;
/// Well-known CPI of LZS (RFC 2395).
pub const CPI_LZS: u16 = 3;
/// The CPI this crate uses for LZF, from the private range 61440..=65535 (RFC 3173 3.3):
/// LZF has no IANA number, so both ends must be configured with it.
pub const CPI_LZF: u16 = 61440;

/// A compression algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// DEFLATE (RFC 1951 / RFC 2394), CPI 2.
    Deflate,
    /// LZS (ANSI X3.241 / RFC 2395), CPI 3.
    Lzs,
    /// LZF, CPI [`CPI_LZF`] (private use).
    Lzf,
}

impl Algorithm {
    /// All algorithms.
    pub const ALL: [Algorithm; 3] = [Algorithm::Deflate, Algorithm::Lzs, Algorithm::Lzf];

    /// The algorithm's CPI.
    pub fn cpi(self) -> u16 {
        match self {
            Algorithm::Deflate => CPI_DEFLATE,
            Algorithm::Lzs => CPI_LZS,
            Algorithm::Lzf => CPI_LZF,
        }
    }
    /// The algorithm with this CPI, or [`Error::UnknownCpi`].
    pub fn from_cpi(cpi: u16) -> Result<Self, Error> {
        match cpi {
            CPI_DEFLATE => Ok(Algorithm::Deflate),
            CPI_LZS => Ok(Algorithm::Lzs),
            CPI_LZF => Ok(Algorithm::Lzf),
            _ => Err(Error::UnknownCpi(cpi)),
        }
    }
    /// Name as `ip xfrm` spells it (`deflate`, `lzs`), and `lzf`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Deflate => "deflate",
            Algorithm::Lzs => "lzs",
            Algorithm::Lzf => "lzf",
        }
    }
    /// The algorithm of a name (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Algorithm::ALL.into_iter().find(|a| a.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm with its per-SA state (match-finder tables, inflater), allocated once at SA
/// creation. Compressing or decompressing a packet allocates nothing.
#[derive(Debug)]
pub enum Compressor {
    /// DEFLATE.
    Deflate(Box<DeflateCodec>),
    /// LZS.
    Lzs(Box<LzsCodec>),
    /// LZF.
    Lzf(Box<LzfCodec>),
}

impl Compressor {
    /// The codec of `alg` with default settings (DEFLATE: 2 KB window).
    pub fn new(alg: Algorithm) -> Self {
        match alg {
            Algorithm::Deflate => Compressor::Deflate(Box::default()),
            Algorithm::Lzs => Compressor::Lzs(Box::default()),
            Algorithm::Lzf => Compressor::Lzf(Box::default()),
        }
    }
    /// A DEFLATE codec whose matches reach at most `max_distance` bytes back.
    pub fn deflate_with_window(max_distance: usize) -> Self {
        Compressor::Deflate(Box::new(DeflateCodec::new(max_distance)))
    }
    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Compressor::Deflate(_) => Algorithm::Deflate,
            Compressor::Lzs(_) => Algorithm::Lzs,
            Compressor::Lzf(_) => Algorithm::Lzf,
        }
    }
    /// Compresses `input` into `out`. Returns the compressed length, or `None` when it would
    /// not fit in `out` (size `out` to the largest useful result to stop early).
    pub fn compress(&mut self, input: &[u8], out: &mut [u8]) -> Option<usize> {
        match self {
            Compressor::Deflate(c) => c.compress(input, out),
            Compressor::Lzs(c) => c.compress(input, out),
            Compressor::Lzf(c) => c.compress(input, out),
        }
    }
    /// Decompresses `input` into `out`; producing more than `out.len()` bytes is
    /// [`Error::DecompressedTooBig`].
    pub fn decompress(&mut self, input: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        match self {
            Compressor::Deflate(c) => c.decompress(input, out),
            Compressor::Lzs(c) => c.decompress(input, out),
            Compressor::Lzf(c) => c.decompress(input, out),
        }
    }
}
