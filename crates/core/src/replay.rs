//! Anti-replay (RFC 4303 section 3.4.3 and Appendix A) as a ring bitmap (RFC 6479): O(1) work
//! per packet and no shifting, for windows from 32 to [`MAX_WINDOW`] packets.
//!
//! Use: [`ReplayWindow::check`] before integrity verification (it also infers the ESN high
//! bits the ICV needs), then [`ReplayWindow::accept`] only after the ICV verified.

use crate::error::Error;
use crate::esn;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

/// The smallest window RFC 4303 section 3.4.3 allows.
pub const MIN_WINDOW: u32 = 32;
/// The largest window supported (a 64 Kib bitmap, 8 KiB of memory).
pub const MAX_WINDOW: u32 = 1 << 16;

/// A receiver's anti-replay window.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// Window size in packets; 0 disables the replay check.
    size: u32,
    esn: bool,
    /// Highest authenticated sequence number (0: none yet).
    top: u64,
    /// Ring of 64-bit blocks; block `(s / 64) % len` holds bit `s % 64` for sequence `s`.
    bitmap: Vec<u64>,
}

/// The window used for ESN inference when the replay check is disabled.
const ESN_NOTIONAL_WINDOW: u32 = 1 << 30;

impl ReplayWindow {
    /// A window of `size` packets (0, or a power of two from 32 to [`MAX_WINDOW`]). With
    /// `esn`, 64-bit sequence numbers are inferred from the 32 bits on the wire.
    pub fn new(size: u32, esn: bool) -> Result<Self, Error> {
        if size != 0 && (!size.is_power_of_two() || !(MIN_WINDOW..=MAX_WINDOW).contains(&size)) {
            return Err(Error::ReplayWindowSize(size));
        }
        // Enough blocks that the whole window plus the block being filled fit (RFC 6479 s.2).
        let blocks = if size == 0 {
            0
        } else {
            ((size as usize).div_ceil(64) + 1).next_power_of_two()
        };
        Ok(ReplayWindow {
            size,
            esn,
            top: 0,
            bitmap: vec![0; blocks],
        })
    }

    /// A window of `size` packets started just below sequence number `first` (so an SA set
    /// up mid-sequence accepts from there).
    pub fn starting_at(size: u32, esn: bool, first: u64) -> Result<Self, Error> {
        let mut w = ReplayWindow::new(size, esn)?;
        if first > 1 {
            w.set_last(first - 1);
        }
        Ok(w)
    }

    /// Starts the window as if `last` had been the last packet received (for resuming an SA
    /// or a capture in the middle of its sequence space).
    pub fn set_last(&mut self, last: u64) {
        self.top = last;
        for b in self.bitmap.iter_mut() {
            *b = 0;
        }
        if last != 0 {
            self.mark(last);
        }
    }

    /// The window size.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// The highest sequence number accepted so far.
    pub fn top(&self) -> u64 {
        self.top
    }

    fn bit(&self, seq: u64) -> (usize, u64) {
        let block = ((seq >> 6) as usize) & (self.bitmap.len() - 1);
        (block, 1u64 << (seq & 63))
    }

    fn mark(&mut self, seq: u64) {
        if !self.bitmap.is_empty() {
            let (b, m) = self.bit(seq);
            self.bitmap[b] |= m;
        }
    }

    /// The full sequence number of a packet whose wire sequence number is `seq_lo`, if it may
    /// be new: not 0, not a replay, not left of the window. Changes nothing.
    #[inline]
    pub fn check(&self, seq_lo: u32) -> Result<u64, Error> {
        let seq = if self.esn {
            let w = if self.size == 0 { ESN_NOTIONAL_WINDOW } else { self.size };
            ((esn::infer_high(self.top, w, seq_lo) as u64) << 32) | seq_lo as u64
        } else {
            seq_lo as u64
        };
        if self.size == 0 {
            return Ok(seq);
        }
        if seq == 0 {
            return Err(Error::SequenceZero);
        }
        if seq > self.top {
            return Ok(seq);
        }
        if self.top - seq >= self.size as u64 {
            return Err(Error::TooOld);
        }
        let (b, m) = self.bit(seq);
        if self.bitmap[b] & m != 0 {
            Err(Error::Replay)
        } else {
            Ok(seq)
        }
    }

