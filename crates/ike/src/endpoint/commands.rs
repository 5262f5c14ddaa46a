//! The caller's commands: initiate a connection or one child (also on a trap's acquire),
//! rekey, delete, check liveness. Each queues a task on an IKE SA ([`crate::task`]).
use super::{wall, ChildId, ConnId, Endpoint, PacketSelectors, SaHandle};
use crate::child::{new_spi, Offer};
use crate::config::StartAction;
use crate::error::CommandError;
use crate::event::{DownReason, Role};
use crate::ike_sa::{Cx, IkeSa, State};
use crate::limits::MAX_IKE_SAS;
use crate::task::ike_auth::IkeAuth;
use crate::task::ike_init::IkeInit;
use crate::task::{
    child_create::ChildCreate, child_delete::ChildDelete, child_rekey::ChildRekey, ike_rekey::IkeRekey, Task,
};
use crate::ts::TrafficSelector;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use rand_core::CryptoRngCore;

impl Endpoint {
    /// Initiates every connection whose start action is `start`.
    pub fn start(&mut self, now: Duration, rng: &mut impl CryptoRngCore) {
        let names: Vec<_> = self
            .cfg
            .connections
            .iter()
            .filter(|c| c.start_action == StartAction::Start)
            .map(|c| c.name.clone())
            .collect();
        for n in names {
            let _ = self.initiate(now, &n, rng);
        }
    }

    /// Initiates an IKE SA for a connection with its first child (IKE_SA_INIT then IKE_AUTH).
    pub fn initiate(
        &mut self,
        now: Duration,
        conn: &str,
        rng: &mut impl CryptoRngCore,
    ) -> Result<SaHandle, CommandError> {
        let ci = self.conn_index(conn)?;
        self.initiate_with(now, ci, None, rng)
    }

    /// A child's selectors as the initiator offers them: the configured ones (the addresses
    /// for `dynamic`), the packet's own first when a packet started it (2.9).
    fn child_selectors(
        &self,
        ci: usize,
        chi: usize,
        packet: Option<(usize, PacketSelectors)>,
    ) -> (Vec<TrafficSelector>, Vec<TrafficSelector>) {
        let c = &self.cfg.connections[ci];
        let child = &c.children[chi];
        let remote_ip = c.remote_addr.unwrap_or(c.local_addr);
        let mut ts_i = if child.local_ts.is_empty() {
            crate::task::config_payload::initiator_ts(c)
                .unwrap_or_else(|| alloc::vec![TrafficSelector::host(c.local_addr)])
        } else {
            child.local_ts.clone()
        };
        let mut ts_r = if child.remote_ts.is_empty() {
            alloc::vec![TrafficSelector::host(remote_ip)]
        } else {
            child.remote_ts.clone()
        };
        if let Some((_, p)) = packet.filter(|(_, p)| *p != PacketSelectors::NONE) {
            let port = |x: u16| {
                if p.protocol == 6 || p.protocol == 17 || p.protocol == 132 {
                    (x, x)
                } else {
                    (0, 0xffff)
                }
            };
            let (sp, ep) = port(p.src_port);
            let (dsp, dep) = port(p.dst_port);
            ts_i.insert(
                0,
                TrafficSelector {
                    protocol: p.protocol,
                    start_port: sp,
                    end_port: ep,
                    start: p.src,
                    end: p.src,
                },
            );
            ts_r.insert(
                0,
                TrafficSelector {
                    protocol: p.protocol,
                    start_port: dsp,
                    end_port: dep,
                    start: p.dst,
                    end: p.dst,
                },
            );
            ts_i.truncate(crate::limits::MAX_TS);
            ts_r.truncate(crate::limits::MAX_TS);
        }
        (ts_i, ts_r)
    }

    pub(super) fn initiate_with(
        &mut self,
        now: Duration,
        ci: usize,
        packet: Option<(usize, PacketSelectors)>,
        rng: &mut impl CryptoRngCore,
    ) -> Result<SaHandle, CommandError> {
        if self.sas.len() >= MAX_IKE_SAS {
            return Err(CommandError::TooManySas);
        }
        let c = &self.cfg.connections[ci];
        let remote_ip = c
            .remote_addr
            .ok_or(CommandError::BadConfig("no remote address to initiate to"))?;
        let dh = *c
            .ike_proposals
            .first()
            .and_then(|p| p.dh.first())
            .ok_or(CommandError::BadConfig("no IKE proposal"))?;
        let local = SocketAddr::new(c.local_addr, self.cfg.ike_port);
        let remote = SocketAddr::new(remote_ip, c.remote_port);
        let spi = self.new_ike_spi(rng);
        let mut sa = IkeSa::new(ci, Role::Initiator, spi, 0, local, remote, State::InitSent, now);
        let child_idx = packet.map(|(i, _)| i).unwrap_or(0);
        let mut offer = None;
        if c.children.get(child_idx).is_some() {
            let (ts_i, ts_r) = self.child_selectors(ci, child_idx, packet);
            offer = Some(Offer {
                cfg: child_idx,
                spi_in: new_spi(rng),
                ts_i,
                ts_r,
                kex: None,
            });
        }
        let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
        sa.queue_task(&mut cx, Task::IkeInit(IkeInit::new(dh)), rng);
        sa.queue_task(
            &mut cx,
            Task::IkeAuth(IkeAuth {
                child: offer,
                eap: None,
            }),
            rng,
        );
        self.sas.insert(spi, Box::new(sa));
        Ok(SaHandle(spi))
    }

