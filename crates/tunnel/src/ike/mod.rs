//! IKEv2 in tunneld: one thread drives the sans-IO [`ipsec_ike::Endpoint`] — datagrams from
//! UDP port 500 (its own sockets) and from port 4500 (the ESP-in-UDP sockets hand it the
//! datagrams that carry the non-ESP marker, RFC 3948 2.2), commands from the control socket,
//! and the endpoint's next deadline — and turns its events into SAs and policies installed
//! through the control side ([`Control::ike_install`], the path `ipsec sa add` takes), so
//! `ipsec show`, `ipsec monitor`, the stats file and the metrics see them like any other SA.
//!
//! - A child SA pair becomes two ESP SAs named `ike:CONN/CHILD/out-SPI` and `.../in-SPI`
//!   (tunnel mode, the negotiated algorithms and KEYMAT keys, ESP in UDP with the ports IKE
//!   used, RFC 3948) and, per pair of selectors (RFC 7296 2.9), an outbound and an inbound
//!   policy ([`child_sas`], sans-IO and tested here).
//! - tunneld's IKE children always go in UDP: tunneld runs its ESP-in-UDP sockets (its fast
//!   path) and asks strongSwan's way (`encap = yes`, a NAT_DETECTION_SOURCE_IP that cannot
//!   match, 2.23) when no NAT is found. strongSwan's own userspace data plane needs the same.
//! - The peer's endpoint moves only on authenticated IKE messages (the endpoint reports
//!   [`Event::PeerEndpointChanged`]) or new ESP packets (the data plane).
//! - Keys never reach a log line; `--keylog DIR` (off by default, loudly announced) writes
//!   Wireshark's `ikev2_decryption_table` and `esp_sa` tables.
//!
//! Rekeys are make before break: a new pair is installed before the message that completes
//! its exchange goes out; our rekey's policies go before the old pair's (traffic moves at
//! once), the peer's after (traffic moves when the old pair is deleted); a replaced pair's
//! inbound SA is retired, kept until idle. A child's byte or packet soft limit, or a sequence
//! number near its end, asks for its rekey ([`IkeHandle::rekey_child`]).

use crate::control::response::{Answer, ChildSaInfo, IkeList, IkeSaCounters, IkeSaInfo, IkeStarted, MessageIds};
use crate::control::{ChildSaKey, Control, IkeRequest, IkeService};
use crate::dataplane::Tunnel;
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::Event;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::time::Duration;
use tracing::{info, warn};

mod addr_watch;
mod events;
mod keylog;
mod radius;
mod selectors;
mod sockets;
mod traps;

pub use crate::obs::ike::{IkeCounters, IkeReport};
use events::{handle_event, needs_live, Live};
pub use keylog::KeyLog;
pub use radius::{Accountant, RadiusSocket};
pub use selectors::{child_sas, range_prefixes, ChildSas};
pub use sockets::{IkeSockets, Inputs};
pub use traps::Traps;

/// The prefix of the names of the SAs IKE installs: a config reload leaves them alone.
pub const IKE_PREFIX: &str = "ike:";

/// How many received datagrams may wait for the IKE thread (more are dropped and counted).
const QUEUE: usize = 256;

/// Datagrams the IKE thread reads from each port-500 socket, and inputs it takes from its
/// queue, before it looks at the other again: during a flood the control side's requests
/// (`ipsec ike list`) are answered within a pass, and timers and sends are not starved.
const INPUTS_PER_PASS: usize = 64;
/// The shortest wait for a deadline the endpoint's timers did not advance (see `run`).
const STALE_DEADLINE_WAIT: Duration = Duration::from_millis(10);

