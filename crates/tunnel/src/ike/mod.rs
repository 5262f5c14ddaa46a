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

use crate::control::Control;
use crate::dataplane::Tunnel;
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::Event;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::Mutex;
use std::time::Duration;
use tracing::{info, warn};

mod keylog;
mod selectors;
mod sockets;
mod traps;

pub use keylog::KeyLog;
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
const BATCH: usize = 64;

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
    /// An `ipsec ike` command; the answer goes to `reply`.
    Command {
        /// What to do.
        cmd: Command,
        /// Where the answer goes.
        reply: mpsc::Sender<Result<Value, String>>,
    },
    /// The IKE SAs and their children as JSON, for `ipsec show`.
    List(mpsc::Sender<Value>),
    /// The data plane asks for a child's rekey (its byte or packet limit, or its sequence
    /// numbers running out): the pair IKE receives on this SPI.
    RekeyChild(u32),
    /// A packet matched a trap: start `conn` with `child`, its selectors first (2.9).
    Acquire {
        /// The connection.
        conn: String,
        /// The child.
        child: String,
        /// The packet's selectors.
        packet: ipsec_ike::PacketSelectors,
    },
}

/// IKE's counters for the stats file and the metrics, kept by the IKE thread.
#[derive(Debug, Default)]
pub struct IkeCounters {
    ike_sas: AtomicU64,
    child_sas: AtomicU64,
    ike_up: AtomicU64,
    ike_rekeys: AtomicU64,
    child_rekeys: AtomicU64,
    requests_sent: AtomicU64,
    requests_answered: AtomicU64,
    retransmits: AtomicU64,
    auth_failures: AtomicU64,
    invalid_syntax: AtomicU64,
    datagrams_dropped: AtomicU64,
    fragments_sent: AtomicU64,
    fragments_received: AtomicU64,
    fragmented_messages: AtomicU64,
    fragments_dropped: AtomicU64,
    half_open: AtomicU64,
    cookies_sent: AtomicU64,
    half_open_refused: AtomicU64,
    too_large: AtomicU64,
}

/// [`IkeCounters`] as the stats file and `/metrics` show them: `ike_sas` and `child_sas`
/// are gauges, the rest totals since start.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct IkeReport {
    /// IKE SAs now (half-open ones included).
    pub ike_sas: u64,
    /// Child SA pairs now.
    pub child_sas: u64,
    /// IKE SAs established.
    pub ike_up: u64,
    /// IKE SA rekeys.
    pub ike_rekeys: u64,
    /// Child SA rekeys.
    pub child_rekeys: u64,
    /// Requests we sent (first transmissions).
    pub requests_sent: u64,
    /// The peers' requests answered.
    pub requests_answered: u64,
    /// Retransmissions of our requests.
    pub retransmits: u64,
    /// Authentications that failed (either side).
    pub auth_failures: u64,
    /// Authenticated requests answered with INVALID_SYNTAX.
    pub invalid_syntax: u64,
    /// Datagrams not used (malformed, unknown SPI, out of window, queue full, answered with
    /// a cookie ...).
    pub datagrams_dropped: u64,
    /// IKE fragments sent (RFC 7383; retransmissions not counted).
    pub fragments_sent: u64,
    /// The peers' IKE fragments authenticated and kept.
    pub fragments_received: u64,
    /// The peers' messages reassembled from fragments.
    pub fragmented_messages: u64,
    /// The peers' IKE fragments not used (bad ICV, duplicate, over the bounds).
    pub fragments_dropped: u64,
    /// Half-open responder IKE SAs now (a gauge; RFC 8019).
    pub half_open: u64,
    /// IKE_SA_INIT requests answered with a COOKIE and no state (RFC 7296 2.6).
    pub cookies_sent: u64,
    /// IKE_SA_INIT requests refused: their source's or the total half-open cap was reached.
    pub half_open_refused: u64,
    /// IKE_SA_INIT requests refused for their size (`ipsec_ike::limits::MAX_INIT_LEN`).
    pub too_large: u64,
}

