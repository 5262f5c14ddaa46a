//! One IKE SA (RFC 7296 1, 2): who it is (SPIs, role, connection), where its peer is (2.23),
//! its state with the data each state needs, the two halves of the message-ID window (2.3:
//! our requests in the [`TaskManager`], the peer's in the [`PeerWindow`]) and its child SAs.
//! The exchanges themselves are tasks ([`crate::task`]), one module each.
//!
//! Its fields are private (as quinn's `Connection`): the tasks and the endpoint go through
//! methods, grouped by concern. The states, their keys and every transition are in `state`,
//! the children in `children`, the path and NAT in `path`, the message-ID window and the
//! dispatch of messages in `window`, the protection of messages (Encrypted payload,
//! fragments) in `protect`, the task context and the SA's effects on the endpoint in `context`.
use crate::config::{Config, Connection};
use crate::event::{DownReason, Event, Role};
use crate::header::{ExchangeType, HeaderRepr};
use crate::nat::NatState;
use crate::status::IkeSaStats;
use crate::task::followup_ke::Pending;
use crate::task::ike_auth_eap::EapState;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use rand_core::CryptoRngCore;

mod children;
mod context;
mod path;
mod protect;
mod state;
mod window;
pub(crate) use children::{Child, ChildState, ChildTimers};
pub(crate) use context::{Census, Cx, EndpointEvent, Output};
pub(crate) use path::Path;
pub(crate) use protect::Opened;
pub(crate) use state::{Crypto, Handshake, State};
use window::{PeerWindow, TaskManager};

pub(crate) struct IkeSa {
    conn: usize,
    role: Role,
    spi_i: u64,
    spi_r: u64,
    path: Path,
    state: State,
    /// Our requests: the one outstanding and the ones waiting for the window.
    tasks: TaskManager,
    /// The peer's requests.
    window: PeerWindow,
    children: Vec<Child>,
    last_heard: Duration,
    created: Duration,
    /// When we rekey this IKE SA (None: never).
    rekey_at: Option<Duration>,
    effects: Vec<EndpointEvent>,
    stats: IkeSaStats,
    /// IKE fragmentation (RFC 7383 2.3): the connection's `fragment_size` when both sides
    /// announced support in IKE_SA_INIT; None: fragments are neither sent nor accepted.
    fragmentation: Option<u16>,
    /// The peer's fragmented requests \[0\] and responses \[1\] being reassembled (2.6).
    reassembly: [crate::fragment::Reassembly; 2],
    /// Responder: a CREATE_CHILD_SA waiting for its IKE_FOLLOWUP_KE (RFC 9370 2.2.4). Boxed:
    /// seldom there, about 250 bytes (issue #36 item 6).
    followup: Option<Box<Pending>>,
    /// The endpoint's SAs as of the request being handled ([`Census`]).
    census: Census,
    /// Responder: the EAP conversation of IKE_AUTH (RFC 7296 2.16) while it runs.
    eap: Option<Box<EapState>>,
    /// Virtual addresses (RFC 7296 3.15): a responder's leases to the peer, an
    /// initiator's own from the CFG_REPLY ([`crate::task::config_payload`]).
    vips: Vec<IpAddr>,
    /// MOBIKE (RFC 4555): whether it is in use, the peer's addresses, the request's path.
    mobike: crate::task::ike_mobike::Mobike,
    /// The peer sent Windows' vendor ID in IKE_SA_INIT ([`crate::vendor`]).
    peer_windows: bool,
    /// Responder: the EAP method that authenticated the peer (`eap-mschapv2`), once done.
    eap_method: Option<&'static str>,
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

    /// The index of its connection in the configuration.
    pub fn conn_index(&self) -> usize {
        self.conn
    }

    /// IKE_AUTH picked another connection for the peer's identity (identity-based
    /// selection): the SA is that connection's from now on.
    pub fn switch_conn(&mut self, conn: usize) {
        self.conn = conn;
    }

    pub fn spi_i(&self) -> u64 {
        self.spi_i
    }

    pub fn spi_r(&self) -> u64 {
        self.spi_r
    }

    /// Initiator: the responder's SPI from its IKE_SA_INIT response (0 again before
    /// IKE_SA_INIT is sent again, 2.6, 2.7).
    pub fn set_spi_r(&mut self, spi_r: u64) {
        self.spi_r = spi_r;
    }

