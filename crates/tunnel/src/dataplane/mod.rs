//! The daemon's core, with no I/O of its own: packets read from the TUN device go through
//! the engine's data plane ([`DataPlane::outbound_batch`]) and out to the underlay; packets
//! read from the underlay go through [`DataPlane::inbound_batch_arrivals`] and into the TUN
//! device. The loops ([`run_outbound`], [`run_inbound`]) work in batches of up to [`BATCH`]
//! packets and load the current data plane once per batch (a lock-free pointer load; the
//! one-packet [`Tunnel::outbound`] and [`Tunnel::inbound`] load it per packet). Each thread
//! brings its own [`Worker`](ipsec_engine::Worker) in its [`Batch`] (or [`PacketBuffer`]);
//! only the ticker and the control socket take the control side's lock, so the packet
//! threads never wait for each other or for it. The devices are traits ([`TunIo`],
//! [`UnderlayTx`], [`UnderlayRx`]), so the whole loop runs in tests on in-memory fakes; the
//! real ones are [`crate::dev::tun`], [`crate::dev::raw`] and [`crate::dev::udp`]. The loops see plain IP
//! packets: the TUN offloads are behind [`TunPort`]. What is known about a packet travels with
//! it in its slot's [`Context`].
//!
//! Every packet that does not make it is counted: by the engine (per SA and reason) when the
//! engine dropped it, else in [`DaemonCounters`]. Nothing a peer or the TUN device sends can
//! stop the loops: errors are counted and logged (the first, then at each power of two).

pub mod mss;
mod needs;
pub mod packet;
pub use needs::{inbound_protocols, tun_mtu_for};

use crate::dataplane::packet::{ip_header_len, packet_bufs, wire_len, NO_ROUTE};
pub use crate::dataplane::packet::{
    Batch, Context, PacketBuffer, RxKind, BATCH, BUF_LEN, HEADROOM, MAX_PACKET, TAILROOM,
};
use crate::dev::sys::is_wait;
pub use crate::dev::tun::{TunIo, TunPort};
pub use crate::dev::underlay::{ByFamily, UnderlayRx, UnderlayTx};
use crate::obs::counters::{add, count_error, inc, DaemonCounters, DaemonSnapshot};
use ipsec_engine::{DataPlane, Dropped, Engine, Event, PlaneHandle, Route, SaId, Snapshot, Verdict};
use serde::Serialize;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// What the daemon (not the engine) dropped a packet for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonDrop {
    /// From the TUN device, and not IPv4 or IPv6 ([`DaemonCounters::not_ip`]).
    NotIp,
    /// A bypass policy let it through in the clear ([`DaemonCounters::bypass_dropped`]).
    Bypass,
    /// Sealed, but not to one of the peers ([`DaemonCounters::not_to_peer`]).
    NotToPeer,
}

/// What became of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Sealed and sent to the peer, or opened and written to the TUN device.
    Forwarded,
    /// The engine dropped it (and counted it under its reason, at its SA if it had one).
    Engine(Dropped),
    /// The daemon dropped it (and counted it).
    Daemon(DaemonDrop),
    /// Writing it failed; counted as a send or TUN write error.
    Lost(io::ErrorKind),
}

/// Every counter at one moment: the stats file's content.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seconds since the daemon started.
    pub uptime_seconds: u64,
    /// The daemon's counters.
    pub daemon: DaemonSnapshot,
    /// The engine's counters (per SA and direction, drops by reason).
    pub engine: Snapshot,
    /// The configured peers (none: any address the SAs tunnel to) and, with ESP in UDP,
    /// where each one's datagrams go now.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerReport>,
    /// IKE's counters, when tunneld runs IKE.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ike: Option<crate::obs::ike::IkeReport>,
}

/// One peer in a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerReport {
    /// Its configured underlay address.
    pub peer: IpAddr,
    /// ESP in UDP: the address and port its datagrams go to (configured, or learned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<SocketAddr>,
    /// ESP in UDP: whether `endpoint` was learned from the peer's authenticated packets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<bool>,
}

