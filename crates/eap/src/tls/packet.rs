//! The EAP-TLS packet (RFC 5216 §3.1 Request, §3.2 Response; the same format for TLS 1.3,
//! RFC 9190 §2): an EAP Request or Response of Type 13 whose Type-Data is a Flags octet,
//! the TLS Message Length when the L flag is set, and TLS data.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Code      |   Identifier  |            Length             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Flags     |      TLS Message Length
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     TLS Message Length        |       TLS Data...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! Flags: L M S R R R R R   (L = Length included, M = More fragments, S = EAP-TLS start)
//! ```
//!
//! The reserved bits are sent as zero and ignored on receipt (§3.1). A Flags octet missing,
//! or a TLS Message Length cut short, is a typed error.

use crate::packet::{self as eap, Code, Type};
use crate::Error;
use alloc::vec::Vec;

mod field {
    use core::ops::{Range, RangeFrom};
    /// Offsets inside the EAP Type-Data.
    pub const FLAGS: usize = 0;
    pub const TLS_MESSAGE_LENGTH: Range<usize> = 1..5;
    pub const DATA_WITHOUT_LENGTH: RangeFrom<usize> = 1..;
    pub const DATA_WITH_LENGTH: RangeFrom<usize> = 5..;
}

/// RFC 5216 §3.1: the L flag (the TLS Message Length field is present).
pub const FLAG_LENGTH: u8 = 0x80;
/// RFC 5216 §3.1: the M flag (more fragments follow).
pub const FLAG_MORE: u8 = 0x40;
/// RFC 5216 §3.1: the S flag (EAP-TLS Start, in a Request only).
pub const FLAG_START: u8 = 0x20;

/// The EAP-TLS flags (RFC 5216 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags {
    /// L: the TLS Message Length is included.
    pub length: bool,
    /// M: more fragments of this TLS message follow.
    pub more: bool,
    /// S: EAP-TLS Start.
    pub start: bool,
}

impl Flags {
    /// From the Flags octet (the reserved bits ignored, §3.1).
    pub fn from_u8(v: u8) -> Flags {
        Flags {
            length: v & FLAG_LENGTH != 0,
            more: v & FLAG_MORE != 0,
            start: v & FLAG_START != 0,
        }
    }
    /// The Flags octet (reserved bits zero).
    pub fn to_u8(self) -> u8 {
        (if self.length { FLAG_LENGTH } else { 0 })
            | (if self.more { FLAG_MORE } else { 0 })
            | (if self.start { FLAG_START } else { 0 })
    }
}

/// A view of the Type-Data of an EAP-TLS packet (Flags onwards).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps the Type-Data without checking it.
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps the Type-Data and checks that the Flags octet and, with L, the four octets of
    /// the TLS Message Length are there.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// See [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        let Some(&flags) = b.get(field::FLAGS) else {
            return Err(Error::Malformed("EAP-TLS packet without its Flags octet"));
        };
        if Flags::from_u8(flags).length && b.len() < field::TLS_MESSAGE_LENGTH.end {
            return Err(Error::Malformed("L flag set but the TLS Message Length is cut short"));
        }
        Ok(())
    }

    pub fn flags(&self) -> Flags {
        Flags::from_u8(self.buffer.as_ref()[field::FLAGS])
    }

    /// The TLS Message Length (L flag set).
    pub fn tls_message_length(&self) -> Option<u32> {
        let b = self.buffer.as_ref();
        self.flags().length.then(|| {
            let l = &b[field::TLS_MESSAGE_LENGTH];
            u32::from_be_bytes([l[0], l[1], l[2], l[3]])
        })
    }

    /// The TLS data of this fragment.
    pub fn data(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        if self.flags().length {
            &b[field::DATA_WITH_LENGTH]
        } else {
            &b[field::DATA_WITHOUT_LENGTH]
        }
    }
}

