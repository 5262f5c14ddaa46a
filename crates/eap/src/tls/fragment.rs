//! Fragmentation of TLS messages over EAP-TLS (RFC 5216 §2.1.5), both ways.
//!
//! - [`Reassembler`]: fragments in, one TLS message (or set of messages) out. The first
//!   fragment of a fragmented message carries the L flag and the TLS Message Length (§3.1:
//!   "MUST be set for the first fragment"); a later fragment may repeat the same length. The
//!   total is bounded by [`MAX_TLS_MESSAGE_LEN`] before anything is stored, and the fragments
//!   must add up to the announced length exactly: anything else is a typed error.
//! - [`Fragmenter`]: one outgoing TLS flight cut into fragments of at most a configured size,
//!   the first with L and M, the middle ones with M, the last with neither; each waits for
//!   the other side's ACK (an empty EAP-TLS packet, §2.1.5).

use super::packet::{Flags, Repr};
use crate::packet::Code;
use crate::Error;
use alloc::vec::Vec;

/// The longest TLS message (set of handshake messages) taken from the other side: a client
/// flight with a chain of a few certificates is a few kilobytes; 64 KiB leaves room for
/// long chains and bounds what one peer can make the server hold.
pub const MAX_TLS_MESSAGE_LEN: usize = 64 * 1024;

/// The TLS data of one EAP-TLS fragment we send, by default (strongSwan's eap-tls
/// `fragment_size` is 1024 too). Each EAP message travels in its own IKE_AUTH message.
pub const DEFAULT_FRAGMENT_SIZE: usize = 1024;

/// Reassembles the incoming fragments of one TLS message (RFC 5216 §2.1.5).
#[derive(Debug)]
pub struct Reassembler {
    buf: Vec<u8>,
    /// The TLS Message Length of the first fragment (None: no fragment pending).
    declared: Option<usize>,
    cap: usize,
}

impl Default for Reassembler {
    fn default() -> Self {
        Reassembler::new(MAX_TLS_MESSAGE_LEN)
    }
}

impl Reassembler {
    /// A reassembler refusing messages longer than `cap` octets.
    pub fn new(cap: usize) -> Reassembler {
        Reassembler {
            buf: Vec::new(),
            declared: None,
            cap,
        }
    }

    /// Whether a fragmented message is partly in.
    pub fn in_progress(&self) -> bool {
        self.declared.is_some()
    }

    /// Takes one fragment: `Ok(None)` when more are expected (send an ACK), `Ok(Some(msg))`
    /// with the whole message after the last one. On an error nothing changed: the fragment
    /// is dropped, what came before it kept (the caller bounds the rounds).
    pub fn push(&mut self, r: &Repr) -> Result<Option<Vec<u8>>, Error> {
        let announced = r.tls_message_length.map(|l| l as usize);
        let declared = match (self.declared, announced) {
            (None, None) if r.flags.more => {
                return Err(Error::Malformed("first fragment without the L flag"));
            }
            (None, None) => {
                // One unfragmented message without L.
                if r.data.is_empty() {
                    return Err(Error::Unexpected("an empty EAP-TLS packet where TLS data was expected"));
                }
                if r.data.len() > self.cap {
                    return Err(Error::TooLong);
                }
                return Ok(Some(r.data.to_vec()));
            }
            (None, Some(len)) if len > self.cap => return Err(Error::TooLong),
            (None, Some(0)) => return Err(Error::Malformed("TLS Message Length zero")),
            (None, Some(len)) => len,
            (Some(d), Some(len)) if d != len => {
                return Err(Error::Malformed("TLS Message Length changed between fragments"));
            }
            (Some(d), _) => d,
        };
        if r.flags.more && r.data.is_empty() {
            return Err(Error::Malformed("an empty fragment with the M flag"));
        }
        let total = self.buf.len() + r.data.len();
        if total > declared || (!r.flags.more && total != declared) {
            return Err(Error::LengthMismatch);
        }
        self.buf.extend_from_slice(r.data);
        if r.flags.more {
            self.declared = Some(declared);
            return Ok(None);
        }
        self.declared = None;
        Ok(Some(core::mem::take(&mut self.buf)))
    }

    /// Drops a partial message.
    pub fn reset(&mut self) {
        self.buf = Vec::new();
        self.declared = None;
    }
}

/// Cuts one outgoing TLS flight into EAP-TLS fragments (RFC 5216 §2.1.5).
#[derive(Debug)]
pub struct Fragmenter {
    data: Vec<u8>,
    offset: usize,
    size: usize,
}

