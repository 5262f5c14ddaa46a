//! The EAP packet (RFC 3748 §4): a smoltcp-style view over bytes and a high-level [`Repr`].
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Code      |  Identifier   |            Length             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |  Type-Data ...  (Request and Response only)
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//! Octets past Length are padding and ignored (RFC 3748 §4.1); a Length past the buffer is
//! an error. Success and Failure carry no data (§4.2).

use crate::Error;
use alloc::vec::Vec;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const CODE: usize = 0;
    pub const IDENTIFIER: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const TYPE: usize = 4;
    pub const TYPE_DATA: RangeFrom<usize> = 5..;
}

/// The header length (Code, Identifier, Length).
pub const HEADER_LEN: usize = 4;

/// RFC 3748 §4: the Code field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Request,
    Response,
    Success,
    Failure,
}

impl Code {
    pub fn from_u8(v: u8) -> Result<Code, Error> {
        Ok(match v {
            1 => Code::Request,
            2 => Code::Response,
            3 => Code::Success,
            4 => Code::Failure,
            other => return Err(Error::BadCode(other)),
        })
    }
    pub fn to_u8(self) -> u8 {
        match self {
            Code::Request => 1,
            Code::Response => 2,
            Code::Success => 3,
            Code::Failure => 4,
        }
    }
}

/// RFC 3748 §5 method types (and the IANA numbers of the methods used here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// 1, RFC 3748 §5.1.
    Identity,
    /// 2, RFC 3748 §5.2.
    Notification,
    /// 3, RFC 3748 §5.3.1 (legacy Nak, Response only).
    Nak,
    /// 13, EAP-TLS (RFC 5216); reserved here for later.
    Tls,
    /// 26, EAP-MSCHAPv2 (draft-kamath-pppext-eap-mschapv2-02).
    MsChapV2,
    /// Any other type number (including 254, expanded types).
    Other(u8),
}

impl Type {
    pub fn from_u8(v: u8) -> Type {
        match v {
            1 => Type::Identity,
            2 => Type::Notification,
            3 => Type::Nak,
            13 => Type::Tls,
            26 => Type::MsChapV2,
            other => Type::Other(other),
        }
    }
    pub fn to_u8(self) -> u8 {
        match self {
            Type::Identity => 1,
            Type::Notification => 2,
            Type::Nak => 3,
            Type::Tls => 13,
            Type::MsChapV2 => 26,
            Type::Other(v) => v,
        }
    }
}

/// A read-only (or read-write) view of an EAP packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that every accessor stays in bounds.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Length field within the buffer, at least the header, and at least the Type octet
    /// for a Request or Response (RFC 3748 §4.1).
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.length());
        if len < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if len > b.len() {
            return Err(Error::Truncated);
        }
        if matches!(b[field::CODE], 1 | 2) && len < HEADER_LEN + 1 {
            return Err(Error::BadLength);
        }
        Ok(())
    }

    pub fn code_raw(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    pub fn identifier(&self) -> u8 {
        self.buffer.as_ref()[field::IDENTIFIER]
    }
    pub fn length(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }
    /// The Type octet (Request/Response only; the caller checked the length).
    pub fn type_raw(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// The Type-Data, up to Length (padding excluded).
    pub fn type_data(&self) -> &[u8] {
        let len = usize::from(self.length());
        &self.buffer.as_ref()[field::TYPE_DATA.start..len]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_code(&mut self, c: Code) {
        self.buffer.as_mut()[field::CODE] = c.to_u8();
    }
    pub fn set_identifier(&mut self, v: u8) {
        self.buffer.as_mut()[field::IDENTIFIER] = v;
    }
    pub fn set_length(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_type(&mut self, t: Type) {
        self.buffer.as_mut()[field::TYPE] = t.to_u8();
    }
    pub fn type_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::TYPE_DATA]
    }
}

/// A parsed EAP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub code: Code,
    pub identifier: u8,
    /// The method type and its data (Request and Response); `None` for Success/Failure.
    pub data: Option<(Type, &'a [u8])>,
}

impl<'a> Repr<'a> {
    /// Parses a checked packet. Success and Failure with data are accepted with the data
    /// ignored (RFC 3748 §4.2 says they have none; Length covers only the header then).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &'a Packet<&'a T>) -> Result<Repr<'a>, Error> {
        packet.check_len()?;
        let code = Code::from_u8(packet.code_raw())?;
        let data = match code {
            Code::Request | Code::Response => Some((Type::from_u8(packet.type_raw()), packet.type_data())),
            Code::Success | Code::Failure => None,
        };
        Ok(Repr {
            code,
            identifier: packet.identifier(),
            data,
        })
    }

    /// Parses bytes (a convenience over [`Packet::new_checked`] + [`Repr::parse`]).
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Repr<'a>, Error> {
        let b = bytes.get(..HEADER_LEN).ok_or(Error::Truncated)?;
        let len = usize::from(u16::from_be_bytes([b[2], b[3]]));
        let code = Code::from_u8(b[0])?;
        if len < HEADER_LEN {
            return Err(Error::BadLength);
        }
        let body = bytes.get(..len).ok_or(Error::Truncated)?;
        let data = match code {
            Code::Request | Code::Response => {
                let t = *body.get(4).ok_or(Error::BadLength)?;
                Some((Type::from_u8(t), &body[5..]))
            }
            Code::Success | Code::Failure => None,
        };
        Ok(Repr {
            code,
            identifier: b[1],
            data,
        })
    }

    /// The length [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data.map_or(0, |(_, d)| 1 + d.len())
    }

    /// Writes the packet into the first [`Repr::buffer_len`] bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<(), Error> {
        let len = self.buffer_len();
        if packet.buffer.as_ref().len() < len {
            return Err(Error::BufferTooSmall);
        }
        let len16 = u16::try_from(len).map_err(|_| Error::BufferTooSmall)?;
        packet.set_code(self.code);
        packet.set_identifier(self.identifier);
        packet.set_length(len16);
        if let Some((t, d)) = self.data {
            packet.set_type(t);
            packet.type_data_mut()[..d.len()].copy_from_slice(d);
        }
        Ok(())
    }

    /// Emits into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, Error> {
        let mut v = alloc::vec![0u8; self.buffer_len()];
        self.emit(&mut Packet::new_unchecked(&mut v[..]))?;
        Ok(v)
    }
}

