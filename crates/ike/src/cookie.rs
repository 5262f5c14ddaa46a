//! Stateless cookies (RFC 7296 2.6) and the responder's defences against floods of
//! IKE_SA_INIT requests (RFC 8019 4 and 5).
//!
//! A responder under load answers an IKE_SA_INIT request with `N(COOKIE)` and keeps no state;
//! only a request that comes back with that cookie as its first payload makes a half-open SA.
//! The cookie is 2.6's
//!
//! ```text
//! COOKIE = <VersionIDofSecret> | Hash(Ni | IPi | SPIi | <secret>)
//! ```
//!
//! here one version octet and HMAC-SHA-256 keyed with the secret over `SPIi | len(Ni) | Ni |
//! IPi`, truncated to [`COOKIE_MAC_LEN`] octets (the length of Ni and the fixed-length fields
//! first, so no two (Ni, IPi) pairs hash the same bytes). KEi is not in it, so the cookie stays
//! valid when the initiator retries with another group after INVALID_KE_PAYLOAD (2.6's shorter
//! exchange: the same Ni, a new KEi, the cookie kept).
//!
//! The secret comes from the caller's rng (sans-IO) and is replaced every [`SECRET_PERIOD`];
//! the previous one stays valid for one more period (2.6: the responder accepts cookies
//! made with the old secret or the new one for a short time after the change), so a cookie
//! is accepted for at least one period and at most two. Verification compares in constant
//! time (`subtle`).
use alloc::vec::Vec;
use core::net::IpAddr;
use core::time::Duration;
use hmac::{Hmac, Mac};
use rand_core::CryptoRngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// How long a secret makes cookies before it is replaced (it verifies them for one more).
pub const SECRET_PERIOD: Duration = Duration::from_secs(120);
/// Octets of the truncated HMAC in a cookie.
pub const COOKIE_MAC_LEN: usize = 16;
/// A cookie's length: the secret's version and the MAC (2.6 allows 1 to 64 octets).
pub const COOKIE_LEN: usize = 1 + COOKIE_MAC_LEN;

struct Secret {
    version: u8,
    key: Zeroizing<[u8; 32]>,
    /// When it started making cookies.
    since: Duration,
}

/// The responder's cookie secrets: the current one and the one before it.
pub struct CookieJar {
    current: Option<Secret>,
    previous: Option<Secret>,
    next_version: u8,
}

impl core::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CookieJar(<redacted>)")
    }
}

impl Default for CookieJar {
    fn default() -> Self {
        CookieJar::new()
    }
}

impl CookieJar {
    /// No secret yet: the first cookie made draws one.
    pub fn new() -> Self {
        CookieJar {
            current: None,
            previous: None,
            next_version: 0,
        }
    }

    fn fresh(&mut self, now: Duration, rng: &mut impl CryptoRngCore) -> Secret {
        let mut key = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut key[..]);
        let version = self.next_version;
        self.next_version = self.next_version.wrapping_add(1);
        Secret {
            version,
            key,
            since: now,
        }
    }

    /// Replaces the current secret when its period is over (the previous one goes after one
    /// more period; after two periods idle both are new).
    fn rotate(&mut self, now: Duration, rng: &mut impl CryptoRngCore) {
        let since = self.current.as_ref().map(|s| s.since);
        match since {
            Some(t) if now < t + SECRET_PERIOD => {}
            Some(t) if now < t + 2 * SECRET_PERIOD => {
                let s = self.fresh(now, rng);
                self.previous = self.current.replace(s);
            }
            _ => {
                let s = self.fresh(now, rng);
                self.previous = None;
                self.current = Some(s);
            }
        }
    }

    /// The cookie for a request with nonce `ni` and SPIi `spi_i` from `ip`, made with the
    /// current secret (drawn from `rng` when there is none or its period is over).
    pub fn make(&mut self, now: Duration, rng: &mut impl CryptoRngCore, ni: &[u8], ip: IpAddr, spi_i: u64) -> Vec<u8> {
        self.rotate(now, rng);
        let mut c = Vec::with_capacity(COOKIE_LEN);
        if let Some(s) = &self.current {
            c.push(s.version);
            c.extend_from_slice(&mac(s, ni, ip, spi_i));
        }
        c
    }

    /// Whether `cookie` was made by [`CookieJar::make`] for these values with a secret still
    /// valid at `now` (the current one, or the previous one for one period after it was
    /// replaced). Constant time in the MAC.
    pub fn verify(&self, now: Duration, cookie: &[u8], ni: &[u8], ip: IpAddr, spi_i: u64) -> bool {
        let Some((&version, tag)) = cookie.split_first() else {
            return false;
        };
        if tag.len() != COOKIE_MAC_LEN {
            return false;
        }
        // The current secret verifies for two periods from its start (one as current, one
        // as previous), the previous one for one period after the current one started.
        let current = self.current.as_ref().filter(|s| now < s.since + 2 * SECRET_PERIOD);
        let previous = self
            .previous
            .as_ref()
            .filter(|_| self.current.as_ref().is_some_and(|c| now < c.since + SECRET_PERIOD));
        [current, previous]
            .into_iter()
            .flatten()
            .find(|s| s.version == version)
            .is_some_and(|s| bool::from(mac(s, ni, ip, spi_i).ct_eq(tag)))
    }
}

