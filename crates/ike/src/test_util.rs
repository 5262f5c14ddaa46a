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

/// A config of one PSK connection `c` from 10.0.0.2 to 10.0.0.1 with the IKE proposal `prop`.
pub(crate) fn psk_config(prop: &str) -> crate::config::Config {
    let c = crate::config::Connection::new(
        "c",
        "10.0.0.2".parse().unwrap(),
        Some("10.0.0.1".parse().unwrap()),
        crate::Identity::from_str_config("10.0.0.2").unwrap(),
        None,
        crate::config::Psk::new(b"k"),
        prop,
    )
    .unwrap();
    crate::config::Config::new(alloc::vec![c])
}
