//! An in-place packet buffer with headroom and tailroom, as the transforms use it.

use crate::error::Error;

/// A packet that lives in `data[head..head + len]` of a caller's buffer. The bytes before it
/// are headroom, the bytes after it tailroom. Transforms grow and shrink the packet at either
/// end without copying the payload and without allocating.
#[derive(Debug)]
pub struct PacketBuf<'a> {
    data: &'a mut [u8],
    head: usize,
    len: usize,
}

impl<'a> PacketBuf<'a> {
    /// A packet of `len` bytes at offset `head` of `data`.
    ///
    /// Returns [`Error::Truncated`] if the range does not fit in `data`.
    #[inline]
    pub fn new(data: &'a mut [u8], head: usize, len: usize) -> Result<Self, Error> {
        if head.checked_add(len).is_none_or(|end| end > data.len()) {
            return Err(Error::Truncated);
        }
        Ok(PacketBuf { data, head, len })
    }

    /// Offset of the packet's first byte in the underlying buffer.
    #[inline]
    pub fn head(&self) -> usize {
        self.head
    }
    /// Length of the packet.
    #[allow(clippy::len_without_is_empty)]
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Bytes free before the packet.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.head
    }
    /// Bytes free after the packet.
    #[inline]
    pub fn tailroom(&self) -> usize {
        self.data.len() - self.head - self.len
    }
    /// The packet.
    #[inline]
    pub fn packet(&self) -> &[u8] {
        &self.data[self.head..self.head + self.len]
    }
    /// The packet, mutable.
    #[inline]
    pub fn packet_mut(&mut self) -> &mut [u8] {
        &mut self.data[self.head..self.head + self.len]
    }
    /// The whole underlying buffer and the packet's offset, for moves that span headroom.
    #[inline]
    pub fn raw_mut(&mut self) -> (&mut [u8], usize) {
        (self.data, self.head)
    }

    /// Grows the packet by `n` bytes at the front (into the headroom).
    #[inline]
    pub fn push_front(&mut self, n: usize) -> Result<(), Error> {
        if n > self.head {
            return Err(Error::NoHeadroom);
        }
        self.head -= n;
        self.len += n;
        Ok(())
    }
    /// Drops `n` bytes from the front of the packet.
    #[inline]
    pub fn pull_front(&mut self, n: usize) -> Result<(), Error> {
        if n > self.len {
            return Err(Error::Truncated);
        }
        self.head += n;
        self.len -= n;
        Ok(())
    }
    /// Grows the packet by `n` bytes at the back (into the tailroom).
    #[inline]
    pub fn push_back(&mut self, n: usize) -> Result<(), Error> {
        if n > self.tailroom() {
            return Err(Error::NoTailroom);
        }
        self.len += n;
        Ok(())
    }
    /// Drops `n` bytes from the back of the packet.
    #[inline]
    pub fn trim_back(&mut self, n: usize) -> Result<(), Error> {
        if n > self.len {
            return Err(Error::Truncated);
        }
        self.len -= n;
        Ok(())
    }

    /// Drops the bytes after the length the IP header claims (link-layer padding), so the
    /// packet is exactly the IP packet.
    #[inline]
    pub fn trim_to_ip_len(&mut self) -> Result<(), Error> {
        let claimed = crate::ip::claimed_len(self.packet())?;
        self.trim_back(self.len - claimed)
    }

    /// Opens a gap of `n` bytes at offset `at` of the packet by moving the first `at` bytes
    /// (the headers) forward into the headroom. The gap's contents are unspecified.
    pub fn insert_gap(&mut self, at: usize, n: usize) -> Result<(), Error> {
        if at > self.len {
            return Err(Error::Truncated);
        }
        if n > self.head {
            return Err(Error::NoHeadroom);
        }
        let h = self.head;
        move_headers(self.data, h, h - n, at);
        self.head -= n;
        self.len += n;
        Ok(())
    }

    /// Removes `n` bytes at offset `at` of the packet by moving the first `at` bytes back.
    pub fn remove_gap(&mut self, at: usize, n: usize) -> Result<(), Error> {
        if at.checked_add(n).is_none_or(|e| e > self.len) {
            return Err(Error::Truncated);
        }
        let h = self.head;
        move_headers(self.data, h, h + n, at);
        self.head += n;
        self.len -= n;
        Ok(())
    }
}

/// `data.copy_within(from..from + len, to)`, with the two common header lengths (an IPv4
/// header without options, an IPv6 header without extensions) copied through a fixed-size
/// array: the compiler moves those in registers instead of calling `memmove`, and the
/// header's fields can then be read back without waiting on the copy's stores.
#[inline]
fn move_headers(data: &mut [u8], from: usize, to: usize, len: usize) {
    fn fixed<const N: usize>(data: &mut [u8], from: usize, to: usize) {
        let mut t = [0u8; N];
        t.copy_from_slice(&data[from..from + N]);
        data[to..to + N].copy_from_slice(&t);
    }
    match len {
        20 => fixed::<20>(data, from, to),
        40 => fixed::<40>(data, from, to),
        _ => data.copy_within(from..from + len, to),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_insert_and_remove_move_only_the_headers() {
        let mut raw = [0u8; 16];
        raw[8..12].copy_from_slice(&[1, 2, 3, 4]);
        let mut b = PacketBuf::new(&mut raw, 8, 4).unwrap();
        b.insert_gap(2, 3).unwrap();
        assert_eq!(b.head(), 5);
        assert_eq!(&b.packet()[..2], &[1, 2]);
        assert_eq!(&b.packet()[5..], &[3, 4]);
        b.remove_gap(2, 3).unwrap();
        assert_eq!(b.packet(), &[1, 2, 3, 4]);
        assert_eq!(b.insert_gap(0, 9), Err(Error::NoHeadroom));
        assert_eq!(b.push_back(5), Err(Error::NoTailroom));
        assert_eq!(b.remove_gap(3, 2), Err(Error::Truncated));
    }

    /// The fixed-size header moves (20 and 40 bytes) and the general one move the same bytes,
    /// by gaps smaller and larger than the headers (the source and destination overlap or
    /// not).
    #[test]
    fn gap_moves_of_every_header_length_agree_with_copy_within() {
        for at in [0, 1, 19, 20, 21, 39, 40, 41, 60] {
            for n in [1, 8, 16, 24, 36, 64] {
                let pattern: [u8; 200] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(1));
                let mut raw = pattern;
                let mut b = PacketBuf::new(&mut raw, 80, 100).unwrap();
                b.insert_gap(at, n).unwrap();
                let mut want = pattern;
                want.copy_within(80..80 + at, 80 - n);
                assert_eq!(raw, want, "insert_gap({at}, {n})");
                let mut raw2 = pattern;
                let mut b = PacketBuf::new(&mut raw2, 20, 160).unwrap();
                b.remove_gap(at, n).unwrap();
                assert_eq!((b.head(), b.len()), (20 + n, 160 - n));
                let mut want = pattern;
                want.copy_within(20..20 + at, 20 + n);
                assert_eq!(raw2, want, "remove_gap({at}, {n})");
            }
        }
    }
}
