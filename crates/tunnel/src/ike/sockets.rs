//! How the IKE thread sends, and what it tells the ESP-in-UDP sockets about peers.
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// How the IKE thread sends: UDP 500 sockets per local address, and the ESP-in-UDP sockets
/// (port 4500) per IP version.
pub struct IkeSockets<'a> {
    /// Bound to `local:500`, one per IP version in use.
    pub ike: Vec<UdpSocket>,
    /// Sends a datagram from port 4500 (the ESP-in-UDP socket of that IP version).
    pub natt: Vec<(&'a crate::udp::UdpEncap, IpAddr)>,
}

impl IkeSockets<'_> {
    /// Sealed packets to `peer` go to `to` from now on (an authenticated IKE message came
    /// from there, RFC 7296 2.23).
    pub(super) fn peer_moved(&self, peer: IpAddr, to: SocketAddr) {
        use crate::underlay::UnderlayRx;
        for (u, _) in &self.natt {
            u.authenticated(peer, to);
        }
    }

    /// A child SA with `peer` is up, its IKE messages from `at`: sealed packets to it go
    /// there, and a peer not configured (a connection with `remote_addrs = %any`) joins the
    /// ESP-in-UDP sockets' peers. `false`: no room for another such peer.
    pub(super) fn add_peer(&self, peer: IpAddr, at: SocketAddr) -> bool {
        self.natt
            .iter()
            .filter(|(_, l)| l.is_ipv4() == peer.is_ipv4())
            .all(|(u, _)| u.add_peer(peer, at))
    }

    /// `peer`'s last IKE SA is gone: a peer IKE added leaves the sockets' peers again.
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
