//! SA parameters (RFC 4301 section 4.4.2.1): what an SA is made of before its keys are
//! expanded. Checked once, when the SA is created.

use crate::alg::{AeadAlg, EncAlg, IntegAlg};
use crate::error::Error;
use crate::replay;
use alloc::vec::Vec;
use core::net::IpAddr;
use zeroize::Zeroizing;

/// Key material, zeroized on drop.
pub type Key = Zeroizing<Vec<u8>>;

/// The IPsec protocol of an SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// ESP, IP protocol 50.
    Esp,
    /// AH, IP protocol 51.
    Ah,
    /// IPComp, IP protocol 108.
    Comp,
}

impl Proto {
    /// `esp`, `ah` or `comp`, as `ip xfrm` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Esp => "esp",
            Proto::Ah => "ah",
            Proto::Comp => "comp",
        }
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Proto::Esp => crate::ip::proto::ESP,
            Proto::Ah => crate::ip::proto::AH,
            Proto::Comp => crate::ip::proto::COMP,
        }
    }
}

/// Transport or tunnel mode (RFC 4301 section 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// The IPsec header goes between the IP header and the upper layer.
    #[default]
    Transport,
    /// The whole packet goes inside a new outer IP header.
    Tunnel,
}

impl Mode {
    /// `transport` or `tunnel`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Transport => "transport",
            Mode::Tunnel => "tunnel",
        }
    }
}

/// The SA's source and destination addresses. In tunnel mode they make the outer header;
/// in transport mode they are only recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tunnel {
    /// Outer source.
    pub src: IpAddr,
    /// Outer destination.
    pub dst: IpAddr,
}

/// An algorithm with its key and ICV length in bytes (0 where there is none). Its `Debug`
/// output shows the key's length, never its bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Keyed<A> {
    /// The algorithm.
    pub alg: A,
    /// The key material.
    pub key: Key,
    /// ICV length in bytes.
    pub icv_len: usize,
}

impl<A: core::fmt::Debug> core::fmt::Debug for Keyed<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Keyed")
            .field("alg", &self.alg)
            .field("key_len", &self.key.len())
            .field("icv_len", &self.icv_len)
            .finish()
    }
}

impl<A> Keyed<A> {
    /// An algorithm, its key and its ICV length.
    pub fn new(alg: A, key: &[u8], icv_len: usize) -> Self {
        Keyed {
            alg,
            key: Zeroizing::new(key.to_vec()),
            icv_len,
        }
    }
}

/// Everything that defines an SA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaParams {
    /// ESP, AH or IPComp.
    pub proto: Proto,
    /// Security Parameters Index (for IPComp, the CPI).
    pub spi: u32,
    /// Transport or tunnel.
    pub mode: Mode,
    /// SA endpoints (required in tunnel mode).
    pub tunnel: Option<Tunnel>,
    /// ESP cipher (not with `aead`).
    pub enc: Option<Keyed<EncAlg>>,
    /// Integrity algorithm (ESP without `aead`, or AH).
    pub integ: Option<Keyed<IntegAlg>>,
    /// ESP combined-mode algorithm.
    pub aead: Option<Keyed<AeadAlg>>,
    /// Anti-replay window in packets (0 disables the check).
    pub replay_window: u32,
    /// Extended (64-bit) sequence numbers.
    pub esn: bool,
    /// The first sequence number sent (1 for a new SA).
    pub initial_seq: u64,
}

/// The default anti-replay window, in packets. RFC 4303 section 3.4.3 prefers 64 and lets a
/// receiver choose any larger size; 64 is too small for a sender whose workers seal one SA in
/// parallel: a worker preempted between taking its batch's sequence numbers and sending the
/// batch lets the others' packets pass, and under CPU load a whole batch arrived 94-122
/// packets behind at 100 Mbit/s and was dropped as replays (issue #39 item 8,
/// `scripts/ci/netns-test.sh rekey`). 1024 packets (a 32-block bitmap, 256 bytes) covers about
/// 12 ms of such a stall at 1 Gbit/s of 1,400-byte packets; Linux takes up to 4096 with ESN.
pub const DEFAULT_REPLAY_WINDOW: u32 = 1024;

impl SaParams {
    /// An SA with no algorithms yet: transport mode, a [`DEFAULT_REPLAY_WINDOW`] window, no
    /// ESN, starting at 1.
    pub fn new(proto: Proto, spi: u32) -> Self {
        SaParams {
            proto,
            spi,
            mode: Mode::Transport,
            tunnel: None,
            enc: None,
            integ: None,
            aead: None,
            replay_window: DEFAULT_REPLAY_WINDOW,
            esn: false,
            initial_seq: 1,
        }
    }

