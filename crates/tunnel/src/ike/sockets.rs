//! How the IKE thread sends, and what it tells the ESP-in-UDP sockets about peers.
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// How the IKE thread sends: UDP 500 sockets per local address, and the ESP-in-UDP sockets
/// (port 4500) per IP version.
pub struct IkeSockets<'a> {
    /// Bound to `local:500`, one per IP version in use.
    pub ike: Vec<UdpSocket>,
    /// Sends a datagram from port 4500 (the ESP-in-UDP socket of that IP version).
    pub natt: Vec<(&'a crate::dev::udp::UdpEncap, IpAddr)>,
}

impl IkeSockets<'_> {
    /// An IKE SA's authenticated messages came from `old` and now come from `to` (RFC 7296
    /// 2.23): the sealed packets that went to `old` (that IKE SA's children) go to `to` from
    /// now on; another client behind the same NAT address keeps its endpoint
    /// ([`UdpEncap::moved`](crate::dev::udp::UdpEncap::moved)).
    pub(super) fn peer_moved(&self, old: SocketAddr, to: SocketAddr) {
        for (u, _) in self.natt.iter().filter(|(_, l)| l.is_ipv4() == old.is_ipv4()) {
            u.moved(old, to);
        }
    }

    /// A child SA (outbound `spi_out`, inbound `spi_in`) is up, its IKE messages from `at`:
    /// its sealed packets go there, and a peer not configured (a connection with
    /// `remote_addrs = %any`) joins the ESP-in-UDP sockets' peers, one endpoint per address
    /// and port (clients behind one NAT address each keep theirs). `false`: no room for
    /// another such peer.
    pub(super) fn add_peer(&self, at: SocketAddr, spi_out: u32, spi_in: u32) -> bool {
        self.natt
            .iter()
            .filter(|(_, l)| l.is_ipv4() == at.is_ipv4())
            .all(|(u, _)| u.add_peer(at, spi_out, spi_in))
    }

    /// The child SA with inbound SPI `spi_in` is gone: an endpoint IKE added leaves the
    /// sockets' peers when no child SA uses it any more.
    pub(super) fn child_down(&self, spi_in: u32) {
        for (u, _) in &self.natt {
            u.remove_child(spi_in);
        }
    }

    /// `peer`'s last IKE SA is gone: the endpoints IKE added at that address that no child SA
    /// uses leave the sockets' peers (another client's at the same address stays).
    pub(super) fn remove_peer(&self, peer: IpAddr) {
        for (u, _) in &self.natt {
            u.remove_peer(peer);
        }
    }

    pub(super) fn send(&self, t: &ipsec_ike::Transmit) -> std::io::Result<()> {
        if let Some(s) = self.ike.iter().find(|s| s.local_addr().is_ok_and(|a| a == t.local)) {
            s.send_to(&t.payload, t.remote)?;
            return Ok(());
        }
        if let Some((u, _)) = self.natt.iter().find(|(_, a)| *a == t.local.ip()) {
            return u.send_datagram(&t.payload, t.remote);
        }
        Err(std::io::Error::other(format!("no socket bound to {}", t.local)))
    }
}
