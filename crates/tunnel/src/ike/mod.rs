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
//! Part 1 does not rekey: the negotiated lifetimes become soft limits (events), and the SAs
//! live until the peer deletes them or goes away.

use crate::control::Control;
use crate::tunnel::Tunnel;
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::Event;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Mutex;
use std::time::Duration;
use tracing::{info, warn};

mod keylog;
mod selectors;
mod sockets;
mod traps;

pub use keylog::KeyLog;
pub use selectors::{child_sas, range_prefixes, ChildSas};
pub use sockets::IkeSockets;
pub use traps::Traps;

/// The prefix of the names of the SAs IKE installs: a config reload leaves them alone.
pub const IKE_PREFIX: &str = "ike:";

/// How many received datagrams may wait for the IKE thread (more are dropped and counted).
const QUEUE: usize = 256;

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
    /// `ipsec ike initiate|terminate NAME`; the answer goes to `reply`.
    Command {
        /// `initiate` or `terminate`.
        op: String,
        /// The connection.
        conn: String,
        /// Where the answer goes.
        reply: mpsc::Sender<Result<Value, String>>,
    },
    /// The IKE SAs and their children as JSON, for `ipsec show`.
    List(mpsc::Sender<Value>),
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

/// The daemon's side of the IKE thread: a queue into it.
#[derive(Clone)]
pub struct IkeHandle {
    tx: SyncSender<Input>,
    dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl IkeHandle {
    /// A handle and the receiving end the IKE thread reads.
    pub fn new() -> (IkeHandle, Receiver<Input>) {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        (
            IkeHandle {
                tx,
                dropped: Default::default(),
            },
            rx,
        )
    }

    /// Queues a received datagram without blocking (the receiving threads must not wait);
    /// counts it when the queue is full.
    pub fn datagram(&self, local: SocketAddr, remote: SocketAddr, data: &[u8]) {
        let d = Input::Datagram {
            local,
            remote,
            data: data.to_vec(),
        };
        if self.tx.try_send(d).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks the IKE thread to start `conn`'s `child` for a trapped packet (never blocks).
    pub fn acquire(&self, conn: &str, child: &str, packet: ipsec_ike::PacketSelectors) {
        let a = Input::Acquire {
            conn: conn.into(),
            child: child.into(),
            packet,
        };
        if self.tx.try_send(a).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Datagrams dropped because the IKE thread was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Runs a control-socket request `op` (`ike.initiate`, `ike.terminate`, `ike.list`) and
    /// waits at most 2 s for the IKE thread's answer.
    pub fn request(&self, op: &str, conn: Option<&str>) -> Result<Value, String> {
        let wait = Duration::from_secs(2);
        let busy = || "the IKE thread did not answer".to_string();
        match op {
            "ike.list" => {
                let (tx, rx) = mpsc::channel();
                self.tx.send(Input::List(tx)).map_err(|_| busy())?;
                rx.recv_timeout(wait).map_err(|_| busy())
            }
            "ike.initiate" | "ike.terminate" => {
                let conn = conn.ok_or("`name`: the connection's name is needed")?;
                let (tx, rx) = mpsc::channel();
                self.tx
                    .send(Input::Command {
                        op: op.trim_start_matches("ike.").into(),
                        conn: conn.into(),
                        reply: tx,
                    })
                    .map_err(|_| busy())?;
                rx.recv_timeout(wait).map_err(|_| busy())?
            }
            other => Err(format!("unknown op `{other}`")),
        }
    }
}

fn event_json(kind: &str, now: Duration, mut fields: Value) -> Value {
    if let Value::Object(m) = &mut fields {
        m.insert("event".into(), kind.into());
        m.insert("time".into(), now.as_secs_f64().into());
    }
    fields
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
    inputs: &Receiver<Input>,
    keylog: Option<&KeyLog>,
    stop: &AtomicBool,
) {
    let mut rng = rand_core::OsRng;
    // The IKE SAs as the events reported them, for `ipsec show`.
    let status: Mutex<Vec<(ipsec_ike::IkeSaInfo, Vec<String>)>> = Mutex::new(Vec::new());
    let now = || t.now();
    endpoint.start(now(), &mut rng);
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        // Port 500: read what is there without waiting (the channel wait below is the sleep).
        for s in &sockets.ike {
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                if let Ok(local) = s.local_addr() {
                    if let Err(e) = endpoint.handle_datagram(now(), local, from, &buf[..n], &mut rng) {
                        tracing::debug!("IKE datagram from {from} dropped: {e}");
                    }
                }
            }
        }
        let wait = endpoint
            .poll_timeout()
            .map_or(Duration::from_millis(50), |d| d.saturating_sub(now()))
            .min(Duration::from_millis(50));
        match inputs.recv_timeout(wait) {
            Ok(Input::Datagram { local, remote, data }) => {
                if let Err(e) = endpoint.handle_datagram(now(), local, remote, &data, &mut rng) {
                    tracing::debug!("IKE datagram from {remote} on {local} dropped: {e}");
                }
            }
            Ok(Input::Command { op, conn, reply }) => {
                let r = match op.as_str() {
                    "initiate" => endpoint
                        .initiate(now(), &conn, &mut rng)
                        .map(|h| json!({"conn": conn, "spi": format!("{:016x}", h.0)})),
                    _ => endpoint
                        .terminate(now(), &conn, &mut rng)
                        .map(|()| json!({"conn": conn})),
                };
                let _ = reply.send(r.map_err(|e| format!("connection `{conn}`: {e}")));
            }
            Ok(Input::List(reply)) => {
                let st = status.lock().unwrap_or_else(|p| p.into_inner());
                let sas: Vec<Value> = st
                    .iter()
                    .map(|(i, children)| {
                        json!({
                            "conn": i.conn,
                            "spi_i": format!("{:016x}", i.spi_i),
                            "spi_r": format!("{:016x}", i.spi_r),
                            "role": format!("{:?}", i.role).to_lowercase(),
                            "local": i.local.to_string(),
                            "remote": i.remote.to_string(),
                            "local_id": format!("{:?}", i.local_id),
                            "remote_id": format!("{:?}", i.remote_id),
                            "nat": i.nat,
                            "suite": format!("{:?}", i.suite),
                            "children": children,
                        })
                    })
                    .collect();
                let _ = reply.send(json!({ "ike_sas": sas }));
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
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if endpoint.poll_timeout().is_some_and(|d| d <= now()) {
            endpoint.handle_timeout(now(), &mut rng);
        }
        while let Some(tx) = endpoint.poll_transmit() {
            if let Err(e) = sockets.send(&tx) {
                warn!("IKE: sending to {}: {e}", tx.remote);
            }
        }
        while let Some(ev) = endpoint.poll_event() {
            handle_event(t, control, sockets, ev, &status, keylog);
        }
    }
    // A clean stop deletes our IKE SAs (the peer removes its SAs at once instead of waiting
    // for its liveness checks).
    let names: Vec<String> = endpoint.config().connections.iter().map(|c| c.name.clone()).collect();
    for n in names {
        let _ = endpoint.terminate(now(), &n, &mut rng);
    }
    while let Some(tx) = endpoint.poll_transmit() {
        let _ = sockets.send(&tx);
    }
}

fn handle_event(
    t: &Tunnel,
    control: &Control,
    sockets: &IkeSockets<'_>,
    ev: Event,
    status: &Mutex<Vec<(ipsec_ike::IkeSaInfo, Vec<String>)>>,
    keylog: Option<&KeyLog>,
) {
    let now = t.now();
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
        Event::IkeDown {
            conn,
            spi_i,
            spi_r,
            reason,
        } => {
            info!("IKE: {conn} down ({reason:?})");
            let gone = st.iter().find(|(i, _)| i.spi_i == spi_i).map(|(i, _)| i.remote.ip());
            st.retain(|(i, _)| i.spi_i != spi_i);
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
            match child_sas(&c).and_then(|sas| control.ike_install(t, sas)) {
                Ok(()) => {
                    info!(
                        "IKE: {}/{} up: ESP in {:08x}, out {:08x}, {:?} <-> {:?}",
                        c.conn, c.child, c.spi_in, c.spi_out, c.local_ts, c.remote_ts
                    );
                    // Sealed packets go to where the peer's IKE messages come from (behind a
                    // NAT, not its configured address).
                    if !sockets.add_peer(c.remote, c.spi_out, c.spi_in) {
                        warn!(
                            "IKE: {}/{}: {} peers added already: packets to {} cannot go",
                            c.conn,
                            c.child,
                            crate::udp::MAX_DYNAMIC_PEERS,
                            c.remote
                        );
                    }
                    if let Some((_, ch)) = st.iter_mut().find(|(i, _)| i.conn == c.conn) {
                        ch.push(format!("{}: in {:08x}, out {:08x}", c.child, c.spi_in, c.spi_out));
                    }
                }
                Err(e) => warn!("IKE: {}/{}: installing the child SA failed: {e}", c.conn, c.child),
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
            let names = [
                format!("{IKE_PREFIX}{conn}/{child}/out-{spi_out:08x}"),
                format!("{IKE_PREFIX}{conn}/{child}/in-{spi_in:08x}"),
            ];
            control.ike_remove(t, &names);
            sockets.child_down(spi_in);
            info!("IKE: {conn}/{child} down ({reason:?}): its SAs and policies removed");
            if let Some((_, ch)) = st.iter_mut().find(|(i, _)| i.conn == conn) {
                ch.retain(|s| !s.starts_with(&format!("{child}: in {spi_in:08x}")));
            }
            event_json(
                "child.down",
                now,
                json!({"conn": conn, "child": child, "spi_in": format!("{spi_in:08x}"), "spi_out": format!("{spi_out:08x}"), "why": format!("{reason:?}")}),
            )
        }
        Event::AuthFailed { conn, local } => {
            warn!(
                "IKE: {conn}: authentication failed ({})",
                if local {
                    "we refused the peer"
                } else {
                    "the peer refused us"
                }
            );
            event_json(
                "ike.auth_failed",
                now,
                json!({"conn": conn, "by": if local { "us" } else { "peer" }}),
            )
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
            return;
        }
    };
    drop(st);
    control.publish(&[out]);
}
