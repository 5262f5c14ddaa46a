//! SA bundles (RFC 4301 section 4.5): `seal` applies the SAs in the order given (IPComp, then
//! ESP, then AH); `open` undoes them from the outside in, finding each SA by the protocol and
//! SPI in the packet.

use alloc::vec::Vec;
use core::fmt;
use ipsec_ah::AhSa;
use ipsec_core::ip::{self, proto};
use ipsec_core::rng::IvRng;
use ipsec_core::sa::Proto;
use ipsec_core::sa::SaParams;
use ipsec_core::{Error, PacketBuf};
use ipsec_esp::EspSa;
use ipsec_ipcomp::{Algorithm, IpcompConfig, IpcompSa, SealOutcome};

/// Why one packet could not be sealed or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketError {
    /// A transform refused it.
    Ipsec(Error),
    /// IPComp refused it.
    Comp(ipsec_ipcomp::Error),
    /// The frame carries no IP packet.
    NotIp,
    /// The result cannot be stored with the capture's link type.
    LinkType(&'static str),
    /// ESP in UDP (RFC 3948) framing refused it, or it is a NAT-keepalive or IKE message.
    Encap(crate::udp_encap::EncapError),
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketError::Ipsec(e) => e.fmt(f),
            PacketError::Comp(e) => e.fmt(f),
            PacketError::NotIp => f.write_str("not an IPv4 or IPv6 packet"),
            PacketError::LinkType(why) => f.write_str(why),
            PacketError::Encap(e) => e.fmt(f),
        }
    }
}

impl From<ipsec_ipcomp::Error> for PacketError {
    fn from(e: ipsec_ipcomp::Error) -> Self {
        match e {
            ipsec_ipcomp::Error::Core(c) => PacketError::Ipsec(c),
            e => PacketError::Comp(e),
        }
    }
}

impl From<Error> for PacketError {
    fn from(e: Error) -> Self {
        PacketError::Ipsec(e)
    }
}

impl From<crate::udp_encap::EncapError> for PacketError {
    fn from(e: crate::udp_encap::EncapError) -> Self {
        match e {
            crate::udp_encap::EncapError::Ip(e) => PacketError::Ipsec(e),
            e => PacketError::Encap(e),
        }
    }
}

/// One keyed SA of any protocol (one per SA, so variant sizes do not matter).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnySa {
    /// ESP.
    Esp(EspSa),
    /// AH.
    Ah(AhSa),
    /// IPComp.
    Comp(IpcompSa),
}

impl AnySa {
    /// Sets up (keys) the SA that `params` describe; an IPComp SA also needs its algorithm.
    /// ESP CBC IVs come from a CSPRNG seeded by the operating system.
    #[cfg(feature = "std")]
    pub fn new(params: &SaParams, comp: Option<Algorithm>) -> Result<Self, PacketError> {
        Self::with_rng(params, comp, IvRng::from_os()?)
    }

    /// As [`AnySa::new`], with a caller-seeded IV generator (for `no_std` targets).
    pub fn with_rng(params: &SaParams, comp: Option<Algorithm>, rng: IvRng) -> Result<Self, PacketError> {
        match params.proto {
            Proto::Esp => Ok(AnySa::Esp(EspSa::with_rng(params, rng)?)),
            Proto::Ah => Ok(AnySa::Ah(AhSa::new(params)?)),
            Proto::Comp => {
                let alg = comp.ok_or(Error::InvalidSa("an IPComp SA needs a compression algorithm"))?;
                let cfg = IpcompConfig::from_sa_params(params, alg)?;
                Ok(AnySa::Comp(IpcompSa::new(cfg)?))
            }
        }
    }

    /// The IP protocol number of the header this SA adds.
    pub fn proto(&self) -> u8 {
        match self {
            AnySa::Esp(_) => proto::ESP,
            AnySa::Ah(_) => proto::AH,
            AnySa::Comp(_) => proto::COMP,
        }
    }

    /// The SPI (for IPComp, the CPI).
    pub fn spi(&self) -> u32 {
        match self {
            AnySa::Esp(s) => s.spi(),
            AnySa::Ah(s) => s.spi(),
            AnySa::Comp(s) => s.config().cpi as u32,
        }
    }

    /// **Tests only**: fixes the IV of an SA that has one (SAs without an IV ignore it).
    pub fn set_fixed_iv_for_testing(&mut self, iv: &[u8]) -> Result<(), Error> {
        match self {
            AnySa::Esp(s) => s.set_fixed_iv_for_testing(iv),
            AnySa::Ah(_) | AnySa::Comp(_) => Ok(()),
        }
    }