    /// An authenticated message from the peer came now (the liveness check waits, 2.4).
    pub fn heard(&mut self, now: Duration) {
        self.last_heard = now;
    }

    pub fn last_heard(&self) -> Duration {
        self.last_heard
    }

    /// When we rekey this IKE SA (None: never).
    pub fn rekey_at(&self) -> Option<Duration> {
        self.rekey_at
    }

    pub fn schedule_rekey(&mut self, at: Option<Duration>) {
        self.rekey_at = at;
    }

    pub fn stats(&self) -> &IkeSaStats {
        &self.stats
    }

    pub fn stats_mut(&mut self) -> &mut IkeSaStats {
        &mut self.stats
    }

    /// The fragment size negotiated in IKE_SA_INIT (RFC 7383 2.3), None: no fragmentation.
    pub fn set_fragmentation(&mut self, size: Option<u16>) {
        self.fragmentation = size;
    }

    /// Responder: the CREATE_CHILD_SA waiting for its IKE_FOLLOWUP_KE (RFC 9370 2.2.4).
    pub fn followup(&self) -> Option<&Pending> {
        self.followup.as_deref()
    }

    pub fn await_followup(&mut self, p: Pending) {
        self.followup = Some(Box::new(p));
    }

    pub fn take_followup(&mut self) -> Option<Pending> {
        self.followup.take().map(|p| *p)
    }

    /// Responder: the EAP conversation of IKE_AUTH (2.16) while it runs.
    pub fn eap(&self) -> Option<&EapState> {
        self.eap.as_deref()
    }

    pub fn eap_mut(&mut self) -> Option<&mut EapState> {
        self.eap.as_deref_mut()
    }

    pub fn start_eap(&mut self, st: EapState) {
        self.eap = Some(Box::new(st));
    }

    /// The EAP conversation is over: its state, if it ran.
    pub fn take_eap(&mut self) -> Option<Box<EapState>> {
        self.eap.take()
    }

    /// Virtual addresses (3.15): a responder's leases to the peer, an initiator's own.
    pub fn vips(&self) -> &[IpAddr] {
        &self.vips
    }

    pub fn set_vips(&mut self, vips: Vec<IpAddr>) {
        self.vips = vips;
    }

    /// The peer sent Windows' vendor ID in IKE_SA_INIT ([`crate::vendor`]).
    pub fn peer_windows(&self) -> bool {
        self.peer_windows
    }

    pub fn set_peer_windows(&mut self, windows: bool) {
        self.peer_windows = windows;
    }

    /// Responder: the EAP method that authenticated the peer, once done.
    pub fn set_eap_method(&mut self, method: &'static str) {
        self.eap_method = Some(method);
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
        // A MOBIKE return-routability check unanswered at the new address (RFC 4555 3.5).
        crate::task::ike_mobike::check_timeout(self, cx);
        match self.tasks.handle_timeout(cx.now, &cx.cfg.retransmit) {
            Ok(Some(bytes)) => {
                self.stats.retransmits += 1;
                let to = self.active_task().and_then(|t| t.to()).unwrap_or(self.path.remote);
                self.send_to(cx, &bytes, to)
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
    /// Issue #36 item 6: what every IKE SA holds inline stays small (3,392 bytes before the
    /// handshake, the outstanding request, a FOLLOWUP_KE's pending child and the HMAC keys
    /// were boxed; 1,064 after, x86_64): the rarely-there and the AEAD-unused parts are boxed.
    /// `cargo run -p ipsec-ike --example ike-sa-memory` measures the heap per SA in all.
    #[test]
    fn an_ike_sa_is_small_inline() {
        use core::mem::size_of;
        let sizes = alloc::format!(
            "IkeSa {} State {} Crypto {} SkCipher {} TaskManager {} followup {}",
            size_of::<super::IkeSa>(),
            size_of::<super::State>(),
            size_of::<super::Crypto>(),
            size_of::<crate::sk::SkCipher>(),
            size_of::<super::TaskManager>(),
            size_of::<Option<alloc::boxed::Box<super::Pending>>>(),
        );
        assert!(size_of::<super::IkeSa>() <= 1200, "{sizes}");
        assert!(size_of::<super::State>() <= 400, "{sizes}");
    }
}
