//! Typed errors for SA setup and packet processing.
use core::fmt;

/// Every way SA setup or packet processing can fail. Packet errors never panic; each says
/// why the packet was dropped, so a caller can count drops by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// A key has the wrong length for its algorithm.
    KeyLength {
        /// Algorithm name, as `ip xfrm` spells it.
        alg: &'static str,
        /// Expected key length(s) in bytes, as text.
        expected: &'static str,
        /// The length given.
        got: usize,
    },
    /// An ICV length that the algorithm does not allow.
    IcvLength {
        /// Algorithm name.
        alg: &'static str,
        /// The ICV length given, in bits.
        bits: usize,
    },
    /// The SA parameters are inconsistent (the text says how).
    InvalidSa(&'static str),
    /// The replay window size is not a power of two in the supported range.
    ReplayWindowSize(u32),
    /// The outbound sequence number would wrap (RFC 4303 3.3.3): rekey.
    SequenceExhausted,
    /// Sequence number 0 was received; it is never sent (RFC 4303 3.3.3).
    SequenceZero,
    /// The sequence number was already received (RFC 4303 3.4.3).
    Replay,
    /// The sequence number is older than the replay window (RFC 4303 3.4.3).
    TooOld,
    /// The Integrity Check Value does not verify.
    BadIcv,
    /// The padding bytes or pad length are not as RFC 4303 2.4 requires.
    BadPadding,
    /// The packet is shorter than its headers, ICV or block alignment need.
    Truncated,
    /// The ciphertext is not a whole number of cipher blocks.
    BadAlignment,
    /// The SPI does not belong to any SA given.
    UnknownSpi(u32),
    /// The packet does not carry the protocol expected (e.g. no ESP header).
    WrongProtocol(u8),
    /// The IP header is malformed (bad version, lengths or extension header chain).
    MalformedIp,
    /// The inner packet of a tunnel-mode SA is not IPv4 or IPv6 (Next Header not 4 or 41).
    BadInnerProtocol(u8),
    /// Not enough headroom in the caller's buffer.
    NoHeadroom,
    /// Not enough tailroom in the caller's buffer.
    NoTailroom,
    /// The packet would exceed the maximum IP packet size.
    TooBig,
    /// An ESP or AH packet that is an IP fragment: RFC 4303 3.4.1 and RFC 4302 3.4.1 say
    /// reassemble first, and discard fragments that reach IPsec processing.
    Fragment,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::KeyLength { alg, expected, got } => {
                write!(f, "key for {alg} must be {expected} bytes, got {got} bytes")
            }
            Error::IcvLength { alg, bits } => write!(f, "{alg} does not allow an ICV of {bits} bits"),
            Error::InvalidSa(why) => write!(f, "invalid SA: {why}"),
            // 32 and 65536 are `replay::MIN_WINDOW` and `MAX_WINDOW` (a test there holds them
            // together; this module imports nothing of the crate, so nothing imports it back).
            Error::ReplayWindowSize(n) => write!(
                f,
                "replay window {n} unsupported: use 0 (off) or a power of two from 32 to 65536"
            ),
            Error::SequenceExhausted => f.write_str("sequence number space exhausted: the SA must be rekeyed"),
            Error::SequenceZero => f.write_str("sequence number 0 is never valid"),
            Error::Replay => f.write_str("replayed sequence number"),
            Error::TooOld => f.write_str("sequence number left of the replay window"),
            Error::BadIcv => f.write_str("bad ICV"),
            Error::BadPadding => f.write_str("bad padding"),
            Error::Truncated => f.write_str("truncated packet"),
            Error::BadAlignment => f.write_str("ciphertext not a multiple of the cipher block size"),
            Error::UnknownSpi(spi) => write!(f, "unknown SPI 0x{spi:08x}"),
            Error::WrongProtocol(p) => write!(f, "unexpected protocol {p}"),
            Error::MalformedIp => f.write_str("malformed IP header"),
            Error::BadInnerProtocol(p) => write!(f, "tunnel inner next header {p} is not IPv4 (4) or IPv6 (41)"),
            Error::NoHeadroom => f.write_str("not enough headroom in buffer"),
            Error::NoTailroom => f.write_str("not enough tailroom in buffer"),
            Error::TooBig => f.write_str("packet would exceed the maximum IP packet size"),
            Error::Fragment => f.write_str("IP fragment (IPsec processes only whole packets)"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}
