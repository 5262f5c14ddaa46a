//! Typed errors of IPComp processing.
use core::fmt;

/// Why compressed data could not be decompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecompressError {
    /// The input ended in the middle of a token.
    Truncated,
    /// A back reference with offset 0 (LZS: an 11-bit offset of 0; only the 7-bit 0 is the end marker).
    OffsetZero,
    /// A back reference to before the start of the output.
    OffsetBeyondOutput,
    /// LZS: the input ends without the end marker.
    MissingEndMarker,
    /// Non-zero padding bits or bytes after the end of the compressed data.
    TrailingData,
    /// The DEFLATE stream is invalid (bad block type, Huffman table, symbol or distance).
    InvalidDeflate,
    /// The DEFLATE stream ends before its final block does.
    DeflateTruncated,
}

impl fmt::Display for DecompressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecompressError::Truncated => "compressed data truncated",
            DecompressError::OffsetZero => "back reference with offset 0",
            DecompressError::OffsetBeyondOutput => "back reference before the start of the output",
            DecompressError::MissingEndMarker => "LZS end marker missing",
            DecompressError::TrailingData => "data after the end of the compressed stream",
            DecompressError::InvalidDeflate => "invalid DEFLATE stream",
            DecompressError::DeflateTruncated => "DEFLATE stream ends before its final block",
        })
    }
}

/// Every way IPComp processing can fail. Nothing panics on packet input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The IPComp header or what it carries is malformed (the text says how).
    Malformed(&'static str),
    /// The CPI in the packet is not the SA's.
    UnknownCpi(u16),
    /// The compressed payload does not decompress.
    Decompress(DecompressError),
    /// The decompressed data would exceed the bound (65535-byte IP packet or the configured MTU).
    DecompressedTooBig,
    /// An error from the shared IP and buffer code.
    Core(ipsec_core::Error),
    /// The caller passed a codec of another algorithm (or DEFLATE window) than the SA's.
    WrongCodec,
}

impl From<ipsec_core::Error> for Error {
    fn from(e: ipsec_core::Error) -> Self {
        Error::Core(e)
    }
}

impl From<DecompressError> for Error {
    fn from(e: DecompressError) -> Self {
        Error::Decompress(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Malformed(why) => write!(f, "malformed IPComp packet: {why}"),
            Error::UnknownCpi(cpi) => write!(f, "unknown CPI {cpi}"),
            Error::Decompress(e) => write!(f, "decompression failed: {e}"),
            Error::DecompressedTooBig => f.write_str("decompressed packet would exceed the size limit"),
            Error::Core(e) => fmt::Display::fmt(e, f),
            Error::WrongCodec => f.write_str("the codec is not of the SA's algorithm"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}
#[cfg(feature = "std")]
impl std::error::Error for DecompressError {}
