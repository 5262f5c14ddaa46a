//! The IP header as the ICV sees it (RFC 4302 section 3.3.3.1): a copy of the IP header and
//! of the IPv6 extension headers before AH, with mutable fields zeroed and mutable but
//! predictable fields set to the value they will have at the receiver.
//!
//! The copy lives in a caller's fixed-size buffer of [`MAX_ICV_HEADER`] bytes; nothing is
//! allocated and the packet itself is never modified.

use crate::{ipv4_options, ipv6_ext};
use ipsec_core::ip::{ipv4_field, ipv6_field, proto};
use ipsec_core::Error;

/// The longest IP header (IPv4 with options, or IPv6 with the extension headers in front of
/// AH) the ICV computation supports. Longer ones are refused with [`Error::TooBig`].
pub const MAX_ICV_HEADER: usize = 512;

/// Copies `headers` (everything in front of the AH header) into `out` with the mutable
/// fields zeroed, and returns the copy.
///
/// Errors: [`Error::TooBig`] if the headers do not fit in `out`, [`Error::MalformedIp`] if
/// they are not one IPv4 header, or an IPv6 header followed only by Hop-by-Hop, Routing and
/// Destination Options headers ending exactly at the end of `headers` (a Fragment header
/// means a fragment, which AH never covers: RFC 4302 section 3.4.1). The protocol named by
/// the last Next Header is not checked (it is AH's place the caller knows).
pub fn zeroed_copy<'a>(headers: &[u8], out: &'a mut [u8; MAX_ICV_HEADER]) -> Result<&'a [u8], Error> {
    let n = headers.len();
    if n > MAX_ICV_HEADER {
        return Err(Error::TooBig);
    }
    let copy = &mut out[..n];
    copy.copy_from_slice(headers);
    match copy.first().map(|b| b >> 4) {
        Some(4) => zero_ipv4(copy)?,
        Some(6) => zero_ipv6(copy)?,
        _ => return Err(Error::MalformedIp),
    }
    Ok(copy)
}

/// RFC 4302 3.3.3.1.1.1: TOS (DSCP and ECN), flags, fragment offset, TTL and header checksum
/// are zeroed; options are handled per Appendix A.1.
fn zero_ipv4(h: &mut [u8]) -> Result<(), Error> {
    if h.len() < ipv4_field::HEADER_LEN || ((h[0] & 0x0f) as usize) * 4 != h.len() {
        return Err(Error::MalformedIp);
    }
    h[ipv4_field::TOS] = 0;
    h[ipv4_field::FLG_OFF].fill(0);
    h[ipv4_field::TTL] = 0;
    h[ipv4_field::CHECKSUM].fill(0);
    let (fixed, options) = h.split_at_mut(ipv4_field::HEADER_LEN);
    if let Some(final_dst) = ipv4_options::zero_mutable(options)? {
        fixed[ipv4_field::DST].copy_from_slice(&final_dst);
    }
    Ok(())
}

/// RFC 4302 3.3.3.1.2.1: traffic class, flow label and hop limit are zeroed; extension
/// headers are handled per section 3.3.3.1.2.2 and Appendix A.2.
fn zero_ipv6(h: &mut [u8]) -> Result<(), Error> {
    if h.len() < ipv6_field::HEADER_LEN {
        return Err(Error::MalformedIp);
    }
    h[0] &= 0xf0;
    h[1..4].fill(0);
    h[ipv6_field::HOP_LIMIT] = 0;
    let (fixed, mut rest) = h.split_at_mut(ipv6_field::HEADER_LEN);
    let mut next = fixed[ipv6_field::NEXT_HEADER];
    while !rest.is_empty() {
        if rest.len() < 8 {
            return Err(Error::MalformedIp);
        }
        let len = (rest[1] as usize + 1) * 8;
        if len > rest.len() {
            return Err(Error::MalformedIp);
        }
        let (ext, tail) = rest.split_at_mut(len);
        let following = ext[0];
        match next {
            proto::HOPOPTS | proto::DSTOPTS => ipv6_ext::zero_mutable_options(ext)?,
            proto::ROUTING => ipv6_ext::as_at_destination(fixed, ext)?,
            _ => return Err(Error::MalformedIp),
        }
        next = following;
        rest = tail;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_fixed_fields() {
        let h = hex::decode("45b80054abcd6123401148fac0000201c0000202").unwrap();
        let mut out = [0u8; MAX_ICV_HEADER];
        let z = zeroed_copy(&h, &mut out).unwrap();
        assert_eq!(
            hex::encode(z),
            "45000054abcd00000011 0000c0000201c0000202".replace(' ', "")
        );
    }

    #[test]
    fn ipv6_fixed_fields_and_chain() {
        // IPv6 (tc 0xb8, flow 0x12345, hlim 63) -> HBH (Pad1 x6) -> AH.
        let mut h = [0u8; 48];
        h[..8].copy_from_slice(&[0x6b, 0x81, 0x23, 0x45, 0, 8, 0, 63]);
        h[40] = proto::AH;
        let mut out = [0u8; MAX_ICV_HEADER];
        let z = zeroed_copy(&h, &mut out).unwrap();
        assert_eq!(&z[..8], &[0x60, 0, 0, 0, 0, 8, 0, 0]);
        h[6] = proto::FRAGMENT;
        assert_eq!(zeroed_copy(&h, &mut out), Err(Error::MalformedIp));
        assert_eq!(zeroed_copy(&[0u8; 600], &mut out), Err(Error::TooBig));
        assert_eq!(zeroed_copy(&h[..44], &mut out), Err(Error::MalformedIp));
    }
}
