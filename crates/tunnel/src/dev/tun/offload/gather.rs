//! A super-packet the [`Coalescer`](super::Coalescer) ended, as the parts a gathered write
//! (`writev(2)`) takes: the first packet's headers, rewritten, then each packet's payload
//! where it lies, so no payload is copied into a super-packet buffer first.

use super::MAX_UDP_SEGMENTS;

/// The most packets one super-packet gathers ([`MAX_UDP_SEGMENTS`], for TCP too: a batch
/// the loops write holds fewer, so only a caller with longer runs of tiny segments sees a
/// super-packet end there).
pub const MAX_PARTS: usize = MAX_UDP_SEGMENTS;

/// The longest headers a coalesced packet may have (IPv6 40 + TCP with options 60).
pub(super) const MAX_HEADERS: usize = 100;

/// A super-packet [`Coalescer::finish`](super::Coalescer::finish) ended: its headers (rewritten) and, in order, each
/// packet's payload, by the caller's number for the packet and where in it.
#[derive(Debug, Clone, Copy)]
pub struct Super<'a> {
    /// The headers to write first.
    pub head: &'a [u8],
    /// `(packet, from, to)`: `packets[packet][from..to]` is the next payload.
    pub parts: &'a [(usize, usize, usize)],
    /// The whole super-packet's length.
    pub len: usize,
}

impl<'a> Super<'a> {
    /// The slices to write, in order, into `out` (its first `1 + parts.len()`): the headers,
    /// then each payload of `packets`; returns how many. `None` when a part names a packet
    /// or bytes `packets` does not have.
    pub fn gather<'p>(&self, packets: &[&'p [u8]], out: &mut [&'p [u8]]) -> Option<usize>
    where
        'a: 'p,
    {
        let n = 1 + self.parts.len();
        if out.len() < n {
            return None;
        }
        out[0] = self.head;
        for (o, &(i, from, to)) in out[1..n].iter_mut().zip(self.parts) {
            *o = packets.get(i)?.get(from..to)?;
        }
        Some(n)
    }

    /// The whole super-packet as one buffer (for tests and a device without gathered
    /// writes).
    pub fn to_vec(&self, packets: &[&[u8]]) -> Vec<u8> {
        let mut v = self.head.to_vec();
        for &(i, from, to) in self.parts {
            v.extend_from_slice(&packets[i][from..to]);
        }
        v
    }
}