    /// A trap policy matched a packet: start the connection's IKE SA with that child, the
    /// packet's selectors first (2.9), or, on an established IKE SA without that child, the
    /// child alone with CREATE_CHILD_SA (1.3.1). Nothing happens while the child is up or
    /// being set up.
    pub fn acquire(
        &mut self,
        now: Duration,
        child: ChildId,
        packet: PacketSelectors,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        self.start_child(now, child, Some(packet), rng)
    }

    /// Starts a child (`ipsec ike initiate CONN/CHILD`): with CREATE_CHILD_SA on the
    /// connection's established IKE SA, or a new IKE SA carrying it.
    pub fn initiate_child(
        &mut self,
        now: Duration,
        child: ChildId,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        self.start_child(now, child, None, rng)
    }

    fn start_child(
        &mut self,
        now: Duration,
        child: ChildId,
        packet: Option<PacketSelectors>,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let (ci, chi) = self.child_at(child)?;
        let busy = self.sas.values().any(|s| {
            s.conn_index() == ci
                && (s.children().iter().any(|c| c.cfg == chi)
                    || !s.is_established() && !s.is_dead() && s.role() == Role::Initiator
                    || s.has_task(|t| matches!(t, Task::ChildCreate(c) if c.offer.cfg == chi)))
        });
        if busy {
            return Ok(());
        }
        let established = self
            .sas
            .iter()
            .find(|(_, s)| s.conn_index() == ci && s.is_established())
            .map(|(k, _)| *k);
        let Some(spi) = established else {
            let packet = packet.map(|p| (chi, p));
            let packet = packet.or(Some((chi, PacketSelectors::NONE)));
            self.initiate_with(now, ci, packet, rng)?;
            return Ok(());
        };
        let (ts_i, ts_r) = self.child_selectors(ci, chi, packet.map(|p| (chi, p)));
        let offer = Offer::new(&self.cfg.connections[ci], chi, ts_i, ts_r, true, rng);
        let task = Task::ChildCreate(ChildCreate::new(offer, rng));
        if let Some(sa) = self.sas.get_mut(&spi) {
            let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
            sa.queue_task(&mut cx, task, rng);
        }
        Ok(())
    }

    /// Rekeys the child pair we receive on `spi_in` now (`ipsec ike rekey`, or the data
    /// plane's byte or packet limit, or a sequence number near its end).
    pub fn rekey_child(
        &mut self,
        now: Duration,
        spi_in: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let cfg = &self.cfg;
        let sa = self
            .sas
            .values_mut()
            .find(|s| s.child(spi_in).is_some())
            .ok_or(CommandError::NotEstablished)?;
        let task = ChildRekey::new(sa, cfg, spi_in, rng).ok_or(CommandError::NotEstablished)?;
        let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
        sa.queue_task(&mut cx, Task::ChildRekey(task), rng);
        Ok(())
    }

    /// Whether the rekeys of the child pair we receive on `spi_in` are the peer's alone
    /// (`rekey_by`, [`crate::config::RekeyBy`]): the data plane's soft byte or packet limit
    /// then starts none (its hard limit still applies); `ipsec ike rekey` still may.
    pub fn rekeys_left_to_peer(&self, spi_in: u32) -> bool {
        self.sas
            .values()
            .find(|s| s.child(spi_in).is_some())
            .is_some_and(|s| !crate::task::lifetimes::we_rekey(s, &self.cfg))
    }

    /// Rekeys the connection's IKE SAs now (`ipsec ike rekey CONN`).
    pub fn rekey_ike(&mut self, now: Duration, conn: &str, rng: &mut impl CryptoRngCore) -> Result<(), CommandError> {
        let id = self.conn_id(conn)?;
        self.rekey_ike_conn(now, id, rng)
    }

