//! What ESP in UDP and IKE share on the NAT-T port (RFC 3948 2.2): the non-ESP marker that
//! tells an IKE message from an ESP packet there. The data plane's framing is
//! `ipsec_engine::udp_encap`; IKE adds and strips the marker in `ipsec_ike`.

/// The non-ESP marker (RFC 3948 2.2): four zero bytes where an SPI would be (an SPI is never
/// 0), in front of an IKE message.
pub const NON_ESP_MARKER: [u8; 4] = [0; 4];
