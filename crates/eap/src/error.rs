//! The crate's typed errors. None carries a key, a password or a hash.

use core::fmt;

/// Everything that can go wrong parsing or driving an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Fewer bytes than the header or the Length field says (RFC 3748 §4, RFC 2865 §3).
    Truncated,
    /// A Length field below the minimum of its packet or attribute.
    BadLength,
    /// An EAP Code other than 1-4 (RFC 3748 §4).
    BadCode(u8),
    /// A packet of the right shape whose content breaks the method's rules.
    Malformed(&'static str),
    /// An EAP Identifier that does not match the outstanding request (RFC 3748 §4.1).
    WrongIdentifier { expected: u8, got: u8 },
    /// A message the state machine does not expect now (out of order or duplicate).
    Unexpected(&'static str),
    /// The peer's Nak offered no method the server supports (RFC 3748 §5.3.1).
    NoCommonMethod,
    /// More rounds than the exchange allows (a bound against a peer that never ends it).
    TooManyRounds,
    /// The exchange already ended (success or failure); nothing more is taken.
    Finished,
    /// The server's authenticator response ("S=...") did not verify (RFC 2759 §8.8).
    BadAuthenticatorResponse,
    /// No credentials for the identity (the credentials source said so).
    UnknownIdentity,
    /// A RADIUS answer whose Response Authenticator or Message-Authenticator is wrong
    /// (RFC 2865 §3, RFC 3579 §3.2): dropped.
    BadAuthenticator,
    /// A buffer too small for what is emitted, or a value too large to encode.
    BufferTooSmall,
    /// An EAP-TLS message longer than the reassembly limit (RFC 5216 §3.1, TLS Message
    /// Length; `tls::fragment::MAX_TLS_MESSAGE_LEN`).
    TooLong,
    /// EAP-TLS fragments that do not add up to the TLS Message Length announced (RFC 5216
    /// §3.1).
    LengthMismatch,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated packet"),
            Error::BadLength => f.write_str("bad length field"),
            Error::BadCode(c) => write!(f, "unknown EAP code {c}"),
            Error::Malformed(what) => write!(f, "malformed: {what}"),
            Error::WrongIdentifier { expected, got } => {
                write!(f, "identifier {got} where {expected} was expected")
            }
            Error::Unexpected(what) => write!(f, "unexpected message: {what}"),
            Error::NoCommonMethod => f.write_str("no EAP method in common"),
            Error::TooManyRounds => f.write_str("too many rounds"),
            Error::Finished => f.write_str("exchange already finished"),
            Error::BadAuthenticatorResponse => f.write_str("the server's authenticator response did not verify"),
            Error::UnknownIdentity => f.write_str("no credentials for this identity"),
            Error::BadAuthenticator => f.write_str("bad RADIUS authenticator"),
            Error::BufferTooSmall => f.write_str("buffer too small"),
            Error::TooLong => f.write_str("EAP-TLS message longer than the reassembly limit"),
            Error::LengthMismatch => f.write_str("EAP-TLS fragments do not add up to the TLS Message Length"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}
