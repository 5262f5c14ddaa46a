//! The Notify payload (RFC 7296 section 3.10) and the notify message types used here (3.10.1).
use crate::error::Error;
use alloc::vec::Vec;

/// Field offsets of the Notify payload body.
pub mod field {
    /// Protocol ID (0 or 1 for the IKE SA, 3 for ESP).
    pub const PROTOCOL: usize = 0;
    /// SPI Size.
    pub const SPI_SIZE: usize = 1;
    /// Notify Message Type.
    pub const TYPE: core::ops::Range<usize> = 2..4;
    /// The SPI, then the notification data.
    pub const SPI: usize = 4;
}

/// Notify message types (3.10.1; RFC 7383; RFC 7427).
pub mod kind {
    /// UNSUPPORTED_CRITICAL_PAYLOAD.
    pub const UNSUPPORTED_CRITICAL_PAYLOAD: u16 = 1;
    /// INVALID_IKE_SPI.
    pub const INVALID_IKE_SPI: u16 = 4;
    /// INVALID_MAJOR_VERSION.
    pub const INVALID_MAJOR_VERSION: u16 = 5;
    /// INVALID_SYNTAX.
    pub const INVALID_SYNTAX: u16 = 7;
    /// INVALID_MESSAGE_ID.
    pub const INVALID_MESSAGE_ID: u16 = 9;
    /// INVALID_SPI.
    pub const INVALID_SPI: u16 = 11;
    /// NO_PROPOSAL_CHOSEN.
    pub const NO_PROPOSAL_CHOSEN: u16 = 14;
    /// INVALID_KE_PAYLOAD.
    pub const INVALID_KE_PAYLOAD: u16 = 17;
    /// AUTHENTICATION_FAILED.
    pub const AUTHENTICATION_FAILED: u16 = 24;
    /// SINGLE_PAIR_REQUIRED.
    pub const SINGLE_PAIR_REQUIRED: u16 = 34;
    /// NO_ADDITIONAL_SAS.
    pub const NO_ADDITIONAL_SAS: u16 = 35;
    /// INTERNAL_ADDRESS_FAILURE.
    pub const INTERNAL_ADDRESS_FAILURE: u16 = 36;
    /// FAILED_CP_REQUIRED.
    pub const FAILED_CP_REQUIRED: u16 = 37;
    /// TS_UNACCEPTABLE.
    pub const TS_UNACCEPTABLE: u16 = 38;
    /// INVALID_SELECTORS.
    pub const INVALID_SELECTORS: u16 = 39;
    /// UNACCEPTABLE_ADDRESSES (RFC 4555 4.1): the new address is refused by policy.
    pub const UNACCEPTABLE_ADDRESSES: u16 = 40;
    /// UNEXPECTED_NAT_DETECTED (RFC 4555 4.1): NO_NATS_ALLOWED and a NAT was found.
    pub const UNEXPECTED_NAT_DETECTED: u16 = 41;
    /// TEMPORARY_FAILURE.
    pub const TEMPORARY_FAILURE: u16 = 43;
    /// CHILD_SA_NOT_FOUND.
    pub const CHILD_SA_NOT_FOUND: u16 = 44;
    /// STATE_NOT_FOUND (RFC 9370 2.2.4): an IKE_FOLLOWUP_KE for an exchange not in progress.
    pub const STATE_NOT_FOUND: u16 = 47;
    /// INITIAL_CONTACT.
    pub const INITIAL_CONTACT: u16 = 16384;
    /// SET_WINDOW_SIZE.
    pub const SET_WINDOW_SIZE: u16 = 16385;
    /// ADDITIONAL_TS_POSSIBLE.
    pub const ADDITIONAL_TS_POSSIBLE: u16 = 16386;
    /// NAT_DETECTION_SOURCE_IP.
    pub const NAT_DETECTION_SOURCE_IP: u16 = 16388;
    /// NAT_DETECTION_DESTINATION_IP.
    pub const NAT_DETECTION_DESTINATION_IP: u16 = 16389;
    /// COOKIE.
    pub const COOKIE: u16 = 16390;
    /// USE_TRANSPORT_MODE.
    pub const USE_TRANSPORT_MODE: u16 = 16391;
    /// REKEY_SA.
    pub const REKEY_SA: u16 = 16393;
    /// ESP_TFC_PADDING_NOT_SUPPORTED.
    pub const ESP_TFC_PADDING_NOT_SUPPORTED: u16 = 16394;
    /// NON_FIRST_FRAGMENTS_ALSO.
    pub const NON_FIRST_FRAGMENTS_ALSO: u16 = 16395;
    /// MOBIKE_SUPPORTED (RFC 4555 3.2, 4.2).
    pub const MOBIKE_SUPPORTED: u16 = 16396;
    /// ADDITIONAL_IP4_ADDRESS (RFC 4555 3.4, 4.2): 4 bytes.
    pub const ADDITIONAL_IP4_ADDRESS: u16 = 16397;
    /// ADDITIONAL_IP6_ADDRESS (RFC 4555 3.4, 4.2): 16 bytes.
    pub const ADDITIONAL_IP6_ADDRESS: u16 = 16398;
    /// NO_ADDITIONAL_ADDRESSES (RFC 4555 3.4, 4.2).
    pub const NO_ADDITIONAL_ADDRESSES: u16 = 16399;
    /// UPDATE_SA_ADDRESSES (RFC 4555 3.5, 4.2).
    pub const UPDATE_SA_ADDRESSES: u16 = 16400;
    /// COOKIE2 (RFC 4555 3.7, 4.2): 8 to 64 bytes, echoed in the response.
    pub const COOKIE2: u16 = 16401;
    /// NO_NATS_ALLOWED (RFC 4555 3.9, 4.2).
    pub const NO_NATS_ALLOWED: u16 = 16402;
    /// IKEV2_FRAGMENTATION_SUPPORTED (RFC 7383).
    pub const IKEV2_FRAGMENTATION_SUPPORTED: u16 = 16430;
    /// SIGNATURE_HASH_ALGORITHMS (RFC 7427).
    pub const SIGNATURE_HASH_ALGORITHMS: u16 = 16431;
    /// EAP_ONLY_AUTHENTICATION (RFC 5998 3, 6): the initiator accepts a responder that
    /// authenticates with the EAP method's MSK alone.
    pub const EAP_ONLY_AUTHENTICATION: u16 = 16417;
    /// INTERMEDIATE_EXCHANGE_SUPPORTED (RFC 9242 3.1).
    pub const INTERMEDIATE_EXCHANGE_SUPPORTED: u16 = 16438;
    /// ADDITIONAL_KEY_EXCHANGE (RFC 9370 2.2.4): links IKE_FOLLOWUP_KE to CREATE_CHILD_SA.
    pub const ADDITIONAL_KEY_EXCHANGE: u16 = 16441;