impl IkeCounters {
    /// A snapshot.
    pub fn report(&self) -> IkeReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IkeReport {
            ike_sas: g(&self.ike_sas),
            child_sas: g(&self.child_sas),
            ike_up: g(&self.ike_up),
            ike_rekeys: g(&self.ike_rekeys),
            child_rekeys: g(&self.child_rekeys),
            requests_sent: g(&self.requests_sent),
            requests_answered: g(&self.requests_answered),
            retransmits: g(&self.retransmits),
            auth_failures: g(&self.auth_failures),
            invalid_syntax: g(&self.invalid_syntax),
            datagrams_dropped: g(&self.datagrams_dropped),
            fragments_sent: g(&self.fragments_sent),
            fragments_received: g(&self.fragments_received),
            fragmented_messages: g(&self.fragmented_messages),
            fragments_dropped: g(&self.fragments_dropped),
            half_open: g(&self.half_open),
            cookies_sent: g(&self.cookies_sent),
            half_open_refused: g(&self.half_open_refused),
            too_large: g(&self.too_large),
        }
    }

    /// The endpoint's own figures.
    fn update(&self, endpoint: &ipsec_ike::Endpoint, now: Duration) {
        let s = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        let st = endpoint.status(now);
        s(&self.ike_sas, st.len() as u64);
        s(&self.child_sas, st.iter().map(|x| x.children.len() as u64).sum());
        let t = endpoint.totals();
        s(&self.requests_sent, t.requests_sent);
        s(&self.requests_answered, t.requests_answered);
        s(&self.retransmits, t.retransmits);
        s(&self.child_rekeys, t.child_rekeys);
        s(&self.invalid_syntax, t.invalid_syntax);
        s(&self.fragments_sent, t.fragments_sent);
        s(&self.fragments_received, t.fragments_received);
        s(&self.fragmented_messages, t.fragmented_messages);
        s(&self.fragments_dropped, t.fragments_dropped);
        self.update_dos(endpoint);
    }

    /// The flood defences' figures (cheap: no pass over the SAs).
    fn update_dos(&self, endpoint: &ipsec_ike::Endpoint) {
        let s = |a: &AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        let d = endpoint.dos_stats();
        s(&self.half_open, endpoint.half_open_count() as u64);
        s(&self.cookies_sent, d.cookies_sent);
        s(&self.half_open_refused, d.half_open_refused);
        s(&self.too_large, d.too_large);
    }

    /// Counts what an event tells.
    fn count(&self, ev: &Event) {
        let inc = |a: &AtomicU64| a.fetch_add(1, Ordering::Relaxed);
        match ev {
            Event::IkeUp { .. } => inc(&self.ike_up),
            Event::IkeRekeyed { .. } => inc(&self.ike_rekeys),
            Event::AuthFailed { .. } => inc(&self.auth_failures),
            _ => 0,
        };
    }
}

/// What the control side asks of the IKE thread (`ipsec ike ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Start the connection (its IKE SA with the first child), or one child of it.
    Initiate {
        /// The connection.
        conn: String,
        /// The child (`CONN/CHILD`), if one.
        child: Option<String>,
    },
    /// Delete the connection's IKE SAs.
    Terminate {
        /// The connection.
        conn: String,
    },
    /// Rekey the connection's IKE SA, or one child of it (all its pairs).
    Rekey {
        /// The connection.
        conn: String,
        /// The child (`CONN/CHILD`), if one.
        child: Option<String>,
    },
}

impl Command {
    /// From a control request's `op` (`ike.initiate`, `ike.terminate`, `ike.rekey`) and
    /// `name` (`CONN` or `CONN/CHILD`).
    pub fn from_request(op: &str, name: Option<&str>) -> Result<Command, String> {
        let name = name.ok_or("`name`: the connection's name is needed")?;
        let (conn, child) = match name.split_once('/') {
            Some((c, ch)) => (c.to_string(), Some(ch.to_string())),
            None => (name.to_string(), None),
        };
        match op {
            "ike.initiate" => Ok(Command::Initiate { conn, child }),
            "ike.terminate" if child.is_none() => Ok(Command::Terminate { conn }),
            "ike.terminate" => Err("`ike.terminate` takes a connection, not a child".into()),
            "ike.rekey" => Ok(Command::Rekey { conn, child }),
            other => Err(format!("unknown op `{other}`")),
        }
    }
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