/// What the IKE thread is asked to do.
pub enum Input {
    /// A datagram that arrived on `local` from `remote` (on 4500: with its non-ESP marker).
    Datagram {
        /// Where it arrived.
        local: SocketAddr,
        /// Its source.
        remote: SocketAddr,
        /// Its UDP payload.
        data: Vec<u8>,
    },
    /// An `ipsec ike` request (not `List`); the answer goes to `reply`.
    Command {
        /// What to do.
        cmd: IkeRequest,
        /// Where the answer goes.
        reply: mpsc::Sender<Result<Answer, String>>,
    },
    /// The IKE SAs and their children, for `ipsec ike list` and `ipsec show`.
    List(mpsc::Sender<IkeList>),
    /// The data plane asks for a child's rekey (its byte or packet limit, or its sequence
    /// numbers running out): the pair IKE receives on this SPI.
    RekeyChild(u32),
    /// A packet matched a trap: start `child` (with its connection), its selectors first
    /// (2.9).
    Acquire {
        /// The child, by the handle its trap holds.
        child: ipsec_ike::ChildId,
        /// The packet's selectors.
        packet: ipsec_ike::PacketSelectors,
    },
}

/// The daemon's side of the IKE thread: a queue into it.
#[derive(Clone)]
pub struct IkeHandle {
    tx: SyncSender<Input>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Wakes the IKE thread when something is queued ([`Inputs`]).
    wake: Option<std::sync::Arc<sockets::Wake>>,
}

impl IkeHandle {
    /// A handle and the receiving end the IKE thread reads.
    pub fn new() -> (IkeHandle, Inputs) {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let wake = match sockets::Wake::new() {
            Ok(w) => Some(std::sync::Arc::new(w)),
            Err(e) => {
                warn!("IKE: no wake-up socket ({e}): the IKE thread reads port 500 every 50 ms");
                None
            }
        };
        (
            IkeHandle {
                tx,
                dropped: Default::default(),
                wake: wake.clone(),
            },
            Inputs { rx, wake },
        )
    }

    /// Queues an input without blocking and wakes the IKE thread; counts it when the queue
    /// is full.
    fn try_send(&self, input: Input) {
        if self.tx.try_send(input).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        } else if let Some(w) = &self.wake {
            w.wake();
        }
    }

    /// Queues a received datagram without blocking (the receiving threads must not wait);
    /// counts it when the queue is full.
    pub fn datagram(&self, local: SocketAddr, remote: SocketAddr, data: &[u8]) {
        self.try_send(Input::Datagram {
            local,
            remote,
            data: data.to_vec(),
        });
    }

    /// Asks the IKE thread to start `child` for a trapped packet (never blocks).
    pub fn acquire(&self, child: ipsec_ike::ChildId, packet: ipsec_ike::PacketSelectors) {
        self.try_send(Input::Acquire { child, packet });
    }

    /// Datagrams dropped because the IKE thread was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl IkeService for IkeHandle {
    /// Runs an `ipsec ike` request and waits at most 2 s for the IKE thread's answer.
    fn request(&self, req: IkeRequest) -> Result<Answer, String> {
        let wait = Duration::from_secs(2);
        let busy = || "the IKE thread did not answer".to_string();
        if req == IkeRequest::List {
            let (tx, rx) = mpsc::channel();
            self.tx.send(Input::List(tx)).map_err(|_| busy())?;
            self.wake.iter().for_each(|w| w.wake());
            return rx.recv_timeout(wait).map(Answer::IkeList).map_err(|_| busy());
        }
        let (tx, rx) = mpsc::channel();
        self.tx
            .send(Input::Command { cmd: req, reply: tx })
            .map_err(|_| busy())?;
        self.wake.iter().for_each(|w| w.wake());
        rx.recv_timeout(wait).map_err(|_| busy())?
    }

    /// Asks the IKE thread to rekey the child pair it receives on `spi_in` (never blocks).
    fn rekey_child(&self, spi_in: u32) {
        self.try_send(Input::RekeyChild(spi_in));
    }
}