/// The engine's control side behind a mutex (for the ticker and configuration), the data
/// plane the packet threads load, the daemon's counters and its clock.
pub struct Tunnel {
    engine: Mutex<Engine>,
    plane: PlaneHandle,
    counters: DaemonCounters,
    /// IKE's counters, set when the IKE thread starts.
    ike: std::sync::OnceLock<std::sync::Arc<crate::obs::ike::IkeCounters>>,
    /// The ticker thread, woken when a batch raised an engine event (a soft lifetime reached:
    /// IKE's rekey should start within a batch, not a glance, at gigabits per second).
    ticker: std::sync::OnceLock<std::thread::Thread>,
    start: Instant,
    peers: Vec<IpAddr>,
    /// `peers` as a set: every sealed packet's destination is checked against it (one hash
    /// probe, not a pass over 10,000 peers).
    peer_set: hashbrown::HashSet<IpAddr>,
    /// Whether sealed packets may go to addresses not in `peers` (IKE adds peers while
    /// running: a connection with `remote_addrs = %any`).
    any_peer: bool,
    /// Per SA, the adaptive IPComp decision flips already logged.
    flips: Mutex<Vec<u64>>,
    /// Where non-ESP datagrams (IKE, RFC 3948 2.2) received on an ESP-in-UDP socket go.
    non_esp: Option<NonEspSink>,
    trap: Option<TrapSink>,
    /// TCP MSS clamping of SYNs both ways ([`mss`]); off by default.
    mss: mss::MssClamp,
}

/// Where outbound packets that no policy covers go before they are dropped (IKE's trap
/// policies, `start_action = trap`: the first packet of a connection's selectors starts it).
/// Called on the sending thread with the inner packet; it must not block.
pub type TrapSink = Box<dyn Fn(&[u8]) + Send + Sync>;

/// A consumer of the non-ESP datagrams an ESP-in-UDP socket receives (IKE messages behind
/// the non-ESP marker, RFC 3948 2.2): called on the receiving thread with the datagram
/// (marker included) and its source; it must not block.
pub type NonEspSink = Box<dyn Fn(&[u8], SocketAddr) + Send + Sync>;

fn is_ip(p: &[u8]) -> bool {
    p.first().is_some_and(|b| matches!(b >> 4, 4 | 6))
}

impl Tunnel {
    /// A tunnel around `engine`; sealed packets go only to `peers` when any are given.
    pub fn new(engine: Engine, peers: Vec<IpAddr>) -> Self {
        Tunnel {
            plane: engine.plane_handle(),
            engine: Mutex::new(engine),
            counters: DaemonCounters::default(),
            ike: std::sync::OnceLock::new(),
            ticker: std::sync::OnceLock::new(),
            start: Instant::now(),
            peer_set: peers.iter().copied().collect(),
            peers,
            any_peer: false,
            flips: Mutex::new(Vec::new()),
            non_esp: None,
            trap: None,
            mss: mss::MssClamp::OFF,
        }
    }

    /// Clamps the MSS option of TCP SYNs and SYN-ACKs both ways ([`mss`]).
    pub fn set_mss_clamp(&mut self, clamp: mss::MssClamp) {
        self.mss = clamp;
    }

    /// Clamps one packet's MSS option when it is a SYN above the limit (clamping on).
    fn clamp_mss(&self, p: &mut [u8]) {
        if let mss::Clamped::Lowered(from, to) = self.mss.apply(p) {
            inc(&self.counters.mss_clamped);
            debug!(from, to, "TCP SYN's MSS option lowered");
        }
    }

    /// The thread to wake when the data plane raises an event ([`Tunnel::events_pending`]).
    pub fn set_ticker(&self, th: std::thread::Thread) {
        let _ = self.ticker.set(th);
    }

    /// After a batch: wakes the ticker if the batch raised an event (an atomic load; the
    /// wake itself happens once per event, rare).
    fn wake_ticker_on_events(&self, plane: &DataPlane) {
        if plane.events_pending() {
            if let Some(t) = self.ticker.get() {
                t.unpark();
            }
        }
    }

