//! The IKE header (RFC 7296 section 3.1): SPIs, Next Payload, version, exchange type, flags,
//! Message ID and Length, as a smoltcp-style view and repr.
use crate::error::Error;
use crate::limits::MAX_MESSAGE_LEN;

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// IKE SA Initiator's SPI.
    pub const SPI_I: Range<usize> = 0..8;
    /// IKE SA Responder's SPI.
    pub const SPI_R: Range<usize> = 8..16;
    /// Next Payload.
    pub const NEXT_PAYLOAD: usize = 16;
    /// Major (high nibble) and Minor version.
    pub const VERSION: usize = 17;
    /// Exchange Type.
    pub const EXCHANGE: usize = 18;
    /// Flags.
    pub const FLAGS: usize = 19;
    /// Message ID.
    pub const MESSAGE_ID: Range<usize> = 20..24;
    /// Length of the whole message.
    pub const LENGTH: Range<usize> = 24..28;
}

/// Length of the IKE header.
pub const HEADER_LEN: usize = 28;

/// Flag: the sender is the original initiator of the IKE SA (3.1).
pub const FLAG_INITIATOR: u8 = 0x08;
/// Flag: the sender can speak a higher major version (3.1).
pub const FLAG_VERSION: u8 = 0x10;
/// Flag: this message is a response (3.1).
pub const FLAG_RESPONSE: u8 = 0x20;

/// Exchange types (RFC 7296 3.1, IANA "IKEv2 Exchange Types").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeType {
    /// IKE_SA_INIT (34).
    IkeSaInit,
    /// IKE_AUTH (35).
    IkeAuth,
    /// CREATE_CHILD_SA (36): further children, child and IKE SA rekeys.
    CreateChildSa,
    /// INFORMATIONAL (37).
    Informational,
    /// IKE_INTERMEDIATE (43, RFC 9242): between IKE_SA_INIT and IKE_AUTH, here carrying
    /// the additional key exchanges of RFC 9370.
    IkeIntermediate,
    /// IKE_FOLLOWUP_KE (44, RFC 9370 2.2.4): an additional key exchange of CREATE_CHILD_SA.
    IkeFollowupKe,
}

impl ExchangeType {
    /// From the wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            34 => ExchangeType::IkeSaInit,
            35 => ExchangeType::IkeAuth,
            36 => ExchangeType::CreateChildSa,
            37 => ExchangeType::Informational,
            43 => ExchangeType::IkeIntermediate,
            44 => ExchangeType::IkeFollowupKe,
            _ => return None,
        })
    }
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            ExchangeType::IkeSaInit => 34,
            ExchangeType::IkeAuth => 35,
            ExchangeType::CreateChildSa => 36,
            ExchangeType::Informational => 37,
            ExchangeType::IkeIntermediate => 43,
            ExchangeType::IkeFollowupKe => 44,
        }
    }
    /// The name RFC 7296 uses.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeType::IkeSaInit => "IKE_SA_INIT",
            ExchangeType::IkeAuth => "IKE_AUTH",
            ExchangeType::CreateChildSa => "CREATE_CHILD_SA",
            ExchangeType::Informational => "INFORMATIONAL",
            ExchangeType::IkeIntermediate => "IKE_INTERMEDIATE",
            ExchangeType::IkeFollowupKe => "IKE_FOLLOWUP_KE",
        }
    }
}