/// Runs the IKE thread until `stop`: `inputs` from the sockets and the control socket,
/// `rx500` polled for port-500 datagrams. Returns when `stop` is set.
pub fn run(
    t: &Tunnel,
    control: &Control,
    mut endpoint: ipsec_ike::Endpoint,
    sockets: &IkeSockets<'_>,
    inputs: &Inputs,
    keylog: Option<&KeyLog>,
    stop: &AtomicBool,
) {
    let mut rng = rand_core::OsRng;
    let now = || t.now();
    let counters = std::sync::Arc::new(IkeCounters::default());
    t.set_ike_counters(counters.clone());
    let mut counted_at = Duration::ZERO;
    // A deadline handle_timeout ran for and left where it was: waited on as any other it
    // would be a 0 ms sleep again and again (issue #39: 100 % of a core while a Delete went
    // unanswered), so the wait for it is at least STALE_DEADLINE_WAIT.
    let mut unadvanced: Option<Duration> = None;
    // Certificates' validity is checked against the wall clock, which the sans-IO endpoint
    // is given (and given again every pass, so a clock step is followed).
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    endpoint.set_unix_time(now(), unix());
    endpoint.start(now(), &mut rng);
    let mut buf = vec![0u8; 65536];
    let port500 = |sockets: &IkeSockets<'_>| -> Vec<Option<SocketAddr>> {
        sockets.ike.iter().map(|s| s.local_addr().ok()).collect()
    };
    let mut locals = port500(sockets);
    // The kernel's address notifications (RFC 4555 3.5: our address may go away).
    let watch = match addr_watch::AddrWatch::open() {
        Ok(w) => Some(w),
        Err(e) => {
            info!("IKE: not watching this host's addresses (rtnetlink: {e}): `ipsec ike update` moves the SAs");
            None
        }
    };
    // A bigger receive buffer on port 500 (the kernel's rmem_max caps it): bursts of a flood
    // wait there while the thread sleeps or sends, instead of being dropped.
    for s in &sockets.ike {
        let _ = socket2::SockRef::from(s).set_recv_buffer_size(crate::dev::sys::RECV_BUFFER);
    }
    while !stop.load(Ordering::Relaxed) {
        endpoint.set_unix_time(now(), unix());
        // Port 500: read what is there without waiting (the channel wait below is the sleep),
        // at most INPUTS_PER_PASS datagrams a socket: a flood must not keep the queue (commands, port
        // 4500) waiting. More left: the queue is only looked at, not waited on.
        let (mut more, mut any) = (false, false);
        for (s, local) in sockets.ike.iter().zip(&locals) {
            let Some(local) = *local else { continue };
            let mut n_read = 0;
            while n_read < INPUTS_PER_PASS {
                let Ok((n, from)) = s.recv_from(&mut buf) else { break };
                n_read += 1;
                if let Err(e) = endpoint.handle_datagram(now(), local, from, &buf[..n], &mut rng) {
                    counters.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("IKE datagram from {from} dropped: {e}");
                }
            }
            more |= n_read == INPUTS_PER_PASS;
            any |= n_read > 0;
        }
        // The thread's sleep: poll(2) on the port-500 sockets and the queue's wake-up socket,
        // until one is readable or the endpoint's next deadline (at most 50 ms, for `stop`);
        // none in a pass that read port 500 (its answers go out at the pass's end). Without a
        // wake-up socket the queue wait is the sleep and port 500 is not read meanwhile:
        // while datagrams come in, at most 1 ms.
        let wait = if more || (any && inputs.wake.is_some()) {
            Duration::ZERO
        } else if any {
            Duration::from_millis(1)
        } else {
            let next = endpoint.poll_timeout();
            let wait = next
                .map_or(Duration::from_millis(50), |d| d.saturating_sub(now()))
                .min(Duration::from_millis(50));
            if next.is_some() && next == unadvanced {
                wait.max(STALE_DEADLINE_WAIT)
            } else {
                wait
            }
        };
        let also: Vec<std::os::fd::RawFd> = [
            sockets.radius.as_ref().map(|r| r.socket().as_raw_fd()),
            watch.as_ref().map(|w| w.fd()),
        ]
        .into_iter()
        .flatten()
        .collect();
        inputs.wait_also(&sockets.ike, &also, wait);
        // Our addresses changed: the sockets and the MOBIKE SAs follow a vanished one.
        if watch.as_ref().is_some_and(|w| w.changed()) && follow_addresses(&mut endpoint, sockets, now(), &mut rng) {
            locals = port500(sockets);
        }
        // The RADIUS server's answers: a deferred IKE_AUTH response goes out with this pass.
        if let Some(r) = &sockets.radius {
            r.receive(&mut endpoint, now(), &mut buf, &mut rng);
        }
        // What is queued, INPUTS_PER_PASS at most.
        let mut taken = 0;
        loop {
            let input = inputs.next(taken == 0, wait);
            taken += 1;
            match input {
                Ok(Input::Datagram { local, remote, data }) => {
                    // (Named by the address its socket was opened on: where it is bound now.)
                    let local = sockets.arrived_on(local);
                    if let Err(e) = endpoint.handle_datagram(now(), local, remote, &data, &mut rng) {
                        counters.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("IKE datagram from {remote} on {local} dropped: {e}");
                    }
                }
                Ok(Input::Command {
                    cmd: IkeRequest::Update { conn, local },
                    reply,
                }) => {
                    let _ = reply.send(update_local(&mut endpoint, sockets, now(), &conn, local, &mut rng));
                    locals = port500(sockets);
                }
                Ok(Input::Command { cmd, reply }) => {
                    let _ = reply.send(command(&mut endpoint, now(), cmd, &mut rng));
                }
                Ok(Input::List(reply)) => {
                    let _ = reply.send(ike_list(&endpoint, now()));
                }
                Ok(Input::RekeyChild(spi_in)) => {
                    if endpoint.rekeys_left_to_peer(spi_in) {
                        // `rekey_by`: the client rekeys; the hard limit still applies.
                        tracing::debug!(
                            "IKE: child {spi_in:08x} reached a data-plane limit: its rekey is the client's"
                        );
                    } else if endpoint.rekey_child(now(), spi_in, &mut rng).is_ok() {
                        info!("IKE: child {spi_in:08x} reached a data-plane limit: rekeying it");
                    }
                }
                Ok(Input::Acquire { child, packet }) => {
                    // The names only for the log.
                    let (conn, ch) = endpoint.child_names(child).unwrap_or(("?", "?"));
                    info!(
                        "IKE: a packet {} -> {} matches {conn}/{ch}'s trap: starting it",
                        packet.src, packet.dst
                    );
                    if let Err(e) = endpoint.acquire(now(), child, packet, &mut rng) {
                        let (conn, ch) = endpoint.child_names(child).unwrap_or(("?", "?"));
                        warn!("IKE: {conn}/{ch}: {e}");
                    }
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return finish(&mut endpoint, sockets, now(), &mut rng),
            }
            if taken >= INPUTS_PER_PASS {
                break;
            }
        }
        if let Some(due) = endpoint.poll_timeout().filter(|d| *d <= now()) {
            endpoint.handle_timeout(now(), &mut rng);
            unadvanced = endpoint.poll_timeout().filter(|d| *d == due);
            if unadvanced.is_some() {
                tracing::debug!("IKE: a deadline ({due:?}) was not advanced by its timer");
            }
        }
        // Events first: a child's SAs are installed before the message that completes its
        // exchange goes out, so the peer's first packets on the new pair (it may switch as
        // soon as it has our answer, 2.8) find its inbound SA here.
        // What a down SA's handling asks of the SAs that remain is read from the endpoint
        // itself, once per pass (the shadow list of IKE SAs the events reported is gone).
        let mut failed = Vec::new();
        let mut live = None;
        let accounting = sockets.radius.as_ref().and_then(|r| r.accounting.as_ref());
        while let Some(ev) = endpoint.poll_event() {
            counters.count(&ev);
            if let Some(a) = accounting {
                // Before the event is acted on: a child's SAs are still there to be read.
                let usage = |spi_in| control.ike_child_usage(t, spi_in);
                a.lock().unwrap_or_else(|p| p.into_inner()).observe(&ev, now(), &usage);
            }
            if live.is_none() && needs_live(&ev) {
                live = Some(Live::of(&endpoint, now()));
            }
            failed.extend(handle_event(t, control, sockets, ev, live.as_ref(), keylog));
        }
        if let Some(a) = accounting {
            let usage = |spi_in| control.ike_child_usage(t, spi_in);
            a.lock().unwrap_or_else(|p| p.into_inner()).flush(now(), &usage);
        }
        // A child agreed but not installed is deleted on both sides (RFC 7296 2.9: a child
        // exists only if it protects what it says); the Delete goes with this round's sends.
        for spi_in in failed {
            match endpoint.delete_child(now(), spi_in, &mut rng) {
                Ok(()) => warn!("IKE: child {spi_in:08x} could not be installed: deleting it"),
                Err(e) => warn!("IKE: child {spi_in:08x} could not be installed nor deleted: {e}"),
            }
        }
        while let Some(tx) = endpoint.poll_transmit() {
            if let Err(e) = sockets.send(&tx) {
                warn!("IKE: sending to {}: {e}", tx.remote);
            }
        }
        if let Some(r) = &sockets.radius {
            r.send_all(&mut endpoint);
        }
        if now() >= counted_at + Duration::from_secs(1) {
            counted_at = now();
            counters.update(&endpoint, counted_at);
        } else {
            counters.update_dos(&endpoint);
        }
        if let Some(r) = &sockets.radius {
            let acct = r
                .accounting
                .as_ref()
                .map(|a| a.lock().unwrap_or_else(|p| p.into_inner()).stats());
            counters.update_radius(&endpoint, r.wrong_source.load(Ordering::Relaxed), r.servers(), acct);
        }
    }
    finish(&mut endpoint, sockets, now(), &mut rng);
}