    /// Reports `c` (the IKE thread's counters) with the others.
    pub fn set_ike_counters(&self, c: std::sync::Arc<crate::obs::ike::IkeCounters>) {
        let _ = self.ike.set(c);
    }

    /// Shows `sink` every outbound packet dropped because no policy covers it (the packet is
    /// still dropped and counted).
    pub fn set_trap(&mut self, sink: TrapSink) {
        self.trap = Some(sink);
    }

    fn trapped(&self, d: &Dropped, packet: &[u8]) {
        if let (Some(t), ipsec_engine::DropReason::PolicyDiscard) = (&self.trap, d.reason) {
            t(packet);
        }
    }

    /// Hands the non-ESP datagrams (IKE) received on ESP-in-UDP sockets to `sink` instead of
    /// only counting them (`udp_non_esp` counts them either way).
    pub fn set_non_esp(&mut self, sink: NonEspSink) {
        self.non_esp = Some(sink);
    }

    /// The engine's control side (the packet path never takes this lock). A thread that
    /// panicked while holding it cannot have left it half-updated in a way that matters more
    /// than stopping would, so a poisoned lock is taken anyway.
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configured peers (empty: any address the SAs tunnel to).
    pub fn peers(&self) -> &[IpAddr] {
        &self.peers
    }

    /// Lets sealed packets go to addresses that are not configured peers: IKE adds peers
    /// while running (a responder with `remote_addrs = %any`), and the ESP-in-UDP sockets
    /// send only to the peers they hold.
    pub fn allow_any_peer(&mut self) {
        self.any_peer = true;
    }

    /// Whether a sealed packet may go along `route` (the engine named it): to one of the
    /// peers, or anywhere when none are configured (or [`Tunnel::allow_any_peer`]).
    fn to_peer(&self, route: &Route) -> bool {
        self.any_peer || self.peers.is_empty() || self.peer_set.contains(&route.to)
    }

    /// The peer whose SA `sa` (of `plane`) is: the SA's configured tunnel source, or the only
    /// peer if the SA names none. The engine reports the SA that authenticated a packet
    /// ([`Arrival`](ipsec_engine::Arrival)), so the peer is known: neither the packet's (unauthenticated) outer
    /// source nor another peer's SA can stand in for it.
    fn peer_of(&self, plane: &DataPlane, sa: SaId) -> Option<IpAddr> {
        let configured = plane.sad().get(sa).and_then(|e| e.config.params.tunnel).map(|t| t.src);
        match (configured, &self.peers[..]) {
            (Some(src), _) => Some(src),
            (None, [only]) => Some(*only),
            (None, _) => None,
        }
    }

    /// The daemon's counters.
    pub fn counters(&self) -> &DaemonCounters {
        &self.counters
    }

    /// The current data plane (a lock-free load).
    fn plane(&self) -> arc_swap::Guard<std::sync::Arc<DataPlane>> {
        self.plane.load()
    }

