//! The AH header on the wire (RFC 4302 section 2) as a smoltcp-style view and repr.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------+---------------+-------------------------------+
//! | Next Header   |  Payload Len  |          RESERVED             |
//! +---------------+---------------+-------------------------------+
//! |                 Security Parameters Index (SPI)               |
//! +---------------------------------------------------------------+
//! |                    Sequence Number Field                      |
//! +---------------------------------------------------------------+
//! |                Integrity Check Value-ICV (variable)           |
//! +---------------------------------------------------------------+
//! ```

use ipsec_core::Error;

/// Field offsets (RFC 4302 section 2).
pub mod field {
    use core::ops::Range;
    /// Next Header (section 2.1).
    pub const NEXT_HEADER: usize = 0;
    /// Payload Len: the header length in 32-bit words, minus 2 (section 2.2).
    pub const PAYLOAD_LEN: usize = 1;
    /// Reserved, zero on send (section 2.3).
    pub const RESERVED: Range<usize> = 2..4;
    /// Security Parameters Index (section 2.4).
    pub const SPI: Range<usize> = 4..8;
    /// Sequence Number, the low 32 bits with ESN (section 2.5).
    pub const SEQ: Range<usize> = 8..12;
    /// Start of the ICV and its padding (section 2.6).
    pub const ICV: usize = 12;
}

/// Length of the fixed part (everything before the ICV).
pub const FIXED_LEN: usize = 12;

/// The largest AH header this crate emits: SHA-512's 256-bit ICV, no padding needed.
pub const MAX_HEADER_LEN: usize = FIXED_LEN + 32;

/// The padding after an ICV of `icv_len` bytes so the header is a multiple of 32 bits for
/// IPv4 or 64 bits for IPv6 (RFC 4302 sections 2.6 and 3.3.3.2.1).
pub fn icv_padding(icv_len: usize, ipv6: bool) -> usize {
    let align = if ipv6 { 8 } else { 4 };
    (align - (FIXED_LEN + icv_len) % align) % align
}

/// The AH header length for an ICV of `icv_len` bytes, padding included.
pub fn header_len(icv_len: usize, ipv6: bool) -> usize {
    FIXED_LEN + icv_len + icv_padding(icv_len, ipv6)
}

/// A view of an AH header followed by what it protects.
#[derive(Debug)]
pub struct AhPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AhPacket<T> {
    /// Wraps a buffer without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        AhPacket { buffer }
    }

    /// Wraps a buffer and checks it with [`AhPacket::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the fixed fields are present and that the header length given by Payload
    /// Len covers them and fits in the buffer. After this no accessor can panic.
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_LEN {
            return Err(Error::Truncated);
        }
        let hl = (b[field::PAYLOAD_LEN] as usize + 2) * 4;
        if hl < FIXED_LEN {
            return Err(Error::MalformedIp);
        }
        if hl > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Consumes the view.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Next Header: the protocol of what follows the AH header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// The Payload Len field as carried (32-bit words minus 2).
    pub fn payload_len(&self) -> u8 {
        self.buffer.as_ref()[field::PAYLOAD_LEN]
    }
    /// The header length in bytes, from Payload Len.
    pub fn header_len(&self) -> usize {
        (self.payload_len() as usize + 2) * 4
    }
    /// The Reserved field.
    pub fn reserved(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }
    /// The SPI.
    pub fn spi(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }
    /// The sequence number as carried (low 32 bits with ESN).
    pub fn seq(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[8], b[9], b[10], b[11]])
    }
    /// The ICV field, padding included.
    pub fn icv_field(&self) -> &[u8] {
        &self.buffer.as_ref()[field::ICV..self.header_len()]
    }
    /// What follows the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AhPacket<T> {
    /// Sets Next Header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = nh;
    }
    /// Sets the Payload Len field (check the buffer again before using the accessors).
    pub fn set_payload_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::PAYLOAD_LEN] = v;
    }
    /// Sets the SPI.
    pub fn set_spi(&mut self, spi: u32) {
        self.buffer.as_mut()[field::SPI].copy_from_slice(&spi.to_be_bytes());
    }
    /// Sets the sequence number.
    pub fn set_seq(&mut self, seq: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&seq.to_be_bytes());
    }
    /// The ICV field, padding included, mutable.
    pub fn icv_field_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[field::ICV..hl]
    }
}

