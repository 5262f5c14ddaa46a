//! One IKE SA (RFC 7296 1, 2): who it is (SPIs, role, connection), where its peer is (2.23),
//! its state with the data each state needs, the two halves of the message-ID window (2.3:
//! our requests in the [`TaskManager`], the peer's in the [`PeerWindow`]) and its child SAs.
//! The exchanges themselves are tasks ([`crate::task`]), one module each.
//!
//! The states and keys are in `state`, the protection of messages (Encrypted payload,
//! fragments) in `protect`, the task context and the SA's effects on the endpoint in `context`.
use crate::config::{Config, Connection};
use crate::event::{ChildSaInfo, DownReason, EncapPorts, Event, Role, Transmit};
use crate::header::{ExchangeType, HeaderRepr};
use crate::message::Payload;
use crate::nat::NatState;
use crate::task::TaskManager;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::time::Duration;
use ipsec_core::nat_t::NON_ESP_MARKER;
use rand_core::CryptoRngCore;

mod context;
mod protect;
mod state;
pub(crate) use context::{Census, Cx, EndpointEvent, Output};
pub(crate) use protect::Opened;
pub(crate) use state::{Crypto, Handshake, State};

/// The peer's half of the message-ID window (2.3): the ID of its next request, and our
/// response to its last one, kept for a retransmission of that request (2.1).
#[derive(Default)]
pub(crate) struct PeerWindow {
    pub expected: u32,
    pub kept: Option<(u32, Vec<u8>)>,
    /// The peer's request whose response waits for a RADIUS server (an EAP round of
    /// IKE_AUTH, [`crate::task::eap_radius`]): its retransmissions are absorbed (2.1).
    pub deferred: Option<u32>,
}

/// Where the peer is and how IKE reaches it (2.23).
pub(crate) struct Path {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// IKE runs on the NAT-T ports (with the non-ESP marker).
    pub natt: bool,
    pub nat: NatState,
}

/// Lifetimes of a child SA pair, as deadlines on the endpoint's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChildTimers {
    /// Start a rekey (ours) at this time.
    pub rekey_at: Option<Duration>,
    /// Delete it at this time if it was not rekeyed (hard lifetime).
    pub expire_at: Option<Duration>,
}

/// Where a child SA pair is in its life (2.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChildState {
    /// Installed and carrying traffic.
    Installed,
    /// A rekey of ours is outstanding; `peer`: the peer rekeyed it too meanwhile (2.8.1).
    Rekeying {
        peer: Option<crate::task::child_rekey::PeerRekey>,
    },
    /// Replaced by a new pair; kept for packets still in flight until its Delete (ours
    /// when `we_delete`, else the peer's; ours anyway at `until`).
    Rekeyed { until: Duration, we_delete: bool },
    /// Our Delete of it is outstanding.
    Deleting,
}

/// A child SA pair of this IKE SA.
pub(crate) struct Child {
    pub info: ChildSaInfo,
    pub state: ChildState,
    pub timers: ChildTimers,
    /// Index of its [`crate::config::ChildConfig`] in the connection.
    pub cfg: usize,
}

impl Child {
    pub fn spi_in(&self) -> u32 {
        self.info.spi_in
    }
}

