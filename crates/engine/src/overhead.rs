//! Overhead and MTU figures for an SA bundle: the bytes each packet gains, the largest inner
//! packet that fits a link MTU, and what an upper-layer payload costs on the wire.
//!
//! A [`Calculator`] holds the bundle as key-free [`SaShape`]s in seal order (IPComp, ESP, AH,
//! as [`Bundle::seal`](crate::Bundle::seal) applies them) and walks an inner packet of a
//! given length through them, the way the transforms do:
//!
//! - ESP ([`SaShape::Esp`]): the outer IP header in tunnel mode, the 8-byte ESP header, the
//!   explicit IV, padding to the cipher block and to 4 bytes ([`ipsec_esp::padding::pad_len`],
//!   the function ESP seals with), the 2-byte trailer and the ICV. In transport mode only the
//!   part after the IP header(s) is padded. [`SaShape::from_params`] keys an
//!   [`EspSa`](ipsec_esp::EspSa) and reads its `iv_len`, `block_size` and `icv_len`, so the
//!   lengths are the ESP crate's own.
//! - AH ([`SaShape::Ah`]): the outer header in tunnel mode and the AH header with its ICV
//!   padded to 32 bits (IPv4) or 64 bits (IPv6), [`ipsec_ah::wire::header_len`].
//! - IPComp ([`SaShape::Comp`]): by default the **worst case**, [`CompAssumption::NotCompressed`]:
//!   non-expansion (RFC 3173 section 2.2) sends a packet that does not shrink as it was, so
//!   transport mode adds 0 bytes and tunnel mode only its outer header (IP-in-IP). A packet
//!   that does compress is always smaller than that (the compressed payload plus the 4-byte
//!   header is smaller than the original, and ESP's padded length never decreases as its
//!   input shrinks), so the worst case is the one that bounds the MTU.
//!   [`CompAssumption::Compressed`] is for callers that know the compressed size: the inner
//!   lengths they give are then taken as already compressed and IPComp adds its 4-byte header.
//! - UDP encapsulation of ESP (RFC 3948, 8 bytes between the IP header and each ESP header)
//!   can be counted with [`Calculator::udp_encap`]. **The data plane does not implement
//!   NAT traversal yet**: this is a figure only.
//!
//! ESN does not change any length (the high 32 bits are never sent). Lengths are IP bytes:
//! no link-layer framing.
//!
//! For a payload there are two answers: [`Calculator::segmented`] is what a sender that
//! knows the path MTU does (TCP sizes its segments so each sealed packet fits the link;
//! a UDP application that sizes its datagrams the same way), and [`Calculator::fragmented`]
//! seals one packet carrying the whole payload and fragments it at the link MTU after IPsec
//! (IPv4 fragments of `(MTU - IHL)` rounded down to 8; IPv6 with an 8-byte Fragment header on
//! every fragment), as RFC 4301's post-IPsec fragmentation does. The IPv4 Don't Fragment bit
//! is not looked at: with DF set (and a tunnel copies it from the inner header) a real sender
//! would drop the packet with an ICMP error instead of fragmenting it.
//!
//! No function panics: impossible inputs are [`OverheadError`]s.

use crate::sad::SaConfig;
use alloc::vec::Vec;
use core::fmt;
use core::net::IpAddr;
use ipsec_core::ip::{self, ipv4_field, ipv6_field, MAX_PACKET};
use ipsec_core::rng::IvRng;
use ipsec_core::sa::{Mode, Proto, SaParams};

/// Bytes a UDP header adds in front of each ESP header (RFC 3948).
pub const UDP_ENCAP_LEN: usize = 8;
/// The IPv6 Fragment header (RFC 8200 section 4.5).
pub const IPV6_FRAGMENT_HEADER_LEN: usize = 8;
/// The largest IV, cipher block or ICV a hand-made [`SaShape`] may declare.
pub const MAX_SHAPE_FIELD: usize = 256;

/// IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum IpVersion {
    /// IPv4.
    #[cfg_attr(feature = "serde", serde(rename = "ipv4"))]
    V4,
    /// IPv6.
    #[cfg_attr(feature = "serde", serde(rename = "ipv6"))]
    V6,
}

