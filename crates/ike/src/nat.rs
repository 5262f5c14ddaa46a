//! NAT detection (RFC 7296 section 2.23): NAT_DETECTION_SOURCE_IP and _DESTINATION_IP carry
//! SHA-1(SPIi | SPIr | IP address | port); a mismatch means a NAT changed the address.
use core::net::{IpAddr, SocketAddr};
use sha1::{Digest, Sha1};

/// The hash of 2.23 for one endpoint.
pub fn nat_hash(spi_i: u64, spi_r: u64, addr: SocketAddr) -> [u8; 20] {
    let mut h = Sha1::new();
    h.update(spi_i.to_be_bytes());
    h.update(spi_r.to_be_bytes());
    match addr.ip() {
        IpAddr::V4(a) => h.update(a.octets()),
        IpAddr::V6(a) => h.update(a.octets()),
    }
    h.update(addr.port().to_be_bytes());
    h.finalize().into()
}

/// What the NAT detection notifies of one received message say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NatState {
    /// The peer is behind a NAT: no NAT_DETECTION_SOURCE_IP matched its address as we see it.
    pub peer_behind_nat: bool,
    /// We are behind a NAT: the NAT_DETECTION_DESTINATION_IP did not match our address.
    pub local_behind_nat: bool,
}

/// Evaluates received notifies. `sources` are the NAT_DETECTION_SOURCE_IP values (any may
/// match, 2.23), `destination` the NAT_DETECTION_DESTINATION_IP value, `local`/`remote` the
/// datagram's addresses as we received it. Returns None if the peer sent no notifies.
pub fn evaluate(
    spi_i: u64,
    spi_r: u64,
    sources: &[&[u8]],
    destination: Option<&[u8]>,
    local: SocketAddr,
    remote: SocketAddr,
) -> Option<NatState> {
    let dest = destination?;
    if sources.is_empty() {
        return None;
    }
    let remote_hash = nat_hash(spi_i, spi_r, remote);
    let local_hash = nat_hash(spi_i, spi_r, local);
    Some(NatState {
        peer_behind_nat: !sources.iter().any(|s| *s == remote_hash),
        local_behind_nat: dest != local_hash,
    })
}
