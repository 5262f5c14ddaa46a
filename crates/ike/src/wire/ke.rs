//! The Key Exchange payload (RFC 7296 section 3.4): the group number and the public value.
use crate::error::Error;
use alloc::vec::Vec;

/// Field offsets of the KE payload body.
pub mod field {
    /// Key Exchange Method Num (Diffie-Hellman group).
    pub const GROUP: core::ops::Range<usize> = 0..2;
    /// Reserved.
    pub const RESERVED: core::ops::Range<usize> = 2..4;
    /// Key Exchange Data.
    pub const DATA: usize = 4;
}

/// A Key Exchange payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KePayload {
    /// Group number (IANA transform type 4 ID).
    pub group: u16,
    /// The public value, of the group's length (checked when the group is known).
    pub data: Vec<u8>,
}

impl KePayload {
    /// Parses the body; the data length is checked against the group by the caller
    /// (an unknown group is answered with INVALID_KE_PAYLOAD, 1.2).
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        if body.len() < field::DATA {
            return Err(Error::Truncated);
        }
        Ok(KePayload {
            group: u16::from_be_bytes([body[0], body[1]]),
            data: body[field::DATA..].to_vec(),
        })
    }
    /// Body length.
    pub fn buffer_len(&self) -> usize {
        field::DATA + self.data.len()
    }
    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let b = buf.get_mut(..self.buffer_len()).ok_or(Error::BufferTooSmall)?;
        b[field::GROUP].copy_from_slice(&self.group.to_be_bytes());
        b[field::RESERVED].fill(0);
        b[field::DATA..].copy_from_slice(&self.data);
        Ok(())
    }
}