    /// Asks the IKE thread to start `conn`'s `child` for a trapped packet (never blocks).
    pub fn acquire(&self, conn: &str, child: &str, packet: ipsec_ike::PacketSelectors) {
        self.try_send(Input::Acquire {
            conn: conn.into(),
            child: child.into(),
            packet,
        });
    }

    /// Asks the IKE thread to rekey the child pair it receives on `spi_in` (never blocks).
    pub fn rekey_child(&self, spi_in: u32) {
        self.try_send(Input::RekeyChild(spi_in));
    }

    /// Datagrams dropped because the IKE thread was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Runs a control-socket request `op` (`ike.initiate`, `ike.terminate`, `ike.rekey`,
    /// `ike.list`) and
    /// waits at most 2 s for the IKE thread's answer.
    pub fn request(&self, op: &str, conn: Option<&str>) -> Result<Value, String> {
        let wait = Duration::from_secs(2);
        let busy = || "the IKE thread did not answer".to_string();
        match op {
            "ike.list" => {
                let (tx, rx) = mpsc::channel();
                self.tx.send(Input::List(tx)).map_err(|_| busy())?;
                self.wake.iter().for_each(|w| w.wake());
                rx.recv_timeout(wait).map_err(|_| busy())
            }
            op => {
                let cmd = Command::from_request(op, conn)?;
                let (tx, rx) = mpsc::channel();
                self.tx.send(Input::Command { cmd, reply: tx }).map_err(|_| busy())?;
                self.wake.iter().for_each(|w| w.wake());
                rx.recv_timeout(wait).map_err(|_| busy())?
            }
        }
    }
}

/// An event line as the control side's (`{"v":1,"event":KIND,"time":SECONDS,...}`).
fn event_json(kind: &str, now: Duration, fields: Value) -> Value {
    crate::control::event(kind, now, fields)
}