impl IpVersion {
    /// The version of an address.
    pub fn of(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => IpVersion::V4,
            IpAddr::V6(_) => IpVersion::V6,
        }
    }
    /// 4 or 6.
    pub fn number(self) -> u8 {
        match self {
            IpVersion::V4 => 4,
            IpVersion::V6 => 6,
        }
    }
    /// The fixed header without options or extension headers: 20 or 40 bytes.
    pub fn header_len(self) -> usize {
        match self {
            IpVersion::V4 => ipv4_field::HEADER_LEN,
            IpVersion::V6 => ipv6_field::HEADER_LEN,
        }
    }
    /// The largest packet: 65535 bytes for IPv4; for IPv6 the 40-byte header and a payload of
    /// 65535 (no jumbograms). The transforms refuse anything larger.
    pub fn max_packet(self) -> usize {
        match self {
            IpVersion::V4 => MAX_PACKET,
            IpVersion::V6 => MAX_PACKET + ipv6_field::HEADER_LEN,
        }
    }
}

impl fmt::Display for IpVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IPv{}", self.number())
    }
}

/// Where an SA puts its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Encap {
    /// After the IP header(s) of the packet it gets.
    Transport,
    /// In front of the whole packet, behind a new outer header of this version.
    Tunnel(IpVersion),
}

impl Encap {
    /// The encapsulation `params` describe (tunnel mode takes the version of its endpoints).
    pub fn of(params: &SaParams) -> Result<Self, OverheadError> {
        match (params.mode, params.tunnel) {
            (Mode::Transport, _) => Ok(Encap::Transport),
            (Mode::Tunnel, Some(t)) => Ok(Encap::Tunnel(IpVersion::of(t.dst))),
            (Mode::Tunnel, None) => Err(OverheadError::Sa(ipsec_core::Error::InvalidSa(
                "tunnel mode needs src and dst addresses",
            ))),
        }
    }
}

/// The lengths of one SA, without its keys. Build it with [`SaShape::from_params`] from a
/// real SA, or by hand (each IV, block and ICV at most [`MAX_SHAPE_FIELD`] bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "proto", rename_all = "lowercase"))]
pub enum SaShape {
    /// ESP.
    Esp {
        /// Transport or tunnel.
        encap: Encap,
        /// Explicit IV carried in each packet.
        iv_len: usize,
        /// Block size the padding aligns to, with 4 bytes (1 for AEADs and the null cipher).
        block_size: usize,
        /// ICV length (0 without integrity).
        icv_len: usize,
    },
    /// AH.
    Ah {
        /// Transport or tunnel.
        encap: Encap,
        /// ICV length, before the 32/64-bit alignment padding.
        icv_len: usize,
    },
    /// IPComp.
    Comp {
        /// Transport or tunnel.
        encap: Encap,
    },
}

impl SaShape {
    /// The shape of the SA `params` describe. The parameters are validated (keys included):
    /// an ESP or AH SA is keyed once and its lengths read from the transform itself.
    pub fn from_params(params: &SaParams) -> Result<Self, OverheadError> {
        params.validate().map_err(OverheadError::Sa)?;
        let encap = Encap::of(params)?;
        Ok(match params.proto {
            Proto::Esp => {
                // The IV generator is never used: nothing is sealed.
                let sa = ipsec_esp::EspSa::with_rng(params, IvRng::from_seed([0; 32])).map_err(OverheadError::Sa)?;
                SaShape::Esp {
                    encap,
                    iv_len: sa.iv_len(),
                    block_size: sa.block_size(),
                    icv_len: sa.icv_len(),
                }
            }
            Proto::Ah => {
                let sa = ipsec_ah::AhSa::new(params).map_err(OverheadError::Sa)?;
                SaShape::Ah {
                    encap,
                    icv_len: sa.icv_len(),
                }
            }
            Proto::Comp => SaShape::Comp { encap },
        })
    }

    /// The protocol.
    pub fn proto(&self) -> Proto {
        match self {
            SaShape::Esp { .. } => Proto::Esp,
            SaShape::Ah { .. } => Proto::Ah,
            SaShape::Comp { .. } => Proto::Comp,
        }
    }

