//! The Encrypted Fragment payload SKF (RFC 7383 2.5, type 53): its fields and their checks.
//! Sealing fragments and reassembling them is [`crate::fragment`]'s.
use crate::error::Error;
use crate::header::{HeaderRepr, HEADER_LEN};
use crate::limits::MAX_FRAGMENTS;
use crate::payload::{kind, GenericPayload};
use core::fmt;

/// Field offsets of the Encrypted Fragment payload (2.5), from its generic header.
pub mod field {
    use core::ops::Range;
    /// Next Payload: the first inner payload's type in fragment 1, 0 in the others.
    pub const NEXT_PAYLOAD: usize = 0;
    /// Payload Length.
    pub const LENGTH: Range<usize> = 2..4;
    /// Fragment Number, from 1.
    pub const NUMBER: Range<usize> = 4..6;
    /// Total Fragments.
    pub const TOTAL: Range<usize> = 6..8;
    /// The IV, then the encrypted content and the ICV (as SK's, RFC 7296 3.14).
    pub const IV: usize = 8;
}

/// Bytes of the SKF payload before its IV.
pub const SKF_HEADER_LEN: usize = field::IV;

/// Why a fragment was not used (each is counted; none is fatal, 2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FragmentError {
    /// Fragmentation was not negotiated on this IKE SA (2.3).
    NotNegotiated,
    /// An SKF in IKE_SA_INIT, which is never fragmented (2.5).
    InitExchange,
    /// The SKF payload is malformed (lengths, or it is not the message's only payload).
    Malformed(Error),
    /// Fragment Number 0, Total Fragments 0, or Fragment Number above Total Fragments (2.5).
    BadNumber,
    /// Total Fragments above [`MAX_FRAGMENTS`].
    TooManyFragments,
    /// The fragments so far exceed [`crate::limits::MAX_MESSAGE_LEN`] bytes (before the peer is
    /// authenticated, [`crate::limits::MAX_PREAUTH_MESSAGE_LEN`]).
    TooLong,
    /// A lower Total Fragments than the fragments kept: dropped (2.6).
    StaleTotal,
    /// A fragment already kept.
    Duplicate,
    /// Its ICV does not verify: not from the peer (2.6).
    BadIntegrity,
    /// A fragment other than the first of a request already answered: only fragment 1
    /// makes the response go again (2.6.1).
    NotFirst,
}

impl fmt::Display for FragmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FragmentError::Malformed(e) => write!(f, "malformed fragment: {e}"),
            other => fmt::Debug::fmt(other, f),
        }
    }
}

/// The fields of a received SKF payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentRepr {
    /// Next Payload (meaningful in fragment 1 only).
    pub next_payload: u8,
    /// Fragment Number.
    pub number: u16,
    /// Total Fragments.
    pub total: u16,
    /// Offset of the IV in the message.
    pub iv_at: usize,
}

impl FragmentRepr {
    /// The SKF of a whole message `raw` whose header `h` names it as the first payload (the
    /// encrypted messages here carry no unencrypted payload before it). Checks lengths and
    /// numbers (2.5) but not the ICV.
    pub fn parse(raw: &[u8], h: &HeaderRepr) -> Result<Self, FragmentError> {
        if h.next_payload != kind::SKF {
            return Err(FragmentError::Malformed(Error::BadEncryptedPayload));
        }
        let body = raw
            .get(HEADER_LEN..)
            .ok_or(FragmentError::Malformed(Error::Truncated))?;
        let p = GenericPayload::new_checked(body).map_err(FragmentError::Malformed)?;
        let len = p.payload_len() as usize;
        // The SKF is the last payload (2.5) and here the only one.
        if len != body.len() || len < SKF_HEADER_LEN {
            return Err(FragmentError::Malformed(Error::BadLength));
        }
        let number = u16::from_be_bytes([body[field::NUMBER.start], body[field::NUMBER.start + 1]]);
        let total = u16::from_be_bytes([body[field::TOTAL.start], body[field::TOTAL.start + 1]]);
        if number == 0 || total == 0 || number > total {
            return Err(FragmentError::BadNumber);
        }
        if total as usize > MAX_FRAGMENTS {
            return Err(FragmentError::TooManyFragments);
        }
        Ok(FragmentRepr {
            next_payload: p.next_payload(),
            number,
            total,
            iv_at: HEADER_LEN + field::IV,
        })
    }
}
