//! The RADIUS packet (RFC 2865 §3) and its attributes (§5): a smoltcp-style view, a
//! [`Repr`] with `parse`/`emit`, and a builder.
//!
//! ```text
//! Code (1) | Identifier (1) | Length (2) | Authenticator (16) | Attributes ...
//! Attribute: Type (1) | Length (1, >= 2, covers Type and Length) | Value ...
//! ```
//! Length is 20 to 4096 (RFC 2865 §3); octets past Length are padding and ignored; every
//! attribute must fit exactly inside Length.

use crate::Error;
use alloc::vec::Vec;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const CODE: usize = 0;
    pub const IDENTIFIER: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const AUTHENTICATOR: Range<usize> = 4..20;
    pub const ATTRIBUTES: RangeFrom<usize> = 20..;
}

pub const HEADER_LEN: usize = 20;
pub const MAX_LEN: usize = 4096;
/// The largest attribute value (255 minus Type and Length).
pub const MAX_VALUE_LEN: usize = 253;

/// RFC 2865 §3 codes (the ones EAP pass-through uses; others kept as numbers).
pub mod code {
    pub const ACCESS_REQUEST: u8 = 1;
    pub const ACCESS_ACCEPT: u8 = 2;
    pub const ACCESS_REJECT: u8 = 3;
    pub const ACCESS_CHALLENGE: u8 = 11;
}

/// Attribute types used here (RFC 2865 §5, RFC 3579 §3, RFC 2869 §5.14).
pub mod attr {
    pub const USER_NAME: u8 = 1;
    pub const NAS_IP_ADDRESS: u8 = 4;
    pub const SERVICE_TYPE: u8 = 6;
    pub const FRAMED_MTU: u8 = 12;
    pub const REPLY_MESSAGE: u8 = 18;
    pub const STATE: u8 = 24;
    pub const VENDOR_SPECIFIC: u8 = 26;
    pub const CALLING_STATION_ID: u8 = 31;
    pub const NAS_IDENTIFIER: u8 = 32;
    pub const NAS_PORT_TYPE: u8 = 61;
    pub const EAP_MESSAGE: u8 = 79;
    pub const MESSAGE_AUTHENTICATOR: u8 = 80;
}

/// A view of a RADIUS packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Checks the header and that the attributes tile Length exactly.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.length());
        if !(HEADER_LEN..=MAX_LEN).contains(&len) {
            return Err(Error::BadLength);
        }
        if len > b.len() {
            return Err(Error::Truncated);
        }
        let mut rest = &b[HEADER_LEN..len];
        while !rest.is_empty() {
            if rest.len() < 2 {
                return Err(Error::Truncated);
            }
            let alen = usize::from(rest[1]);
            if alen < 2 {
                return Err(Error::BadLength);
            }
            if alen > rest.len() {
                return Err(Error::Truncated);
            }
            rest = &rest[alen..];
        }
        Ok(())
    }

    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    pub fn identifier(&self) -> u8 {
        self.buffer.as_ref()[field::IDENTIFIER]
    }
    pub fn length(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn authenticator(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::AUTHENTICATOR]);
        a
    }
    /// The attribute bytes, up to Length.
    pub fn attributes(&self) -> &[u8] {
        &self.buffer.as_ref()[field::ATTRIBUTES.start..usize::from(self.length())]
    }
    /// The packet up to Length.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.length())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_authenticator(&mut self, a: &[u8; 16]) {
        self.buffer.as_mut()[field::AUTHENTICATOR].copy_from_slice(a);
    }
}

/// Iterates the (type, value) pairs of checked attribute bytes.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Attributes<'a> {
    type Item = (u8, &'a [u8]);
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let t = *self.rest.first()?;
        let l = usize::from(*self.rest.get(1)?);
        if l < 2 || l > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let v = &self.rest[2..l];
        self.rest = &self.rest[l..];
        Some((t, v))
    }
}

/// A parsed RADIUS packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    pub code: u8,
    pub identifier: u8,
    pub authenticator: [u8; 16],
    /// The attribute bytes (checked to tile exactly).
    pub attributes: &'a [u8],
}

