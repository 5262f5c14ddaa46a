//! IKE message fragmentation (RFC 7383): the Encrypted Fragment payload SKF (type 53, 2.5),
//! splitting an encrypted message into fragments each with its own IV and ICV (2.5.3), the
//! fragment size as an IP datagram's (2.5.1), and reassembly (2.6) bounded in fragments
//! ([`MAX_FRAGMENTS`]), bytes ([`MAX_MESSAGE_LEN`]; before the peer is authenticated,
//! [`crate::limits::MAX_PREAUTH_MESSAGE_LEN`]) and time ([`FRAGMENT_REASSEMBLY_TIMEOUT`]),
//! every fragment authenticated before it is kept.
//!
//! Fragmentation is used only when both sides sent IKEV2_FRAGMENTATION_SUPPORTED in
//! IKE_SA_INIT (2.3; `task/ike_init.rs`) and only for encrypted messages, never
//! IKE_SA_INIT (2.5). The fragments of one message travel together as a "train": the
//! fragment messages one after the other in one buffer, each delimited by its IKE header's
//! Length (RFC 7296 3.1). A train is what a request keeps for its retransmission and a
//! response for the peer's retransmitted request, so both resend every fragment (2.6, 2.8);
//! [`datagrams`] cuts it into the datagrams to send.
use crate::error::Error;
use crate::header::{HeaderRepr, HEADER_LEN};
use crate::limits::{FRAGMENT_REASSEMBLY_TIMEOUT, MAX_FRAGMENTS, MAX_MESSAGE_LEN, MIN_FRAGMENT_SIZE};
use crate::payload::kind;
use crate::sk::SkCipher;
use alloc::vec::Vec;
use core::fmt;
use core::net::SocketAddr;
use core::time::Duration;
use rand_core::CryptoRngCore;
use zeroize::Zeroizing;

pub use crate::wire::fragment::{field, FragmentError, FragmentRepr, SKF_HEADER_LEN};

/// The IKE message budget of a `fragment_size` IP datagram (2.5.1: the size is the IP
/// datagram's): minus the IP header (20 bytes IPv4, 40 IPv6, no options), UDP's 8 and the
/// non-ESP marker's 4 on the NAT-T ports (RFC 3948 2.2).
pub fn message_budget(fragment_size: u16, remote: SocketAddr, natt: bool) -> usize {
    let ip = if remote.is_ipv4() { 20 } else { 40 };
    let marker = if natt { 4 } else { 0 };
    (fragment_size.max(MIN_FRAGMENT_SIZE) as usize).saturating_sub(ip + 8 + marker)
}

/// Seals the inner payload chain `inner` (first type `first`) as fragments of at most
/// `budget` bytes each (2.5.3): the inner chain is cut into pieces, each encrypted on its
/// own in an SKF with its own IV and ICV; fragment 1 carries `first` as its Next Payload,
/// the others 0 (2.5). Returns the train. `Err(MessageTooLong)`: more than
/// [`MAX_FRAGMENTS`] would be needed, or the budget holds no payload byte.
pub fn seal_fragments(
    cipher: &mut SkCipher,
    header: &HeaderRepr,
    first: u8,
    inner: &[u8],
    budget: usize,
    rng: &mut impl CryptoRngCore,
) -> Result<Vec<u8>, Error> {
    let room = budget.saturating_sub(HEADER_LEN + SKF_HEADER_LEN);
    let chunk = cipher.max_inner(room);
    if chunk == 0 {
        return Err(Error::MessageTooLong);
    }
    let total = inner.len().div_ceil(chunk).max(1);
    if total > MAX_FRAGMENTS {
        return Err(Error::MessageTooLong);
    }
    let mut train = Vec::new();
    for (i, piece) in inner.chunks(chunk).enumerate() {
        let number = i as u16 + 1;
        let mut fields = [0u8; 4];
        fields[..2].copy_from_slice(&number.to_be_bytes());
        fields[2..].copy_from_slice(&(total as u16).to_be_bytes());
        let next = if number == 1 { first } else { kind::NONE };
        let m = cipher.seal_payload(header, kind::SKF, next, &fields, piece, rng)?;
        train.extend_from_slice(&m);
    }
    Ok(train)
}

/// The datagrams of a train: each IKE message by its header's Length. A buffer holding one
/// message (anything not fragmented) is one datagram; a Length that does not fit ends the
/// cutting with the rest as one datagram.
pub fn datagrams(train: &[u8]) -> Datagrams<'_> {
    Datagrams { rest: train }
}

/// Iterator of [`datagrams`].
#[derive(Debug, Clone)]
pub struct Datagrams<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let len = self
            .rest
            .get(crate::header::field::LENGTH)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .filter(|&l| l >= HEADER_LEN && l <= self.rest.len())
            .unwrap_or(self.rest.len());
        let (d, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(d)
    }
}

