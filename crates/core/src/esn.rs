//! Extended sequence numbers: inferring the high 32 bits at the receiver (RFC 4303
//! Appendix A2.2) and splitting the 64-bit counter at the sender (RFC 4303 section 2.2.1).

/// The low 32 bits, as carried in the packet.
#[inline]
pub fn low(seq: u64) -> u32 {
    seq as u32
}

/// The high 32 bits, as appended to the ICV input.
#[inline]
pub fn high(seq: u64) -> u32 {
    (seq >> 32) as u32
}

/// RFC 4303 Appendix A2.2: the high 32 bits of a received sequence number whose low bits are
/// `seq_lo`, given the highest authenticated sequence number `top` and the window size `w`.
///
/// At the start of the SA (`top` in the first subspace) the guess "previous subspace" is
/// impossible and the current one is used.
#[inline]
pub fn infer_high(top: u64, w: u32, seq_lo: u32) -> u32 {
    let th = high(top);
    let tl = low(top);
    let w = w.max(1);
    if tl >= w - 1 {
        // Case A: the window lies within one sequence-number subspace.
        if seq_lo >= tl - (w - 1) {
            th
        } else {
            th.wrapping_add(1)
        }
    } else {
        // Case B: the window spans two subspaces.
        if seq_lo >= tl.wrapping_sub(w - 1) {
            th.checked_sub(1).unwrap_or(th)
        } else {
            th
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_a_within_one_subspace() {
        let top = (7u64 << 32) | 1000;
        assert_eq!(infer_high(top, 64, 1000), 7);
        assert_eq!(infer_high(top, 64, 937), 7); // left edge of the window
        assert_eq!(infer_high(top, 64, 936), 8); // below the window: assumed to have wrapped
        assert_eq!(infer_high(top, 64, 5000), 7);
    }

    #[test]
    fn case_b_window_spans_two_subspaces() {
        let top = (7u64 << 32) | 10;
        assert_eq!(infer_high(top, 64, 5), 7);
        assert_eq!(infer_high(top, 64, 100), 7); // ahead of top in the same subspace
        assert_eq!(infer_high(top, 64, u32::MAX - 20), 6); // in the window, previous subspace
        assert_eq!(infer_high(top, 64, u32::MAX - 60), 7); // left of the window: far ahead
    }

    #[test]
    fn start_of_sa_never_underflows() {
        assert_eq!(infer_high(0, 64, 1), 0);
        assert_eq!(infer_high(0, 64, u32::MAX), 0);
    }
}