/// A view of an IKE message starting at the IKE header.
#[derive(Debug, Clone)]
pub struct IkePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IkePacket<T> {
    /// Wraps a buffer without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        IkePacket { buffer }
    }
    /// Wraps a buffer and checks it with [`IkePacket::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// Checks the header is present, the Length field covers at least the header and equals
    /// the buffer's length (one message per datagram, RFC 7296 2), and the size limit.
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b.len() > MAX_MESSAGE_LEN {
            return Err(Error::MessageTooLong);
        }
        let len = self.length() as usize;
        if len < HEADER_LEN || len > b.len() {
            return Err(if len > b.len() {
                Error::Truncated
            } else {
                Error::BadLength
            });
        }
        if len != b.len() {
            return Err(Error::BadLength);
        }
        Ok(())
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Initiator's SPI.
    pub fn spi_i(&self) -> u64 {
        u64::from_be_bytes(self.b()[field::SPI_I].try_into().unwrap_or([0; 8]))
    }
    /// Responder's SPI (zero in the first IKE_SA_INIT request).
    pub fn spi_r(&self) -> u64 {
        u64::from_be_bytes(self.b()[field::SPI_R].try_into().unwrap_or([0; 8]))
    }
    /// Next Payload type.
    pub fn next_payload(&self) -> u8 {
        self.b()[field::NEXT_PAYLOAD]
    }
    /// Major version.
    pub fn major_version(&self) -> u8 {
        self.b()[field::VERSION] >> 4
    }
    /// Minor version.
    pub fn minor_version(&self) -> u8 {
        self.b()[field::VERSION] & 0x0f
    }
    /// Exchange type as carried.
    pub fn exchange_type(&self) -> u8 {
        self.b()[field::EXCHANGE]
    }
    /// Flags byte.
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    /// Message ID.
    pub fn message_id(&self) -> u32 {
        u32::from_be_bytes(self.b()[field::MESSAGE_ID].try_into().unwrap_or([0; 4]))
    }
    /// Length field.
    pub fn length(&self) -> u32 {
        u32::from_be_bytes(self.b()[field::LENGTH].try_into().unwrap_or([0; 4]))
    }
    /// The payloads after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }
    /// The whole message.
    pub fn as_bytes(&self) -> &[u8] {
        self.b()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IkePacket<T> {
    /// Sets the Length field.
    pub fn set_length(&mut self, len: u32) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&len.to_be_bytes());
    }
}

/// The IKE header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    /// Initiator's SPI.
    pub spi_i: u64,
    /// Responder's SPI.
    pub spi_r: u64,
    /// Type of the first payload.
    pub next_payload: u8,
    /// Exchange type.
    pub exchange: ExchangeType,
    /// I flag: sent by the original initiator.
    pub initiator: bool,
    /// R flag: a response.
    pub response: bool,
    /// Message ID.
    pub message_id: u32,
    /// Length of the whole message.
    pub length: u32,
}

impl HeaderRepr {
    /// Reads the header of a checked packet: the major version must be 2 (3.1), the
    /// exchange type one of RFC 7296's.
    pub fn parse<T: AsRef<[u8]>>(p: &IkePacket<T>) -> Result<Self, Error> {
        p.check_len()?;
        if p.major_version() != 2 {
            return Err(Error::UnsupportedVersion(p.major_version()));
        }
        let exchange = ExchangeType::from_u8(p.exchange_type()).ok_or(Error::UnknownExchange(p.exchange_type()))?;
        Ok(HeaderRepr {
            spi_i: p.spi_i(),
            spi_r: p.spi_r(),
            next_payload: p.next_payload(),
            exchange,
            initiator: p.flags() & FLAG_INITIATOR != 0,
            response: p.flags() & FLAG_RESPONSE != 0,
            message_id: p.message_id(),
            length: p.length(),
        })
    }
    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header to `buf[..28]` (version 2.0, V flag clear).
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let b = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall)?;
        b[field::SPI_I].copy_from_slice(&self.spi_i.to_be_bytes());
        b[field::SPI_R].copy_from_slice(&self.spi_r.to_be_bytes());
        b[field::NEXT_PAYLOAD] = self.next_payload;
        b[field::VERSION] = 0x20;
        b[field::EXCHANGE] = self.exchange.to_u8();
        let mut flags = 0;
        if self.initiator {
            flags |= FLAG_INITIATOR;
        }
        if self.response {
            flags |= FLAG_RESPONSE;
        }
        b[field::FLAGS] = flags;
        b[field::MESSAGE_ID].copy_from_slice(&self.message_id.to_be_bytes());
        b[field::LENGTH].copy_from_slice(&self.length.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checks() {
        let h = HeaderRepr {
            spi_i: 0x0102030405060708,
            spi_r: 0,
            next_payload: 33,
            exchange: ExchangeType::IkeSaInit,
            initiator: true,
            response: false,
            message_id: 0,
            length: 28,
        };
        let mut b = [0u8; 28];
        h.emit(&mut b).unwrap();
        assert_eq!(b[17], 0x20);
        assert_eq!(b[19], FLAG_INITIATOR);
        assert_eq!(HeaderRepr::parse(&IkePacket::new_checked(&b[..]).unwrap()).unwrap(), h);
        assert_eq!(IkePacket::new_checked(&b[..27]).err(), Some(Error::Truncated));
        let mut long = [0u8; 29];
        long[..28].copy_from_slice(&b);
        assert_eq!(IkePacket::new_checked(&long[..]).err(), Some(Error::BadLength));
        b[17] = 0x30;
        assert_eq!(
            HeaderRepr::parse(&IkePacket::new_unchecked(&b[..])).err(),
            Some(Error::UnsupportedVersion(3))
        );
    }
}
