//! IPv6 extension headers in front of AH, in the ICV input (RFC 4302 section 3.3.3.1.2.2 and
//! Appendix A.2).

use ipsec_core::ip::ipv6_field;
use ipsec_core::Error;

/// Pad1: a single octet with no length (RFC 8200 section 4.2).
pub const PAD1: u8 = 0;

/// RFC 8200 section 4.2: the third-highest bit of an option type says the option data may
/// change en route.
pub const MAY_CHANGE: u8 = 0x20;

/// RFC 4302 3.3.3.1.2.2: in a Hop-by-Hop or Destination Options header (`ext`, the whole
/// header), the data of each option whose type has the "may change en route" bit set is
/// zeroed; type and length octets stay. [`Error::MalformedIp`] if an option runs past the
/// header.
pub fn zero_mutable_options(ext: &mut [u8]) -> Result<(), Error> {
    let mut i = 2;
    while i < ext.len() {
        let t = ext[i];
        if t == PAD1 {
            i += 1;
            continue;
        }
        let len = *ext.get(i + 1).ok_or(Error::MalformedIp)? as usize;
        let data = ext.get_mut(i + 2..i + 2 + len).ok_or(Error::MalformedIp)?;
        if t & MAY_CHANGE != 0 {
            data.fill(0);
        }
        i += 2 + len;
    }
    Ok(())
}

/// Routing types whose layout is a list of 16-byte addresses after 4 reserved octets.
pub mod routing_type {
    /// Type 0 (RFC 2460, deprecated by RFC 5095 but still what RFC 4302 Appendix A.2 names).
    pub const TYPE0: u8 = 0;
    /// Type 2, Mobile IPv6 (RFC 6275 section 6.4): one address, handled as type 0.
    pub const TYPE2: u8 = 2;
}

/// RFC 4302 Appendix A.2: the Routing header is "mutable but predictable": the ICV input
/// holds it, and the IPv6 destination address, as they will be at the final destination.
///
/// For types 0 and 2 with Segments Left `s > 0` over `n` addresses, each remaining hop swaps
/// the destination address with the next address, so the receiver sees: destination =
/// address `n - 1`; addresses `0 .. n - s` unchanged; address `n - s` = the current
/// destination; addresses `n - s + 1 .. n` = the current addresses `n - s .. n - 1`; Segments
/// Left 0. With `s = 0` (as at the receiver) nothing changes. Other routing types are
/// included as they are. [`Error::MalformedIp`] if the header length is not a whole number
/// of addresses or Segments Left exceeds their number (RFC 8200 section 4.4).
pub fn as_at_destination(fixed: &mut [u8], rh: &mut [u8]) -> Result<(), Error> {
    if rh.len() < 8 || fixed.len() < ipv6_field::HEADER_LEN {
        return Err(Error::MalformedIp);
    }
    let (rtype, segs_left) = (rh[2], rh[3] as usize);
    if !matches!(rtype, routing_type::TYPE0 | routing_type::TYPE2) || segs_left == 0 {
        return Ok(());
    }
    let ext_len = rh[1] as usize;
    // The header must also be as long as its length field says (8 + 8 * ext_len bytes).
    if ext_len & 1 != 0 || segs_left > ext_len / 2 || rh.len() < 8 + 8 * ext_len {
        return Err(Error::MalformedIp);
    }
    let n = ext_len / 2;
    let addrs = &mut rh[8..8 + 16 * n];
    let first = n - segs_left;
    let mut final_dst = [0u8; 16];
    final_dst.copy_from_slice(&addrs[16 * (n - 1)..]);
    addrs.copy_within(16 * first..16 * (n - 1), 16 * (first + 1));
    addrs[16 * first..16 * (first + 1)].copy_from_slice(&fixed[ipv6_field::DST]);
    fixed[ipv6_field::DST].copy_from_slice(&final_dst);
    rh[3] = 0;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_data_zeroed_only_when_it_may_change() {
        // NH, len, Pad1, PadN(1), Router Alert (0x05, 2), an option 0x3e (may change) with 2 bytes.
        let mut e = [59, 1, 0, 1, 1, 0xee, 5, 2, 0, 1, 0x3e, 2, 0xaa, 0xbb, 1, 0];
        zero_mutable_options(&mut e).unwrap();
        assert_eq!(e, [59, 1, 0, 1, 1, 0xee, 5, 2, 0, 1, 0x3e, 2, 0, 0, 1, 0]);
        let mut bad = [59, 0, 0x3e, 9, 0, 0, 0, 0];
        assert_eq!(zero_mutable_options(&mut bad), Err(Error::MalformedIp));
        let mut bad = [59, 0, 1, 0, 0, 0, 0, 0x3e];
        assert_eq!(zero_mutable_options(&mut bad), Err(Error::MalformedIp));
    }

    fn addr(x: u8) -> [u8; 16] {
        [x; 16]
    }

    fn routing(n: usize, segs_left: u8) -> ([u8; 40], [u8; 56]) {
        let mut fixed = [0u8; 40];
        fixed[24..40].copy_from_slice(&addr(0xd0));
        let mut rh = [0u8; 56];
        rh[1] = (2 * n) as u8;
        rh[3] = segs_left;
        for i in 0..n {
            rh[8 + 16 * i..24 + 16 * i].copy_from_slice(&addr(0xa0 + i as u8));
        }
        (fixed, rh)
    }

    #[test]
    fn routing_header_as_the_receiver_sees_it() {
        // All three segments left: D, [A0, A1, A2] -> A2, [D, A0, A1].
        let (mut f, mut rh) = routing(3, 3);
        as_at_destination(&mut f, &mut rh).unwrap();
        assert_eq!(&f[24..40], &addr(0xa2));
        assert_eq!(rh[3], 0);
        assert_eq!(&rh[8..24], &addr(0xd0));
        assert_eq!(&rh[24..40], &addr(0xa0));
        assert_eq!(&rh[40..56], &addr(0xa1));
        // One segment left (A0 already visited; D is now A1): D, [X, A1, A2] -> A2, [X, A1, D].
        let (mut f, mut rh) = routing(3, 1);
        as_at_destination(&mut f, &mut rh).unwrap();
        assert_eq!(&f[24..40], &addr(0xa2));
        assert_eq!(&rh[8..24], &addr(0xa0));
        assert_eq!(&rh[24..40], &addr(0xa1));
        assert_eq!(&rh[40..56], &addr(0xd0));
        // Nothing left: unchanged.
        let (mut f, mut rh) = routing(3, 0);
        let (f0, rh0) = (f, rh);
        as_at_destination(&mut f, &mut rh).unwrap();
        assert_eq!((f, rh), (f0, rh0));
        // Segments Left beyond the addresses.
        let (mut f, mut rh) = routing(3, 4);
        assert_eq!(as_at_destination(&mut f, &mut rh), Err(Error::MalformedIp));
    }
}