    /// [`Endpoint::rekey_ike`] of a connection by handle.
    pub fn rekey_ike_conn(
        &mut self,
        now: Duration,
        conn: ConnId,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let ci = self.conn_at(conn)?;
        self.on_established(now, ci, rng, |sa, rng| IkeRekey::new(sa, rng).map(Task::IkeRekey))
    }

    /// Queues `task(sa)` on each of connection `ci`'s established IKE SAs; none:
    /// [`CommandError::NotEstablished`].
    fn on_established<R: CryptoRngCore>(
        &mut self,
        now: Duration,
        ci: usize,
        rng: &mut R,
        mut task: impl FnMut(&IkeSa, &mut R) -> Option<Task>,
    ) -> Result<(), CommandError> {
        let mut found = false;
        for sa in self
            .sas
            .values_mut()
            .filter(|s| s.conn_index() == ci && s.is_established())
        {
            found = true;
            if let Some(t) = task(sa, rng) {
                let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
                sa.queue_task(&mut cx, t, rng);
            }
        }
        if found {
            Ok(())
        } else {
            Err(CommandError::NotEstablished)
        }
    }

    /// The handle of connection `name` (its index in [`crate::Config::connections`]): a caller
    /// resolves a name once, at its edge, and passes the handle inward.
    pub fn conn_id(&self, name: &str) -> Result<ConnId, CommandError> {
        self.conn_index(name).map(ConnId)
    }

    /// The handles of every connection, in the config's order.
    pub fn conn_ids(&self) -> impl Iterator<Item = ConnId> {
        (0..self.cfg.connections.len()).map(ConnId)
    }

    fn conn_at(&self, conn: ConnId) -> Result<usize, CommandError> {
        (conn.0 < self.cfg.connections.len())
            .then_some(conn.0)
            .ok_or(CommandError::UnknownConnection)
    }

    /// The handle of child `child` of connection `conn`, resolved once from the names (at
    /// the caller's edge, or when a trap is installed).
    pub fn child_id(&self, conn: &str, child: &str) -> Result<ChildId, CommandError> {
        let ci = self.conn_index(conn)?;
        let chi = self.cfg.connections[ci]
            .children
            .iter()
            .position(|c| c.name == child)
            .ok_or(CommandError::UnknownChild)?;
        Ok(ChildId {
            conn: ConnId(ci),
            child: chi,
        })
    }

    /// The names of a child's connection and of the child, for a log line.
    pub fn child_names(&self, child: ChildId) -> Option<(&str, &str)> {
        let c = self.cfg.connections.get(child.conn.0)?;
        Some((&c.name, &c.children.get(child.child)?.name))
    }

    fn child_at(&self, child: ChildId) -> Result<(usize, usize), CommandError> {
        let ci = self.conn_at(child.conn)?;
        (child.child < self.cfg.connections[ci].children.len())
            .then_some((ci, child.child))
            .ok_or(CommandError::UnknownChild)
    }

    /// [`Endpoint::initiate`] of a connection by handle.
    pub fn initiate_conn(
        &mut self,
        now: Duration,
        conn: ConnId,
        rng: &mut impl CryptoRngCore,
    ) -> Result<SaHandle, CommandError> {
        let ci = self.conn_at(conn)?;
        self.initiate_with(now, ci, None, rng)
    }

    /// The inbound SPIs of the connection's child pairs named `child` ([`Endpoint::children`]
    /// by handle), for [`Endpoint::rekey_child`].
    pub fn child_spis(&self, conn: ConnId, child: &str) -> Vec<u32> {
        self.sas
            .values()
            .filter(|s| s.conn_index() == conn.0)
            .flat_map(|s| {
                s.children()
                    .iter()
                    .filter(|c| c.info.child == child)
                    .map(|c| c.spi_in())
            })
            .collect()
    }

    /// The children of the connection's established IKE SAs: (child name, our inbound SPI).
    pub fn children(&self, conn: &str) -> Vec<(alloc::string::String, u32)> {
        let Ok(ci) = self.conn_index(conn) else {
            return Vec::new();
        };
        self.sas
            .values()
            .filter(|s| s.conn_index() == ci)
            .flat_map(|s| s.children().iter().map(|c| (c.info.child.clone(), c.spi_in())))
            .collect()
    }

    /// Deletes the connection's IKE SAs (INFORMATIONAL with a Delete; half-open ones are
    /// dropped at once).
    pub fn terminate(&mut self, now: Duration, conn: &str, rng: &mut impl CryptoRngCore) -> Result<(), CommandError> {
        let id = self.conn_id(conn)?;
        self.terminate_conn(now, id, rng)
    }

