//! Typed errors: what was wrong with a message from outside ([`Error`]) and why a command
//! from the caller was refused ([`CommandError`]). No variant carries key material.
use core::fmt;

/// Every way an IKE message, payload or proposal string can be malformed or refused. Parsing
/// never panics; each error names the rule that failed so the caller can count drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// Shorter than a header or than a length field says (RFC 7296 3.1, 3.2).
    Truncated,
    /// A length field is inconsistent with the bytes carried or with its structure.
    BadLength,
    /// The message is larger than [`crate::limits::MAX_MESSAGE_LEN`].
    MessageTooLong,
    /// More payloads than [`crate::limits::MAX_PAYLOADS`].
    TooManyPayloads,
    /// More proposals than [`crate::limits::MAX_PROPOSALS`].
    TooManyProposals,
    /// More transforms than [`crate::limits::MAX_TRANSFORMS`].
    TooManyTransforms,
    /// More traffic selectors than [`crate::limits::MAX_TS`].
    TooManyTs,
    /// More SPIs in a Delete payload than [`crate::limits::MAX_DELETE_SPIS`].
    TooManySpis,
    /// The major version is not 2 (RFC 7296 3.1: answer INVALID_MAJOR_VERSION).
    UnsupportedVersion(u8),
    /// An exchange type this implementation does not handle.
    UnknownExchange(u8),
    /// A payload type we do not know has the critical bit set (RFC 7296 2.5).
    UnsupportedCritical(u8),
    /// A proposal or transform substructure is malformed (RFC 7296 3.3).
    BadProposal,
    /// A traffic selector is malformed (RFC 7296 3.13.1).
    BadTs,
    /// An identification payload is malformed (RFC 7296 3.5).
    BadId,
    /// A notify payload is malformed (RFC 7296 3.10).
    BadNotify,
    /// A delete payload is malformed (RFC 7296 3.11).
    BadDelete,
    /// A nonce is shorter than 16 or longer than 256 bytes (RFC 7296 3.9).
    BadNonce,
    /// A key-exchange value has the wrong length or is not a valid public value.
    BadKeyExchange,
    /// The Encrypted payload is not the last one, or appears where it must not (3.14).
    BadEncryptedPayload,
    /// The integrity check or AEAD tag of an Encrypted payload does not verify.
    BadIntegrity,
    /// The padding of a decrypted Encrypted payload is inconsistent.
    BadPadding,
    /// A payload required by the exchange is missing (the text names it).
    MissingPayload(&'static str),
    /// A payload appears where the exchange does not allow it, or twice.
    UnexpectedPayload(u8),
    /// An algorithm name in a proposal string is not known (the index of the token).
    UnknownAlgorithm,
    /// A proposal string is incomplete or inconsistent (the text says how).
    BadProposalString(&'static str),
    /// A traffic selector or identity string could not be parsed.
    BadSyntax(&'static str),
    /// A buffer given to `emit` is too small.
    BufferTooSmall,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated"),
            Error::BadLength => f.write_str("inconsistent length field"),
            Error::MessageTooLong => f.write_str("message too long"),
            Error::TooManyPayloads => f.write_str("too many payloads"),
            Error::TooManyProposals => f.write_str("too many proposals"),
            Error::TooManyTransforms => f.write_str("too many transforms"),
            Error::TooManyTs => f.write_str("too many traffic selectors"),
            Error::TooManySpis => f.write_str("too many SPIs in a Delete payload"),
            Error::UnsupportedVersion(v) => write!(f, "unsupported IKE major version {v}"),
            Error::UnknownExchange(t) => write!(f, "unknown exchange type {t}"),
            Error::UnsupportedCritical(t) => write!(f, "unsupported critical payload {t}"),
            Error::BadProposal => f.write_str("malformed proposal or transform"),
            Error::BadTs => f.write_str("malformed traffic selector"),
            Error::BadId => f.write_str("malformed identification"),
            Error::BadNotify => f.write_str("malformed notify payload"),
            Error::BadDelete => f.write_str("malformed delete payload"),
            Error::BadNonce => f.write_str("nonce length outside 16..=256"),
            Error::BadKeyExchange => f.write_str("invalid key exchange value"),
            Error::BadEncryptedPayload => f.write_str("misplaced or malformed Encrypted payload"),
            Error::BadIntegrity => f.write_str("integrity check failed"),
            Error::BadPadding => f.write_str("bad padding in Encrypted payload"),
            Error::MissingPayload(p) => write!(f, "missing {p} payload"),
            Error::UnexpectedPayload(t) => write!(f, "unexpected payload type {t}"),
            Error::UnknownAlgorithm => f.write_str("unknown algorithm name"),
            Error::BadProposalString(s) => write!(f, "bad proposal: {s}"),
            Error::BadSyntax(s) => write!(f, "syntax: {s}"),
            Error::BufferTooSmall => f.write_str("buffer too small"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// Why a command ([`crate::Endpoint::initiate`] and friends) was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CommandError {
    /// No connection has that name.
    UnknownConnection,
    /// The connection has no child of that name.
    UnknownChild,
    /// No IKE SA is up or being set up for the connection.
    NotEstablished,
    /// The connection's configuration cannot be used (the text says why).
    BadConfig(&'static str),
    /// More IKE SAs than [`crate::limits::MAX_IKE_SAS`].
    TooManySas,
    /// Not in this part of the implementation (the text says what).
    Unsupported(&'static str),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::UnknownConnection => f.write_str("unknown connection"),
            CommandError::UnknownChild => f.write_str("unknown child"),
            CommandError::NotEstablished => f.write_str("no IKE SA for the connection"),
            CommandError::BadConfig(s) => write!(f, "bad configuration: {s}"),
            CommandError::TooManySas => f.write_str("too many IKE SAs"),
            CommandError::Unsupported(s) => write!(f, "unsupported: {s}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for CommandError {}
