//! IPv4 options in the ICV input (RFC 4302 section 3.3.3.1.1.2 and Appendix A.1).
//!
//! Options are matched on the whole option-type octet (copy flag, class and number), as in
//! the Appendix A.1 tables and Linux's `ip_clear_mutable_options`. An option classed as
//! mutable is zeroed as a unit, type and length octets included (section 3.3.3.1.1.2).
//! Options the appendix does not list as immutable, including unknown ones, are zeroed: the
//! appendix zeroes every other option it lists, and scapy and Linux zero unknown options too.
//!
//! Loose and Strict Source Route: the options are zeroed, and while the route is not yet
//! used up (pointer not past the option), the destination address in the ICV input is the
//! last address of the route, the final destination the receiver will see (section
//! 3.3.3.1.1.1, "mutable but predictable"). Once the pointer is past the end (the packet is
//! at its final destination) the header's destination is used as is. This is Linux's
//! behaviour on both sides; scapy leaves the destination address alone (see the crate docs).
//!
//! The option list ends at End of Options List; the octets after it are header padding and
//! are included as they are (as Linux does).

use ipsec_core::Error;

/// Option type octets (copy flag, class, number) used here.
pub mod kind {
    /// End of Options List (RFC 791).
    pub const EOL: u8 = 0;
    /// No Operation (RFC 791).
    pub const NOP: u8 = 1;
    /// Security (RFC 1108): copy 1, class 0, number 2.
    pub const SECURITY: u8 = 0x82;
    /// Loose Source and Record Route (RFC 791).
    pub const LSRR: u8 = 0x83;
    /// Extended Security (RFC 1108).
    pub const EXTENDED_SECURITY: u8 = 0x85;
    /// Commercial Security (CIPSO).
    pub const COMMERCIAL_SECURITY: u8 = 0x86;
    /// Strict Source and Record Route (RFC 791).
    pub const SSRR: u8 = 0x89;
    /// Record Route (RFC 791).
    pub const RR: u8 = 0x07;
    /// Internet Timestamp (RFC 791).
    pub const TIMESTAMP: u8 = 0x44;
    /// Router Alert (RFC 2113).
    pub const ROUTER_ALERT: u8 = 0x94;
    /// Sender Directed Multi-Destination Delivery (RFC 1770).
    pub const SDMDD: u8 = 0x95;
}

/// RFC 4302 Appendix A.1: whether an option is immutable (included in the ICV as it is).
pub fn is_immutable(option_type: u8) -> bool {
    matches!(
        option_type,
        kind::EOL
            | kind::NOP
            | kind::SECURITY
            | kind::EXTENDED_SECURITY
            | kind::COMMERCIAL_SECURITY
            | kind::ROUTER_ALERT
            | kind::SDMDD
    )
}

/// Zeroes the mutable options in `options` (the octets after the 20-byte header). Returns
/// the final destination named by a source route that is not used up yet, if any.
///
/// [`Error::MalformedIp`] if an option's length is below 2 or runs past the header.
pub fn zero_mutable(options: &mut [u8]) -> Result<Option<[u8; 4]>, Error> {
    let mut final_dst = None;
    let mut i = 0;
    while i < options.len() {
        let t = options[i];
        match t {
            kind::EOL => break,
            kind::NOP => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let len = *options.get(i + 1).ok_or(Error::MalformedIp)? as usize;
        if len < 2 || i + len > options.len() {
            return Err(Error::MalformedIp);
        }
        let opt = &mut options[i..i + len];
        if !is_immutable(t) {
            // Source route: type, length, pointer, then addresses; the pointer (1-based)
            // names the next address to use and is past the option once it is used up.
            if (t == kind::LSRR || t == kind::SSRR) && len >= 7 && (opt[2] as usize) <= len {
                let mut a = [0u8; 4];
                a.copy_from_slice(&opt[len - 4..]);
                final_dst = Some(a);
            }
            opt.fill(0);
        }
        i += len;
    }
    Ok(final_dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_appendix_a1() {
        for t in [0u8, 1, 0x82, 0x85, 0x86, 0x94, 0x95] {
            assert!(is_immutable(t), "{t:#x}");
        }
        for t in [0x83u8, 0x44, 0x07, 0x89, 0x52, 0x88, 0x0b, 0x0c, 0x91, 0x99, 0x02, 0x14] {
            assert!(!is_immutable(t), "{t:#x}");
        }
    }

    #[test]
    fn zeroes_whole_mutable_options_and_keeps_immutable_ones() {
        // NOP, Router Alert (4), Record Route (7: ptr 4, one slot), NOP, EOL, padding.
        let mut o = [1, 0x94, 4, 0, 0, 0x07, 7, 4, 9, 9, 9, 9, 1, 0, 0xaa, 0xbb];
        assert_eq!(zero_mutable(&mut o), Ok(None));
        assert_eq!(o, [1, 0x94, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xaa, 0xbb]);
    }

    #[test]
    fn source_route_names_the_final_destination_until_used_up() {
        let mut o = [0x83, 11, 4, 10, 0, 0, 1, 10, 0, 0, 2, 0];
        assert_eq!(zero_mutable(&mut o), Ok(Some([10, 0, 0, 2])));
        assert_eq!(o, [0; 12]);
        // At the final destination the pointer is past the option: the header's destination stays.
        let mut o = [0x89, 11, 12, 10, 0, 0, 1, 10, 0, 0, 9, 0];
        assert_eq!(zero_mutable(&mut o), Ok(None));
    }

    #[test]
    fn malformed_lengths() {
        assert_eq!(zero_mutable(&mut [0x94, 1, 0, 0]), Err(Error::MalformedIp));
        assert_eq!(zero_mutable(&mut [0x94, 5, 0, 0]), Err(Error::MalformedIp));
        assert_eq!(zero_mutable(&mut [1, 1, 1, 0x94]), Err(Error::MalformedIp));
    }
}
