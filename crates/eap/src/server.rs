//! What the IKE responder drives (RFC 7296 §2.16): an EAP authenticator that asks the
//! peer's identity (RFC 3748 §5.1), then runs EAP-MSCHAPv2 itself or passes the
//! conversation to a RADIUS server (RFC 3579, [`crate::radius::client`]).
//!
//! Every call answers with a [`Step`]: bytes for the next IKE_AUTH response's EAP payload,
//! `Pending` (wait for the RADIUS server: feed its datagrams, poll its timeout), or the end,
//! Success with the MSK for the AUTH payload or Failure with a reason, each with the
//! EAP-Success/Failure packet to send.

use crate::Msk;
use alloc::vec::Vec;

/// Why an exchange failed (for the caller's log and counters; the peer only sees
/// EAP-Failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// The NT-Response did not match the stored password.
    WrongPassword,
    /// No credentials for the identity.
    UnknownIdentity,
    /// The peer Nak'ed the method and offered nothing the server has.
    NoCommonMethod,
    /// The peer gave up (an EAP Response the method reads as refusal).
    PeerFailed,
    /// The RADIUS server answered Access-Reject.
    RadiusReject,
    /// The RADIUS server did not answer (after every retransmission), or every answer
    /// failed its authenticator check.
    RadiusServerDown,
    /// More rounds than allowed.
    TooManyRounds,
}

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this EAP packet to the peer (an EAP payload of the next IKE_AUTH response).
    Send(Vec<u8>),
    /// Waiting for the RADIUS server; nothing for the peer yet.
    Pending,
    /// Authenticated: the MSK for the AUTH payload, and the EAP-Success to send.
    Success { msk: Msk, eap: Vec<u8> },
    /// Not authenticated: why, and the EAP-Failure to send.
    Failure { reason: FailureReason, eap: Vec<u8> },
}
