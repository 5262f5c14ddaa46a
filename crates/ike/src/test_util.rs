//! Helpers shared by the unit tests of several modules.

use crate::header::{ExchangeType, HeaderRepr};

/// An IKE_AUTH request header (SPIs 1 and 2, message ID 1) for sealing and fragmenting tests.
pub(crate) fn hdr() -> HeaderRepr {
    HeaderRepr {
        spi_i: 1,
        spi_r: 2,
        next_payload: 0,
        exchange: ExchangeType::IkeAuth,
        initiator: true,
        response: false,
        message_id: 1,
        length: 0,
    }
}