pub(crate) struct IkeSa {
    pub conn: usize,
    role: Role,
    pub spi_i: u64,
    pub spi_r: u64,
    pub path: Path,
    pub state: State,
    /// Our requests: the one outstanding and the ones waiting for the window.
    pub tasks: TaskManager,
    /// The peer's requests.
    pub window: PeerWindow,
    pub children: Vec<Child>,
    pub last_heard: Duration,
    created: Duration,
    /// When we rekey this IKE SA (None: never).
    pub rekey_at: Option<Duration>,
    effects: Vec<EndpointEvent>,
    pub stats: crate::status::IkeSaStats,
    /// IKE fragmentation (RFC 7383 2.3): the connection's `fragment_size` when both sides
    /// announced support in IKE_SA_INIT; None: fragments are neither sent nor accepted.
    pub fragmentation: Option<u16>,
    /// The peer's fragmented requests \[0\] and responses \[1\] being reassembled (2.6).
    reassembly: [crate::fragment::Reassembly; 2],
    /// Responder: a CREATE_CHILD_SA waiting for its IKE_FOLLOWUP_KE (RFC 9370 2.2.4).
    pub followup: Option<crate::task::followup_ke::Pending>,
    /// The endpoint's SAs as of the request being handled ([`Census`]).
    census: Census,
    /// Responder: the EAP conversation of IKE_AUTH (RFC 7296 2.16) while it runs.
    pub eap: Option<alloc::boxed::Box<crate::task::ike_auth_eap::EapState>>,
    /// Virtual addresses (RFC 7296 3.15): a responder's leases to the peer, an
    /// initiator's own from the CFG_REPLY ([`crate::task::config_payload`]).
    pub vips: Vec<core::net::IpAddr>,
    /// MOBIKE (RFC 4555): whether it is in use, the peer's addresses, the request's path.
    pub mobike: crate::task::ike_mobike::Mobike,
    /// The peer sent Windows' vendor ID in IKE_SA_INIT ([`crate::vendor`]).
    pub peer_windows: bool,
    /// Responder: the EAP method that authenticated the peer (`eap-mschapv2`), once done.
    pub eap_method: Option<&'static str>,
}