    /// Transport or tunnel.
    pub fn encap(&self) -> Encap {
        match *self {
            SaShape::Esp { encap, .. } | SaShape::Ah { encap, .. } | SaShape::Comp { encap } => encap,
        }
    }

    fn check(&self) -> Result<(), OverheadError> {
        let ok = match *self {
            SaShape::Esp {
                iv_len,
                block_size,
                icv_len,
                ..
            } => iv_len <= MAX_SHAPE_FIELD && (1..=MAX_SHAPE_FIELD).contains(&block_size) && icv_len <= MAX_SHAPE_FIELD,
            SaShape::Ah { icv_len, .. } => icv_len <= MAX_SHAPE_FIELD,
            SaShape::Comp { .. } => true,
        };
        if ok {
            Ok(())
        } else {
            Err(OverheadError::BadShape)
        }
    }
}

/// What IPComp is assumed to do (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum CompAssumption {
    /// The worst case (default): the packet does not compress and is sent as it was; IPComp
    /// adds nothing in transport mode and its outer header (IP-in-IP) in tunnel mode.
    #[default]
    NotCompressed,
    /// The lengths given are already the compressor's output: IPComp adds its 4-byte header
    /// (and in tunnel mode its outer header).
    Compressed,
}

/// The inner packet's IP version and the length of the IP header(s) that transport mode
/// keeps in front of the IPsec header: the IPv4 header with its options, or the IPv6 header
/// with the extension headers [`ip::transport_split`] leaves in front (Hop-by-Hop, Routing,
/// and Destination Options not after a Routing header). This part is also taken as the
/// unfragmentable part when a transport-mode result is fragmented (IPv4 options are counted
/// in every fragment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Inner {
    version: IpVersion,
    header_len: usize,
}

impl Inner {
    /// An IPv4 packet with a 20-byte header.
    pub fn ipv4() -> Self {
        Inner {
            version: IpVersion::V4,
            header_len: ipv4_field::HEADER_LEN,
        }
    }
    /// An IPv6 packet with no extension headers in front.
    pub fn ipv6() -> Self {
        Inner {
            version: IpVersion::V6,
            header_len: ipv6_field::HEADER_LEN,
        }
    }
    /// A header of `header_len` bytes: IPv4 20 to 60 in steps of 4; IPv6 40 plus a multiple of
    /// 8, less than the largest packet.
    pub fn new(version: IpVersion, header_len: usize) -> Result<Self, OverheadError> {
        let ok = match version {
            IpVersion::V4 => (20..=60).contains(&header_len) && header_len.is_multiple_of(4),
            IpVersion::V6 => {
                header_len >= 40 && (header_len - 40).is_multiple_of(8) && header_len < version.max_packet()
            }
        };
        if ok {
            Ok(Inner { version, header_len })
        } else {
            Err(OverheadError::HeaderLen { version, header_len })
        }
    }
    /// The description of a real packet, and its length (the length its IP header claims).
    pub fn of_packet(packet: &[u8]) -> Result<(Self, usize), OverheadError> {
        let len = ip::claimed_len(packet).map_err(OverheadError::Sa)?;
        let split = ip::transport_split(
            packet
                .get(..len)
                .ok_or(OverheadError::Sa(ipsec_core::Error::Truncated))?,
        )
        .map_err(OverheadError::Sa)?;
        let version = match ip::version(packet).map_err(OverheadError::Sa)? {
            4 => IpVersion::V4,
            _ => IpVersion::V6,
        };
        Ok((Inner::new(version, split.offset)?, len))
    }
    /// The IP version.
    pub fn version(&self) -> IpVersion {
        self.version
    }
    /// The header length.
    pub fn header_len(&self) -> usize {
        self.header_len
    }
}

/// The upper-layer protocol a payload travels in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Upper {
    /// TCP with a 20-byte header (no options).
    Tcp,
    /// UDP (8-byte header).
    Udp,
    /// Any header of this many bytes (e.g. TCP with timestamps: 32).
    Other(usize),
}

impl Upper {
    /// The header length.
    pub fn header_len(self) -> usize {
        match self {
            Upper::Tcp => 20,
            Upper::Udp => 8,
            Upper::Other(n) => n,
        }
    }
}