/// A clean stop deletes our IKE SAs (the peer removes its SAs at once instead of waiting
/// for its liveness checks).
fn finish(endpoint: &mut ipsec_ike::Endpoint, sockets: &IkeSockets<'_>, now: Duration, rng: &mut rand_core::OsRng) {
    let conns: Vec<ipsec_ike::ConnId> = endpoint.conn_ids().collect();
    for c in conns {
        let _ = endpoint.terminate_conn(now, c, rng);
    }
    while let Some(tx) = endpoint.poll_transmit() {
        let _ = sockets.send(&tx);
    }
}

/// The IKE SAs and their children as `ike.list` and `show` give them (no key).
pub fn ike_list(endpoint: &ipsec_ike::Endpoint, now: Duration) -> IkeList {
    let ike_sas = endpoint
        .status(now)
        .iter()
        .map(|s| {
            let local_id = endpoint
                .config()
                .connections
                .iter()
                .find(|c| c.name == s.conn)
                .map(|c| c.local_id.to_string());
            ike_sa_info(s, local_id)
        })
        .collect();
    IkeList { ike_sas }
}

/// One IKE SA of `ike.list`.
pub(crate) fn ike_sa_info(s: &ipsec_ike::IkeSaStatus, local_id: Option<String>) -> IkeSaInfo {
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs());
    IkeSaInfo {
        conn: s.conn.clone(),
        state: s.state.to_string(),
        role: match s.role {
            ipsec_ike::Role::Initiator => "initiator",
            ipsec_ike::Role::Responder => "responder",
        }
        .to_string(),
        spi_i: format!("{:016x}", s.spi_i),
        spi_r: format!("{:016x}", s.spi_r),
        local: s.local.to_string(),
        remote: s.remote.to_string(),
        local_id,
        remote_id: s.remote_id.clone(),
        nat: s.nat,
        virtual_ips: s.virtual_ips.iter().map(|a| a.to_string()).collect(),
        mobike: s.mobike,
        peer_addresses: s.peer_addresses.iter().map(|a| a.to_string()).collect(),
        eap_method: s.eap_method.map(str::to_string),
        proposal: s.proposal.clone(),
        message_ids: MessageIds {
            next_request: s.next_request_id,
            peer_next: s.expected_peer_id,
        },
        age_seconds: s.age.as_secs(),
        rekey_in_seconds: secs(s.rekey_in),
        counters: IkeSaCounters {
            requests_sent: s.stats.requests_sent,
            requests_answered: s.stats.requests_answered,
            retransmits: s.stats.retransmits,
            child_rekeys: s.stats.child_rekeys,
            invalid_syntax: s.stats.invalid_syntax,
            fragments_sent: s.stats.fragments_sent,
            fragments_received: s.stats.fragments_received,
            fragmented_messages: s.stats.fragmented_messages,
            fragments_dropped: s.stats.fragments_dropped,
            eap_only: s.stats.eap_only,
            mobike_checks: s.stats.mobike_checks,
        },
        children: s
            .children
            .iter()
            .map(|c| ChildSaInfo {
                child: c.child.clone(),
                state: c.state.to_string(),
                spi_in: format!("{:08x}", c.spi_in),
                spi_out: format!("{:08x}", c.spi_out),
                proposal: c.proposal.clone(),
                rekeys: c.rekeys.map(|r| format!("{r:08x}")),
                rekey_in_seconds: secs(c.rekey_in),
                expires_in_seconds: secs(c.expires_in),
                // The data plane's counts, filled in by the control side
                // (`control::views::ike_child_bytes`).
                bytes_in: None,
                bytes_out: None,
            })
            .collect(),
    }
}