    /// Time since the tunnel started: the engine's clock.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// One packet read from the TUN device (`len` bytes in `pkt`'s receive area): sealed by
    /// the engine as `tx` frames packets and sent along the route the engine named.
    pub fn outbound(&self, pkt: &mut PacketBuffer, len: usize, tx: &dyn UnderlayTx) -> Outcome {
        let c = &self.counters;
        inc(&c.tun_rx_packets);
        add(&c.tun_rx_bytes, len as u64);
        let (mut buf, worker) = pkt.parts(len);
        if !is_ip(buf.packet()) {
            inc(&c.not_ip);
            debug!(len, "packet from the TUN device is not IPv4 or IPv6: dropped");
            return Outcome::Daemon(DaemonDrop::NotIp);
        }
        if self.mss.is_on() {
            self.clamp_mss(buf.packet_mut());
        }
        let mut verdict = [Ok(Verdict::Bypass)];
        let mut route = [None];
        let bufs = std::slice::from_mut(&mut buf);
        let plane = self.plane();
        plane.outbound_batch_routed(worker, bufs, &mut verdict, &mut route, tx.framing(), self.now());
        self.wake_ticker_on_events(&plane);
        let [verdict] = verdict;
        match verdict {
            Ok(Verdict::Protected(_)) => {}
            Ok(Verdict::Bypass) => {
                inc(&c.bypass_dropped);
                debug!("outbound packet matches a bypass policy: tunneld sends nothing in the clear");
                return Outcome::Daemon(DaemonDrop::Bypass);
            }
            Err(d) => {
                inc(&c.engine_out_drops);
                debug!("outbound packet dropped: {d}");
                self.trapped(&d, buf.packet());
                return Outcome::Engine(d);
            }
        }
        let packet = buf.packet();
        let Some(route) = route[0].filter(|r| self.to_peer(r)) else {
            inc(&c.not_to_peer);
            debug!("sealed packet is not to a peer: dropped (is the outermost SA a tunnel to a peer?)");
            return Outcome::Daemon(DaemonDrop::NotToPeer);
        };
        match tx.send_to(packet, &route) {
            Ok(()) => {
                inc(&c.underlay_tx_packets);
                add(&c.underlay_tx_bytes, wire_len(packet.len(), &route, tx.framing()));
                Outcome::Forwarded
            }
            Err(e) => {
                count_error(&c.underlay_send_errors, "sending on the underlay", &e);
                Outcome::Lost(e.kind())
            }
        }
    }

    /// One packet read from the underlay (`len` bytes in `pkt`'s receive area): opened by the
    /// engine and written to the TUN device.
    pub fn inbound(&self, pkt: &mut PacketBuffer, len: usize, tun: &dyn TunIo) -> Outcome {
        let c = &self.counters;
        inc(&c.underlay_rx_packets);
        add(&c.underlay_rx_bytes, len as u64);
        let (mut buf, worker) = pkt.parts(len);
        let verdict = self.plane().inbound(worker, &mut buf, self.now());
        match verdict {
            Ok(Verdict::Protected(_)) => {}
            Ok(Verdict::Bypass) => {
                inc(&c.bypass_dropped);
                debug!("inbound packet matches a bypass policy: not written to the TUN device");
                return Outcome::Daemon(DaemonDrop::Bypass);
            }
            Err(d) => {
                inc(&c.engine_in_drops);
                debug!("inbound packet dropped: {d}");
                return Outcome::Engine(d);
            }
        }
        if self.mss.is_on() {
            self.clamp_mss(buf.packet_mut());
        }
        let packet = buf.packet();
        match tun.send(packet) {
            Ok(()) => {
                inc(&c.tun_tx_packets);
                add(&c.tun_tx_bytes, packet.len() as u64);
                Outcome::Forwarded
            }
            Err(e) => {
                count_error(&c.tun_write_errors, "writing the TUN device", &e);
                Outcome::Lost(e.kind())
            }
        }
    }