/// Bytes added, by kind. For a bundle, the sum over its SAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Breakdown {
    /// New outer IP headers (tunnel mode, including an IPComp IP-in-IP header).
    pub outer_ip: usize,
    /// UDP encapsulation of ESP (RFC 3948).
    pub udp_encap: usize,
    /// IPComp headers (0 unless [`CompAssumption::Compressed`]).
    pub ipcomp: usize,
    /// AH headers: 12 fixed bytes, the ICV and its alignment padding.
    pub ah: usize,
    /// ESP headers (SPI and sequence number).
    pub esp_header: usize,
    /// ESP explicit IVs.
    pub esp_iv: usize,
    /// ESP padding.
    pub esp_padding: usize,
    /// ESP trailers (pad length and next header).
    pub esp_trailer: usize,
    /// ESP ICVs.
    pub esp_icv: usize,
}

impl Breakdown {
    /// All bytes added.
    pub fn total(&self) -> usize {
        self.outer_ip
            + self.udp_encap
            + self.ipcomp
            + self.ah
            + self.esp_header
            + self.esp_iv
            + self.esp_padding
            + self.esp_trailer
            + self.esp_icv
    }

    fn add(&mut self, o: &Breakdown) {
        self.outer_ip += o.outer_ip;
        self.udp_encap += o.udp_encap;
        self.ipcomp += o.ipcomp;
        self.ah += o.ah;
        self.esp_header += o.esp_header;
        self.esp_iv += o.esp_iv;
        self.esp_padding += o.esp_padding;
        self.esp_trailer += o.esp_trailer;
        self.esp_icv += o.esp_icv;
    }
}

/// What one packet gains.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Overhead {
    /// The inner packet's length.
    pub inner_len: usize,
    /// The sealed packet's length.
    pub sealed_len: usize,
    /// `sealed_len - inner_len`.
    pub bytes: usize,
    /// The bytes added, by kind.
    pub breakdown: Breakdown,
    /// The bytes each SA added, in seal order.
    pub per_sa: Vec<Breakdown>,
    /// The packet's length after each SA, in seal order (the last is `sealed_len`). With
    /// `per_sa` this gives what each SA processes, e.g. the bytes an AH ICV covers (the
    /// packet after AH) or an ESP cipher encrypts (what ESP protects, padding and trailer).
    pub len_after: Vec<usize>,
    /// The IP version of the sealed packet.
    pub outer_version: IpVersion,
    /// The sealed packet's header(s) in front of the first IPsec header: what fragmentation
    /// repeats in every fragment.
    pub unfragmentable_len: usize,
}

/// A payload sent as segments (or datagrams) sized so that every sealed packet fits the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Segmented {
    /// Upper-layer payload bytes.
    pub payload: usize,
    /// The largest inner packet that fits ([`Calculator::max_inner_mtu`]).
    pub max_inner_mtu: usize,
    /// Payload bytes per full segment (the TCP MSS): `max_inner_mtu` less the inner IP and
    /// upper-layer headers.
    pub segment_payload: usize,
    /// Payload bytes in the last segment.
    pub last_segment_payload: usize,
    /// Packets on the link (= segments; at least 1).
    pub packets: usize,
    /// IP bytes on the link, every header included.
    pub wire_bytes: usize,
}

/// How one IP packet is fragmented at a link MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Fragments {
    /// Packets on the link (1 when the packet fits).
    pub packets: usize,
    /// Fragmentable bytes in each fragment but the last (a multiple of 8); the whole
    /// fragmentable part when the packet fits.
    pub fragment_data: usize,
    /// Fragmentable bytes in the last fragment.
    pub last_fragment_data: usize,
    /// IP bytes on the link: every fragment with its headers.
    pub wire_bytes: usize,
}

/// A payload sent in one upper-layer packet, sealed, then fragmented at the link MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Fragmented {
    /// Upper-layer payload bytes.
    pub payload: usize,
    /// The inner packet: IP header(s), upper-layer header, payload.
    pub inner_len: usize,
    /// The sealed packet before fragmentation.
    pub sealed_len: usize,
    /// Packets on the link (1 when it fits).
    pub packets: usize,
    /// Fragmentable bytes per fragment but the last.
    pub fragment_data: usize,
    /// Fragmentable bytes in the last fragment.
    pub last_fragment_data: usize,
    /// IP bytes on the link, every fragment's headers included.
    pub wire_bytes: usize,
}

