//! Sending with UDP GSO: runs of equal-sized datagrams to one destination as one message.
#![allow(unsafe_code)]

use crate::dataplane::packet::BATCH;
use crate::dev::sys::Names;
use std::io;
use std::os::fd::RawFd;

// send_gso writes the control message by hand: a 16-byte cmsghdr (64-bit Linux).
const _: () = assert!(std::mem::size_of::<libc::cmsghdr>() == 16);

/// The most datagrams one UDP GSO send carries (the kernel's UDP_MAX_SEGMENTS).
const UDP_MAX_SEGMENTS: usize = 64;

/// Sends `payloads[i]` to `to`'s slot `i` with one sendmmsg(2), runs of equal-sized
/// datagrams to one destination (the last of a run may be shorter) each as one message with
/// UDP_SEGMENT (UDP GSO): the kernel cuts it into datagrams of the run's size. Returns how
/// many datagrams went (at least one) and how many of the messages were runs of more than
/// one, with how many datagrams.
pub(super) fn send_gso(fd: RawFd, payloads: &[&[u8]], to: &mut Names) -> io::Result<Runs> {
    #[repr(C, align(8))]
    #[derive(Clone, Copy)]
    struct Cmsg([u8; 32]);
    let n = payloads.len().min(BATCH);
    if n == 0 {
        return Ok(Runs::default());
    }
    // SAFETY: iovec and mmsghdr are plain C structs for which all-zero bytes are valid.
    let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    let mut ctl = [Cmsg([0; 32]); BATCH];
    let mut runs = [0usize; BATCH]; // datagrams in message m
    for (v, p) in iov.iter_mut().zip(payloads) {
        v.iov_base = p.as_ptr() as *mut libc::c_void;
        v.iov_len = p.len();
    }
    let (mut m, mut i) = (0, 0);
    while i < n {
        let seg = payloads[i].len();
        let (mut j, mut total) = (i + 1, seg);
        let dst = to.get(i);
        // An empty datagram never joins a run: a run's last segment cannot be empty.
        while j < n
            && j - i < UDP_MAX_SEGMENTS
            && to.get(j) == dst
            && !payloads[j].is_empty()
            && payloads[j].len() <= seg
            && total + payloads[j].len() <= 65000
        {
            total += payloads[j].len();
            j += 1;
            if payloads[j - 1].len() < seg {
                break; // a shorter datagram ends the run
            }
        }
        let h = &mut hdrs[m].msg_hdr;
        h.msg_iov = &mut iov[i];
        h.msg_iovlen = j - i;
        (h.msg_name, h.msg_namelen) = to.raw(i);
        if j - i > 1 {
            let c = &mut ctl[m].0;
            // struct cmsghdr { size_t cmsg_len; int cmsg_level; int cmsg_type; } then the u16.
            let len = std::mem::size_of::<libc::cmsghdr>() + 2;
            c[..8].copy_from_slice(&(len as u64).to_ne_bytes());
            c[8..12].copy_from_slice(&libc::SOL_UDP.to_ne_bytes());
            c[12..16].copy_from_slice(&libc::UDP_SEGMENT.to_ne_bytes());
            c[16..18].copy_from_slice(&(seg as u16).to_ne_bytes());
            h.msg_control = c.as_mut_ptr().cast();
            h.msg_controllen = 24; // CMSG_SPACE(2) on 64-bit Linux
        }
        runs[m] = j - i;
        m += 1;
        i = j;
    }
    // SAFETY: the first `m` headers each point at a run of iovecs in `iov` (each describing
    // a live borrowed payload the kernel only reads), at one socket address of `to` with its
    // true length, and, for
    // runs of more than one, at a control buffer holding one well-formed 8-byte-aligned
    // cmsghdr (UDP_SEGMENT, a u16) within `msg_controllen`. Everything outlives the call; the
    // kernel writes only the headers' `msg_len`.
    let r = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), m as libc::c_uint, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let sent = &runs[..(r as usize).min(m)];
    let coalesced = sent.iter().filter(|&&k| k > 1);
    Ok(Runs {
        datagrams: sent.iter().sum::<usize>().max(1),
        runs: coalesced.clone().count(),
        in_runs: coalesced.sum(),
    })
}

/// What one GSO send or GRO read moved: datagrams in all, and the messages that were runs of
/// more than one datagram, with the datagrams in them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Runs {
    pub(super) datagrams: usize,
    pub(super) runs: usize,
    pub(super) in_runs: usize,
}