    /// The first `n` packets of `b` (read from the TUN device): sealed by the engine as one
    /// batch and sent to the peer with as few system calls as the underlay allows. Counted
    /// as [`outbound`](Self::outbound) counts them.
    pub fn outbound_batch(&self, b: &mut Batch, n: usize, tx: &dyn UnderlayTx) {
        let c = &self.counters;
        let n = n.min(BATCH);
        let mut k = 0;
        for i in 0..n {
            inc(&c.tun_rx_packets);
            add(&c.tun_rx_bytes, b.len[i] as u64);
            if !is_ip(b.packet(i)) {
                inc(&c.not_ip);
                debug!(
                    len = b.len[i],
                    "packet from the TUN device is not IPv4 or IPv6: dropped"
                );
                continue;
            }
            b.swap(k, i);
            k += 1;
        }
        if k == 0 {
            return;
        }
        // Before sealing: after the TUN port cut super-packets into segments (a SYN is never
        // one) and completed partial checksums.
        if self.mss.is_on() {
            for i in 0..k {
                self.clamp_mss(b.packet_mut(i));
            }
        }
        let now = self.now();
        let plane = self.plane();
        let Batch { data, len, worker, .. } = b;
        let mut bufs = packet_bufs(data, len);
        let mut out = [Ok(Verdict::Bypass); BATCH];
        let mut routes = [None; BATCH];
        let framing = tx.framing();
        plane.outbound_batch_routed(worker, &mut bufs[..k], &mut out[..k], &mut routes[..k], framing, now);
        self.wake_ticker_on_events(&plane);
        let mut pkts: [&[u8]; BATCH] = [&[]; BATCH];
        let mut to = [NO_ROUTE; BATCH];
        let mut m = 0;
        for ((buf, verdict), route) in bufs[..k].iter().zip(&out[..k]).zip(&routes[..k]) {
            match verdict {
                Ok(Verdict::Protected(_)) => {}
                Ok(Verdict::Bypass) => {
                    inc(&c.bypass_dropped);
                    debug!("outbound packet matches a bypass policy: tunneld sends nothing in the clear");
                    continue;
                }
                Err(d) => {
                    inc(&c.engine_out_drops);
                    debug!("outbound packet dropped: {d}");
                    self.trapped(d, buf.packet());
                    continue;
                }
            }
            let Some(route) = route.filter(|r| self.to_peer(r)) else {
                inc(&c.not_to_peer);
                debug!("sealed packet is not to a peer: dropped (is the outermost SA a tunnel to a peer?)");
                continue;
            };
            pkts[m] = buf.packet();
            to[m] = route;
            m += 1;
        }
        let (pkts, to) = (&pkts[..m], &to[..m]);
        let mut i = 0;
        while i < m {
            match tx.send_batch(&pkts[i..], &to[i..]) {
                Ok(sent) => {
                    let sent = sent.clamp(1, m - i);
                    for (p, r) in pkts[i..i + sent].iter().zip(&to[i..i + sent]) {
                        inc(&c.underlay_tx_packets);
                        add(&c.underlay_tx_bytes, wire_len(p.len(), r, framing));
                    }
                    i += sent;
                }
                Err(e) => {
                    count_error(&c.underlay_send_errors, "sending on the underlay", &e);
                    i += 1;
                }
            }
        }
    }