fn mac(s: &Secret, ni: &[u8], ip: IpAddr, spi_i: u64) -> [u8; COOKIE_MAC_LEN] {
    // HMAC takes keys of any length (RFC 2104 2): new_from_slice cannot fail for 32 octets.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&s.key[..]).unwrap_or_else(|_| unreachable_hmac());
    m.update(&spi_i.to_be_bytes());
    m.update(&(ni.len() as u16).to_be_bytes());
    m.update(ni);
    match ip {
        IpAddr::V4(a) => m.update(&a.octets()),
        IpAddr::V6(a) => m.update(&a.octets()),
    }
    let full = m.finalize().into_bytes();
    let mut out = [0u8; COOKIE_MAC_LEN];
    out.copy_from_slice(&full[..COOKIE_MAC_LEN]);
    out
}

#[cold]
fn unreachable_hmac() -> ! {
    panic!("HMAC refused a 32-octet key")
}

/// What the responder's defences did, since the endpoint started ([`crate::Endpoint::dos_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DosStats {
    /// IKE_SA_INIT requests answered with N(COOKIE) and no state (2.6).
    pub cookies_sent: u64,
    /// Requests whose cookie verified (they went on to make an SA, or to a cap).
    pub cookies_accepted: u64,
    /// Requests with a cookie that did not verify (forged, for another address or nonce, or
    /// made with a secret no longer valid): handled as if they had none (2.6).
    pub cookies_refused: u64,
    /// Requests refused because their source had `half_open_per_source` half-open SAs, or
    /// the endpoint `half_open_max` ([`crate::Dropped::HalfOpenPerSource`],
    /// [`crate::Dropped::HalfOpenLimit`]).
    pub half_open_refused: u64,
    /// Unauthenticated requests longer than [`crate::limits::MAX_INIT_LEN`]
    /// ([`crate::Dropped::TooLarge`]).
    pub too_large: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    fn rng() -> rand_chacha::ChaCha20Rng {
        rand_chacha::ChaCha20Rng::seed_from_u64(7)
    }
    const NI: [u8; 32] = [0x5a; 32];
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn t(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_cookie_verifies_for_its_request_only() {
        let mut j = CookieJar::new();
        let mut r = rng();
        let c = j.make(t(0), &mut r, &NI, ip("192.0.2.1"), 0x1122);
        assert_eq!(c.len(), COOKIE_LEN);
        assert!(j.verify(t(1), &c, &NI, ip("192.0.2.1"), 0x1122));
        // another address, SPI, nonce, or one changed bit: refused
        assert!(!j.verify(t(1), &c, &NI, ip("192.0.2.2"), 0x1122));
        assert!(!j.verify(t(1), &c, &NI, ip("::ffff:192.0.2.1"), 0x1122));
        assert!(!j.verify(t(1), &c, &NI, ip("192.0.2.1"), 0x1123));
        assert!(!j.verify(t(1), &c, &[0x5b; 32], ip("192.0.2.1"), 0x1122));
        assert!(!j.verify(t(1), &c, &NI[..31], ip("192.0.2.1"), 0x1122));
        for i in 0..c.len() {
            let mut bad = c.clone();
            bad[i] ^= 0x01;
            assert!(
                !j.verify(t(1), &bad, &NI, ip("192.0.2.1"), 0x1122),
                "bit flipped in octet {i}"
            );
        }
        // truncated, extended, empty
        assert!(!j.verify(t(1), &c[..c.len() - 1], &NI, ip("192.0.2.1"), 0x1122));
        let mut long = c.clone();
        long.push(0);
        assert!(!j.verify(t(1), &long, &NI, ip("192.0.2.1"), 0x1122));
        assert!(!j.verify(t(1), &[], &NI, ip("192.0.2.1"), 0x1122));
    }

    #[test]
    fn another_jar_with_another_secret_refuses_it() {
        let mut a = CookieJar::new();
        let mut b = CookieJar::new();
        let mut r = rng();
        let c = a.make(t(0), &mut r, &NI, ip("10.0.0.1"), 9);
        let _ = b.make(t(0), &mut r, &NI, ip("10.0.0.1"), 9);
        assert!(a.verify(t(0), &c, &NI, ip("10.0.0.1"), 9));
        assert!(!b.verify(t(0), &c, &NI, ip("10.0.0.1"), 9), "b's secret is another");
        // the same inputs give another cookie under another secret
        assert_ne!(c, b.make(t(0), &mut r, &NI, ip("10.0.0.1"), 9));
    }

    #[test]
    fn secrets_rotate_and_expire() {
        let mut j = CookieJar::new();
        let mut r = rng();
        let p = SECRET_PERIOD.as_secs();
        let old = j.make(t(0), &mut r, &NI, ip("10.0.0.1"), 9);
        // within its period, the same secret: the same cookie
        assert_eq!(old, j.make(t(p - 1), &mut r, &NI, ip("10.0.0.1"), 9));
        // a new period: a new secret (another version), the old cookie still good
        let new = j.make(t(p), &mut r, &NI, ip("10.0.0.1"), 9);
        assert_ne!(old[0], new[0]);
        assert!(j.verify(t(p + 1), &old, &NI, ip("10.0.0.1"), 9));
        assert!(j.verify(t(p + 1), &new, &NI, ip("10.0.0.1"), 9));
        // one period after the replacement the old secret is gone, even with no new cookie made
        assert!(!j.verify(t(2 * p), &old, &NI, ip("10.0.0.1"), 9));
        assert!(j.verify(t(2 * p), &new, &NI, ip("10.0.0.1"), 9));
        // the current one expires two periods after it started, made or not
        assert!(!j.verify(t(3 * p), &new, &NI, ip("10.0.0.1"), 9));
        // long idle: both secrets new, nothing old verifies
        let later = j.make(t(10 * p), &mut r, &NI, ip("10.0.0.1"), 9);
        assert!(!j.verify(t(10 * p), &new, &NI, ip("10.0.0.1"), 9));
        assert!(j.verify(t(10 * p), &later, &NI, ip("10.0.0.1"), 9));
    }

    #[test]
    fn a_jar_without_a_secret_verifies_nothing() {
        let j = CookieJar::new();
        let mut c = alloc::vec![0u8; COOKIE_LEN];
        assert!(!j.verify(t(0), &c, &NI, ip("10.0.0.1"), 9));
        c[0] = 1;
        assert!(!j.verify(t(0), &c, &NI, ip("10.0.0.1"), 9));
        assert_eq!(alloc::format!("{j:?}"), "CookieJar(<redacted>)");
    }

    /// The MAC is HMAC-SHA-256 (RFC 4231 test case 2's key and data give its known output, so
    /// the primitive is the standard one), truncated.
    #[test]
    fn the_mac_is_truncated_hmac_sha256() {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let out = m.finalize().into_bytes();
        assert_eq!(
            hex::encode(out),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let s = Secret {
            version: 3,
            key: Zeroizing::new([7u8; 32]),
            since: t(0),
        };
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&[7u8; 32]).unwrap();
        m.update(&9u64.to_be_bytes());
        m.update(&32u16.to_be_bytes());
        m.update(&NI);
        m.update(&[10, 0, 0, 1]);
        assert_eq!(
            mac(&s, &NI, ip("10.0.0.1"), 9)[..],
            m.finalize().into_bytes()[..COOKIE_MAC_LEN]
        );
    }
}