impl<'a> Repr<'a> {
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &'a Packet<&'a T>) -> Result<Repr<'a>, Error> {
        packet.check_len()?;
        Ok(Repr {
            code: packet.code(),
            identifier: packet.identifier(),
            authenticator: packet.authenticator(),
            attributes: packet.attributes(),
        })
    }

    /// The attributes, in order.
    pub fn iter(&self) -> Attributes<'a> {
        Attributes { rest: self.attributes }
    }

    /// The first value of attribute `t`.
    pub fn get(&self, t: u8) -> Option<&'a [u8]> {
        self.iter().find(|(at, _)| *at == t).map(|(_, v)| v)
    }

    /// The concatenated EAP-Message attributes (RFC 3579 §3.1), if any.
    pub fn eap_message(&self) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        for (t, v) in self.iter() {
            if t == attr::EAP_MESSAGE {
                out.get_or_insert_with(Vec::new).extend_from_slice(v);
            }
        }
        out
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.attributes.len()
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<(), Error> {
        let len = self.buffer_len();
        if len > MAX_LEN {
            return Err(Error::BufferTooSmall);
        }
        let b = packet.buffer.as_mut();
        if b.len() < len {
            return Err(Error::BufferTooSmall);
        }
        b[field::CODE] = self.code;
        b[field::IDENTIFIER] = self.identifier;
        b[field::LENGTH].copy_from_slice(&(len as u16).to_be_bytes());
        b[field::AUTHENTICATOR].copy_from_slice(&self.authenticator);
        b[HEADER_LEN..len].copy_from_slice(self.attributes);
        Ok(())
    }
}

/// Builds a packet attribute by attribute; [`Builder::finish`] fixes the Length.
#[derive(Debug, Clone)]
pub struct Builder {
    buf: Vec<u8>,
}

impl Builder {
    pub fn new(code: u8, identifier: u8, authenticator: &[u8; 16]) -> Builder {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&[code, identifier, 0, 0]);
        buf.extend_from_slice(authenticator);
        Builder { buf }
    }

    /// Adds one attribute (a value over 253 octets is an error).
    pub fn attr(&mut self, t: u8, value: &[u8]) -> Result<&mut Builder, Error> {
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::BufferTooSmall);
        }
        if self.buf.len() + 2 + value.len() > MAX_LEN {
            return Err(Error::BufferTooSmall);
        }
        self.buf.push(t);
        self.buf.push((value.len() + 2) as u8);
        self.buf.extend_from_slice(value);
        Ok(self)
    }

    /// Adds `value` as consecutive attributes of at most 253 octets (EAP-Message, RFC 3579
    /// §3.1).
    pub fn fragmented(&mut self, t: u8, value: &[u8]) -> Result<&mut Builder, Error> {
        if value.is_empty() {
            return self.attr(t, value);
        }
        for chunk in value.chunks(MAX_VALUE_LEN) {
            self.attr(t, chunk)?;
        }
        Ok(self)
    }

    /// The finished packet bytes (Length set).
    pub fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u16;
        self.buf[2..4].copy_from_slice(&len.to_be_bytes());
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_parse_fragments() {
        let eap: Vec<u8> = (0..600u16).map(|i| i as u8).collect();
        let mut b = Builder::new(code::ACCESS_REQUEST, 5, &[9; 16]);
        b.attr(attr::USER_NAME, b"alice").unwrap();
        b.fragmented(attr::EAP_MESSAGE, &eap).unwrap();
        let bytes = b.finish();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r.code, 1);
        assert_eq!(r.identifier, 5);
        assert_eq!(r.get(attr::USER_NAME), Some(&b"alice"[..]));
        let lens: Vec<usize> = r
            .iter()
            .filter(|(t, _)| *t == attr::EAP_MESSAGE)
            .map(|(_, v)| v.len())
            .collect();
        assert_eq!(lens, [253, 253, 94]);
        assert_eq!(r.eap_message().unwrap(), eap);
        let mut out = alloc::vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn bad_packets_are_typed_errors() {
        let mut b = Builder::new(code::ACCESS_ACCEPT, 1, &[0; 16]);
        b.attr(attr::STATE, b"xyz").unwrap();
        let ok = b.finish();
        for n in 0..ok.len() {
            assert!(Packet::new_checked(&ok[..n]).is_err());
        }
        let mut bad = ok.clone();
        bad[21] = 1; // attribute length 1
        assert_eq!(Packet::new_checked(&bad[..]).err(), Some(Error::BadLength));
        let mut bad = ok.clone();
        bad[21] = 9; // attribute past Length
        assert_eq!(Packet::new_checked(&bad[..]).err(), Some(Error::Truncated));
        let mut bad = ok.clone();
        bad[3] = 19;
        assert_eq!(Packet::new_checked(&bad[..]).err(), Some(Error::BadLength));
        assert!(Builder::new(1, 1, &[0; 16]).attr(1, &[0; 254]).is_err());
    }
}