    /// The first `n` slots of `b` (read from `rx`): keepalives counted, non-ESP (IKE)
    /// datagrams handed to the consumer set with [`set_non_esp`](Self::set_non_esp) (else
    /// counted and dropped), the packets opened by the engine as one batch and written to the
    /// TUN device through `tun`. Each slot's [`Context`] goes to the engine and back: in, how
    /// the packet arrived (the engine checks it against the SA's `encap`); out, the SA that
    /// opened it. For packets with a source (ESP in UDP), the last *new* one each peer's SAs
    /// authenticated (its sequence number above every one seen, on an SA with a replay window:
    /// [`Arrival::newest`](ipsec_engine::Arrival::newest), RFC 7296 2.23) is reported to `rx`
    /// with its peer ([`UnderlayRx::authenticated`], the peer its SA names); a late, replayed
    /// or window-less packet never moves a peer's endpoint.
    pub fn inbound_batch(&self, b: &mut Batch, n: usize, rx: &dyn UnderlayRx, tun: &mut TunPort) {
        let c = &self.counters;
        let n = n.min(BATCH);
        let mut k = 0;
        for i in 0..n {
            match b.ctx[i].kind {
                RxKind::Packet => {
                    inc(&c.underlay_rx_packets);
                    // A datagram's payload counts with the IP header it came in, as a whole
                    // packet does.
                    let header = b.ctx[i].arrival.datagram.map_or(0, |(_, dst)| ip_header_len(dst));
                    add(&c.underlay_rx_bytes, (b.len[i] + header) as u64);
                    b.swap(k, i);
                    k += 1;
                }
                RxKind::Keepalive => inc(&c.udp_keepalives_rx),
                RxKind::NonEsp => {
                    inc(&c.udp_non_esp);
                    if let (Some(f), Some(from)) = (&self.non_esp, b.ctx[i].from) {
                        f(b.packet(i), from);
                    }
                }
                RxKind::Runt => inc(&c.udp_runts),
            }
        }
        if k == 0 {
            return;
        }
        let now = self.now();
        let plane = self.plane();
        let Batch {
            data, len, ctx, worker, ..
        } = b;
        let mut bufs = packet_bufs(data, len);
        let mut out = [Ok(Verdict::Bypass); BATCH];
        let mut arrivals = [ipsec_engine::Arrival::default(); BATCH];
        for (a, x) in arrivals.iter_mut().zip(&ctx[..k]) {
            *a = x.arrival;
        }
        plane.inbound_batch_arrivals(worker, &mut bufs[..k], &mut out[..k], &mut arrivals[..k], now);
        self.wake_ticker_on_events(&plane);
        // After opening, before the TUN port coalesces packets (GRO never takes a SYN).
        if self.mss.is_on() {
            for (buf, verdict) in bufs[..k].iter_mut().zip(&out[..k]) {
                if let Ok(Verdict::Protected(_)) = verdict {
                    self.clamp_mss(buf.packet_mut());
                }
            }
        }
        // The last source per peer, in order of first appearance.
        let mut learned: [Option<(IpAddr, SocketAddr)>; BATCH] = [None; BATCH];
        let mut opened: [&[u8]; BATCH] = [&[]; BATCH];
        let mut m = 0;
        for (i, verdict) in out[..k].iter().enumerate() {
            match verdict {
                Ok(Verdict::Protected(_)) => {
                    let a = arrivals[i];
                    ctx[i].arrival = a;
                    let from = ctx[i].from;
                    let peer =
                        a.sa.filter(|_| a.newest && from.is_some())
                            .and_then(|sa| self.peer_of(&plane, sa));
                    if let (Some(from), Some(p)) = (from, peer) {
                        let slot = learned.iter().position(|l| l.is_none_or(|(q, _)| q == p));
                        if let Some(j) = slot {
                            learned[j] = Some((p, from));
                        }
                    }
                }
                Ok(Verdict::Bypass) => {
                    inc(&c.bypass_dropped);
                    debug!("inbound packet matches a bypass policy: not written to the TUN device");
                    continue;
                }
                Err(d) => {
                    inc(&c.engine_in_drops);
                    debug!("inbound packet dropped: {d}");
                    continue;
                }
            }
            opened[m] = bufs[i].packet();
            m += 1;
        }
        // Learn before writing to the TUN device: the kernel may answer a packet at once, and
        // the answer must go to the endpoint this packet came from (behind a NAT, the
        // configured one is unreachable; the netns udp-nat stage lost a first ping to it).
        for (p, from) in learned.into_iter().map_while(|l| l) {
            rx.authenticated(p, from);
        }
        tun.write_batch(&opened[..m], c);
    }

    /// Expires SAs whose time is up, logs the engine's events and returns every counter:
    /// [`poll`](Self::poll) and [`report`](Self::report).
    pub fn tick(&self) -> (Report, Vec<Event>) {
        let events = self.poll();
        (self.report(), events)
    }

