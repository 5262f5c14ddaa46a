//! Segmentation offload (TSO/USO): a super-packet the TUN device hands over (a virtio-net
//! header with `gso_type` set) cut into packets of at most `gso_size` payload bytes, each with
//! its own IP and TCP/UDP header and checksum, as the kernel's GSO would have.

use super::*;

/// Cuts one TCP super-packet (read behind a virtio-net header with GSO_TCPV4/6) into
/// segments of `gso_size` payload bytes, each a complete packet with correct lengths, IPv4
/// ID and header checksum, TCP sequence number, flags (FIN and PSH on the last only, CWR on
/// the first only) and TCP checksum; or one UDP super-packet (GSO_UDP_L4) into datagrams of
/// `gso_size` payload bytes, each with its own UDP length and checksum (as the kernel's
/// `__udp_gso_segment` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segmenter {
    layout: Layout,
    gso: usize,
    count: usize,
}

impl Segmenter {
    /// Checks `p` (the packet after the header) against `hdr`. A header without GSO is an
    /// error here ([`complete_checksum`] handles those).
    pub fn new(p: &[u8], hdr: &VnetHdr) -> Result<Segmenter, OffloadError> {
        let (v6, proto) = match hdr.gso_type & !GSO_ECN {
            GSO_TCPV4 => (Some(false), PROTO_TCP),
            GSO_TCPV6 => (Some(true), PROTO_TCP),
            GSO_UDP_L4 => (None, PROTO_UDP),
            t => return Err(OffloadError::UnsupportedGso(t)),
        };
        let layout = l4_layout(p, proto, true).ok_or(OffloadError::NotTcp)?;
        if v6.is_some_and(|v6| layout.v6 != v6) {
            return Err(OffloadError::NotTcp);
        }
        let gso = usize::from(hdr.gso_size);
        if gso == 0 {
            return Err(OffloadError::BadGsoSize);
        }
        let payload = layout.total - layout.headers();
        let count = payload.div_ceil(gso).max(1);
        if count > MAX_SEGMENTS {
            return Err(OffloadError::BadGsoSize);
        }
        Ok(Segmenter { layout, gso, count })
    }

    /// How many segments.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Writes segment `i` (< [`count`](Self::count)) of `p` into `out`; returns its length.
    pub fn write(&self, p: &[u8], i: usize, out: &mut [u8]) -> Result<usize, OffloadError> {
        let l = self.layout;
        let h = l.headers();
        let from = h + i * self.gso;
        let to = (from + self.gso).min(l.total);
        if i >= self.count || from > to {
            return Err(OffloadError::BadGsoSize);
        }
        let len = h + (to - from);
        if out.len() < len {
            return Err(OffloadError::NoRoom);
        }
        out[..h].copy_from_slice(&p[..h]);
        out[h..len].copy_from_slice(&p[from..to]);
        let (ip, tcp) = out[..len].split_at_mut(l.ip);
        if l.v6 {
            // The payload length covers the extension headers, which each segment repeats.
            ip[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        } else {
            ip[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(i as u16);
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            ip[10..12].copy_from_slice(&[0, 0]);
            let c = checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        if l.udp {
            let udp = tcp;
            let udp_len = udp.len() as u16;
            udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
            udp[6..8].copy_from_slice(&[0, 0]);
            // RFC 768: a computed zero is sent as all ones.
            let c = match !fold(sum(pseudo_sum(ip, PROTO_UDP, udp.len()), udp)) {
                0 => 0xffff,
                c => c,
            };
            udp[6..8].copy_from_slice(&c.to_be_bytes());
            return Ok(len);
        }
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]).wrapping_add((i * self.gso) as u32);
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        if i + 1 < self.count {
            tcp[13] &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            tcp[13] &= !TCP_CWR;
        }
        tcp[16..18].copy_from_slice(&[0, 0]);
        let c = !fold(sum(pseudo_sum(ip, PROTO_TCP, tcp.len()), tcp));
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        Ok(len)
    }
}