/// Why a figure cannot be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverheadError {
    /// The SA parameters are invalid (or a packet given to [`Inner::of_packet`] is).
    Sa(ipsec_core::Error),
    /// A hand-made [`SaShape`] has a zero block size or a field above [`MAX_SHAPE_FIELD`].
    BadShape,
    /// An IP header length that cannot be.
    HeaderLen {
        /// The version.
        version: IpVersion,
        /// The length given.
        header_len: usize,
    },
    /// The inner packet is shorter than its IP header.
    ShorterThanHeader {
        /// The length given.
        len: usize,
        /// The header length.
        header_len: usize,
    },
    /// A packet (inner or sealed) would exceed the largest IP packet of its version.
    TooBig {
        /// Its length (saturated).
        len: usize,
        /// The largest allowed.
        max: usize,
    },
    /// Not even an inner packet of bare IP header fits the link once sealed.
    MtuTooSmall {
        /// The link MTU.
        link_mtu: usize,
        /// The smallest sealed packet.
        smallest: usize,
    },
    /// The largest inner packet that fits leaves no byte for the payload.
    NoRoomForPayload {
        /// The largest inner packet that fits.
        max_inner_mtu: usize,
        /// Inner IP and upper-layer headers.
        headers: usize,
    },
    /// The link MTU leaves no room for 8 bytes of data in a fragment.
    CannotFragment {
        /// The link MTU.
        link_mtu: usize,
        /// Headers every fragment repeats (with the IPv6 Fragment header).
        per_fragment_headers: usize,
    },
    /// A total does not fit in `usize`.
    Overflow,
}

impl fmt::Display for OverheadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            OverheadError::Sa(e) => e.fmt(f),
            OverheadError::BadShape => write!(
                f,
                "an SA shape needs a block size of 1 to {MAX_SHAPE_FIELD} bytes and IV and ICV of at most {MAX_SHAPE_FIELD}"
            ),
            OverheadError::HeaderLen { version, header_len } => match version {
                IpVersion::V4 => write!(f, "an IPv4 header is 20 to 60 bytes in steps of 4, not {header_len}"),
                IpVersion::V6 => write!(
                    f,
                    "IPv6 headers in front are 40 bytes plus a multiple of 8, not {header_len}"
                ),
            },
            OverheadError::ShorterThanHeader { len, header_len } => {
                write!(f, "an inner packet of {len} bytes is shorter than its {header_len}-byte IP header")
            }
            OverheadError::TooBig { len, max } => {
                write!(f, "a packet of {len} bytes exceeds the IP maximum of {max}")
            }
            OverheadError::MtuTooSmall { link_mtu, smallest } => write!(
                f,
                "link MTU {link_mtu} is too small: the smallest sealed packet is {smallest} bytes"
            ),
            OverheadError::NoRoomForPayload { max_inner_mtu, headers } => write!(
                f,
                "the largest inner packet that fits ({max_inner_mtu} bytes) leaves no room for payload after {headers} bytes of headers"
            ),
            OverheadError::CannotFragment {
                link_mtu,
                per_fragment_headers,
            } => write!(
                f,
                "link MTU {link_mtu} leaves no room for 8 data bytes after {per_fragment_headers} bytes of headers in a fragment"
            ),
            OverheadError::Overflow => f.write_str("the total does not fit in a machine word"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for OverheadError {}

/// A packet while it is being walked through the bundle.
struct Walk {
    version: IpVersion,
    /// Bytes in front of the IPsec header in transport mode.
    front: usize,
    len: usize,
}

/// The overhead calculator for one bundle (see the [module documentation](self)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Calculator {
    sas: Vec<SaShape>,
    udp_encap: bool,
    comp: CompAssumption,
}

impl Calculator {
    /// A bundle of these SAs, in seal order. Fails on a [`SaShape`] with an impossible field.
    pub fn new(sas: Vec<SaShape>) -> Result<Self, OverheadError> {
        for s in &sas {
            s.check()?;
        }
        Ok(Calculator {
            sas,
            udp_encap: false,
            comp: CompAssumption::default(),
        })
    }