    /// When the engine next has a time limit to check, on [`now`](Self::now)'s clock
    /// ([`Engine::poll_timeout`]), or `None`.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.engine().poll_timeout()
    }

    /// Whether the data plane raised events not collected yet (one atomic load, no lock).
    pub fn events_pending(&self) -> bool {
        self.plane().events_pending()
    }

    /// Expires SAs whose time is up and returns the engine's events, logged.
    pub fn poll(&self) -> Vec<Event> {
        let mut e = self.engine();
        e.poll(self.now());
        let mut events = Vec::new();
        while let Some(ev) = e.next_event() {
            let (sa, limit, hard) = match ev {
                Event::SoftExpired { sa, limit } => (sa, limit, false),
                Event::HardExpired { sa, limit } => (sa, limit, true),
            };
            let name = e.sad().get(sa).map_or("?", |s| s.config.name.as_str());
            if hard {
                warn!("SA `{name}` reached its hard {limit:?} limit: its packets are dropped from now on");
            } else {
                info!("SA `{name}` reached its soft {limit:?} limit: it still works; replace it");
            }
            events.push(ev);
        }
        events
    }

    /// Every counter now (the engine's snapshot: every SA), and the adaptive IPComp SAs whose
    /// decision changed since the last report, logged.
    pub fn report(&self) -> Report {
        let now = self.now();
        let report = Report {
            uptime_seconds: now.as_secs(),
            daemon: self.counters.snapshot(),
            engine: self.engine().snapshot(now),
            peers: self
                .peers
                .iter()
                .map(|&peer| PeerReport {
                    peer,
                    endpoint: None,
                    learned: None,
                })
                .collect(),
            ike: self.ike.get().map(|c| c.report()),
        };
        self.log_flips(&report.engine);
        report
    }

    /// Logs each adaptive IPComp SA whose decision changed since the last tick, with the
    /// numbers the model decided on.
    fn log_flips(&self, snap: &Snapshot) {
        let mut seen = self.flips.lock().unwrap_or_else(|p| p.into_inner());
        seen.resize(snap.sas.len(), 0);
        for (s, last) in snap.sas.iter().zip(seen.iter_mut()) {
            let Some(m) = s.comp.as_ref().and_then(|c| c.model.as_ref()) else {
                continue;
            };
            if m.flips + m.switches == *last {
                continue;
            }
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            info!(
                "SA `{}`: IPComp model now says {} with {} ({} flips, {} algorithm switches): ratio {}, compress {} Mbit/s, decompress ({}) {} Mbit/s, \
                 encrypt {} Mbit/s, ICV {} Mbit/s, link ({}) {} Mbit/s; slowest stage with compression {} vs without {} ns/byte \
                 (the paper's form: gain {} vs cost {})",
                s.name,
                m.decision,
                m.algorithm,
                m.flips,
                m.switches,
                f(m.ratio),
                f(m.comp_mbps),
                if m.decomp_measured { "measured" } else { "assumed" },
                f(m.decomp_mbps),
                f(m.enc_mbps),
                f(m.icv_mbps),
                m.link_source,
                f(m.link_mbps),
                f(m.on_ns_per_byte),
                f(m.off_ns_per_byte),
                f(m.gain_ns_per_byte),
                f(m.cost_ns_per_byte),
            );
            *last = m.flips + m.switches;
        }
    }

    /// Counts and logs a device read error.
    fn read_error(&self, c: &AtomicU64, what: &str, e: &io::Error) {
        count_error(c, what, e);
        // A device that fails every read would otherwise spin.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The outbound loop: TUN device → engine → underlay, until `stop` is set. Each wakeup
/// reads what the device has ready (up to [`BATCH`] packets; with offloads, super-packets
/// already cut into segments, see [`TunPort`]) and seals it as one batch.
pub fn run_outbound(t: &Tunnel, tun: &dyn TunIo, tx: &dyn UnderlayTx, stop: &AtomicBool) {
    let mut b = Batch::new();
    let mut port = TunPort::new(tun);
    while !stop.load(Ordering::Relaxed) {
        match port.read_batch(&mut b, &t.counters) {
            Ok(0) => {}
            Ok(n) => t.outbound_batch(&mut b, n, tx),
            Err(e) if is_wait(&e) => {}
            Err(e) => t.read_error(&t.counters.tun_read_errors, "reading the TUN device", &e),
        }
    }
}

/// One inbound loop: underlay socket → engine → TUN device, until `stop` is set. Each
/// wakeup takes what the socket has queued (up to [`BATCH`] packets) and opens it as one batch.
pub fn run_inbound(t: &Tunnel, rx: &dyn UnderlayRx, tun: &dyn TunIo, stop: &AtomicBool) {
    let mut b = Batch::new();
    let mut port = TunPort::new(tun);
    while !stop.load(Ordering::Relaxed) {
        match rx.recv_batch(&mut b) {
            Ok(0) => {}
            Ok(n) => t.inbound_batch(&mut b, n, rx, &mut port),
            Err(e) if is_wait(&e) => {}
            Err(e) => t.read_error(&t.counters.underlay_recv_errors, "reading the underlay", &e),
        }
        add(&t.counters.underlay_ring_drops, rx.take_drops());
    }
}

#[cfg(test)]
mod tests;
