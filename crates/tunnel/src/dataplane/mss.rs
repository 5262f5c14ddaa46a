//! TCP MSS clamping on the TUN device: the Maximum Segment Size option (RFC 9293 3.7.1,
//! kind 2, length 4) of a SYN or SYN-ACK lowered to what fits the tunnel, so that TCP never
//! sends segments the tunnel would have to fragment or drop ("connected, but web pages do not
//! load": a path MTU discovery that an ICMP filter somewhere breaks).
//!
//! Both directions: packets read from the TUN device before they are sealed (the local
//! host's or a LAN host's SYN to a client) and packets opened before they are written to the
//! TUN device (a client's SYN). Only the first fragment-free IPv4 packet (options allowed)
//! and the fixed IPv6 header directly followed by TCP are looked at; a packet with IPv6
//! extension headers, a fragment or a malformed TCP option list is left as it is. The TCP
//! checksum is updated incrementally (RFC 1624 eqn. 3), never recomputed: the packet's
//! length and every other byte stay as they were.
//!
//! The packet loops test one flag per batch ([`MssClamp::is_on`]) when clamping is off (the
//! default); on, a packet that is not a TCP SYN costs about 51 instructions in each direction
//! (docs/performance.md).

/// The IP protocol number of TCP.
const TCP: u8 = 6;
/// The TCP SYN flag (RFC 9293 3.1).
const SYN: u8 = 0x02;
/// TCP option kinds (RFC 9293 3.2).
const OPT_END: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_MSS: u8 = 2;
/// The fixed header lengths the `auto` values take off the MTU.
const IPV4_HEADER: u32 = 20;
const IPV6_HEADER: u32 = 40;
const TCP_HEADER: u32 = 20;

/// The configured clamp (`[tunnel] mss_clamp`): the largest MSS a SYN may carry, per IP
/// version; 0 means no clamping for that version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MssClamp {
    v4: u16,
    v6: u16,
}

/// What [`MssClamp::apply`] did to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clamped {
    /// Not a TCP SYN with an MSS option above the limit (or not parsable): untouched.
    No,
    /// The MSS option was lowered from the first value to the second.
    Lowered(u16, u16),
}

impl MssClamp {
    /// No clamping.
    pub const OFF: MssClamp = MssClamp { v4: 0, v6: 0 };

    /// `mss_clamp = "auto"`: the TUN MTU less the fixed IP header (20 or 40 bytes) and the
    /// TCP header (20), so a full segment without options fits the device's MTU
    /// (RFC 9293 3.7.1, RFC 6691: the MSS counts no options).
    pub fn auto(tun_mtu: u32) -> MssClamp {
        let v = |h: u32| u16::try_from(tun_mtu.saturating_sub(h + TCP_HEADER).max(1)).unwrap_or(u16::MAX);
        MssClamp {
            v4: v(IPV4_HEADER),
            v6: v(IPV6_HEADER),
        }
    }

    /// `mss_clamp = N`: the same limit over IPv4 and IPv6 (0: off).
    pub fn fixed(mss: u16) -> MssClamp {
        MssClamp { v4: mss, v6: mss }
    }

    /// Whether any packet may be changed (the per-packet flag test).
    #[inline]
    pub fn is_on(&self) -> bool {
        (self.v4 | self.v6) != 0
    }

    /// The limits over IPv4 and IPv6 (0: none).
    pub fn limits(&self) -> (u16, u16) {
        (self.v4, self.v6)
    }

    /// Lowers the MSS option of a TCP SYN or SYN-ACK in `pkt` (a whole IP packet) to the
    /// limit of its IP version, if it is above it. Anything else, and anything malformed,
    /// is left as it is.
    pub fn apply(&self, pkt: &mut [u8]) -> Clamped {
        let Some(&first) = pkt.first() else { return Clamped::No };
        let (limit, tcp, end) = match first >> 4 {
            4 => {
                if pkt.len() < 20 || pkt[9] != TCP {
                    return Clamped::No;
                }
                // More fragments, or a fragment offset: not a whole segment.
                if u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff != 0 {
                    return Clamped::No;
                }
                let ihl = usize::from(first & 0x0f) * 4;
                let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
                (self.v4, ihl, total.min(pkt.len()))
            }
            6 => {
                // The fixed header followed by TCP only: extension headers are left alone.
                if pkt.len() < 40 || pkt[6] != TCP {
                    return Clamped::No;
                }
                let payload = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
                (self.v6, 40, (40 + payload).min(pkt.len()))
            }
            _ => return Clamped::No,
        };
        if limit == 0 || tcp < 20 || end < tcp + 20 {
            return Clamped::No;
        }
        let seg = &mut pkt[tcp..end];
        if seg[13] & SYN == 0 {
            return Clamped::No;
        }
        let data_off = usize::from(seg[12] >> 4) * 4;
        if data_off < 20 || data_off > seg.len() {
            return Clamped::No;
        }
        let Some(at) = find_mss(&seg[20..data_off]).map(|o| 20 + o) else {
            return Clamped::No;
        };
        let old = u16::from_be_bytes([seg[at], seg[at + 1]]);
        if old <= limit {
            return Clamped::No;
        }
        seg[at..at + 2].copy_from_slice(&limit.to_be_bytes());
        // A field at an odd offset adds its bytes to the sum swapped (RFC 1071 2(B): the
        // sum is byte-order independent).
        let (m, m2) = if at % 2 == 0 {
            (old, limit)
        } else {
            (old.swap_bytes(), limit.swap_bytes())
        };
        let hc = u16::from_be_bytes([seg[16], seg[17]]);
        seg[16..18].copy_from_slice(&update_checksum(hc, m, m2).to_be_bytes());
        Clamped::Lowered(old, limit)
    }
}

/// The offset of the MSS option's value in `opts` (a TCP option list), if it has a
/// well-formed one and the whole list is well-formed: an option with a length below 2 or
/// running past the list's end (RFC 9293 3.2), or an MSS option whose length is not 4, makes
/// it None, and the packet is left alone. Options after End of Option List are padding.
fn find_mss(opts: &[u8]) -> Option<usize> {
    let mut found = None;
    let mut i = 0;
    // Each turn moves i forward by one at least: bounded by the list's length (at most 40).
    while i < opts.len() {
        match opts[i] {
            OPT_END => break,
            OPT_NOP => i += 1,
            kind => {
                let len = usize::from(*opts.get(i + 1)?);
                if len < 2 || i + len > opts.len() || (kind == OPT_MSS && len != 4) {
                    return None;
                }
                if kind == OPT_MSS && found.is_none() {
                    found = Some(i + 2);
                }
                i += len;
            }
        }
    }
    found
}

/// RFC 1624 eqn. 3: the checksum `hc` after a 16-bit word of the summed data changes from
/// `m` to `m2`: HC' = ~(~HC + ~m + m2), in one's complement arithmetic.
pub fn update_checksum(hc: u16, m: u16, m2: u16) -> u16 {
    let mut sum = u32::from(!hc) + u32::from(!m) + u32::from(m2);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests;