impl IkeSa {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        conn: usize,
        role: Role,
        spi_i: u64,
        spi_r: u64,
        local: SocketAddr,
        remote: SocketAddr,
        state: State,
        now: Duration,
    ) -> Self {
        IkeSa {
            conn,
            role,
            spi_i,
            spi_r,
            path: Path {
                local,
                remote,
                natt: false,
                nat: NatState::default(),
            },
            state,
            tasks: TaskManager::default(),
            window: PeerWindow::default(),
            children: Vec::new(),
            last_heard: now,
            created: now,
            rekey_at: None,
            effects: Vec::new(),
            stats: Default::default(),
            fragmentation: None,
            reassembly: Default::default(),
            followup: None,
            census: Census::default(),
            eap: None,
            vips: Vec::new(),
            mobike: Default::default(),
            peer_windows: false,
            eap_method: None,
        }
    }

    /// Our SPI: the key the endpoint files this SA under.
    pub fn our_spi(&self) -> u64 {
        match self.role {
            Role::Initiator => self.spi_i,
            Role::Responder => self.spi_r,
        }
    }

    pub fn conn<'c>(&self, cfg: &'c Config) -> &'c Connection {
        &cfg.connections[self.conn]
    }

    pub fn conn_name(&self, cfg: &Config) -> String {
        self.conn(cfg).name.clone()
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Asks something of the endpoint ([`EndpointEvent`]), done after this call.
    pub fn effect(&mut self, e: EndpointEvent) {
        self.effects.push(e);
    }

    /// What the SA asked of the endpoint since the last call.
    pub fn take_effects(&mut self) -> Vec<EndpointEvent> {
        core::mem::take(&mut self.effects)
    }

    pub fn has_effects(&self) -> bool {
        !self.effects.is_empty()
    }

    /// The endpoint's SAs as of the request about to be handled ([`Census`]).
    pub fn set_census(&mut self, census: Census) {
        self.census = census;
    }

    pub fn census(&self) -> Census {
        self.census
    }

    pub fn is_initiator(&self) -> bool {
        self.role == Role::Initiator
    }

    pub fn header(&self, exchange: ExchangeType, response: bool, id: u32) -> HeaderRepr {
        HeaderRepr {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            next_payload: 0,
            exchange,
            initiator: self.is_initiator(),
            response,
            message_id: id,
            length: 0,
        }
    }

    /// Queues a message to the peer, with the non-ESP marker on the NAT-T ports: one
    /// datagram, or one per fragment of a fragmented message (a train, [`crate::fragment`]).
    pub fn send(&self, cx: &mut Cx, bytes: &[u8]) {
        self.send_to(cx, bytes, self.path.remote)
    }

    /// Sends on the IKE path's local address to `remote`.
    fn send_to(&self, cx: &mut Cx, bytes: &[u8], remote: SocketAddr) {
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

    /// Sends a response to the peer's request `id` and keeps it for a retransmission of
    /// that request (2.1).
    pub fn respond(
        &mut self,
        cx: &mut Cx,
        exchange: ExchangeType,
        id: u32,
        payloads: &[Payload],
        rng: &mut impl CryptoRngCore,
    ) {
        match self.seal(exchange, true, id, payloads, rng) {
            Ok(bytes) => {
                // To where the request came from (RFC 7296 2.11; with MOBIKE that need not
                // be the peer's address, RFC 4555 3.5).
                let to = self.mobike.request.take().map_or(self.path.remote, |(_, r)| r);
                self.send_to(cx, &bytes, to);
                self.window.kept = Some((id, bytes));
            }
            Err(_) => self.window.kept = None,
        }
    }

    /// Marks the SA dead, reporting its children and itself down.
    pub fn kill(&mut self, cx: &mut Cx, reason: DownReason) {
        if self.state.is_dead() {
            return;
        }
        let name = self.conn_name(cx.cfg);
        let child_reason = if reason == DownReason::Local || reason == DownReason::Peer {
            reason
        } else {
            DownReason::IkeSaDown
        };
        for c in self.children.drain(..) {
            cx.out.event(Event::ChildDown {
                conn: name.clone(),
                child: c.info.child.clone(),
                spi_in: c.info.spi_in,
                spi_out: c.info.spi_out,
                reason: child_reason,
            });
        }
        let half_open = matches!(self.state, State::HalfOpen { .. });
        // A stalled EAP conversation is announced (it got past IKE_SA_INIT; RFC 7296 2.16).
        let announce = !(half_open && reason == DownReason::HalfOpenTimeout && self.eap.is_none());
        if announce {
            cx.out.event(Event::IkeDown {
                conn: name,
                spi_i: self.spi_i,
                spi_r: self.spi_r,
                remote: self.path.remote,
                reason,
            });
        }
        self.die();
        self.tasks.clear();
        self.effects.push(EndpointEvent::Down(reason));
    }

    /// Reports a child down and forgets it.
    pub fn child_down(&mut self, cx: &mut Cx, spi_in: u32, reason: DownReason) {
        let name = self.conn_name(cx.cfg);
        if let Some(i) = self.children.iter().position(|c| c.spi_in() == spi_in) {
            let c = self.children.remove(i);
            cx.out.event(Event::ChildDown {
                conn: name,
                child: c.info.child.clone(),
                spi_in: c.info.spi_in,
                spi_out: c.info.spi_out,
                reason,
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

    /// Timers: retransmission, half-open expiry, liveness checks, rekeying and expiry.
    pub fn handle_timeout(&mut self, cx: &mut Cx, rng: &mut impl CryptoRngCore) {
        if self.state.is_dead() {
            return;
        }
        for r in &mut self.reassembly {
            r.expire(cx.now);
        }
        crate::task::followup_ke::expire(self, cx.now);
        crate::task::eap_radius::handle_timeout(self, cx, rng);
        if self.state.is_dead() {
            return;
        }
        // A liveness check unanswered for dpd_timeout: the peer is gone (2.4).
        let dpd_timeout = self.conn(cx.cfg).dpd_timeout;
        if let (Some(t), Some(a)) = (dpd_timeout, self.tasks.active.as_ref()) {
            if matches!(a.task, crate::task::Task::IkeDpd) && cx.now >= a.started + t {
                self.kill(cx, DownReason::Timeout);
                return;
            }
        }
        match self.tasks.handle_timeout(cx.now, &cx.cfg.retransmit) {
            Ok(Some(bytes)) => {
                self.stats.retransmits += 1;
                self.send(cx, &bytes)
            }
            Ok(None) => {}
            Err(()) => {
                self.kill(cx, DownReason::Timeout);
                return;
            }
        }
        if matches!(self.state, State::HalfOpen { .. }) && cx.now >= self.created + cx.cfg.half_open_timeout {
            self.kill(cx, DownReason::HalfOpenTimeout);
            return;
        }
        crate::task::lifetimes::handle_timeout(self, cx, rng);
    }

    pub fn poll_timeout(&self, cfg: &Config) -> Option<Duration> {
        if self.state.is_dead() {
            return None;
        }
        let mut t: Option<Duration> = self.tasks.deadline();
        if let Some(d) = self.tasks.dpd_deadline(self.conn(cfg).dpd_timeout) {
            t = Some(t.map_or(d, |x| x.min(d)));
        }
        let mut consider = |d: Duration| t = Some(t.map_or(d, |x| x.min(d)));
        if matches!(self.state, State::HalfOpen { .. }) {
            consider(self.created + cfg.half_open_timeout);
        }
        if let Some(d) = crate::task::lifetimes::deadline(self, cfg) {
            consider(d);
        }
        for d in self.reassembly.iter().filter_map(|r| r.deadline()) {
            consider(d);
        }
        if let Some(p) = &self.followup {
            consider(p.deadline());
        }
        if let Some(d) = crate::task::eap_radius::deadline(self) {
            consider(d);
        }
        t
    }

    /// A child SA pair's [`ChildSaInfo`] from its negotiated parameters and keys.
    pub fn child_info(&self, cfg: &Config, a: &crate::child::Agreed, keys: &crate::keys::ChildKeys) -> ChildSaInfo {
        let c = &self.conn(cfg).children[a.cfg];
        let (encr_out, integ_out, encr_in, integ_in) = ChildSaInfo::new_keys(a.initiator, keys);
        ChildSaInfo {
            conn: self.conn_name(cfg),
            child: c.name.clone(),
            protocol: 50,
            spi_in: a.spi_in,
            spi_out: a.spi_out,
            suite: a.suite,
            mode: a.mode,
            local_ts: a.local_ts.clone(),
            remote_ts: a.remote_ts.clone(),
            lifetimes: c.lifetimes,
            encap: self.child_encap(cfg),
            local: self.path.local,
            remote: self.path.remote,
            initiator: a.initiator,
            rekeys: None,
            encr_out,
            integ_out,
            encr_in,
            integ_in,
        }
    }
}

impl IkeSa {
    /// What [`crate::Endpoint::status`] says of it.
    pub fn status(&self, cfg: &Config, now: Duration) -> crate::status::IkeSaStatus {
        let state = match self.state {
            State::InitSent | State::AuthSent { .. } => "connecting",
            State::HalfOpen { .. } => "half-open",
            State::Established { .. } => "established",
            State::Rekeyed { .. } => "rekeyed",
            State::Dead => "dead",
        };
        let left = |t: Option<Duration>| t.map(|t| t.saturating_sub(now));
        crate::status::IkeSaStatus {
            conn: self.conn_name(cfg),
            state,
            role: self.role,
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            local: self.path.local,
            remote: self.path.remote,
            remote_id: self.state.remote_id().map(|i| alloc::format!("{i}")),
            proposal: self.state.crypto().map(|c| c.suite.proposal_string()),
            nat: self.child_encap(cfg).is_some(),
            next_request_id: self.tasks.next_id,
            expected_peer_id: self.window.expected,
            age: now.saturating_sub(self.created),
            rekey_in: left(self.rekey_at),
            stats: self.stats,
            virtual_ips: self.vips.clone(),
            mobike: self.mobike.agreed,
            peer_addresses: self.mobike.peer_addresses.clone(),
            eap_method: self.eap_method,
            children: self
                .children
                .iter()
                .map(|c| crate::status::ChildSaStatus {
                    child: c.info.child.clone(),
                    state: match c.state {
                        ChildState::Installed => "installed",
                        ChildState::Rekeying { .. } => "rekeying",
                        ChildState::Rekeyed { .. } => "rekeyed",
                        ChildState::Deleting => "deleting",
                    },
                    spi_in: c.info.spi_in,
                    spi_out: c.info.spi_out,
                    proposal: c.info.suite.proposal_string(),
                    rekeys: c.info.rekeys,
                    rekey_in: left(c.timers.rekey_at),
                    expires_in: left(c.timers.expire_at),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Connection, Psk};

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