    /// Records `seq` as received, after its ICV verified. Checks again, so a packet accepted
    /// twice between check and accept is still refused. `Ok(true)` when the packet is *new*:
    /// the window checks replays and `seq` is above every number accepted before (a late
    /// packet inside the window, or any packet on an SA without a window, is `Ok(false)`).
    /// Only a new packet may move a peer's learned address (RFC 7296 2.23; RFC 3948 4).
    #[inline]
    pub fn accept(&mut self, seq: u64) -> Result<bool, Error> {
        if self.size == 0 {
            self.top = self.top.max(seq);
            return Ok(false);
        }
        if seq == 0 {
            return Err(Error::SequenceZero);
        }
        if seq > self.top {
            let nblocks = self.bitmap.len() as u64;
            let cur = self.top >> 6;
            let new = seq >> 6;
            // Clear the blocks the window slides over (at most the whole ring).
            let diff = (new - cur).min(nblocks);
            for i in 1..=diff {
                let b = ((cur + i) & (nblocks - 1)) as usize;
                self.bitmap[b] = 0;
            }
            self.top = seq;
            self.mark(seq);
            return Ok(true);
        } else if self.top - seq >= self.size as u64 {
            return Err(Error::TooOld);
        } else {
            let (b, m) = self.bit(seq);
            if self.bitmap[b] & m != 0 {
                return Err(Error::Replay);
            }
        }
        self.mark(seq);
        Ok(false)
    }
}

/// A sender's sequence counter (RFC 4303 section 3.3.3): it never wraps. Without ESN the
/// last usable number is 2^32 - 1, with ESN 2^64 - 1.
#[derive(Debug, Clone)]
pub struct SeqCounter {
    next: u64,
    esn: bool,
}

impl SeqCounter {
    /// A counter whose first number is `first` (1 for a new SA).
    pub fn new(first: u64, esn: bool) -> Result<Self, Error> {
        if first == 0 {
            return Err(Error::SequenceZero);
        }
        if !esn && first > u32::MAX as u64 {
            return Err(Error::InvalidSa("initial sequence number above 2^32-1 needs ESN"));
        }
        Ok(SeqCounter { next: first, esn })
    }

    /// The number the next packet gets, without taking it.
    pub fn peek(&self) -> Result<u64, Error> {
        let limit = if self.esn { u64::MAX } else { u32::MAX as u64 };
        if self.next == 0 || self.next > limit {
            Err(Error::SequenceExhausted)
        } else {
            Ok(self.next)
        }
    }

    /// Takes the next number, or fails with [`Error::SequenceExhausted`] once the space is used up.
    #[allow(clippy::should_implement_trait)] // fallible, so not an Iterator
    pub fn next(&mut self) -> Result<u64, Error> {
        let s = self.peek()?;
        // After u64::MAX, `next` becomes 0, which `peek` treats as exhausted.
        self.next = s.wrapping_add(1);
        Ok(s)
    }
}

/// A sender's sequence counter that many threads draw from at once (RFC 4303 section 3.3.3):
/// numbers are handed out by an atomic compare-and-swap, each exactly once, and the counter
/// never wraps. [`AtomicSeq::take_n`] reserves a run of numbers for a batch in one step.
#[derive(Debug)]
pub struct AtomicSeq {
    /// The next number to hand out; 0 once the space is used up (after 2^64 - 1).
    next: AtomicU64,
    /// The last usable number: 2^32 - 1, or 2^64 - 1 with ESN.
    limit: u64,
}

impl AtomicSeq {
    /// A counter whose first number is `first` (1 for a new SA), as [`SeqCounter::new`].
    pub fn new(first: u64, esn: bool) -> Result<Self, Error> {
        let c = SeqCounter::new(first, esn)?;
        Ok(AtomicSeq {
            next: AtomicU64::new(c.next),
            limit: if c.esn { u64::MAX } else { u32::MAX as u64 },
        })
    }

    /// The number the next packet gets, without taking it.
    #[inline]
    pub fn peek(&self) -> Result<u64, Error> {
        let n = self.next.load(Ordering::Relaxed);
        if n == 0 || n > self.limit {
            Err(Error::SequenceExhausted)
        } else {
            Ok(n)
        }
    }