    /// Checks the whole SA: algorithm combinations, key and ICV lengths, tunnel endpoints,
    /// replay window, initial sequence number.
    pub fn validate(&self) -> Result<(), Error> {
        if let Some(e) = &self.enc {
            e.alg.check_key(e.key.len())?;
        }
        if let Some(i) = &self.integ {
            i.alg.check_key(i.key.len())?;
            i.alg.check_icv_bits(i.icv_len * 8)?;
        }
        if let Some(a) = &self.aead {
            a.alg.check_key(a.key.len())?;
            a.alg.check_icv_bits(a.icv_len * 8)?;
        }
        // RFC 4303 2.1 and RFC 4302 2.4: SPI 0 is reserved for local use and MUST NOT be
        // sent; in UDP (RFC 3948 2.2) four zero bytes where the SPI goes are the non-ESP
        // marker, so the peer would take every packet for IKE.
        if self.spi == 0 && self.proto != Proto::Comp {
            return Err(Error::InvalidSa(
                "SPI 0 is reserved (RFC 4303 2.1, RFC 4302 2.4: it MUST NOT be sent; in UDP it is RFC 3948's non-ESP marker)",
            ));
        }
        match self.proto {
            Proto::Esp => {
                if self.aead.is_some() && (self.enc.is_some() || self.integ.is_some()) {
                    return Err(Error::InvalidSa("an AEAD SA takes no separate enc or auth algorithm"));
                }
                if self.aead.is_none() && self.enc.is_none() {
                    return Err(Error::InvalidSa("ESP needs an enc or aead algorithm"));
                }
                let null_enc = self.enc.as_ref().is_some_and(|e| e.alg == EncAlg::Null);
                let null_integ = self.integ.as_ref().is_none_or(|i| i.alg == IntegAlg::Null);
                if null_enc && null_integ {
                    return Err(Error::InvalidSa(
                        "ESP with neither confidentiality nor integrity (RFC 4303 section 3.2)",
                    ));
                }
            }
            Proto::Ah => {
                if self.enc.is_some() || self.aead.is_some() {
                    return Err(Error::InvalidSa("AH takes only an auth algorithm"));
                }
                if self.integ.as_ref().is_none_or(|i| i.alg == IntegAlg::Null) {
                    return Err(Error::InvalidSa("AH needs an auth algorithm other than digest_null"));
                }
            }
            Proto::Comp => {
                if self.enc.is_some() || self.aead.is_some() || self.integ.is_some() {
                    return Err(Error::InvalidSa("IPComp takes no keys"));
                }
            }
        }
        match (self.mode, &self.tunnel) {
            (Mode::Tunnel, None) => return Err(Error::InvalidSa("tunnel mode needs src and dst addresses")),
            (_, Some(t)) if t.src.is_ipv4() != t.dst.is_ipv4() => {
                return Err(Error::InvalidSa("src and dst must be of the same IP version"))
            }
            _ => {}
        }
        replay::ReplayWindow::new(self.replay_window, self.esn)?;
        // The receiver infers the high 32 bits of an ESN from its window (RFC 4303 3.4.3,
        // Appendix A): without one it cannot (Linux refuses it too, `xfrm_user`'s
        // verify_replay).
        if self.esn && self.replay_window == 0 && self.proto != Proto::Comp {
            return Err(Error::InvalidSa(
                "ESN needs a replay window (the receiver infers the high 32 bits from it, RFC 4303 Appendix A)",
            ));
        }
        replay::SeqCounter::new(self.initial_seq, self.esn)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esp() -> SaParams {
        let mut p = SaParams::new(Proto::Esp, 0x1000);
        p.enc = Some(Keyed::new(EncAlg::AesCbc, &[1; 16], 0));
        p.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[2; 20], 12));
        p
    }

    #[test]
    fn debug_shows_no_key_bytes() {
        let k = Keyed::new(EncAlg::AesCbc, &[0xab; 16], 0);
        let d = alloc::format!("{k:?} {:?}", esp());
        assert!(!d.contains("171") && !d.to_lowercase().contains("ab, ab"), "{d}");
        assert!(d.contains("key_len: 16"), "{d}");
    }

    #[test]
    fn validation() {
        assert_eq!(esp().validate(), Ok(()));
        let mut p = esp();
        p.enc = Some(Keyed::new(EncAlg::AesCbc, &[1; 15], 0));
        assert!(matches!(p.validate(), Err(Error::KeyLength { got: 15, .. })));
        let mut p = esp();
        p.mode = Mode::Tunnel;
        assert!(p.validate().is_err());
        p.tunnel = Some(Tunnel {
            src: "192.0.2.1".parse().unwrap(),
            dst: "2001:db8::1".parse().unwrap(),
        });
        assert!(p.validate().is_err());
        p.tunnel = Some(Tunnel {
            src: "192.0.2.1".parse().unwrap(),
            dst: "192.0.2.2".parse().unwrap(),
        });
        assert_eq!(p.validate(), Ok(()));
        let mut p = esp();
        p.enc = Some(Keyed::new(EncAlg::Null, &[], 0));
        p.integ = None;
        assert!(p.validate().is_err());
        let mut p = esp();
        p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[0; 20], 16));
        assert!(p.validate().is_err());
        let mut p = esp();
        p.replay_window = 48;
        assert_eq!(p.validate(), Err(Error::ReplayWindowSize(48)));
        let mut p = esp();
        p.initial_seq = 1 << 32;
        assert!(p.validate().is_err());
        p.esn = true;
        assert_eq!(p.validate(), Ok(()));
        // SPI 0 (RFC 4303 2.1: MUST NOT be sent), for ESP and AH.
        let mut p = esp();
        p.spi = 0;
        assert!(matches!(p.validate(), Err(Error::InvalidSa(m)) if m.contains("SPI 0")));
        let mut p = SaParams::new(Proto::Ah, 0);
        p.integ = Some(Keyed::new(IntegAlg::HmacSha1, &[2; 20], 12));
        assert!(matches!(p.validate(), Err(Error::InvalidSa(m)) if m.contains("SPI 0")));
        p.spi = 1;
        assert_eq!(p.validate(), Ok(()));
        // ESN without a replay window: refused; with one, or without ESN: fine.
        let mut p = esp();
        p.esn = true;
        assert_eq!(p.validate(), Ok(()));
        p.replay_window = 0;
        assert!(matches!(p.validate(), Err(Error::InvalidSa(m)) if m.contains("ESN needs a replay window")));
        p.esn = false;
        assert_eq!(p.validate(), Ok(()));
    }
}