    /// Applies the SA to an outbound packet. `Ok(false)` when IPComp left the packet as it
    /// was (non-expansion, RFC 3173 section 2.2).
    pub fn seal(&mut self, buf: &mut PacketBuf) -> Result<bool, PacketError> {
        match self {
            AnySa::Esp(s) => s.seal(buf).map(|_| true).map_err(Into::into),
            AnySa::Ah(s) => s.seal(buf).map(|_| true).map_err(Into::into),
            AnySa::Comp(s) => Ok(matches!(s.seal(buf)?, SealOutcome::Compressed { .. })),
        }
    }

    /// Removes the SA's header from an inbound packet whose outermost IPsec header is this SA's.
    pub fn open(&mut self, buf: &mut PacketBuf) -> Result<(), PacketError> {
        match self {
            AnySa::Esp(s) => s.open(buf).map(|_| ())?,
            AnySa::Ah(s) => s.open(buf).map(|_| ())?,
            AnySa::Comp(s) => s.open(buf).map(|_| ())?,
        }
        Ok(())
    }
}

/// The outermost IPsec header of a packet: (protocol, SPI or CPI), or the first upper-layer
/// protocol if there is none.
pub fn outer_ipsec(packet: &[u8]) -> Result<Result<(u8, u32), u8>, Error> {
    let split = ip::upper_split(packet)?;
    match split.next {
        proto::ESP | proto::AH | proto::COMP => Ok(Ok((split.next, spi_of(split.next, &packet[split.offset..])?))),
        other => Ok(Err(other)),
    }
}

/// The SPI of an ESP or AH header, or the CPI of an IPComp header (its low 16 bits), at the
/// start of `header`.
pub(crate) fn spi_of(protocol: u8, header: &[u8]) -> Result<u32, Error> {
    let b = match protocol {
        proto::AH => header.get(4..8),
        _ => header.get(0..4),
    }
    .ok_or(Error::Truncated)?;
    let v = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Ok(if protocol == proto::COMP { v & 0xffff } else { v })
}

/// An ordered list of SAs.
#[derive(Debug)]
pub struct Bundle {
    sas: Vec<AnySa>,
}

impl Bundle {
    /// A bundle of the given SAs, in seal order.
    pub fn new(sas: Vec<AnySa>) -> Self {
        Bundle { sas }
    }

    /// The SAs.
    pub fn sas_mut(&mut self) -> &mut [AnySa] {
        &mut self.sas
    }

    /// Applies every SA in order.
    pub fn seal(&mut self, buf: &mut PacketBuf) -> Result<(), PacketError> {
        for sa in &mut self.sas {
            sa.seal(buf)?;
        }
        Ok(())
    }

    /// Undoes SAs from the outside in while the outermost header belongs to one of them.
    /// A packet with no IPsec header, or whose outer SPI is unknown, is an error.
    ///
    /// Bounded: at most as many headers are removed as the bundle has SAs (sealing applies
    /// each once), and a packet that IPComp decompressed to another IPComp header is refused,
    /// since IPComp is never applied twice (RFC 3173 section 2: a datagram is compressed once,
    /// before IPsec). Without these a payload that decompresses to itself (a "quine") would be
    /// opened forever.
    pub fn open(&mut self, buf: &mut PacketBuf) -> Result<usize, PacketError> {
        let mut done = 0;
        let mut decompressed = false;
        loop {
            let found = outer_ipsec(buf.packet())?;
            let (p, spi) = match found {
                Ok(x) => x,
                Err(_) if done > 0 => return Ok(done),
                Err(other) => return Err(Error::WrongProtocol(other).into()),
            };
            if decompressed && p == proto::COMP {
                return Err(PacketError::Comp(ipsec_ipcomp::Error::Malformed(NESTED_IPCOMP)));
            }
            let depth = self.sas.len();
            let sa = self.sas.iter_mut().find(|s| s.proto() == p && s.spi() == spi);
            match sa {
                // More IPsec headers than the bundle has SAs: unexpected here.
                Some(_) if done == depth => return Err(Error::WrongProtocol(p).into()),
                Some(sa) => sa.open(buf)?,
                None if done > 0 => return Ok(done),
                None => return Err(Error::UnknownSpi(spi).into()),
            }
            decompressed |= p == proto::COMP;
            done += 1;
        }
    }
}

/// Why a packet whose decompressed payload is again IPComp is refused.
pub const NESTED_IPCOMP: &str = "IPComp inside IPComp (a datagram is compressed only once, RFC 3173 section 2)";

#[cfg(feature = "std")]
impl std::error::Error for PacketError {}