/// A reassembled message: the first inner payload's type and the inner payload chain.
pub type Whole = (u8, Zeroizing<Vec<u8>>);

/// The fragments of one message being reassembled.
struct Partial {
    message_id: u32,
    exchange: u8,
    total: u16,
    first: u8,
    parts: Vec<Option<Zeroizing<Vec<u8>>>>,
    have: usize,
    bytes: usize,
    started: Duration,
}

/// The reassembly of one direction's messages (requests or responses) of an IKE SA (2.6):
/// one message at a time, the one of the current message ID; a fragment of another ID
/// (the window moved on) starts anew.
#[derive(Default)]
pub struct Reassembly {
    partial: Option<Partial>,
}

impl fmt::Debug for Reassembly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.partial {
            Some(p) => write!(f, "Reassembly({}/{} of message {})", p.have, p.total, p.message_id),
            None => f.write_str("Reassembly(empty)"),
        }
    }
}

impl Reassembly {
    /// Drops a partial message older than [`FRAGMENT_REASSEMBLY_TIMEOUT`].
    pub fn expire(&mut self, now: Duration) {
        if self.deadline().is_some_and(|d| now >= d) {
            self.partial = None;
        }
    }

    /// When the partial message, if any, is dropped.
    pub fn deadline(&self) -> Option<Duration> {
        self.partial.as_ref().map(|p| p.started + FRAGMENT_REASSEMBLY_TIMEOUT)
    }

