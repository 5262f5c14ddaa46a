//! Batched TUN reads through io_uring (Linux >= 6.7; used with `TUNNELD_TUN_URING=on`, see
//! [`super::uring_allowed`]): one multishot read
//! (`IORING_OP_READ_MULTISHOT`) on the queue's descriptor that, each time the device becomes
//! readable, reads every frame it has into buffers the kernel takes from a ring of provided
//! buffers (`IORING_REGISTER_PBUF_RING`), one completion per frame. The reading thread makes
//! one `io_uring_enter` per wakeup instead of a `poll` and a `read` per frame and one more
//! `read` that finds nothing. The ring is set up with DEFER_TASKRUN (and so SINGLE_ISSUER):
//! the reads run when the thread waits for completions, never interrupting it.
//!
//! [`UringReader::open`] fails where the kernel refuses any of it (io_uring disabled by
//! `kernel.io_uring_disabled`, seccomp, an older kernel), and a multishot read that fails
//! when armed is reported by [`UringReader::wait`]; the caller ([`super::TunPort`]) then
//! reads the plain way.
//!
//! `unsafe` here: the buffer ring's memory (page-aligned, shared with the kernel: the
//! entries written, the tail published with a release store), registering it, and
//! submitting the read, whose buffers the kernel writes into; each with its `// SAFETY:`
//! comment. Frames are handed out as slices of the buffers only between a completion and
//! [`UringReader::recycle`] of that buffer, when the kernel does not own it.
#![allow(unsafe_code)]

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

/// Provided buffers per queue (a power of two; at least two batches' worth, so a batch's
/// frames and a pending super-packet never starve the read).
pub const BUFFERS: usize = 64;
/// The buffer group id (one group per ring).
const BGID: u16 = 0;
/// The multishot read's `user_data`.
const READ: u64 = 1;
/// The cancel request's `user_data`.
const CANCEL: u64 = 2;

/// The ring of provided buffers: [`BUFFERS`] `io_uring_buf` entries in page-aligned memory
/// the kernel reads, the tail in the first entry's last two bytes.
struct BufRing {
    base: *mut types::BufRingEntry,
    layout: Layout,
    tail: u16,
}

// SAFETY: the memory is owned by the BufRing alone (the kernel only reads it); moving it to
// another thread moves that ownership.
unsafe impl Send for BufRing {}