    /// [`Endpoint::terminate`] of a connection by handle.
    pub fn terminate_conn(
        &mut self,
        now: Duration,
        conn: ConnId,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let ci = self.conn_at(conn)?;
        let mut found = false;
        for sa in self.sas.values_mut().filter(|s| s.conn_index() == ci) {
            found = true;
            let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
            if sa.is_established() {
                sa.queue_task(&mut cx, Task::IkeDelete, rng);
            } else {
                sa.kill(&mut cx, DownReason::Local);
            }
        }
        self.reap();
        if found {
            Ok(())
        } else {
            Err(CommandError::NotEstablished)
        }
    }

    /// Deletes one IKE SA by handle.
    pub fn delete_ike_sa(
        &mut self,
        now: Duration,
        sa: SaHandle,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let s = self.sas.get_mut(&sa.0).ok_or(CommandError::NotEstablished)?;
        let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
        if s.is_established() {
            s.queue_task(&mut cx, Task::IkeDelete, rng);
        } else {
            s.kill(&mut cx, DownReason::Local);
        }
        self.reap();
        Ok(())
    }

    /// Deletes a child SA pair by the SPI we receive on.
    pub fn delete_child(
        &mut self,
        now: Duration,
        spi_in: u32,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let s = self
            .sas
            .values_mut()
            .find(|s| s.child(spi_in).is_some())
            .ok_or(CommandError::NotEstablished)?;
        let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
        s.queue_task(&mut cx, Task::ChildDelete(ChildDelete { spi_in }), rng);
        Ok(())
    }

    /// Sends a liveness check (empty INFORMATIONAL) on the connection's IKE SAs now.
    pub fn check_liveness(
        &mut self,
        now: Duration,
        conn: &str,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let ci = self.conn_index(conn)?;
        self.on_established(now, ci, rng, |_, _| Some(Task::IkeDpd))
    }

    /// Our address changed (RFC 4555 3.5, initiator): each established IKE SA of `conn`
    /// that uses MOBIKE sends UPDATE_SA_ADDRESSES (with COOKIE2) from where it now sends;
    /// the caller has moved its socket. `Unsupported`: no SA of `conn` uses MOBIKE.
    pub fn update_addresses(
        &mut self,
        now: Duration,
        conn: &str,
        rng: &mut impl CryptoRngCore,
    ) -> Result<(), CommandError> {
        let ci = self.conn_index(conn)?;
        let mut any = false;
        self.on_established(now, ci, rng, |sa, rng| {
            any |= sa.mobike().agreed;
            sa.mobike()
                .agreed
                .then(|| Task::IkeMobike(crate::task::ike_mobike::IkeMobike::new(rng)))
        })?;
        if any {
            Ok(())
        } else {
            Err(CommandError::Unsupported(
                "MOBIKE is not in use on this connection's IKE SA",
            ))
        }
    }

    /// Our own address changed to `local` (RFC 4555 3.5, initiator: a client moving from
    /// Wi-Fi to LTE, a gateway renumbered): each established IKE SA of `conn` that uses
    /// MOBIKE sends from `local` from now on (its port kept; its children's outer endpoint
    /// moves with it) and sends UPDATE_SA_ADDRESSES with COOKIE2 and NAT_DETECTION_* from
    /// there, retransmitted as any request; the caller has a socket there. The number of IKE
    /// SAs updated. Nothing changes when no established SA of `conn` uses MOBIKE
    /// (`Unsupported`: the peer or the connection did not agree to it, 3.2) or `local` is of
    /// another IP version than the SA's path (`Unsupported`).
    pub fn update_local(
        &mut self,
        now: Duration,
        conn: &str,
        local: IpAddr,
        rng: &mut impl CryptoRngCore,
    ) -> Result<usize, CommandError> {
        let ci = self.conn_index(conn)?;
        let mut sas: Vec<_> = self
            .sas
            .values_mut()
            .filter(|s| s.conn_index() == ci && s.is_established())
            .collect();
        if sas.is_empty() {
            return Err(CommandError::NotEstablished);
        }
        if !sas.iter().any(|s| s.mobike().agreed) {
            return Err(CommandError::Unsupported(
                "MOBIKE is not in use on this connection's IKE SA (the peer or the connection did not agree to it)",
            ));
        }
        if sas.iter().any(|s| s.path().local.is_ipv4() != local.is_ipv4()) {
            return Err(CommandError::Unsupported(
                "the new local address is of another IP version than the IKE SA's path",
            ));
        }
        let mut n = 0;
        for sa in sas.iter_mut() {
            let mut cx = Cx::new(&self.cfg, &mut self.out, now, wall(self.clock, now));
            n += usize::from(crate::task::ike_mobike::update_local(sa, &mut cx, local, rng));
        }
        Ok(n)
    }
}