/// A parsed EAP-TLS packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Request (server to peer) or Response.
    pub code: Code,
    pub identifier: u8,
    pub flags: Flags,
    /// The TLS Message Length (present when `flags.length`).
    pub tls_message_length: Option<u32>,
    /// The TLS data of this fragment (empty in a Start and in an ACK).
    pub data: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a whole EAP packet that must be an EAP-TLS Request or Response.
    pub fn parse_eap(bytes: &'a [u8]) -> Result<Repr<'a>, Error> {
        let eap = eap::Repr::parse_bytes(bytes)?;
        let Some((t, type_data)) = eap.data else {
            return Err(Error::Unexpected("EAP Success/Failure where EAP-TLS was expected"));
        };
        if t != Type::Tls {
            return Err(Error::Unexpected("not an EAP-TLS packet"));
        }
        Self::parse(eap.code, eap.identifier, type_data)
    }

    /// Parses the Type-Data of an EAP-TLS packet of `code` and `identifier`.
    pub fn parse(code: Code, identifier: u8, type_data: &'a [u8]) -> Result<Repr<'a>, Error> {
        let p = Packet::new_checked(type_data)?;
        let flags = p.flags();
        let tls_message_length = p.tls_message_length();
        let data = &type_data[type_data.len() - p.data().len()..];
        if tls_message_length.is_some_and(|l| (l as usize) < data.len()) {
            return Err(Error::LengthMismatch);
        }
        Ok(Repr {
            code,
            identifier,
            flags,
            tls_message_length,
            data,
        })
    }

    /// Whether this is an empty packet without L, M or S: the ACK of a fragment (§3.1, "an
    /// EAP-TLS Response/Request packet with no data").
    pub fn is_ack(&self) -> bool {
        self.data.is_empty() && !self.flags.more && !self.flags.start && self.tls_message_length.is_none()
    }

    /// The whole EAP packet (a fragment too large for the 16-bit EAP Length is an error).
    pub fn to_vec(&self) -> Result<Vec<u8>, Error> {
        let mut flags = self.flags;
        flags.length = self.tls_message_length.is_some();
        let mut td = Vec::with_capacity(5 + self.data.len());
        td.push(flags.to_u8());
        if let Some(l) = self.tls_message_length {
            td.extend_from_slice(&l.to_be_bytes());
        }
        td.extend_from_slice(self.data);
        eap::build(self.code, self.identifier, Type::Tls, &td)
    }
}

/// An empty EAP-TLS packet: the Start (Request with S, §3.1) or an ACK (no flags, no data).
pub fn build_empty(code: Code, identifier: u8, start: bool) -> Vec<u8> {
    let flags = Flags {
        start,
        ..Flags::default()
    };
    alloc::vec![code.to_u8(), identifier, 0, 6, Type::Tls.to_u8(), flags.to_u8()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_and_ack() {
        // RFC 5216 §3.1: the Start is a Request of Type 13 with only the S flag.
        let s = build_empty(Code::Request, 5, true);
        assert_eq!(s, [1, 5, 0, 6, 13, 0x20]);
        let r = Repr::parse_eap(&s).unwrap();
        assert!(r.flags.start && !r.is_ack());
        let a = build_empty(Code::Response, 5, false);
        assert!(Repr::parse_eap(&a).unwrap().is_ack());
    }

    #[test]
    fn first_fragment_round_trip() {
        let r = Repr {
            code: Code::Response,
            identifier: 9,
            flags: Flags {
                length: true,
                more: true,
                start: false,
            },
            tls_message_length: Some(300),
            data: &[0x16, 3, 3],
        };
        let v = r.to_vec().unwrap();
        assert_eq!(v, [2, 9, 0, 13, 13, 0xc0, 0, 0, 1, 44, 0x16, 3, 3]);
        assert_eq!(Repr::parse_eap(&v).unwrap(), r);
    }

    #[test]
    fn malformed_are_typed_errors() {
        // No Flags octet.
        assert!(matches!(Repr::parse_eap(&[2, 1, 0, 5, 13]), Err(Error::Malformed(_))));
        // L set, the length cut short.
        assert!(matches!(
            Repr::parse_eap(&[2, 1, 0, 8, 13, 0x80, 0, 0]),
            Err(Error::Malformed(_))
        ));
        // A TLS Message Length below this fragment's data.
        assert_eq!(
            Repr::parse_eap(&[2, 1, 0, 12, 13, 0x80, 0, 0, 0, 1, 0x16, 3]),
            Err(Error::LengthMismatch)
        );
        // Another method.
        assert!(matches!(
            Repr::parse_eap(&[2, 1, 0, 6, 26, 0]),
            Err(Error::Unexpected(_))
        ));
        // Every prefix of a valid packet fails cleanly.
        let ok = [2u8, 9, 0, 13, 13, 0xc0, 0, 0, 1, 44, 0x16, 3, 3];
        for n in 0..ok.len() {
            assert!(Repr::parse_eap(&ok[..n]).is_err());
        }
    }
}