impl BufRing {
    fn new() -> io::Result<BufRing> {
        let size = BUFFERS * std::mem::size_of::<types::BufRingEntry>();
        let layout = Layout::from_size_align(size.max(4096), 4096).map_err(|e| io::Error::other(e.to_string()))?;
        // SAFETY: the layout has a non-zero size; the result is checked for null.
        let base = unsafe { alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if base.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        Ok(BufRing { base, layout, tail: 0 })
    }

    /// Puts buffer `bid` (at `addr`, `len` bytes) at the tail, not yet published.
    fn push(&mut self, bid: u16, addr: *mut u8, len: usize) {
        let i = usize::from(self.tail) & (BUFFERS - 1);
        // SAFETY: `i` < BUFFERS, so the entry is inside the allocation; the kernel reads only
        // entries between its head and the published tail, which this one is not yet.
        let e = unsafe { &mut *self.base.add(i) };
        e.set_addr(addr as u64);
        e.set_len(len as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the entries pushed so far to the kernel.
    fn publish(&self) {
        // SAFETY: `tail` points at the u16 inside the first entry (BufRingEntry::tail's
        // contract: a valid ring base); it is 2-aligned and the kernel only reads it. An
        // AtomicU16 has the same layout as u16.
        let tail = unsafe { &*(types::BufRingEntry::tail(self.base).cast::<AtomicU16>()) };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the ring is unregistered (or the
        // io_uring closed) before the BufRing is dropped (UringReader's field order).
        unsafe { dealloc(self.base.cast(), self.layout) };
    }
}

/// One TUN queue's reads through io_uring; see the module documentation.
pub struct UringReader {
    // Field order is drop order: the ring (closing the io_uring) before the memory it used.
    ring: IoUring,
    fd: RawFd,
    wait: Duration,
    frame_len: usize,
    bufs: Box<[u8]>,
    br: BufRing,
    armed: bool,
    /// Completed frames not taken yet: buffer id and length, in order.
    done: VecDeque<(u16, usize)>,
    /// Buffers handed out and not recycled yet.
    out: usize,
}

impl UringReader {
    /// Sets up a ring for reading `fd` (a TUN queue, non-blocking) in frames of at most
    /// `frame_len` bytes, waits bounded by `wait`. Must be called on the thread that will
    /// read (SINGLE_ISSUER).
    pub fn open(fd: RawFd, frame_len: usize, wait: Duration) -> io::Result<UringReader> {
        let ring = IoUring::<squeue::Entry, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(4 * BUFFERS as u32)
            .build(8)?;
        let mut r = UringReader {
            ring,
            fd,
            wait,
            frame_len,
            bufs: vec![0u8; BUFFERS * frame_len].into_boxed_slice(),
            br: BufRing::new()?,
            armed: false,
            done: VecDeque::with_capacity(BUFFERS),
            out: 0,
        };
        // SAFETY: `br.base` is page-aligned memory for BUFFERS entries that lives as long as
        // the ring (it is dropped after it); BUFFERS is a power of two below 2^15.
        unsafe {
            r.ring
                .submitter()
                .register_buf_ring_with_flags(r.br.base as u64, BUFFERS as u16, BGID, 0)?;
        }
        for bid in 0..BUFFERS as u16 {
            let addr = r.buf_ptr(bid);
            r.br.push(bid, addr, frame_len);
        }
        r.br.publish();
        Ok(r)
    }

    fn buf_ptr(&mut self, bid: u16) -> *mut u8 {
        self.bufs[usize::from(bid) * self.frame_len..].as_mut_ptr()
    }

    /// Arms the multishot read if it is not.
    fn arm(&mut self) -> io::Result<()> {
        if self.armed {
            return Ok(());
        }
        // Length 0: each read takes its provided buffer's length (the kernel refuses any other).
        let sqe = opcode::ReadMulti::new(types::Fd(self.fd), 0, BGID)
            .build()
            .user_data(READ);
        // SAFETY: the read writes only into buffers of the registered group, which live as
        // long as the ring; the fd is the caller's TUN queue, open while the reader is.
        unsafe { self.ring.submission().push(&sqe) }.map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.armed = true;
        Ok(())
    }

    /// Moves the completions into `done`. A failed read ends multishot: ENOBUFS (every buffer
    /// out) re-arms on the next wait; any other error is returned (the caller falls back).
    fn reap(&mut self) -> io::Result<()> {
        let mut err = None;
        for cqe in self.ring.completion() {
            if cqe.user_data() != READ {
                continue;
            }
            let flags = cqe.flags();
            if !cqueue::more(flags) {
                self.armed = false;
            }
            let res = cqe.result();
            if res < 0 {
                if res != -libc::ENOBUFS {
                    err = Some(io::Error::from_raw_os_error(-res));
                }
                continue;
            }
            if let Some(bid) = cqueue::buffer_select(flags) {
                if usize::from(bid) < BUFFERS {
                    self.done.push_back((bid, (res as usize).min(self.frame_len)));
                    self.out += 1;
                }
            }
        }
        err.map_or(Ok(()), Err)
    }

    /// Waits (at most the wait interval, or not at all with `block` false) until frames are
    /// ready; returns whether any is.
    pub fn wait(&mut self, block: bool) -> io::Result<bool> {
        if !self.done.is_empty() {
            return Ok(true);
        }
        if self.out < BUFFERS {
            self.arm()?;
        }
        let ts = types::Timespec::from(if block { self.wait } else { Duration::ZERO });
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
            Err(e) => return Err(e),
        }
        self.reap()?;
        Ok(!self.done.is_empty())
    }

    /// The next frame ready: its buffer id (for [`frame`](Self::frame) and
    /// [`recycle`](Self::recycle)) and length.
    pub fn next_frame(&mut self) -> Option<(u16, usize)> {
        self.done.pop_front()
    }

    /// The `len` bytes of buffer `bid` (a frame [`next_frame`](Self::next_frame) gave, not recycled yet).
    pub fn frame(&mut self, bid: u16, len: usize) -> &mut [u8] {
        let at = usize::from(bid) * self.frame_len;
        &mut self.bufs[at..at + len.min(self.frame_len)]
    }

    /// Gives buffer `bid` back to the kernel (its frame no longer used).
    pub fn recycle(&mut self, bid: u16) {
        let addr = self.buf_ptr(bid);
        self.br.push(bid, addr, self.frame_len);
        self.br.publish();
        self.out = self.out.saturating_sub(1);
    }
}

impl Drop for UringReader {
    fn drop(&mut self) {
        // Cancel the read and wait (bounded) for its last completion, so the kernel writes
        // into no buffer once they are freed; then unregister the buffer ring.
        if self.armed {
            let sqe = opcode::AsyncCancel::new(READ).build().user_data(CANCEL);
            // SAFETY: a cancel request carries no buffer.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                for _ in 0..10 {
                    let ts = types::Timespec::from(Duration::from_millis(10));
                    let args = types::SubmitArgs::new().timespec(&ts);
                    let _ = self.ring.submitter().submit_with_args(1, &args);
                    for cqe in self.ring.completion() {
                        if cqe.user_data() == READ && !cqueue::more(cqe.flags()) {
                            self.armed = false;
                        }
                    }
                    if !self.armed {
                        break;
                    }
                }
            }
        }
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
    }
}