    /// The bundle of these SAs, in seal order ([`SaShape::from_params`] for each).
    pub fn from_params<'a>(sas: impl IntoIterator<Item = &'a SaParams>) -> Result<Self, OverheadError> {
        Self::new(
            sas.into_iter()
                .map(SaShape::from_params)
                .collect::<Result<Vec<_>, _>>()?,
        )
    }

    /// The bundle of these SAD configurations, in seal order.
    pub fn from_configs(configs: &[SaConfig]) -> Result<Self, OverheadError> {
        Self::from_params(configs.iter().map(|c| &c.params))
    }

    /// Counts RFC 3948 UDP encapsulation (8 bytes) in front of each ESP header. Not
    /// implemented by the data plane yet: for planning only.
    pub fn udp_encap(mut self, on: bool) -> Self {
        self.udp_encap = on;
        self
    }

    /// What IPComp is assumed to do (default: [`CompAssumption::NotCompressed`]).
    pub fn comp_assumption(mut self, c: CompAssumption) -> Self {
        self.comp = c;
        self
    }

    /// The SAs.
    pub fn sas(&self) -> &[SaShape] {
        &self.sas
    }

    /// Whether UDP encapsulation is counted.
    pub fn has_udp_encap(&self) -> bool {
        self.udp_encap
    }

    /// The IPComp assumption.
    pub fn comp(&self) -> CompAssumption {
        self.comp
    }

    /// The bytes the bundle adds to an inner packet of `len` bytes, with the breakdown.
    pub fn overhead(&self, inner: Inner, len: usize) -> Result<Overhead, OverheadError> {
        if len < inner.header_len {
            return Err(OverheadError::ShorterThanHeader {
                len,
                header_len: inner.header_len,
            });
        }
        let max = inner.version.max_packet();
        if len > max {
            return Err(OverheadError::TooBig { len, max });
        }
        let mut w = Walk {
            version: inner.version,
            front: inner.header_len,
            len,
        };
        let mut per_sa = Vec::with_capacity(self.sas.len());
        let mut len_after = Vec::with_capacity(self.sas.len());
        let mut breakdown = Breakdown::default();
        for sa in &self.sas {
            let b = self.apply(sa, &mut w)?;
            breakdown.add(&b);
            per_sa.push(b);
            len_after.push(w.len);
        }
        Ok(Overhead {
            inner_len: len,
            sealed_len: w.len,
            bytes: w.len - len,
            breakdown,
            per_sa,
            len_after,
            outer_version: w.version,
            unfragmentable_len: w.front,
        })
    }

    /// The sealed length of an inner packet of `len` bytes.
    pub fn sealed_len(&self, inner: Inner, len: usize) -> Result<usize, OverheadError> {
        self.overhead(inner, len).map(|o| o.sealed_len)
    }

    /// One SA's bytes; moves `w` on. Lengths stay below the IP maximum plus a few hundred
    /// bytes (shapes are bounded), so the additions cannot overflow.
    fn apply(&self, sa: &SaShape, w: &mut Walk) -> Result<Breakdown, OverheadError> {
        let mut b = Breakdown::default();
        // Tunnel mode: everything so far is protected and a new outer header goes in front.
        let (protected, outer) = match sa.encap() {
            Encap::Transport => (w.len - w.front, None),
            Encap::Tunnel(v) => (w.len, Some(v)),
        };
        let version = outer.unwrap_or(w.version);
        match *sa {
            SaShape::Esp {
                iv_len,
                block_size,
                icv_len,
                ..
            } => {
                b.udp_encap = if self.udp_encap { UDP_ENCAP_LEN } else { 0 };
                b.esp_header = ipsec_esp::packet::HEADER_LEN;
                b.esp_iv = iv_len;
                b.esp_padding = ipsec_esp::padding::pad_len(protected, block_size);
                b.esp_trailer = ipsec_esp::padding::TRAILER_LEN;
                b.esp_icv = icv_len;
            }
            SaShape::Ah { icv_len, .. } => {
                b.ah = ipsec_ah::wire::header_len(icv_len, version == IpVersion::V6);
            }
            SaShape::Comp { .. } => {
                if self.comp == CompAssumption::Compressed {
                    b.ipcomp = ipsec_ipcomp::HEADER_LEN;
                }
            }
        }
        if let Some(v) = outer {
            b.outer_ip = v.header_len();
            w.version = v;
            w.front = v.header_len();
        }
        w.len += b.total();
        let max = w.version.max_packet();
        if w.len > max {
            return Err(OverheadError::TooBig { len: w.len, max });
        }
        Ok(b)
    }

    /// The largest inner packet (IP header included) that, sealed, fits `link_mtu` without
    /// fragmentation. Found by trying lengths downwards from the MTU (padding makes the
    /// sealed length a step function, so it is not inverted by hand).
    pub fn max_inner_mtu(&self, inner: Inner, link_mtu: usize) -> Result<usize, OverheadError> {
        let mut len = link_mtu.min(inner.version.max_packet());
        // Each step down moves the sealed length by at most one byte less than the overhead,
        // so this loop runs at most about (overhead + block size) times.
        while len >= inner.header_len {
            match self.sealed_len(inner, len) {
                Ok(s) if s <= link_mtu => return Ok(len),
                Ok(_) | Err(OverheadError::TooBig { .. }) => {}
                Err(e) => return Err(e),
            }
            len -= 1;
        }
        let smallest = match self.sealed_len(inner, inner.header_len) {
            Ok(s) => s,
            Err(OverheadError::TooBig { len, .. }) => len,
            Err(e) => return Err(e),
        };
        Err(OverheadError::MtuTooSmall { link_mtu, smallest })
    }

    /// `payload` bytes sent as upper-layer segments sized to fit the link after sealing (what
    /// TCP does with path-MTU discovery): full segments carry
    /// `max_inner_mtu - inner header - upper header` bytes, the last one the rest. A payload of
    /// 0 is one empty segment.
    pub fn segmented(
        &self,
        inner: Inner,
        upper: Upper,
        payload: usize,
        link_mtu: usize,
    ) -> Result<Segmented, OverheadError> {
        let mtu = self.max_inner_mtu(inner, link_mtu)?;
        let headers = inner
            .header_len
            .checked_add(upper.header_len())
            .ok_or(OverheadError::Overflow)?;
        let per = mtu.saturating_sub(headers);
        if per == 0 {
            return Err(OverheadError::NoRoomForPayload {
                max_inner_mtu: mtu,
                headers,
            });
        }
        let packets = payload.div_ceil(per).max(1);
        let full = packets - 1;
        let last = payload - full * per;
        let full_sealed = self.sealed_len(inner, mtu)?;
        let last_sealed = self.sealed_len(inner, headers + last)?;
        let wire_bytes = full
            .checked_mul(full_sealed)
            .and_then(|w| w.checked_add(last_sealed))
            .ok_or(OverheadError::Overflow)?;
        Ok(Segmented {
            payload,
            max_inner_mtu: mtu,
            segment_payload: per,
            last_segment_payload: last,
            packets,
            wire_bytes,
        })
    }

    /// `payload` bytes sent in one upper-layer packet, sealed, then fragmented at `link_mtu`
    /// (see [`fragment`]).
    pub fn fragmented(
        &self,
        inner: Inner,
        upper: Upper,
        payload: usize,
        link_mtu: usize,
    ) -> Result<Fragmented, OverheadError> {
        let inner_len = inner
            .header_len
            .checked_add(upper.header_len())
            .and_then(|l| l.checked_add(payload))
            .ok_or(OverheadError::Overflow)?;
        let o = self.overhead(inner, inner_len)?;
        let f = fragment(o.outer_version, o.unfragmentable_len, o.sealed_len, link_mtu)?;
        Ok(Fragmented {
            payload,
            inner_len,
            sealed_len: o.sealed_len,
            packets: f.packets,
            fragment_data: f.fragment_data,
            last_fragment_data: f.last_fragment_data,
            wire_bytes: f.wire_bytes,
        })
    }
}