/// `ipsec ike update CONN --local ADDR` (RFC 4555 3.5, our address changed): the sockets
/// of that IP version are bound to ADDR first (an address this host does not have is an
/// error, and nothing changes), then the connection's MOBIKE IKE SAs send from there and
/// tell the peer (UPDATE_SA_ADDRESSES, `Endpoint::update_local`). Refused by the endpoint (no
/// MOBIKE on the SA: the peer or the connection did not agree to it), the sockets go back
/// where they were. tunneld has one local address per IP version: its sockets move for all
/// its connections (the command is for a host with one underlay address, a road-warrior
/// client).
fn update_local(
    endpoint: &mut ipsec_ike::Endpoint,
    sockets: &IkeSockets<'_>,
    now: Duration,
    conn: &str,
    local: std::net::IpAddr,
    rng: &mut rand_core::OsRng,
) -> Result<Answer, String> {
    if endpoint.conn_id(conn).is_err() {
        return Err(format!("`{conn}`: unknown connection"));
    }
    let old = sockets
        .move_local(local)
        .map_err(|e| format!("`{conn}`: binding the sockets to {local}: {e}"))?;
    match endpoint.update_local(now, conn, local, rng) {
        Ok(n) => {
            info!(
                "IKE: {conn}: our address moved from {old} to {local}: UPDATE_SA_ADDRESSES on {n} IKE SA(s) (MOBIKE)"
            );
            Ok(Answer::IkeStarted(IkeStarted {
                conn: conn.to_string(),
                spi: None,
                child: None,
                pairs: Some(n),
            }))
        }
        Err(e) => {
            warn!("IKE: {conn}: our address cannot move to {local}: {e}");
            if let Err(b) = sockets.move_local(old) {
                warn!("IKE: the sockets stay on {local}: moving them back to {old}: {b}");
            }
            Err(format!("`{conn}`: {e}"))
        }
    }
}