/// The AH header's fields. The ICV itself is not part of the repr: [`AhRepr::emit`] writes
/// it as zeros, as the ICV computation wants it (RFC 4302 section 3.3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhRepr {
    /// Next Header.
    pub next_header: u8,
    /// SPI.
    pub spi: u32,
    /// Sequence number as carried (low 32 bits).
    pub seq: u32,
    /// ICV length in bytes.
    pub icv_len: usize,
    /// Padding after the ICV in bytes.
    pub pad_len: usize,
}

impl AhRepr {
    /// The header for an ICV of `icv_len` bytes, padded for IPv4 or IPv6.
    pub fn new(next_header: u8, spi: u32, seq: u32, icv_len: usize, ipv6: bool) -> Self {
        AhRepr {
            next_header,
            spi,
            seq,
            icv_len,
            pad_len: icv_padding(icv_len, ipv6),
        }
    }

    /// Parses a checked header whose ICV is `icv_len` bytes (known from the SA): whatever
    /// follows the ICV in the ICV field is padding.
    pub fn parse<T: AsRef<[u8]>>(p: &AhPacket<T>, icv_len: usize) -> Result<Self, Error> {
        p.check_len()?;
        let field_len = p.header_len() - FIXED_LEN;
        if field_len < icv_len {
            return Err(Error::MalformedIp);
        }
        Ok(AhRepr {
            next_header: p.next_header(),
            spi: p.spi(),
            seq: p.seq(),
            icv_len,
            pad_len: field_len - icv_len,
        })
    }

    /// The header length.
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN.saturating_add(self.icv_len).saturating_add(self.pad_len)
    }

    /// Writes the header to `buf[..self.buffer_len()]`, with a zero Reserved field and a zero
    /// ICV and padding.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let len = self.buffer_len();
        if len & 3 != 0 || len / 4 - 2 > u8::MAX as usize {
            // (len is at least FIXED_LEN, so len / 4 - 2 cannot underflow.)
            return Err(Error::InvalidSa("AH header length is not a multiple of 32 bits"));
        }
        let b = buf.get_mut(..len).ok_or(Error::NoHeadroom)?;
        b[field::NEXT_HEADER] = self.next_header;
        b[field::PAYLOAD_LEN] = (len / 4 - 2) as u8;
        b[field::RESERVED].copy_from_slice(&[0, 0]);
        b[field::SPI].copy_from_slice(&self.spi.to_be_bytes());
        b[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        b[field::ICV..].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_per_ip_version() {
        // (ICV bytes, IPv4 header length, IPv6 header length)
        for (icv, v4, v6) in [(12, 24, 24), (16, 28, 32), (24, 36, 40), (32, 44, 48)] {
            assert_eq!(header_len(icv, false), v4, "icv {icv}");
            assert_eq!(header_len(icv, true), v6, "icv {icv}");
        }
    }

    #[test]
    fn emit_parse_round_trip() {
        let r = AhRepr::new(6, 0xdead_beef, 7, 24, true);
        assert_eq!(r.buffer_len(), 40);
        let mut b = [0xffu8; 48];
        r.emit(&mut b).unwrap();
        assert_eq!(&b[..4], &[6, 8, 0, 0]);
        let p = AhPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.spi(), p.seq(), p.header_len(), p.reserved()),
            (0xdead_beef, 7, 40, 0)
        );
        assert_eq!(p.icv_field(), &[0; 28]);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(AhRepr::parse(&p, 24).unwrap(), r);
        assert_eq!(AhRepr::parse(&p, 32), Err(Error::MalformedIp));
        assert_eq!(r.emit(&mut [0u8; 39]), Err(Error::NoHeadroom));
    }

    #[test]
    fn checks() {
        assert_eq!(AhPacket::new_checked(&[0u8; 11][..]).err(), Some(Error::Truncated));
        // Payload Len 0 means an 8-byte header, shorter than the fixed fields.
        assert_eq!(AhPacket::new_checked(&[0u8; 12][..]).err(), Some(Error::MalformedIp));
        let mut b = [0u8; 20];
        b[1] = 4; // 24 bytes
        assert_eq!(AhPacket::new_checked(&b[..]).err(), Some(Error::Truncated));
        b[1] = 1; // 12 bytes, no ICV
        assert!(AhPacket::new_checked(&b[..]).is_ok());
    }
}
