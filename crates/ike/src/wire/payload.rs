//! The generic payload header (RFC 7296 section 3.2) and the payload chain: each payload
//! names the type of the next one; a chain is walked with a bound on its length.
use crate::error::Error;
use crate::limits::MAX_PAYLOADS;

/// Field offsets of the generic payload header.
pub mod field {
    use core::ops::Range;
    /// Next Payload.
    pub const NEXT_PAYLOAD: usize = 0;
    /// Critical bit (high bit) and reserved bits.
    pub const CRITICAL: usize = 1;
    /// Payload Length, header included.
    pub const LENGTH: Range<usize> = 2..4;
    /// Start of the payload's body.
    pub const BODY: usize = 4;
}

/// Length of the generic payload header.
pub const GENERIC_HEADER_LEN: usize = 4;

/// Payload types (RFC 7296 3.2, IANA "IKEv2 Payload Types").
pub mod kind {
    /// No Next Payload.
    pub const NONE: u8 = 0;
    /// Security Association.
    pub const SA: u8 = 33;
    /// Key Exchange.
    pub const KE: u8 = 34;
    /// Identification - Initiator.
    pub const IDI: u8 = 35;
    /// Identification - Responder.
    pub const IDR: u8 = 36;
    /// Certificate.
    pub const CERT: u8 = 37;
    /// Certificate Request.
    pub const CERTREQ: u8 = 38;
    /// Authentication.
    pub const AUTH: u8 = 39;
    /// Nonce.
    pub const NONCE: u8 = 40;
    /// Notify.
    pub const NOTIFY: u8 = 41;
    /// Delete.
    pub const DELETE: u8 = 42;
    /// Vendor ID.
    pub const VENDOR: u8 = 43;
    /// Traffic Selector - Initiator.
    pub const TSI: u8 = 44;
    /// Traffic Selector - Responder.
    pub const TSR: u8 = 45;
    /// Encrypted and Authenticated.
    pub const SK: u8 = 46;
    /// Configuration.
    pub const CP: u8 = 47;
    /// Extensible Authentication.
    pub const EAP: u8 = 48;
    /// Encrypted and Authenticated Fragment (RFC 7383).
    pub const SKF: u8 = 53;
}

/// A view of one payload at the start of a buffer.
#[derive(Debug, Clone)]
pub struct GenericPayload<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GenericPayload<T> {
    /// Wraps a buffer without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        GenericPayload { buffer }
    }
    /// Wraps a buffer and checks the generic header and that Payload Length fits.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the header is present and 4 <= Payload Length <= the buffer.
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < GENERIC_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = self.payload_len() as usize;
        if len < GENERIC_HEADER_LEN {
            return Err(Error::BadLength);
        }
        if len > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    /// Next Payload type.
    pub fn next_payload(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_PAYLOAD]
    }
    /// Critical bit.
    pub fn critical(&self) -> bool {
        self.buffer.as_ref()[field::CRITICAL] & 0x80 != 0
    }
    /// Payload Length (header included).
    pub fn payload_len(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }
    /// The body (after the generic header, up to Payload Length).
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[field::BODY..self.payload_len() as usize]
    }
}

/// Writes a generic payload header.
pub fn emit_generic_header(buf: &mut [u8], next: u8, critical: bool, len: usize) -> Result<(), Error> {
    let len = u16::try_from(len).map_err(|_| Error::BadLength)?;
    let b = buf.get_mut(..GENERIC_HEADER_LEN).ok_or(Error::BufferTooSmall)?;
    b[0] = next;
    b[1] = if critical { 0x80 } else { 0 };
    b[2..4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// One payload of a chain, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawPayload<'a> {
    /// Its type (from the previous payload's Next Payload, or the header's).
    pub kind: u8,
    /// Critical bit.
    pub critical: bool,
    /// Its body.
    pub body: &'a [u8],
    /// Offset of its generic header in the chain buffer.
    pub offset: usize,
}

/// Walks a payload chain. Stops at Next Payload 0; the chain must end exactly at the end of
/// the buffer, except that the Encrypted payload (46) ends the walk (RFC 7296 3.14: it is
/// the last payload and its Next Payload names the first inner one), and so does the
/// Encrypted Fragment payload (53, RFC 7383 2.5).
#[derive(Debug, Clone)]
pub struct PayloadIter<'a> {
    data: &'a [u8],
    pos: usize,
    next: u8,
    count: usize,
    done: bool,
}

impl<'a> PayloadIter<'a> {
    /// A chain in `data` whose first payload has type `first`.
    pub fn new(data: &'a [u8], first: u8) -> Self {
        PayloadIter {
            data,
            pos: 0,
            next: first,
            count: 0,
            done: false,
        }
    }
}

impl<'a> Iterator for PayloadIter<'a> {
    type Item = Result<RawPayload<'a>, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.next == kind::NONE {
            self.done = true;
            if self.pos != self.data.len() {
                return Some(Err(Error::BadLength));
            }
            return None;
        }
        self.count += 1;
        if self.count > MAX_PAYLOADS {
            self.done = true;
            return Some(Err(Error::TooManyPayloads));
        }
        let rest = &self.data[self.pos..];
        let p = match GenericPayload::new_checked(rest) {
            Ok(p) => p,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        let len = p.payload_len() as usize;
        let kind = self.next;
        let item = RawPayload {
            kind,
            critical: p.critical(),
            body: &rest[GENERIC_HEADER_LEN..len],
            offset: self.pos,
        };
        self.pos += len;
        self.next = p.next_payload();
        if kind == kind::SK || kind == kind::SKF {
            // The Encrypted (and Encrypted Fragment, RFC 7383 2.5) payload is last; its Next
            // Payload is the first inner payload.
            self.done = true;
            if self.pos != self.data.len() {
                return Some(Err(Error::BadEncryptedPayload));
            }
        }
        Some(Ok(item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn walks_a_chain_and_rejects_bad_lengths() {
        // Nonce (40) of 4 bytes, then Notify (41) of 0 bytes body.
        let chain = [41, 0, 0, 8, 1, 2, 3, 4, 0, 0x80, 0, 4];
        let v: Vec<_> = PayloadIter::new(&chain, 40).collect::<Result<_, _>>().unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].kind, 40);
        assert_eq!(v[0].body, &[1, 2, 3, 4]);
        assert_eq!(v[1].kind, 41);
        assert!(v[1].critical);
        // Length past the end.
        let bad = [0, 0, 0, 9, 1, 2, 3, 4];
        assert_eq!(PayloadIter::new(&bad, 40).next(), Some(Err(Error::Truncated)));
        // Length below the header.
        let bad = [0, 0, 0, 3];
        assert_eq!(PayloadIter::new(&bad, 40).next(), Some(Err(Error::BadLength)));
        // Trailing bytes after the last payload.
        let bad = [0, 0, 0, 4, 9];
        let r: Result<Vec<_>, _> = PayloadIter::new(&bad, 40).collect();
        assert_eq!(r, Err(Error::BadLength));
        // A loop of empty payloads is bounded.
        let many = [41u8, 0, 0, 4].repeat(100);
        let r: Result<Vec<_>, _> = PayloadIter::new(&many, 41).collect();
        assert_eq!(r, Err(Error::TooManyPayloads));
    }
}
