//! Inputs the fuzz targets (fuzz/fuzz_targets/ip_views.rs) found panicking, kept as tests.

use ipsec_ah::ipv6_ext::as_at_destination;
use ipsec_core::Error;

/// A type 0 routing header whose length field claims 5 addresses (Hdr Ext Len 10) with
/// Segments Left 1 but only 24 bytes present: an error, not an out-of-range slice.
#[test]
fn a_routing_header_shorter_than_its_length_field_is_malformed() {
    let mut fixed = [0u8; 40];
    fixed[0] = 0x60;
    let mut rh = [0u8; 24];
    rh[1] = 10; // Hdr Ext Len: 10 * 8 + 8 = 88 bytes claimed
    rh[2] = 0; // routing type 0
    rh[3] = 1; // Segments Left
    assert_eq!(as_at_destination(&mut fixed, &mut rh), Err(Error::MalformedIp));
}
