//! Why a received datagram was not used: the endpoint's and the tasks' common verdict on
//! input they drop (counted by the caller; none is fatal).
use crate::error::Error;
use core::fmt;

/// Why a received datagram was not used (count these; none is fatal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dropped {
    /// Malformed, or failed its integrity check.
    Malformed(Error),
    /// On the NAT-T port without the non-ESP marker: ESP, for the data plane.
    NotIke,
    /// A NAT-keepalive (RFC 3948 2.3).
    Keepalive,
    /// No IKE SA has this SPI.
    UnknownSpi,
    /// A response to no outstanding request.
    UnexpectedResponse,
    /// A request outside the window (2.3).
    OutOfWindow,
    /// The I flag names the wrong side.
    WrongRole,
    /// Not expected in the SA's state.
    WrongState,
    /// IKE_SA_INIT answered with NO_PROPOSAL_CHOSEN.
    NoProposal,
    /// IKE_SA_INIT answered with INVALID_KE_PAYLOAD.
    InvalidKe,
    /// Too many IKE SAs.
    TooManySas,
    /// Authenticated, but its payloads are malformed: answered with INVALID_SYNTAX (or
    /// UNSUPPORTED_CRITICAL_PAYLOAD) when it was a request (RFC 7296 2.21.3, 3.10.1).
    InvalidSyntax(Error),
    /// An IKE fragment not used (RFC 7383 2.6; [`crate::fragment`]).
    Fragment(crate::fragment::FragmentError),
    /// A new IKE_SA_INIT without a valid cookie while cookies are required: answered with
    /// N(COOKIE), no state kept (2.6, [`crate::cookie`]).
    CookieRequired,
    /// A new IKE_SA_INIT from a source with `half_open_per_source` half-open SAs already.
    HalfOpenPerSource,
    /// A new IKE_SA_INIT while `half_open_max` SAs are half-open.
    HalfOpenLimit,
    /// A new IKE_SA_INIT longer than [`crate::limits::MAX_INIT_LEN`].
    TooLarge,
}

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dropped::Malformed(e) => write!(f, "malformed: {e}"),
            Dropped::InvalidSyntax(e) => write!(f, "authenticated but malformed (answered INVALID_SYNTAX): {e}"),
            Dropped::Fragment(e) => write!(f, "IKE fragment: {e}"),
            other => fmt::Debug::fmt(other, f),
        }
    }
}
