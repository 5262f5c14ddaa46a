//! The IP header views and walkers on arbitrary bytes: `ipsec_core::ip` (IPv4 header and
//! options, IPv6 extension header chains, splits, length fixing), IPComp's transport
//! placement, and AH's mutable-field walkers (`ipsec_ah::mutable_fields`, IPv4 options,
//! IPv6 options and routing headers). Errors are fine; panics and unbounded loops are not.
#![no_main]
use ipsec_ah::{ipv4_options, ipv6_ext, mutable_fields, MAX_ICV_HEADER};
use ipsec_core::ip::{self, proto, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};
use ipsec_fuzz::MAX_INPUT;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_INPUT {
        return;
    }
    let _ = ip::version(data);
    let _ = ip::upper_split(data);
    let _ = ip::transport_split(data);
    for want in [proto::ESP, proto::AH, proto::COMP, proto::ROUTING, proto::DSTOPTS] {
        let _ = ip::find_header(data, want);
    }
    let mut steps = 0usize;
    let _ = ip::walk_ipv6_ext(data, |h| {
        steps += 1;
        assert!(h.offset + h.len <= data.len(), "extension header beyond the packet");
    });
    assert!(steps <= data.len() / 8 + 1, "more extension headers than 8-byte units");
    let _ = ip::tos(data);
    let _ = ip::addrs(data);
    let _ = ip::claimed_len(data);
    if let Ok(p) = Ipv4Packet::new_checked(data) {
        let _ = Ipv4Repr::parse(&p);
        let _ = p.verify_checksum();
    }
    if let Ok(p) = Ipv6Packet::new_checked(data) {
        let _ = Ipv6Repr::parse(&p);
    }
    let _ = ipsec_ipcomp::transport_placement(data);
    let mut copy = data.to_vec();
    let _ = ip::fix_length(&mut copy);
    let mut out = [0u8; MAX_ICV_HEADER];
    let _ = mutable_fields::zeroed_copy(data, &mut out);
    let mut copy = data.to_vec();
    let _ = ipv4_options::zero_mutable(&mut copy);
    let mut copy = data.to_vec();
    let _ = ipv6_ext::zero_mutable_options(&mut copy);
    if data.len() >= 40 {
        let (fixed, rh) = copy.split_at_mut(40);
        fixed.copy_from_slice(&data[..40]);
        let _ = ipv6_ext::as_at_destination(fixed, rh);
    }
});