impl Fragmenter {
    /// `data` in fragments of at most `size` octets of TLS data (at least 1; at most what
    /// the 16-bit EAP Length leaves room for).
    pub fn new(data: Vec<u8>, size: usize) -> Fragmenter {
        Fragmenter {
            data,
            offset: 0,
            size: size.clamp(1, usize::from(u16::MAX) - 10),
        }
    }

    /// Whether fragments remain to be sent.
    pub fn has_more(&self) -> bool {
        self.offset < self.data.len()
    }

    /// The next fragment as an EAP packet of `code` and `identifier`, or None when all went.
    /// A message that fits in one fragment goes without L (as strongSwan sends it); the first
    /// of several carries L with the total length and M (§3.1).
    pub fn next_packet(&mut self, code: Code, identifier: u8) -> Option<Vec<u8>> {
        if !self.has_more() {
            return None;
        }
        let first = self.offset == 0;
        let end = (self.offset + self.size).min(self.data.len());
        let more = end < self.data.len();
        let total = u32::try_from(self.data.len()).ok()?;
        let r = Repr {
            code,
            identifier,
            flags: Flags {
                length: first && more,
                more,
                start: false,
            },
            tls_message_length: (first && more).then_some(total),
            data: &self.data[self.offset..end],
        };
        self.offset = end;
        r.to_vec().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(len: Option<u32>, more: bool, data: &[u8]) -> Repr<'_> {
        Repr {
            code: Code::Response,
            identifier: 1,
            flags: Flags {
                length: len.is_some(),
                more,
                start: false,
            },
            tls_message_length: len,
            data,
        }
    }

    #[test]
    fn fragments_out_and_back_in() {
        let msg: Vec<u8> = (0..=255u8).cycle().take(2500).collect();
        let mut f = Fragmenter::new(msg.clone(), 1000);
        let mut r = Reassembler::default();
        let mut got = None;
        let mut n = 0;
        while let Some(p) = f.next_packet(Code::Request, 3) {
            n += 1;
            let repr = Repr::parse_eap(&p).unwrap();
            assert_eq!(repr.flags.length, n == 1, "L on the first fragment only");
            assert_eq!(repr.flags.more, n < 3);
            got = r.push(&repr).unwrap();
        }
        assert_eq!(n, 3);
        assert_eq!(got.unwrap(), msg);
        // One that fits: no L, no M.
        let mut f = Fragmenter::new(alloc::vec![1, 2, 3], 1000);
        let p = f.next_packet(Code::Response, 4).unwrap();
        assert_eq!(p, [2, 4, 0, 9, 13, 0, 1, 2, 3]);
        assert!(f.next_packet(Code::Response, 5).is_none());
    }

    #[test]
    fn bad_fragments_are_typed_errors() {
        let mut r = Reassembler::new(100);
        // More than the cap announced: refused before anything is stored.
        assert_eq!(r.push(&frag(Some(101), true, &[1])), Err(Error::TooLong));
        assert_eq!(r.push(&frag(Some(u32::MAX), true, &[1])), Err(Error::TooLong));
        // M without L on the first fragment.
        assert!(matches!(r.push(&frag(None, true, &[1])), Err(Error::Malformed(_))));
        // More data than announced.
        assert_eq!(r.push(&frag(Some(4), true, &[1, 2])), Ok(None));
        assert_eq!(r.push(&frag(None, true, &[3, 4, 5])), Err(Error::LengthMismatch));
        // Fewer than announced at the last fragment.
        assert_eq!(r.push(&frag(None, false, &[3])), Err(Error::LengthMismatch));
        // A changed length.
        assert!(matches!(r.push(&frag(Some(5), true, &[2])), Err(Error::Malformed(_))));
        // An empty fragment with M (which would make an endless conversation).
        assert!(matches!(r.push(&frag(None, true, &[])), Err(Error::Malformed(_))));
        // None of the refused fragments changed what was in: the right last one completes it.
        assert!(r.in_progress());
        assert_eq!(r.push(&frag(None, false, &[3, 4])), Ok(Some(alloc::vec![1, 2, 3, 4])));
        assert!(!r.in_progress());
        // An unfragmented message over the cap.
        assert_eq!(r.push(&frag(None, false, &[0; 101])), Err(Error::TooLong));
        // The same length repeated on a later fragment is fine.
        assert_eq!(r.push(&frag(Some(3), true, &[1])), Ok(None));
        assert_eq!(r.push(&frag(Some(3), false, &[2, 3])), Ok(Some(alloc::vec![1, 2, 3])));
    }
}
