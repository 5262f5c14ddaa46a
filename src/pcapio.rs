//! Reading and writing pcap captures for `ipsec seal` and `ipsec open`: LINKTYPE_RAW (101),
//! LINKTYPE_IPV4 (228), LINKTYPE_IPV6 (229) and Ethernet (1).

use crate::bundle::PacketError;
use pcap_file::DataLink;

/// Link types the tool handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Raw IP, either version (101).
    Raw,
    /// IPv4 only (228).
    Ipv4,
    /// IPv6 only (229).
    Ipv6,
    /// Ethernet II, optionally with one 802.1Q tag (1).
    Ethernet,
}

impl Link {
    /// The link type of a capture, or a message naming it.
    pub fn from_datalink(d: DataLink) -> Result<Self, String> {
        match d {
            DataLink::RAW => Ok(Link::Raw),
            DataLink::IPV4 => Ok(Link::Ipv4),
            DataLink::IPV6 => Ok(Link::Ipv6),
            DataLink::ETHERNET => Ok(Link::Ethernet),
            other => Err(format!(
                "unsupported link type {other:?}: use raw IP (101), IPv4 (228), IPv6 (229) or Ethernet (1)"
            )),
        }
    }

    /// Where the IP packet starts in a frame.
    pub fn ip_offset(self, frame: &[u8]) -> Result<usize, PacketError> {
        match self {
            Link::Raw | Link::Ipv4 | Link::Ipv6 => Ok(0),
            Link::Ethernet => {
                let et = |at: usize| frame.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
                match et(12) {
                    Some(0x0800 | 0x86dd) => Ok(14),
                    Some(0x8100) => match et(16) {
                        Some(0x0800 | 0x86dd) => Ok(18),
                        _ => Err(PacketError::NotIp),
                    },
                    _ => Err(PacketError::NotIp),
                }
            }
        }
    }

    /// Makes the link-layer header agree with the IP version of the (transformed) packet in
    /// `frame[offset..]`: the Ethernet type is rewritten; IPv4- or IPv6-only captures refuse
    /// the other version.
    pub fn fix_frame(self, frame: &mut [u8], offset: usize) -> Result<(), PacketError> {
        let v = frame.get(offset).map(|b| b >> 4);
        match (self, v) {
            (Link::Raw, Some(4 | 6)) | (Link::Ipv4, Some(4)) | (Link::Ipv6, Some(6)) => Ok(()),
            (Link::Ipv4, _) => Err(PacketError::LinkType(
                "result is not IPv4, but the capture's link type is IPv4",
            )),
            (Link::Ipv6, _) => Err(PacketError::LinkType(
                "result is not IPv6, but the capture's link type is IPv6",
            )),
            (Link::Ethernet, Some(v @ (4 | 6))) => {
                let et: u16 = if v == 4 { 0x0800 } else { 0x86dd };
                frame[offset - 2..offset].copy_from_slice(&et.to_be_bytes());
                Ok(())
            }
            _ => Err(PacketError::NotIp),
        }
    }
}
