//! The IPComp header (RFC 3173 section 2.2), smoltcp style.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Next Header  |     Flags     |            CPI                |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
use crate::error::Error;

/// Field offsets of the IPComp header.
pub mod field {
    use core::ops::Range;
    /// Next Header: the protocol of the compressed data.
    pub const NEXT_HEADER: usize = 0;
    /// Flags: reserved, sent as 0 and ignored on receipt.
    pub const FLAGS: usize = 1;
    /// Compression Parameter Index.
    pub const CPI: Range<usize> = 2..4;
    /// Where the compressed payload starts.
    pub const PAYLOAD: usize = 4;
}

/// Length of the IPComp header.
pub const HEADER_LEN: usize = 4;

/// A view of an IPComp header followed by its compressed payload.
#[derive(Debug, Clone)]
pub struct IpcompPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IpcompPacket<T> {
    /// Wraps a buffer without checks; accessors may panic if it is shorter than 4 bytes.
    pub fn new_unchecked(buffer: T) -> Self {
        IpcompPacket { buffer }
    }
    /// Wraps a buffer and checks it with [`IpcompPacket::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks that the buffer holds the whole header.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Malformed("shorter than the 4-byte IPComp header"));
        }
        Ok(())
    }
    /// Consumes the view.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Next Header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Flags (reserved).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Compression Parameter Index.
    pub fn cpi(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::CPI.start], b[field::CPI.start + 1]])
    }
    /// The compressed payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IpcompPacket<T> {
    /// Sets Next Header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }
    /// Sets Flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets the CPI.
    pub fn set_cpi(&mut self, v: u16) {
        self.buffer.as_mut()[field::CPI].copy_from_slice(&v.to_be_bytes());
    }
    /// The compressed payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// The parsed IPComp header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcompRepr {
    /// Protocol of the compressed data (the upper layer, or 4/41 in tunnel mode).
    pub next_header: u8,
    /// Compression Parameter Index.
    pub cpi: u16,
}

impl IpcompRepr {
    /// Parses a checked header. Flags are ignored, as RFC 3173 requires.
    pub fn parse<T: AsRef<[u8]>>(p: &IpcompPacket<T>) -> Result<Self, Error> {
        p.check_len()?;
        Ok(IpcompRepr {
            next_header: p.next_header(),
            cpi: p.cpi(),
        })
    }
    /// Header length: 4.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header (flags 0).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut IpcompPacket<T>) {
        p.set_next_header(self.next_header);
        p.set_flags(0);
        p.set_cpi(self.cpi);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_emit() {
        let b = [6u8, 0x55, 0x00, 0x02, 0xaa];
        let p = IpcompPacket::new_checked(&b[..]).unwrap();
        let r = IpcompRepr::parse(&p).unwrap();
        assert_eq!(r, IpcompRepr { next_header: 6, cpi: 2 });
        assert_eq!(p.payload(), &[0xaa]);
        let mut out = [0xffu8; 4];
        r.emit(&mut IpcompPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, [6, 0, 0, 2]);
        assert_eq!(r.buffer_len(), 4);
        assert!(matches!(IpcompPacket::new_checked(&b[..3]), Err(Error::Malformed(_))));
    }
}
