//! The ESP header on the wire (RFC 4303 section 2): SPI, Sequence Number, then the payload
//! (IV, ciphertext, ICV), as a smoltcp-style view and repr.

use ipsec_core::Error;

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// Security Parameters Index.
    pub const SPI: Range<usize> = 0..4;
    /// Sequence Number (low 32 bits with ESN).
    pub const SEQ: Range<usize> = 4..8;
    /// Start of the payload (IV, then ciphertext).
    pub const PAYLOAD: usize = 8;
}

/// Length of the SPI and Sequence Number.
pub const HEADER_LEN: usize = 8;

/// A view of an ESP packet (starting at the SPI).
#[derive(Debug)]
pub struct EspPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EspPacket<T> {
    /// Wraps a buffer without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        EspPacket { buffer }
    }
    /// Wraps a buffer and checks it with [`EspPacket::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks that the SPI and Sequence Number are present.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The SPI.
    pub fn spi(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    /// The sequence number as carried.
    pub fn seq(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }
    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EspPacket<T> {
    /// Sets the SPI.
    pub fn set_spi(&mut self, spi: u32) {
        self.buffer.as_mut()[field::SPI].copy_from_slice(&spi.to_be_bytes());
    }
    /// Sets the sequence number.
    pub fn set_seq(&mut self, seq: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&seq.to_be_bytes());
    }
}

/// The ESP header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EspRepr {
    /// SPI.
    pub spi: u32,
    /// Sequence number as carried (low 32 bits).
    pub seq: u32,
}

impl EspRepr {
    /// Reads the header of a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &EspPacket<T>) -> Result<Self, Error> {
        p.check_len()?;
        Ok(EspRepr {
            spi: p.spi(),
            seq: p.seq(),
        })
    }
    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header to `buf[..8]`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let b = buf.get_mut(..HEADER_LEN).ok_or(Error::NoHeadroom)?;
        let mut p = EspPacket::new_unchecked(b);
        p.set_spi(self.spi);
        p.set_seq(self.seq);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        let r = EspRepr { spi: 0x1000, seq: 7 };
        let mut b = [0u8; 8];
        r.emit(&mut b).unwrap();
        assert_eq!(b, [0, 0, 0x10, 0, 0, 0, 0, 7]);
        assert_eq!(EspRepr::parse(&EspPacket::new_checked(&b[..]).unwrap()).unwrap(), r);
        assert_eq!(EspPacket::new_checked(&b[..7]).err(), Some(Error::Truncated));
    }
}
