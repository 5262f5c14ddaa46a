//! Where an IKE SA's peer is and how IKE reaches it (RFC 7296 2.23): the addresses, the
//! move to the NAT-T ports, NAT detection's result, and what follows from them for the
//! children's UDP encapsulation (RFC 3948).
use super::{Cx, IkeSa};
use crate::config::Config;
use crate::event::{EncapPorts, Event, Transmit};
use crate::nat::NatState;
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};
use ipsec_core::nat_t::NON_ESP_MARKER;

/// Where the peer is and how IKE reaches it (2.23).
pub(crate) struct Path {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// IKE runs on the NAT-T ports (with the non-ESP marker).
    pub natt: bool,
    pub nat: NatState,
}

/// The path (2.23).
impl IkeSa {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// NAT detection's result (2.23), from the NAT_DETECTION_*_IP notifies of IKE_SA_INIT.
    pub fn set_nat(&mut self, nat: NatState) {
        self.path.nat = nat;
    }

    /// IKE moves to (or arrived on) the NAT-T ports (2.23): ours is `local_port`, the
    /// peer's `remote_port`, and messages carry the non-ESP marker from now on.
    pub fn float_to_natt(&mut self, local_port: u16, remote_port: u16) {
        self.path.natt = true;
        self.path.local.set_port(local_port);
        self.path.remote.set_port(remote_port);
    }

    /// MOBIKE's state (RFC 4555): whether it is in use, the peer's other addresses, the
    /// path of the request being answered ([`crate::task::ike_mobike`]).
    pub fn mobike(&self) -> &crate::task::ike_mobike::Mobike {
        &self.mobike
    }

    pub fn mobike_mut(&mut self) -> &mut crate::task::ike_mobike::Mobike {
        &mut self.mobike
    }

    /// UPDATE_SA_ADDRESSES (RFC 4555 3.5 steps 4, 7): the peer, and every child SA's outer
    /// endpoint with it (on the NAT-T port the path now uses), move to `to`. The old
    /// address; None when the peer is there already.
    pub fn move_to(&mut self, cfg: &Config, to: SocketAddr) -> Option<SocketAddr> {
        if to == self.path.remote {
            return None;
        }
        let old = core::mem::replace(&mut self.path.remote, to);
        let encap = self.child_encap(cfg);
        for c in &mut self.children {
            c.info.remote = to;
            if let (Some(e), Some(now)) = (c.info.encap.as_mut(), encap) {
                e.remote_port = now.remote_port;
            }
        }
        Some(old)
    }

    /// Our own address changed (RFC 4555 3.5, the initiator's side): the IKE SA sends from
    /// `ip` (its port kept), and its children's outer endpoint is there too. The old local
    /// endpoint; None when it is there already.
    pub fn move_local(&mut self, ip: IpAddr) -> Option<SocketAddr> {
        if ip == self.path.local.ip() {
            return None;
        }
        let old = self.path.local;
        self.path.local.set_ip(ip);
        for c in &mut self.children {
            c.info.local.set_ip(ip);
        }
        Some(old)
    }

    /// Queues a message to the peer, with the non-ESP marker on the NAT-T ports: one
    /// datagram, or one per fragment of a fragmented message (a train, [`crate::fragment`]).
    pub fn send(&self, cx: &mut Cx, bytes: &[u8]) {
        self.send_to(cx, bytes, self.path.remote)
    }

    /// Sends on the IKE path's local address to `remote`.
    pub(super) fn send_to(&self, cx: &mut Cx, bytes: &[u8], remote: SocketAddr) {
        for d in crate::fragment::datagrams(bytes) {
            let mut payload = Vec::with_capacity(d.len() + 4);
            if self.path.natt {
                payload.extend_from_slice(&NON_ESP_MARKER);
            }
            payload.extend_from_slice(d);
            cx.out.transmit(Transmit {
                local: self.path.local,
                remote,
                payload,
            });
        }
    }

    /// The UDP encapsulation of child SAs: when a NAT is detected or encapsulation forced,
    /// on the NAT-T ports (RFC 3948): the IKE path's once IKE moved there (behind a NAT the
    /// peer's port is the NAT's mapping), else ours and the peer's configured NAT-T port —
    /// never the IKE port, whose socket drops ESP.
    pub fn child_encap(&self, cfg: &Config) -> Option<EncapPorts> {
        let conn = self.conn(cfg);
        let (local_port, remote_port) = if self.path.natt {
            (self.path.local.port(), self.path.remote.port())
        } else {
            (cfg.natt_port, conn.remote_natt_port)
        };
        (self.path.nat.peer_behind_nat || self.path.nat.local_behind_nat || conn.encap).then_some(EncapPorts {
            local_port,
            remote_port,
        })
    }

    /// Records an authenticated message's addresses (2.23: only those move the peer).
    pub fn authenticated_from(&mut self, cx: &mut Cx, local: SocketAddr, remote: SocketAddr) {
        self.last_heard = cx.now;
        self.path.local = local;
        if local.port() == cx.cfg.natt_port {
            self.path.natt = true;
        }
        // With MOBIKE only UPDATE_SA_ADDRESSES moves the peer (RFC 4555 3.5).
        if remote != self.path.remote && !crate::task::ike_mobike::holds_path(self) {
            let old = self.path.remote;
            self.path.remote = remote;
            if self.state.is_established() {
                cx.out.event(Event::PeerEndpointChanged {
                    conn: self.conn_name(cx.cfg),
                    spi_i: self.spi_i,
                    old,
                    new: remote,
                    mobike: false,
                });
                for c in &mut self.children {
                    c.info.remote = remote;
                    if let Some(e) = c.info.encap.as_mut() {
                        e.remote_port = remote.port();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Connection, Psk};
    use crate::ike_sa::State;
    use core::time::Duration;

    /// Forced encapsulation with a peer still on port 500 (it never moved to the NAT-T
    /// ports): the child's ESP in UDP goes between the NAT-T ports, never to IKE's port,
    /// whose socket drops ESP (#31 defect 7).
    #[test]
    fn child_encapsulation_is_on_the_natt_ports() {
        let a = "10.0.0.1".parse().unwrap();
        let b = "10.0.0.2".parse().unwrap();
        let mut c = Connection::new(
            "c",
            a,
            Some(b),
            crate::Identity::from_str_config("10.0.0.1").unwrap(),
            None,
            Psk::new(b"k"),
            "aes128gcm16-prfsha256-x25519",
        )
        .unwrap();
        c.encap = true;
        let cfg = Config::new(alloc::vec![c]);
        let mut sa = IkeSa::new(
            0,
            crate::event::Role::Responder,
            1,
            2,
            SocketAddr::new(a, 500),
            SocketAddr::new(b, 500),
            State::InitSent,
            Duration::ZERO,
        );
        let natt = Some(EncapPorts {
            local_port: 4500,
            remote_port: 4500,
        });
        assert_eq!(sa.child_encap(&cfg), natt);
        // Once IKE moved (behind a NAT: to the NAT's port), the path's ports.
        sa.path.natt = true;
        sa.path.local = SocketAddr::new(a, 4500);
        sa.path.remote = SocketAddr::new(b, 34500);
        assert_eq!(
            sa.child_encap(&cfg),
            Some(EncapPorts {
                local_port: 4500,
                remote_port: 34500
            })
        );
        let mut cfg = cfg;
        cfg.connections[0].encap = false;
        assert_eq!(sa.child_encap(&cfg), None, "no NAT, not forced: plain ESP");
    }
}