fn ts_json(ts: &[TrafficSelector]) -> Vec<String> {
    ts.iter().map(|t| format!("{t}")).collect()
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
    // The IKE SAs as the events reported them, for `ipsec show`.
    let status: Mutex<Vec<(ipsec_ike::IkeSaInfo, Vec<ChildEntry>)>> = Mutex::new(Vec::new());
    let now = || t.now();
    let counters = std::sync::Arc::new(IkeCounters::default());
    t.set_ike_counters(counters.clone());
    let mut counted_at = Duration::ZERO;
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
    let locals: Vec<Option<SocketAddr>> = sockets.ike.iter().map(|s| s.local_addr().ok()).collect();
    // A bigger receive buffer on port 500 (the kernel's rmem_max caps it): bursts of a flood
    // wait there while the thread sleeps or sends, instead of being dropped.
    for s in &sockets.ike {
        let _ = socket2::SockRef::from(s).set_recv_buffer_size(crate::dev::sys::RECV_BUFFER);
    }
    while !stop.load(Ordering::Relaxed) {
        endpoint.set_unix_time(now(), unix());
        // Port 500: read what is there without waiting (the channel wait below is the sleep),
        // at most BATCH datagrams a socket: a flood must not keep the queue (commands, port
        // 4500) waiting. More left: the queue is only looked at, not waited on.
        let (mut more, mut any) = (false, false);
        for (s, local) in sockets.ike.iter().zip(&locals) {
            let Some(local) = *local else { continue };
            let mut n_read = 0;
            while n_read < BATCH {
                let Ok((n, from)) = s.recv_from(&mut buf) else { break };
                n_read += 1;
                if let Err(e) = endpoint.handle_datagram(now(), local, from, &buf[..n], &mut rng) {
                    counters.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("IKE datagram from {from} dropped: {e}");
                }
            }
            more |= n_read == BATCH;
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
            endpoint
                .poll_timeout()
                .map_or(Duration::from_millis(50), |d| d.saturating_sub(now()))
                .min(Duration::from_millis(50))
        };
        inputs.wait(&sockets.ike, wait);
        // What is queued, BATCH at most.
        let mut taken = 0;
        loop {
            let input = inputs.next(taken == 0, wait);
            taken += 1;
            match input {
                Ok(Input::Datagram { local, remote, data }) => {
                    if let Err(e) = endpoint.handle_datagram(now(), local, remote, &data, &mut rng) {
                        counters.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("IKE datagram from {remote} on {local} dropped: {e}");
                    }
                }
                Ok(Input::Command { cmd, reply }) => {
                    let _ = reply.send(command(&mut endpoint, now(), cmd, &mut rng));
                }
                Ok(Input::List(reply)) => {
                    let _ = reply.send(list_json(&endpoint, now()));
                }
                Ok(Input::RekeyChild(spi_in)) => {
                    if endpoint.rekey_child(now(), spi_in, &mut rng).is_ok() {
                        info!("IKE: child {spi_in:08x} reached a data-plane limit: rekeying it");
                    }
                }
                Ok(Input::Acquire { conn, child, packet }) => {
                    info!(
                        "IKE: a packet {} -> {} matches {conn}/{child}'s trap: starting it",
                        packet.src, packet.dst
                    );
                    if let Err(e) = endpoint.acquire(now(), &conn, &child, packet, &mut rng) {
                        warn!("IKE: {conn}/{child}: {e}");
                    }
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return finish(&mut endpoint, sockets, now(), &mut rng),
            }
            if taken >= BATCH {
                break;
            }
        }
        if endpoint.poll_timeout().is_some_and(|d| d <= now()) {
            endpoint.handle_timeout(now(), &mut rng);
        }
        // Events first: a child's SAs are installed before the message that completes its
        // exchange goes out, so the peer's first packets on the new pair (it may switch as
        // soon as it has our answer, 2.8) find its inbound SA here.
        let mut failed = Vec::new();
        while let Some(ev) = endpoint.poll_event() {
            counters.count(&ev);
            failed.extend(handle_event(t, control, sockets, ev, &status, keylog));
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
        if now() >= counted_at + Duration::from_secs(1) {
            counted_at = now();
            counters.update(&endpoint, counted_at);
        } else {
            counters.update_dos(&endpoint);
        }
    }
    finish(&mut endpoint, sockets, now(), &mut rng);
}

/// A clean stop deletes our IKE SAs (the peer removes its SAs at once instead of waiting
/// for its liveness checks).
fn finish(endpoint: &mut ipsec_ike::Endpoint, sockets: &IkeSockets<'_>, now: Duration, rng: &mut rand_core::OsRng) {
    let names: Vec<String> = endpoint.config().connections.iter().map(|c| c.name.clone()).collect();
    for n in names {
        let _ = endpoint.terminate(now, &n, rng);
    }
    while let Some(tx) = endpoint.poll_transmit() {
        let _ = sockets.send(&tx);
    }
}

/// The IKE SAs and their children as `ike.list` and `show` give them (no key).
pub fn list_json(endpoint: &ipsec_ike::Endpoint, now: Duration) -> Value {
    let secs = |d: Option<Duration>| d.map(|d| d.as_secs());
    let sas: Vec<Value> = endpoint
        .status(now)
        .iter()
        .map(|s| {
            let local_id = endpoint
                .config()
                .connections
                .iter()
                .find(|c| c.name == s.conn)
                .map(|c| c.local_id.to_string());
            json!({
                "conn": s.conn,
                "state": s.state,
                "role": match s.role { ipsec_ike::Role::Initiator => "initiator", ipsec_ike::Role::Responder => "responder" },
                "spi_i": format!("{:016x}", s.spi_i),
                "spi_r": format!("{:016x}", s.spi_r),
                "local": s.local.to_string(),
                "remote": s.remote.to_string(),
                "local_id": local_id,
                "remote_id": s.remote_id,
                "nat": s.nat,
                "proposal": s.proposal,
                "message_ids": {"next_request": s.next_request_id, "peer_next": s.expected_peer_id},
                "age_seconds": s.age.as_secs(),
                "rekey_in_seconds": secs(s.rekey_in),
                "counters": {
                    "requests_sent": s.stats.requests_sent,
                    "requests_answered": s.stats.requests_answered,
                    "retransmits": s.stats.retransmits,
                    "child_rekeys": s.stats.child_rekeys,
                    "invalid_syntax": s.stats.invalid_syntax,
                    "fragments_sent": s.stats.fragments_sent,
                    "fragments_received": s.stats.fragments_received,
                    "fragmented_messages": s.stats.fragmented_messages,
                    "fragments_dropped": s.stats.fragments_dropped,
                },
                "children": s.children.iter().map(|c| json!({
                    "child": c.child,
                    "state": c.state,
                    "spi_in": format!("{:08x}", c.spi_in),
                    "spi_out": format!("{:08x}", c.spi_out),
                    "proposal": c.proposal,
                    "rekeys": c.rekeys.map(|r| format!("{r:08x}")),
                    "rekey_in_seconds": secs(c.rekey_in),
                    "expires_in_seconds": secs(c.expires_in),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "ike_sas": sas })
}

/// A child pair as the IKE thread's status lists it.
struct ChildEntry {
    child: String,
    spi_in: u32,
    spi_out: u32,
    /// A rekey made its successor: when it goes, its inbound SA is retired, not removed.
    replaced: bool,
}

/// Carries out a command on the endpoint.
fn command(
    endpoint: &mut ipsec_ike::Endpoint,
    now: Duration,
    cmd: Command,
    rng: &mut rand_core::OsRng,
) -> Result<Value, String> {
    let label = match &cmd {
        Command::Initiate { conn, child: Some(ch) } | Command::Rekey { conn, child: Some(ch) } => {
            format!("{conn}/{ch}")
        }
        Command::Initiate { conn, .. } | Command::Terminate { conn } | Command::Rekey { conn, .. } => conn.clone(),
    };
    let r = match cmd {
        Command::Initiate { conn, child: None } => endpoint
            .initiate(now, &conn, rng)
            .map(|h| json!({"conn": conn, "spi": format!("{:016x}", h.0)})),
        Command::Initiate { conn, child: Some(ch) } => endpoint
            .initiate_child(now, &conn, &ch, rng)
            .map(|()| json!({"conn": conn, "child": ch})),
        Command::Terminate { conn } => endpoint.terminate(now, &conn, rng).map(|()| json!({"conn": conn})),
        Command::Rekey { conn, child: None } => endpoint.rekey_ike(now, &conn, rng).map(|()| json!({"conn": conn})),
        Command::Rekey { conn, child: Some(ch) } => {
            let spis: Vec<u32> = endpoint
                .children(&conn)
                .into_iter()
                .filter(|(n, _)| *n == ch)
                .map(|(_, s)| s)
                .collect();
            if spis.is_empty() {
                Err(ipsec_ike::CommandError::NotEstablished)
            } else {
                spis.iter()
                    .try_for_each(|s| endpoint.rekey_child(now, *s, rng))
                    .map(|()| json!({"conn": conn, "child": ch, "pairs": spis.len()}))
            }
        }
    };
    r.map_err(|e| format!("`{label}`: {e}"))
}

fn handle_event(
    t: &Tunnel,
    control: &Control,
    sockets: &IkeSockets<'_>,
    ev: Event,
    status: &Mutex<Vec<(ipsec_ike::IkeSaInfo, Vec<ChildEntry>)>>,
    keylog: Option<&KeyLog>,
) -> Option<u32> {
    let now = t.now();
    let mut failed = None;
    let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
    let out = match ev {
        Event::IkeUp { info, keys } => {
            info!(
                "IKE: {} up ({:?}, {} <-> {}, peer {:?}{})",
                info.conn,
                info.role,
                info.local,
                info.remote,
                info.remote_id,
                if info.nat { ", NAT" } else { "" }
            );
            if let (Some(k), Some(log)) = (keys.as_ref(), keylog) {
                log.append("ikev2_decryption_table", &[ipsec_ike::keylog::ikev2_line(k)]);
            }
            let v = json!({"conn": info.conn, "spi_i": format!("{:016x}", info.spi_i), "spi_r": format!("{:016x}", info.spi_r),
                "local": info.local.to_string(), "remote": info.remote.to_string(), "nat": info.nat});
            st.retain(|(i, _)| !(i.spi_i == info.spi_i && i.spi_r == info.spi_r));
            st.push((info, Vec::new()));
            event_json("ike.up", now, v)
        }
        Event::IkeRekeyed {
            old_spi_i,
            old_spi_r,
            info,
            keys,
        } => {
            info!(
                "IKE: {} rekeyed: SPIs {:016x}_i {:016x}_r -> {:016x}_i {:016x}_r",
                info.conn, old_spi_i, old_spi_r, info.spi_i, info.spi_r
            );
            if let (Some(k), Some(log)) = (keys.as_ref(), keylog) {
                log.append("ikev2_decryption_table", &[ipsec_ike::keylog::ikev2_line(k)]);
            }
            let v = json!({"conn": info.conn, "old_spi_i": format!("{old_spi_i:016x}"), "old_spi_r": format!("{old_spi_r:016x}"),
                "spi_i": format!("{:016x}", info.spi_i), "spi_r": format!("{:016x}", info.spi_r)});
            // The children moved to the new SA.
            let children = st
                .iter()
                .position(|(i, _)| i.spi_i == old_spi_i && i.spi_r == old_spi_r)
                .map(|k| core::mem::take(&mut st[k].1))
                .unwrap_or_default();
            st.push((info, children));
            event_json("ike.rekeyed", now, v)
        }
        Event::IkeDown {
            conn,
            spi_i,
            spi_r,
            reason,
        } => {
            info!("IKE: {conn} down ({reason:?})");
            let gone = st
                .iter()
                .find(|(i, _)| i.spi_i == spi_i && i.spi_r == spi_r)
                .map(|(i, _)| i.remote.ip());
            st.retain(|(i, _)| !(i.spi_i == spi_i && i.spi_r == spi_r));
            if let Some(ip) = gone.filter(|ip| !st.iter().any(|(i, _)| i.remote.ip() == *ip)) {
                sockets.remove_peer(ip);
            }
            event_json(
                "ike.down",
                now,
                json!({"conn": conn, "spi_i": format!("{spi_i:016x}"), "spi_r": format!("{spi_r:016x}"), "why": format!("{reason:?}")}),
            )
        }
        Event::ChildUp(c) => {
            if let Some(log) = keylog {
                log.append("esp_sa", &ipsec_ike::keylog::esp_sa_lines(&c));
            }
            let v = json!({"conn": c.conn, "child": c.child, "spi_in": format!("{:08x}", c.spi_in),
                "spi_out": format!("{:08x}", c.spi_out), "local_ts": ts_json(&c.local_ts), "remote_ts": ts_json(&c.remote_ts),
                "encap": c.encap.map(|e| json!({"sport": e.local_port, "dport": e.remote_port}))});
            // Our rekey: the new pair's policies go before the old pair's (outbound traffic
            // moves at once); the peer's: after (it moves when the peer deletes the old).
            let before = c.rekeys.filter(|_| c.initiator).and_then(|old| {
                st.iter()
                    .flat_map(|(_, ch)| ch.iter())
                    .find(|x| x.spi_in == old)
                    .map(|x| selectors::sa_name(&c.conn, &x.child, "out", x.spi_out))
            });
            let v = match c.rekeys {
                Some(old) => {
                    let mut v = v;
                    v["rekeys"] = format!("{old:08x}").into();
                    v
                }
                None => v,
            };
            // Sealed packets go to where the peer's IKE messages come from (behind a NAT, not
            // its configured address), at its NAT-T port (the encapsulation IKE negotiated,
            // not the IKE port its messages may still come from); registered before the SAs
            // are installed, so no packet of the new pair goes anywhere else.
            let esp_to = c
                .encap
                .map_or(c.remote, |e| SocketAddr::new(c.remote.ip(), e.remote_port));
            let room = sockets.add_peer(esp_to, c.spi_out, c.spi_in);
            let installed = child_sas(&c).and_then(|mut sas| {
                sas.before = before;
                control.ike_install(t, sas)
            });
            if installed.is_err() {
                sockets.child_down(c.spi_in);
            }
            match installed {
                Ok(()) => {
                    info!(
                        "IKE: {}/{} up: ESP in {:08x}, out {:08x}, {:?} <-> {:?}",
                        c.conn, c.child, c.spi_in, c.spi_out, c.local_ts, c.remote_ts
                    );
                    if !room {
                        warn!(
                            "IKE: {}/{}: {} peers added already: packets to {} cannot go",
                            c.conn,
                            c.child,
                            crate::dev::udp::MAX_DYNAMIC_PEERS,
                            c.remote
                        );
                    }
                    if let Some((_, ch)) = st.iter_mut().find(|(i, _)| i.conn == c.conn) {
                        ch.push(ChildEntry {
                            child: c.child.clone(),
                            spi_in: c.spi_in,
                            spi_out: c.spi_out,
                            replaced: false,
                        });
                    }
                    if let Some(old) = c.rekeys {
                        for x in st
                            .iter_mut()
                            .flat_map(|(_, ch)| ch.iter_mut())
                            .filter(|x| x.spi_in == old)
                        {
                            x.replaced = true;
                        }
                    }
                }
                Err(e) => {
                    warn!("IKE: {}/{}: installing the child SA failed: {e}", c.conn, c.child);
                    failed = Some(c.spi_in);
                    let mut v = v;
                    v["error"] = e.into();
                    drop(st);
                    control.publish(&[event_json("child.failed", now, v)]);
                    return failed;
                }
            }
            event_json("child.up", now, v)
        }
        Event::ChildDown {
            conn,
            child,
            spi_in,
            spi_out,
            reason,
        } => {
            let replaced = st
                .iter()
                .flat_map(|(_, ch)| ch.iter())
                .any(|x| x.spi_in == spi_in && x.replaced);
            let (out_name, in_name) = (
                selectors::sa_name(&conn, &child, "out", spi_out),
                selectors::sa_name(&conn, &child, "in", spi_in),
            );
            if replaced {
                // Make before break's last step: the old outbound SA goes, the old inbound one
                // stays until the packets in flight on it are through (RFC 7296 2.8).
                control.ike_remove(t, std::slice::from_ref(&out_name));
                control.ike_retire(t, &in_name);
            } else {
                control.ike_remove(t, &[out_name, in_name]);
            }
            sockets.child_down(spi_in);
            info!("IKE: {conn}/{child} down ({reason:?}): its SAs and policies removed");
            for (_, ch) in st.iter_mut() {
                ch.retain(|x| x.spi_in != spi_in);
            }
            event_json(
                "child.down",
                now,
                json!({"conn": conn, "child": child, "spi_in": format!("{spi_in:08x}"), "spi_out": format!("{spi_out:08x}"), "why": format!("{reason:?}")}),
            )
        }
        Event::AuthFailed { conn, local, reason } => {
            match (local, reason) {
                (true, Some(why)) => warn!("IKE: {conn}: authentication failed: we refused the peer: {why}"),
                (true, None) => warn!("IKE: {conn}: authentication failed: we refused the peer"),
                (false, _) => warn!("IKE: {conn}: authentication failed: the peer refused us"),
            }
            let mut f = json!({"conn": conn, "by": if local { "us" } else { "peer" }});
            if let Some(why) = reason {
                f["why"] = json!(why.to_string());
            }
            event_json("ike.auth_failed", now, f)
        }
        Event::ProposalMismatch { conn, child } => {
            warn!(
                "IKE: {conn}: no proposal in common{}",
                child.as_deref().map_or(String::new(), |c| format!(" for child {c}"))
            );
            event_json("ike.no_proposal", now, json!({"conn": conn, "child": child}))
        }
        Event::TsUnacceptable { conn, child } => {
            warn!("IKE: {conn}/{child}: traffic selectors unacceptable");
            event_json("ike.ts_unacceptable", now, json!({"conn": conn, "child": child}))
        }
        Event::PeerEndpointChanged { conn, old, new, .. } => {
            info!("IKE: {conn}: the peer moved from {old} to {new}");
            sockets.peer_moved(old, new);
            event_json(
                "ike.peer_moved",
                now,
                json!({"conn": conn, "old": old.to_string(), "new": new.to_string()}),
            )
        }
        other => {
            tracing::debug!("IKE: {other:?}");
            return failed;
        }
    };
    drop(st);
    control.publish(&[out]);
    failed
}