/// The address watch saw an address come or go: for each IP version whose sockets' address is
/// no longer this host's, the MOBIKE IKE SAs there (by connection) move with the sockets to
/// the source of the route to their peer, as `ipsec ike update` would; no route (yet), or no
/// MOBIKE SA there: nothing (the next notification looks again). Whether something moved.
fn follow_addresses(
    endpoint: &mut ipsec_ike::Endpoint,
    sockets: &IkeSockets<'_>,
    now: Duration,
    rng: &mut rand_core::OsRng,
) -> bool {
    let mut moved = false;
    for cur in sockets.bound_addresses() {
        if addr_watch::is_ours(cur) {
            continue;
        }
        let st = endpoint.status(now);
        let sas: Vec<_> = st
            .iter()
            .filter(|s| s.mobike && s.state == "established" && s.local.ip() == cur)
            .collect();
        let Some(first) = sas.first() else {
            info!("IKE: our address {cur} is gone; no IKE SA there uses MOBIKE");
            continue;
        };
        let to = match addr_watch::source_toward(first.remote.ip()) {
            Ok(Some(a)) if a != cur && a.is_ipv4() == cur.is_ipv4() => a,
            Ok(_) => {
                info!(
                    "IKE: our address {cur} is gone; no other source toward {} yet",
                    first.remote.ip()
                );
                continue;
            }
            Err(e) => {
                warn!(
                    "IKE: our address {cur} is gone; the route toward {}: {e}",
                    first.remote.ip()
                );
                continue;
            }
        };
        let mut conns: Vec<String> = sas.iter().map(|s| s.conn.clone()).collect();
        conns.sort();
        conns.dedup();
        info!(
            "IKE: our address {cur} is gone; the route toward {} leaves from {to}",
            first.remote.ip()
        );
        for c in conns {
            match update_local(endpoint, sockets, now, &c, to, rng) {
                Ok(_) => moved = true,
                Err(e) => warn!("IKE: {e}"),
            }
        }
    }
    moved
}