    /// Takes the next number, or fails with [`Error::SequenceExhausted`] once the space is
    /// used up.
    #[inline]
    pub fn take(&self) -> Result<u64, Error> {
        self.take_n(1).map(|(first, _)| first)
    }

    /// [`AtomicSeq::take`] for a sole owner: `&mut self` proves no other thread draws at the
    /// same time, so the counter is read and written without an atomic read-modify-write.
    #[inline]
    pub fn take_mut(&mut self) -> Result<u64, Error> {
        let next = self.next.get_mut();
        let cur = *next;
        if cur == 0 || cur > self.limit {
            return Err(Error::SequenceExhausted);
        }
        // After u64::MAX the counter becomes 0, which means exhausted.
        *next = cur.wrapping_add(1);
        Ok(cur)
    }

    /// Takes up to `n` consecutive numbers at once: returns the first and how many were
    /// taken (fewer than `n` only at the end of the space). Fails with
    /// [`Error::SequenceExhausted`] when none is left, or when `n` is 0.
    pub fn take_n(&self, n: u64) -> Result<(u64, u64), Error> {
        if n == 0 {
            return Err(Error::SequenceExhausted);
        }
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            if cur == 0 || cur > self.limit {
                return Err(Error::SequenceExhausted);
            }
            let got = n.min(self.limit - cur + 1);
            // After u64::MAX the counter becomes 0, which means exhausted.
            let new = cur.wrapping_add(got);
            match self
                .next
                .compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok((cur, got)),
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A receiver's anti-replay window shared by threads: [`SharedReplay::check`] and
/// [`SharedReplay::accept`] each take a spin lock for the few instructions of the bitmap test
/// or update, never across the ICV check or decryption (the shape of Linux
/// `xfrm_replay_check` / `xfrm_replay_advance` under `x->lock`). `accept` checks again, so two
/// threads that both passed `check` with the same number cannot both accept it.
#[derive(Debug)]
pub struct SharedReplay {
    window: spin::Mutex<ReplayWindow>,
}

impl SharedReplay {
    /// Shares `window`.
    pub fn new(window: ReplayWindow) -> Self {
        SharedReplay {
            window: spin::Mutex::new(window),
        }
    }

    /// [`ReplayWindow::check`] under the lock.
    #[inline]
    pub fn check(&self, seq_lo: u32) -> Result<u64, Error> {
        self.window.lock().check(seq_lo)
    }

    /// [`ReplayWindow::accept`] under the lock.
    #[inline]
    pub fn accept(&self, seq: u64) -> Result<bool, Error> {
        self.window.lock().accept(seq)
    }

    /// [`ReplayWindow::set_last`] under the lock.
    pub fn set_last(&self, last: u64) {
        self.window.lock().set_last(last)
    }

    /// The window itself, for a sole owner: `&mut self` proves no other thread holds it, so
    /// no lock is taken.
    #[inline]
    pub fn get_mut(&mut self) -> &mut ReplayWindow {
        self.window.get_mut()
    }

    /// A copy of the window as it is now (for reports).
    pub fn snapshot(&self) -> ReplayWindow {
        self.window.lock().clone()
    }

    /// The highest sequence number accepted so far.
    pub fn top(&self) -> u64 {
        self.window.lock().top()
    }

    /// The window size.
    pub fn size(&self) -> u32 {
        self.window.lock().size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;

    fn recv(w: &mut ReplayWindow, lo: u32) -> Result<u64, Error> {
        let s = w.check(lo)?;
        w.accept(s)?;
        Ok(s)
    }

    #[test]
    fn sizes() {
        assert!(ReplayWindow::new(16, false).is_err());
        assert!(ReplayWindow::new(100, false).is_err());
        assert!(ReplayWindow::new(MAX_WINDOW * 2, false).is_err());
        for s in [0, 32, 64, 128, 1024, 4096, MAX_WINDOW] {
            assert!(ReplayWindow::new(s, false).is_ok());
        }
    }

    #[test]
    fn in_order_duplicates_and_zero() {
        let mut w = ReplayWindow::new(64, false).unwrap();
        assert_eq!(w.check(0), Err(Error::SequenceZero));
        for s in 1..=200 {
            assert_eq!(recv(&mut w, s), Ok(s as u64));
        }
        assert_eq!(recv(&mut w, 200), Err(Error::Replay));
        assert_eq!(recv(&mut w, 150), Err(Error::Replay));
        assert_eq!(recv(&mut w, 136), Err(Error::TooOld));
        assert_eq!(recv(&mut w, 137), Err(Error::Replay));
    }

    #[test]
    fn reordered_within_window() {
        let mut w = ReplayWindow::new(32, false).unwrap();
        assert!(recv(&mut w, 40).is_ok());
        for s in (9..40).rev() {
            assert_eq!(recv(&mut w, s), Ok(s as u64), "seq {s}");
        }
        assert_eq!(recv(&mut w, 8), Err(Error::TooOld));
        for s in 9..=40 {
            assert_eq!(recv(&mut w, s), Err(Error::Replay));
        }
    }

    #[test]
    fn far_ahead_jump_clears_the_ring() {
        let mut w = ReplayWindow::new(128, false).unwrap();
        for s in 1..=100 {
            recv(&mut w, s).unwrap();
        }
        // A jump of many times the ring size must not leave stale bits behind.
        assert!(recv(&mut w, 1_000_000).is_ok());
        for s in (1_000_000 - 127)..1_000_000 {
            assert_eq!(w.check(s), Ok(s as u64), "seq {s} was never received");
        }
        assert_eq!(w.check(1_000_000 - 128), Err(Error::TooOld));
        // Jumps of exactly a block boundary and of the window size.
        assert!(recv(&mut w, 1_000_064).is_ok());
        assert!(recv(&mut w, 1_000_000 + 64 + 128).is_ok());
        assert_eq!(recv(&mut w, 1_000_064 + 1), Ok(1_000_065));
        assert_eq!(recv(&mut w, 1_000_064), Err(Error::TooOld));
    }

    #[test]
    fn check_does_not_update_and_failed_icv_leaves_window_alone() {
        let mut w = ReplayWindow::new(64, false).unwrap();
        recv(&mut w, 10).unwrap();
        // A forged packet far ahead is checked but never accepted (its ICV failed)...
        assert_eq!(w.check(5000), Ok(5000));
        // ...so the window did not move and 9 still gets in.
        assert_eq!(recv(&mut w, 9), Ok(9));
        assert_eq!(w.top(), 10);
    }

    #[test]
    fn large_window_matches_a_reference_model() {
        // Compare against a plain set-based model over a pseudo-random walk.
        let size = 4096u32;
        let mut w = ReplayWindow::new(size, false).unwrap();
        let mut seen = alloc::collections::BTreeSet::new();
        let mut top = 0u64;
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let mut base = 1u64;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let step = x % 9000;
            base += (x >> 20) % 40;
            let s = (base + step).saturating_sub(4500).max(1);
            let want = if s + (size as u64) <= top {
                Err(Error::TooOld)
            } else if seen.contains(&s) {
                Err(Error::Replay)
            } else {
                Ok(s)
            };
            let got = recv(&mut w, s as u32);
            assert_eq!(got, want, "seq {s} top {top}");
            if got.is_ok() {
                seen.insert(s);
                top = top.max(s);
            }
        }
    }

    #[test]
    fn esn_wraps_around_2_pow_32() {
        let mut w = ReplayWindow::new(64, true).unwrap();
        w.set_last((1u64 << 32) - 10);
        for s in (1u64 << 32) - 9..(1u64 << 32) + 10 {
            assert_eq!(recv(&mut w, s as u32), Ok(s), "seq {s:#x}");
        }
        // A late packet from just before the wrap is still recognised (and replays caught).
        assert_eq!(recv(&mut w, u32::MAX - 3), Err(Error::Replay));
        // Low bits 0 after the wrap are sequence 2^32, which was received.
        assert_eq!(recv(&mut w, 0), Err(Error::Replay));
        // Without ESN the same low bits are simply too old / zero.
        let mut n = ReplayWindow::new(64, false).unwrap();
        n.set_last(u32::MAX as u64);
        assert_eq!(n.check(5), Err(Error::TooOld));
        assert_eq!(n.check(0), Err(Error::SequenceZero));
    }

    #[test]
    fn sender_counter_never_wraps() {
        let mut c = SeqCounter::new(u32::MAX as u64 - 1, false).unwrap();
        assert_eq!(c.next(), Ok(u32::MAX as u64 - 1));
        assert_eq!(c.next(), Ok(u32::MAX as u64));
        assert_eq!(c.next(), Err(Error::SequenceExhausted));
        assert_eq!(c.next(), Err(Error::SequenceExhausted));
        let mut e = SeqCounter::new(u32::MAX as u64, true).unwrap();
        e.next().unwrap();
        assert_eq!(e.next(), Ok(1u64 << 32));
        let mut m = SeqCounter::new(u64::MAX, true).unwrap();
        assert_eq!(m.next(), Ok(u64::MAX));
        assert_eq!(m.next(), Err(Error::SequenceExhausted));
        assert!(SeqCounter::new(0, false).is_err());
        assert!(SeqCounter::new(1 << 33, false).is_err());
    }

    #[test]
    fn atomic_counter_takes_runs_and_never_wraps() {
        let c = AtomicSeq::new(u32::MAX as u64 - 4, false).unwrap();
        assert_eq!(c.take_n(3), Ok((u32::MAX as u64 - 4, 3)));
        // Only two numbers are left: a batch of 5 gets those two.
        assert_eq!(c.take_n(5), Ok((u32::MAX as u64 - 1, 2)));
        assert_eq!(c.take(), Err(Error::SequenceExhausted));
        assert_eq!(c.peek(), Err(Error::SequenceExhausted));
        let e = AtomicSeq::new(u64::MAX - 1, true).unwrap();
        assert_eq!(e.take_n(4), Ok((u64::MAX - 1, 2)));
        assert_eq!(e.take(), Err(Error::SequenceExhausted));
        assert_eq!(e.take_n(0), Err(Error::SequenceExhausted));
    }

    /// `error.rs` spells the largest window out (it imports nothing of this module, so the
    /// modules do not import each other): the text must say [`MAX_WINDOW`].
    #[test]
    fn the_window_size_error_names_the_largest_window() {
        let text = ReplayWindow::new(48, false).unwrap_err().to_string();
        assert!(text.contains(&format!("to {MAX_WINDOW}")), "{text}");
        assert!(text.contains(&format!("from {MIN_WINDOW}")), "{text}");
    }

    /// Only a packet above every number accepted before is new; a late one inside the
    /// window is accepted but not new; without a window nothing is new (RFC 7296 2.23).
    #[test]
    fn accept_says_which_packets_are_new() {
        let mut w = ReplayWindow::new(64, false).unwrap();
        assert_eq!(w.accept(w.check(5).unwrap()), Ok(true));
        assert_eq!(w.accept(w.check(9).unwrap()), Ok(true));
        assert_eq!(w.accept(w.check(7).unwrap()), Ok(false), "late, inside the window");
        assert_eq!(w.check(9), Err(Error::Replay));
        assert_eq!(w.accept(w.check(10).unwrap()), Ok(true));
        let mut off = ReplayWindow::new(0, false).unwrap();
        assert_eq!(
            off.accept(off.check(5).unwrap()),
            Ok(false),
            "no replay check: never new"
        );
        assert_eq!(off.accept(off.check(6).unwrap()), Ok(false));
        let mut esn = ReplayWindow::new(64, true).unwrap();
        esn.set_last(u32::MAX as u64 - 1);
        let past_wrap = esn.check(3).unwrap();
        assert_eq!(past_wrap, (1u64 << 32) | 3);
        assert_eq!(esn.accept(past_wrap), Ok(true), "ESN: the high bits count");
    }

    #[test]
    fn shared_window_accepts_once() {
        let w = SharedReplay::new(ReplayWindow::new(64, false).unwrap());
        let s = w.check(7).unwrap();
        let again = w.check(7).unwrap(); // a second thread checked the same packet
        assert_eq!(w.accept(s), Ok(true));
        assert_eq!(w.accept(again), Err(Error::Replay));
        assert_eq!(w.top(), 7);
    }
}