    /// Fragments kept now.
    pub fn held(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.have)
    }

    /// Whether a fragment would be used, before its ICV is checked (nothing changes here):
    /// duplicates and a lower Total Fragments are refused (2.6).
    pub fn check(&self, message_id: u32, exchange: u8, f: &FragmentRepr) -> Result<(), FragmentError> {
        let Some(p) = self
            .partial
            .as_ref()
            .filter(|p| p.message_id == message_id && p.exchange == exchange)
        else {
            return Ok(());
        };
        if f.total < p.total {
            return Err(FragmentError::StaleTotal);
        }
        if f.total == p.total && p.parts[f.number as usize - 1].is_some() {
            return Err(FragmentError::Duplicate);
        }
        Ok(())
    }

    /// Keeps an authenticated fragment's plaintext; when it completes the message, returns
    /// the first inner payload's type and the inner payload chain. A higher Total Fragments
    /// than the kept fragments' drops them and starts anew (2.6: the sender re-fragmented).
    pub fn add(
        &mut self,
        now: Duration,
        message_id: u32,
        exchange: u8,
        f: &FragmentRepr,
        plain: Zeroizing<Vec<u8>>,
    ) -> Result<Option<Whole>, FragmentError> {
        self.add_within(now, message_id, exchange, f, plain, MAX_MESSAGE_LEN)
    }

    /// [`Reassembly::add`] with the message bounded to `limit` bytes: more, and the partial
    /// message is dropped ([`FragmentError::TooLong`]).
    pub fn add_within(
        &mut self,
        now: Duration,
        message_id: u32,
        exchange: u8,
        f: &FragmentRepr,
        plain: Zeroizing<Vec<u8>>,
        limit: usize,
    ) -> Result<Option<Whole>, FragmentError> {
        self.check(message_id, exchange, f)?;
        let same = self
            .partial
            .as_ref()
            .is_some_and(|p| p.message_id == message_id && p.exchange == exchange && p.total == f.total);
        if !same {
            let mut parts = Vec::new();
            parts.resize_with(f.total as usize, || None);
            self.partial = Some(Partial {
                message_id,
                exchange,
                total: f.total,
                first: kind::NONE,
                parts,
                have: 0,
                bytes: 0,
                started: now,
            });
        }
        let Some(p) = self.partial.as_mut() else {
            return Ok(None);
        };
        if p.bytes + plain.len() > limit.min(MAX_MESSAGE_LEN) {
            self.partial = None;
            return Err(FragmentError::TooLong);
        }
        if f.number == 1 {
            p.first = f.next_payload;
        }
        p.bytes += plain.len();
        p.have += 1;
        p.parts[f.number as usize - 1] = Some(plain);
        if p.have < p.total as usize {
            return Ok(None);
        }
        let Some(p) = self.partial.take() else {
            return Ok(None);
        };
        let mut inner = Zeroizing::new(Vec::with_capacity(p.bytes));
        for part in p.parts.iter().flatten() {
            inner.extend_from_slice(part);
        }
        Ok(Some((p.first, inner)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alg::{Encr, Integ};
    use crate::test_util::hdr;
    use rand_core::SeedableRng;

    fn ciphers(e: Encr, i: Option<Integ>) -> (SkCipher, SkCipher) {
        let ke = alloc::vec![7u8; e.keymat_len()];
        let ka = alloc::vec![9u8; i.map_or(0, |i| i.key_len())];
        (
            SkCipher::new(e, i, &ke, &ka).unwrap(),
            SkCipher::new(e, i, &ke, &ka).unwrap(),
        )
    }

    /// Seals, cuts into datagrams, checks every fragment's layout (2.5) and size, opens each
    /// and reassembles in the given order.
    fn round_trip(e: Encr, i: Option<Integ>, len: usize, budget: usize, order: impl Fn(usize) -> Vec<usize>) {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(len as u64);
        let (mut out, inn) = ciphers(e, i);
        let inner: Vec<u8> = (0..len).map(|x| x as u8).collect();
        let train = seal_fragments(&mut out, &hdr(), 35, &inner, budget, &mut rng).unwrap();
        let ds: Vec<&[u8]> = datagrams(&train).collect();
        let n = ds.len();
        assert!(n >= 2, "{len} bytes in {budget}: {n} fragment(s)");
        let mut r = Reassembly::default();
        let mut done = None;
        for (k, &at) in order(n).iter().enumerate() {
            let d = ds[at];
            assert!(d.len() <= budget, "fragment of {} > {budget}", d.len());
            let h = HeaderRepr::parse(&crate::header::IkePacket::new_checked(d).unwrap()).unwrap();
            assert_eq!(
                (h.next_payload, h.length as usize, h.message_id),
                (kind::SKF, d.len(), 1)
            );
            let f = FragmentRepr::parse(d, &h).unwrap();
            assert_eq!((f.number as usize, f.total as usize), (at + 1, n));
            assert_eq!(f.next_payload, if at == 0 { 35 } else { 0 }, "2.5: Next Payload");
            let plain = inn.open_at(d, f.iv_at).unwrap();
            let got = r.add(Duration::ZERO, 1, 35, &f, plain).unwrap();
            if k + 1 < n {
                assert!(got.is_none());
            } else {
                done = got;
            }
        }
        let (first, whole) = done.expect("complete");
        assert_eq!(first, 35);
        assert_eq!(&whole[..], &inner[..]);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn fragments_round_trip_in_any_order_every_suite() {
        for (e, i) in [
            (Encr::AesGcm16_128, None),
            (Encr::AesCbc128, Some(Integ::HmacSha256_128)),
            (Encr::AesCbc256, Some(Integ::HmacSha512_256)),
        ] {
            for (len, budget) in [(500, 200), (1000, 300), (333, 100), (4000, 1232)] {
                round_trip(e, i, len, budget, |n| (0..n).collect());
                round_trip(e, i, len, budget, |n| (0..n).rev().collect());
                round_trip(e, i, len, budget, |n| (0..n).map(|k| (k * 7 + 3) % n).collect());
            }
        }
    }

    #[test]
    fn fragment_sizes_and_bounds() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let (mut out, _) = ciphers(Encr::AesGcm16_128, None);
        // Per fragment: header 28, SKF 8, IV 8, ICV 16, pad length 1: 61 bytes of overhead.
        let t = seal_fragments(&mut out, &hdr(), 35, &[0; 100], 61 + 50, &mut rng).unwrap();
        let lens: Vec<usize> = datagrams(&t).map(<[u8]>::len).collect();
        assert_eq!(lens, [111, 111]);
        let t = seal_fragments(&mut out, &hdr(), 35, &[0; 101], 61 + 50, &mut rng).unwrap();
        assert_eq!(datagrams(&t).count(), 3);
        assert_eq!(
            seal_fragments(&mut out, &hdr(), 35, &[0; 100], 61, &mut rng),
            Err(Error::MessageTooLong),
            "no room for a byte"
        );
        assert_eq!(
            seal_fragments(&mut out, &hdr(), 35, &[0; 33 * 10], 61 + 10, &mut rng),
            Err(Error::MessageTooLong),
            "33 fragments"
        );
        // 2.5.1: the size is the IP datagram's.
        let v4: SocketAddr = "192.0.2.1:500".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:4500".parse().unwrap();
        assert_eq!(message_budget(1280, v4, false), 1252);
        assert_eq!(message_budget(1280, v4, true), 1248);
        assert_eq!(message_budget(1280, v6, true), 1228);
        assert_eq!(message_budget(0, v4, false), MIN_FRAGMENT_SIZE as usize - 28);
    }

    #[test]
    fn datagrams_of_a_single_message_and_of_garbage() {
        let mut m = alloc::vec![0u8; 40];
        m[24..28].copy_from_slice(&40u32.to_be_bytes());
        assert_eq!(datagrams(&m).count(), 1);
        m[24..28].copy_from_slice(&4000u32.to_be_bytes());
        assert_eq!(datagrams(&m).collect::<Vec<_>>(), [&m[..]]);
        assert_eq!(datagrams(&m[..10]).count(), 1);
        assert_eq!(datagrams(&[]).count(), 0);
    }

    fn frag(number: u16, total: u16) -> FragmentRepr {
        FragmentRepr {
            next_payload: if number == 1 { 35 } else { 0 },
            number,
            total,
            iv_at: 0,
        }
    }

    fn plain(b: u8, n: usize) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(alloc::vec![b; n])
    }

    #[test]
    fn reassembly_rules_of_2_6() {
        let t0 = Duration::ZERO;
        let mut r = Reassembly::default();
        assert_eq!(r.add(t0, 5, 35, &frag(2, 3), plain(2, 4)), Ok(None));
        // Duplicate: refused before its ICV is even checked, nothing changes.
        assert_eq!(r.check(5, 35, &frag(2, 3)), Err(FragmentError::Duplicate));
        assert_eq!(
            r.add(t0, 5, 35, &frag(2, 3), plain(9, 4)),
            Err(FragmentError::Duplicate)
        );
        // Lower Total Fragments: dropped.
        assert_eq!(
            r.add(t0, 5, 35, &frag(1, 2), plain(1, 4)),
            Err(FragmentError::StaleTotal)
        );
        assert_eq!(r.held(), 1);
        // Higher: the kept ones go, reassembly starts anew.
        assert_eq!(r.add(t0, 5, 35, &frag(4, 4), plain(4, 1)), Ok(None));
        assert_eq!(r.held(), 1);
        assert_eq!(r.add(t0, 5, 35, &frag(1, 4), plain(1, 1)), Ok(None));
        assert_eq!(r.add(t0, 5, 35, &frag(3, 4), plain(3, 1)), Ok(None));
        let (first, m) = r.add(t0, 5, 35, &frag(2, 4), plain(2, 1)).unwrap().unwrap();
        assert_eq!((first, &m[..]), (35, &[1u8, 2, 3, 4][..]));
        // Another message ID (the window moved on) starts anew.
        assert_eq!(r.add(t0, 6, 37, &frag(1, 2), plain(1, 1)), Ok(None));
        assert_eq!(r.add(t0, 7, 37, &frag(2, 2), plain(2, 1)), Ok(None));
        assert_eq!(r.held(), 1);
        // Time: dropped after the timeout.
        assert_eq!(r.deadline(), Some(FRAGMENT_REASSEMBLY_TIMEOUT));
        r.expire(FRAGMENT_REASSEMBLY_TIMEOUT - Duration::from_millis(1));
        assert_eq!(r.held(), 1);
        r.expire(FRAGMENT_REASSEMBLY_TIMEOUT);
        assert_eq!((r.held(), r.deadline()), (0, None));
        // Bytes: the whole stays within MAX_MESSAGE_LEN.
        for k in 1..=2 {
            assert_eq!(r.add(t0, 8, 37, &frag(k, 3), plain(0, 30_000)), Ok(None));
        }
        assert_eq!(
            r.add(t0, 8, 37, &frag(3, 3), plain(0, 6_000)),
            Err(FragmentError::TooLong)
        );
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn skf_parse_refuses_bad_numbers_and_lengths() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(4);
        let (mut out, _) = ciphers(Encr::AesGcm16_128, None);
        let t = seal_fragments(&mut out, &hdr(), 35, &[1; 100], 120, &mut rng).unwrap();
        let d = datagrams(&t).next().unwrap().to_vec();
        let h = |d: &[u8]| HeaderRepr::parse(&crate::header::IkePacket::new_checked(d).unwrap()).unwrap();
        assert!(FragmentRepr::parse(&d, &h(&d)).is_ok());
        let with = |at: usize, v: u16| {
            let mut x = d.clone();
            x[HEADER_LEN + at..HEADER_LEN + at + 2].copy_from_slice(&v.to_be_bytes());
            x
        };
        for (at, v, e) in [
            (4, 0, FragmentError::BadNumber),
            (6, 0, FragmentError::BadNumber),
            (4, 60, FragmentError::BadNumber),
            (6, 33, FragmentError::TooManyFragments),
            (2, 7, FragmentError::Malformed(Error::BadLength)),
            (2, 3, FragmentError::Malformed(Error::BadLength)),
            (2, 4000, FragmentError::Malformed(Error::Truncated)),
        ] {
            let x = with(at, v);
            assert_eq!(FragmentRepr::parse(&x, &h(&x)), Err(e), "field at {at} = {v}");
        }
        let mut sk = h(&d);
        sk.next_payload = kind::SK;
        assert!(FragmentRepr::parse(&d, &sk).is_err());
    }
}