/// Fragments an IP packet of `packet_len` bytes whose first `unfragmentable` bytes every
/// fragment repeats, at `link_mtu`. A packet that fits is one packet. IPv4: each fragment
/// carries `(link_mtu - unfragmentable)` rounded down to 8 bytes of data. IPv6: the same
/// after an 8-byte Fragment header, which every fragment carries.
pub fn fragment(
    version: IpVersion,
    unfragmentable: usize,
    packet_len: usize,
    link_mtu: usize,
) -> Result<Fragments, OverheadError> {
    let data = packet_len
        .checked_sub(unfragmentable)
        .ok_or(OverheadError::ShorterThanHeader {
            len: packet_len,
            header_len: unfragmentable,
        })?;
    if packet_len <= link_mtu {
        return Ok(Fragments {
            packets: 1,
            fragment_data: data,
            last_fragment_data: data,
            wire_bytes: packet_len,
        });
    }
    let headers = match version {
        IpVersion::V4 => unfragmentable,
        IpVersion::V6 => unfragmentable
            .checked_add(IPV6_FRAGMENT_HEADER_LEN)
            .ok_or(OverheadError::Overflow)?,
    };
    let per = link_mtu.saturating_sub(headers) / 8 * 8;
    if per == 0 {
        return Err(OverheadError::CannotFragment {
            link_mtu,
            per_fragment_headers: headers,
        });
    }
    let packets = data.div_ceil(per);
    let wire_bytes = packets
        .checked_mul(headers)
        .and_then(|h| h.checked_add(data))
        .ok_or(OverheadError::Overflow)?;
    Ok(Fragments {
        packets,
        fragment_data: per,
        last_fragment_data: data - (packets - 1) * per,
        wire_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esp(encap: Encap, iv_len: usize, block_size: usize, icv_len: usize) -> SaShape {
        SaShape::Esp {
            encap,
            iv_len,
            block_size,
            icv_len,
        }
    }

    #[test]
    fn no_panics_on_odd_inputs() {
        let c = Calculator::new(alloc::vec![esp(Encap::Tunnel(IpVersion::V4), 16, 16, 12)]).unwrap();
        let v4 = Inner::ipv4();
        assert!(matches!(
            c.overhead(v4, 19),
            Err(OverheadError::ShorterThanHeader { .. })
        ));
        assert!(matches!(c.overhead(v4, usize::MAX), Err(OverheadError::TooBig { .. })));
        assert!(matches!(c.overhead(v4, 65535), Err(OverheadError::TooBig { .. })));
        assert!(matches!(c.max_inner_mtu(v4, 0), Err(OverheadError::MtuTooSmall { .. })));
        assert!(matches!(
            c.max_inner_mtu(v4, 60),
            Err(OverheadError::MtuTooSmall { .. })
        ));
        assert!(c.max_inner_mtu(v4, usize::MAX).is_ok());
        assert!(matches!(
            c.segmented(v4, Upper::Other(usize::MAX), 10, 1500),
            Err(OverheadError::Overflow)
        ));
        assert!(matches!(
            c.segmented(v4, Upper::Tcp, 10, 100),
            Err(OverheadError::NoRoomForPayload { .. })
        ));
        assert!(c.segmented(v4, Upper::Tcp, usize::MAX, 1500).is_err());
        assert!(matches!(
            c.fragmented(v4, Upper::Tcp, usize::MAX, 1500),
            Err(OverheadError::Overflow)
        ));
        assert!(matches!(
            fragment(IpVersion::V6, 40, 2000, 55),
            Err(OverheadError::CannotFragment { .. })
        ));
        assert!(fragment(IpVersion::V4, 60, 10, 1500).is_err());
        assert!(Calculator::new(alloc::vec![esp(Encap::Transport, 0, 0, 0)]).is_err());
        assert!(Calculator::new(alloc::vec![esp(Encap::Transport, usize::MAX, 1, 0)]).is_err());
        assert!(Inner::new(IpVersion::V4, 22).is_err());
        assert!(Inner::new(IpVersion::V6, 44).is_err());
        assert!(Inner::new(IpVersion::V6, usize::MAX).is_err());
        assert!(Inner::of_packet(&[0x45]).is_err());
    }

    #[test]
    fn empty_bundle_adds_nothing() {
        let c = Calculator::default();
        assert_eq!(c.max_inner_mtu(Inner::ipv6(), 1280), Ok(1280));
        let o = c.overhead(Inner::ipv6(), 1280).unwrap();
        assert_eq!((o.bytes, o.sealed_len, o.unfragmentable_len), (0, 1280, 40));
    }
}