    /// Types below 16384 report errors (3.10.1).
    pub fn is_error(t: u16) -> bool {
        t < 16384
    }

    /// The RFC's name for the types this crate knows.
    pub fn name(t: u16) -> &'static str {
        match t {
            UNSUPPORTED_CRITICAL_PAYLOAD => "UNSUPPORTED_CRITICAL_PAYLOAD",
            INVALID_IKE_SPI => "INVALID_IKE_SPI",
            INVALID_MAJOR_VERSION => "INVALID_MAJOR_VERSION",
            INVALID_SYNTAX => "INVALID_SYNTAX",
            INVALID_MESSAGE_ID => "INVALID_MESSAGE_ID",
            INVALID_SPI => "INVALID_SPI",
            NO_PROPOSAL_CHOSEN => "NO_PROPOSAL_CHOSEN",
            INVALID_KE_PAYLOAD => "INVALID_KE_PAYLOAD",
            AUTHENTICATION_FAILED => "AUTHENTICATION_FAILED",
            SINGLE_PAIR_REQUIRED => "SINGLE_PAIR_REQUIRED",
            NO_ADDITIONAL_SAS => "NO_ADDITIONAL_SAS",
            INTERNAL_ADDRESS_FAILURE => "INTERNAL_ADDRESS_FAILURE",
            FAILED_CP_REQUIRED => "FAILED_CP_REQUIRED",
            TS_UNACCEPTABLE => "TS_UNACCEPTABLE",
            INVALID_SELECTORS => "INVALID_SELECTORS",
            TEMPORARY_FAILURE => "TEMPORARY_FAILURE",
            CHILD_SA_NOT_FOUND => "CHILD_SA_NOT_FOUND",
            STATE_NOT_FOUND => "STATE_NOT_FOUND",
            INTERMEDIATE_EXCHANGE_SUPPORTED => "INTERMEDIATE_EXCHANGE_SUPPORTED",
            ADDITIONAL_KEY_EXCHANGE => "ADDITIONAL_KEY_EXCHANGE",
            INITIAL_CONTACT => "INITIAL_CONTACT",
            NAT_DETECTION_SOURCE_IP => "NAT_DETECTION_SOURCE_IP",
            NAT_DETECTION_DESTINATION_IP => "NAT_DETECTION_DESTINATION_IP",
            COOKIE => "COOKIE",
            USE_TRANSPORT_MODE => "USE_TRANSPORT_MODE",
            UNACCEPTABLE_ADDRESSES => "UNACCEPTABLE_ADDRESSES",
            UNEXPECTED_NAT_DETECTED => "UNEXPECTED_NAT_DETECTED",
            MOBIKE_SUPPORTED => "MOBIKE_SUPPORTED",
            ADDITIONAL_IP4_ADDRESS => "ADDITIONAL_IP4_ADDRESS",
            ADDITIONAL_IP6_ADDRESS => "ADDITIONAL_IP6_ADDRESS",
            NO_ADDITIONAL_ADDRESSES => "NO_ADDITIONAL_ADDRESSES",
            UPDATE_SA_ADDRESSES => "UPDATE_SA_ADDRESSES",
            COOKIE2 => "COOKIE2",
            NO_NATS_ALLOWED => "NO_NATS_ALLOWED",
            EAP_ONLY_AUTHENTICATION => "EAP_ONLY_AUTHENTICATION",
            _ => "other",
        }
    }
}

