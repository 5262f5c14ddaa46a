//! The Delete payload (RFC 7296 section 3.11): the IKE SA (protocol 1, no SPIs) or child
//! SAs by the SPIs their sender receives on.
use crate::error::Error;
use crate::limits::MAX_DELETE_SPIS;
use crate::sa::protocol;
use alloc::vec::Vec;

/// A Delete payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delete {
    /// Delete the IKE SA (and with it all its child SAs, 1.4.1).
    Ike,
    /// Delete ESP SAs: the sender's inbound SPIs.
    Esp(Vec<u32>),
    /// Another protocol (AH), kept as SPIs; answered with nothing.
    Other(u8, Vec<u32>),
}

impl Delete {
    /// Parses the body.
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        if body.len() < 4 {
            return Err(Error::Truncated);
        }
        let proto = body[0];
        let spi_size = body[1] as usize;
        let n = u16::from_be_bytes([body[2], body[3]]) as usize;
        let rest = &body[4..];
        if proto == protocol::IKE {
            // 3.11: for the IKE SA, SPI Size 0 and no SPIs.
            if spi_size != 0 || n != 0 || !rest.is_empty() {
                return Err(Error::BadDelete);
            }
            return Ok(Delete::Ike);
        }
        if spi_size != 4 || rest.len() != n * 4 {
            return Err(Error::BadDelete);
        }
        if n > MAX_DELETE_SPIS {
            return Err(Error::TooManySpis);
        }
        let spis = rest
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(if proto == protocol::ESP {
            Delete::Esp(spis)
        } else {
            Delete::Other(proto, spis)
        })
    }
    /// Body length.
    pub fn buffer_len(&self) -> usize {
        4 + match self {
            Delete::Ike => 0,
            Delete::Esp(s) | Delete::Other(_, s) => 4 * s.len(),
        }
    }
    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let b = buf.get_mut(..self.buffer_len()).ok_or(Error::BufferTooSmall)?;
        match self {
            Delete::Ike => b.copy_from_slice(&[protocol::IKE, 0, 0, 0]),
            Delete::Esp(s) | Delete::Other(_, s) => {
                b[0] = if let Delete::Other(p, _) = self {
                    *p
                } else {
                    protocol::ESP
                };
                b[1] = 4;
                b[2..4].copy_from_slice(&(s.len() as u16).to_be_bytes());
                for (i, spi) in s.iter().enumerate() {
                    b[4 + 4 * i..8 + 4 * i].copy_from_slice(&spi.to_be_bytes());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for d in [Delete::Ike, Delete::Esp(alloc::vec![1, 0xdeadbeef])] {
            let mut b = alloc::vec![0; d.buffer_len()];
            d.emit(&mut b).unwrap();
            assert_eq!(Delete::parse(&b).unwrap(), d);
        }
        assert_eq!(Delete::parse(&[3, 4, 0, 2, 0, 0, 0, 1]), Err(Error::BadDelete));
        assert_eq!(Delete::parse(&[1, 8, 0, 0]), Err(Error::BadDelete));
    }
}