/// Carries out a command on the endpoint: the connection's name is resolved once, here (the
/// IKE thread's edge), to its handle ([`ipsec_ike::ConnId`]), which the endpoint is given.
fn command(
    endpoint: &mut ipsec_ike::Endpoint,
    now: Duration,
    cmd: IkeRequest,
    rng: &mut rand_core::OsRng,
) -> Result<Answer, String> {
    let started = |conn: String, spi: Option<String>, child: Option<String>, pairs: Option<usize>| {
        Answer::IkeStarted(IkeStarted {
            conn,
            spi,
            child,
            pairs,
        })
    };
    let label = cmd.label();
    let r = match cmd {
        IkeRequest::List => return Ok(Answer::IkeList(ike_list(endpoint, now))),
        IkeRequest::Initiate { conn, child: None } => endpoint
            .conn_id(&conn)
            .and_then(|id| endpoint.initiate_conn(now, id, rng))
            .map(|h| started(conn, Some(format!("{:016x}", h.0)), None, None)),
        IkeRequest::Initiate { conn, child: Some(ch) } => endpoint
            .child_id(&conn, &ch)
            .and_then(|id| endpoint.initiate_child(now, id, rng))
            .map(|()| started(conn, None, Some(ch), None)),
        IkeRequest::Terminate { conn } => endpoint
            .conn_id(&conn)
            .and_then(|id| endpoint.terminate_conn(now, id, rng))
            .map(|()| started(conn, None, None, None)),
        IkeRequest::Rekey { conn, child: None } => endpoint
            .conn_id(&conn)
            .and_then(|id| endpoint.rekey_ike_conn(now, id, rng))
            .map(|()| started(conn, None, None, None)),
        IkeRequest::Update { .. } => Err(ipsec_ike::CommandError::Unsupported(
            "an address update is carried out with the sockets (update_local)",
        )),
        IkeRequest::Rekey { conn, child: Some(ch) } => {
            // (An unknown connection has no child up: "not established", as before.)
            let spis = endpoint
                .conn_id(&conn)
                .map_or_else(|_| Vec::new(), |id| endpoint.child_spis(id, &ch));
            if spis.is_empty() {
                Err(ipsec_ike::CommandError::NotEstablished)
            } else {
                spis.iter()
                    .try_for_each(|s| endpoint.rekey_child(now, *s, rng))
                    .map(|()| started(conn, None, Some(ch), Some(spis.len())))
            }
        }
    };
    r.map_err(|e| format!("`{label}`: {e}"))
}