/// Largest notification data accepted.
pub const MAX_NOTIFY_DATA: usize = 4096;

/// A Notify payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// Protocol ID.
    pub protocol: u8,
    /// The SPI (empty, 4 or 8 bytes).
    pub spi: Vec<u8>,
    /// Notify Message Type.
    pub kind: u16,
    /// Notification data.
    pub data: Vec<u8>,
}

impl Notify {
    /// A notify about the IKE SA (no SPI).
    pub fn ike(kind: u16, data: &[u8]) -> Self {
        Notify {
            protocol: 0,
            spi: Vec::new(),
            kind,
            data: data.to_vec(),
        }
    }
    /// Parses the body.
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        if body.len() < field::SPI {
            return Err(Error::Truncated);
        }
        let spi_size = body[field::SPI_SIZE] as usize;
        if !matches!(spi_size, 0 | 4 | 8) || body.len() < field::SPI + spi_size {
            return Err(Error::BadNotify);
        }
        let data = &body[field::SPI + spi_size..];
        if data.len() > MAX_NOTIFY_DATA {
            return Err(Error::BadNotify);
        }
        Ok(Notify {
            protocol: body[field::PROTOCOL],
            spi: body[field::SPI..field::SPI + spi_size].to_vec(),
            kind: u16::from_be_bytes([body[2], body[3]]),
            data: data.to_vec(),
        })
    }
    /// Body length.
    pub fn buffer_len(&self) -> usize {
        field::SPI + self.spi.len() + self.data.len()
    }
    /// Writes the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        let b = buf.get_mut(..self.buffer_len()).ok_or(Error::BufferTooSmall)?;
        b[field::PROTOCOL] = self.protocol;
        b[field::SPI_SIZE] = self.spi.len() as u8;
        b[field::TYPE].copy_from_slice(&self.kind.to_be_bytes());
        b[field::SPI..field::SPI + self.spi.len()].copy_from_slice(&self.spi);
        b[field::SPI + self.spi.len()..].copy_from_slice(&self.data);
        Ok(())
    }
}