/// An EAP Request or Response of `t` with `data`, as bytes (a value too long for the
/// 16-bit Length is an error).
pub fn build(code: Code, identifier: u8, t: Type, data: &[u8]) -> Result<Vec<u8>, Error> {
    Repr {
        code,
        identifier,
        data: Some((t, data)),
    }
    .to_vec()
}

/// EAP-Success or EAP-Failure (RFC 3748 §4.2).
pub fn build_result(success: bool, identifier: u8) -> Vec<u8> {
    let code = if success { Code::Success } else { Code::Failure };
    alloc::vec![code.to_u8(), identifier, 0, 4]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_request_round_trip() {
        // RFC 3748 §5.1: an Identity Request may carry a displayable message.
        let bytes = build(Code::Request, 7, Type::Identity, b"hello").unwrap();
        assert_eq!(bytes, [1, 7, 0, 10, 1, b'h', b'e', b'l', b'l', b'o']);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r.code, Code::Request);
        assert_eq!(r.identifier, 7);
        assert_eq!(r.data, Some((Type::Identity, &b"hello"[..])));
        assert_eq!(Repr::parse_bytes(&bytes).unwrap(), r);
    }

    #[test]
    fn success_and_padding() {
        let mut bytes = build_result(true, 9);
        bytes.extend_from_slice(&[0xaa, 0xbb]); // padding past Length is ignored
        let r = Repr::parse_bytes(&bytes).unwrap();
        assert_eq!(
            r,
            Repr {
                code: Code::Success,
                identifier: 9,
                data: None
            }
        );
        assert_eq!(r.to_vec().unwrap(), &bytes[..4]);
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        assert_eq!(Repr::parse_bytes(&[1, 2, 0]), Err(Error::Truncated));
        assert_eq!(Repr::parse_bytes(&[1, 2, 0, 3]), Err(Error::BadLength));
        assert_eq!(Repr::parse_bytes(&[1, 2, 0, 4]), Err(Error::BadLength)); // no Type
        assert_eq!(Repr::parse_bytes(&[1, 2, 0, 9, 1]), Err(Error::Truncated));
        assert_eq!(Repr::parse_bytes(&[5, 2, 0, 4]), Err(Error::BadCode(5)));
        assert_eq!(Packet::new_checked(&[2u8, 1, 0, 4][..]).err(), Some(Error::BadLength));
        assert_eq!(Packet::new_checked(&[3u8, 1, 0, 8][..]).err(), Some(Error::Truncated));
        // Every prefix of a valid packet parses or fails cleanly, never panics.
        let ok = build(Code::Response, 1, Type::Nak, &[26]).unwrap();
        for n in 0..ok.len() {
            assert!(Repr::parse_bytes(&ok[..n]).is_err());
            assert!(Packet::new_checked(&ok[..n]).is_err());
        }
    }
}
