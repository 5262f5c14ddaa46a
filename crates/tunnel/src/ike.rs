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
use ipsec_core::sa::{Keyed, Mode, Proto, SaParams, Tunnel as Endpoints};
use ipsec_core::{AeadAlg, EncAlg, IntegAlg};
use ipsec_engine::{Limits, PortRange, Prefix, SaConfig, Selector};
use ipsec_ike::alg::{Encr, Integ};
use ipsec_ike::ts::TrafficSelector;
use ipsec_ike::{ChildSaInfo, Event};
use serde_json::{json, Value};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Mutex;
use std::time::Duration;
use tracing::{info, warn};

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

/// The trap policies of the connections whose child has `start_action = trap`: a packet
/// matching one's selectors (local to remote) starts that connection, at most every
/// [`Traps::EVERY`] per child.
pub struct Traps {
    traps: Vec<(String, String, Vec<Selector>, std::sync::atomic::AtomicU64)>,
    start: std::time::Instant,
}

impl Traps {
    /// How often a trap may ask for the same child.
    pub const EVERY: Duration = Duration::from_millis(500);

    /// The traps of `config`'s trap children (none: `None`).
    pub fn of(config: &ipsec_ike::Config) -> Result<Option<Traps>, String> {
        let mut traps = Vec::new();
        for c in &config.connections {
            for ch in c
                .children
                .iter()
                .filter(|ch| ch.start_action == ipsec_ike::StartAction::Trap)
            {
                let l = if ch.local_ts.is_empty() {
                    vec![TrafficSelector::host(c.local_addr)]
                } else {
                    ch.local_ts.clone()
                };
                let r = match (&ch.remote_ts[..], c.remote_addr) {
                    ([], Some(a)) => vec![TrafficSelector::host(a)],
                    ([], None) => continue,
                    (r, _) => r.to_vec(),
                };
                let mut sel = Vec::new();
                for lt in &l {
                    for rt in &r {
                        sel.extend(selectors(lt, rt)?.into_iter().map(|(out, _)| out));
                    }
                }
                traps.push((c.name.clone(), ch.name.clone(), sel, Default::default()));
            }
        }
        Ok((!traps.is_empty()).then(|| Traps {
            traps,
            start: std::time::Instant::now(),
        }))
    }

    /// The connection and child whose trap `packet` matches, if it may ask now.
    pub fn matches(&self, packet: &[u8]) -> Option<(&str, &str, ipsec_ike::PacketSelectors)> {
        let flow = ipsec_engine::Flow::from_packet(packet).ok()?;
        let now = self.start.elapsed().as_millis() as u64;
        let (conn, child, _, last) = self
            .traps
            .iter()
            .find(|(_, _, sel, _)| sel.iter().any(|s| s.matches(&flow)))?;
        let prev = last.load(Ordering::Relaxed);
        if prev != 0 && now.saturating_sub(prev) < Self::EVERY.as_millis() as u64 {
            return None;
        }
        last.store(now.max(1), Ordering::Relaxed);
        Some((
            conn,
            child,
            ipsec_ike::PacketSelectors {
                src: flow.src,
                dst: flow.dst,
                protocol: flow.proto,
                src_port: flow.src_port.unwrap_or(0),
                dst_port: flow.dst_port.unwrap_or(0),
            },
        ))
    }
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

/// The engine's algorithms and keys for one direction of a child SA.
fn keyed(params: &mut SaParams, encr: Encr, integ: Option<Integ>, ek: &[u8], ik: &[u8]) -> Result<(), String> {
    match encr {
        Encr::AesGcm16_128 | Encr::AesGcm16_256 => params.aead = Some(Keyed::new(AeadAlg::AesGcm, ek, 16)),
        Encr::ChaCha20Poly1305 => params.aead = Some(Keyed::new(AeadAlg::ChaCha20Poly1305, ek, 16)),
        Encr::AesCbc128 | Encr::AesCbc256 => {
            params.enc = Some(Keyed::new(EncAlg::AesCbc, ek, 0));
            let (alg, icv) = match integ.ok_or("AES-CBC without an integrity algorithm")? {
                Integ::HmacSha256_128 => (IntegAlg::HmacSha256, 16),
                Integ::HmacSha384_192 => (IntegAlg::HmacSha384, 24),
                Integ::HmacSha512_256 => (IntegAlg::HmacSha512, 32),
            };
            params.integ = Some(Keyed::new(alg, ik, icv));
        }
    }
    Ok(())
}

/// The prefixes that cover the address range `start..=end` exactly (RFC 7296 traffic
/// selectors are ranges; the SPD takes prefixes). At most 256 (a pathological range is cut
/// there, and said so by `Err`).
pub fn range_prefixes(start: IpAddr, end: IpAddr) -> Result<Vec<Prefix>, String> {
    let (bits, lo, hi) = match (start, end) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (32u32, u32::from(a) as u128, u32::from(b) as u128),
        (IpAddr::V6(a), IpAddr::V6(b)) => (128u32, u128::from(a), u128::from(b)),
        _ => return Err("a traffic selector mixes IPv4 and IPv6".into()),
    };
    if lo > hi {
        return Err("a traffic selector's range is empty".into());
    }
    let addr = |v: u128| -> IpAddr {
        if bits == 32 {
            IpAddr::from((v as u32).to_be_bytes())
        } else {
            IpAddr::from(v.to_be_bytes())
        }
    };
    let mut out = Vec::new();
    let mut cur = lo;
    loop {
        // The largest block aligned at `cur` that stays within `hi`.
        let mut size = if cur == 0 { bits } else { cur.trailing_zeros().min(bits) };
        while size > 0 && (size >= 128 || cur + ((1u128 << size) - 1) > hi) {
            if size >= 128 && cur == 0 && hi == u128::MAX {
                break;
            }
            size -= 1;
        }
        out.push(Prefix::new(addr(cur), (bits - size) as u8).ok_or("bad prefix")?);
        if out.len() > 256 {
            return Err("a traffic selector needs more than 256 prefixes".into());
        }
        let last = if size >= 128 {
            u128::MAX
        } else {
            cur + ((1u128 << size) - 1)
        };
        if last >= hi {
            break;
        }
        cur = last + 1;
    }
    Ok(out)
}

/// The SPD selectors of one (local, remote) pair of traffic selectors: outbound (local →
/// remote) and inbound (remote → local).
fn selectors(l: &TrafficSelector, r: &TrafficSelector) -> Result<Vec<(Selector, Selector)>, String> {
    let ports = |t: &TrafficSelector| PortRange {
        lo: t.start_port,
        hi: t.end_port,
    };
    if l.protocol != r.protocol && l.protocol != 0 && r.protocol != 0 {
        return Ok(Vec::new());
    }
    let proto = [l.protocol, r.protocol].into_iter().find(|&p| p != 0);
    let mut v = Vec::new();
    for lp in range_prefixes(l.start, l.end)? {
        for rp in range_prefixes(r.start, r.end)? {
            let out = Selector {
                src: Some(lp),
                dst: Some(rp),
                proto,
                src_ports: ports(l),
                dst_ports: ports(r),
            };
            let inb = Selector {
                src: Some(rp),
                dst: Some(lp),
                proto,
                src_ports: ports(r),
                dst_ports: ports(l),
            };
            v.push((out, inb));
        }
    }
    Ok(v)
}

/// What one child SA pair installs.
pub struct ChildSas {
    /// The outbound SA.
    pub out: SaConfig,
    /// The inbound SA.
    pub inb: SaConfig,
    /// (outbound, inbound) selector pairs, one policy each way.
    pub selectors: Vec<(Selector, Selector)>,
}

/// The SAs and policy selectors of a negotiated child SA pair (sans-IO).
pub fn child_sas(c: &ChildSaInfo) -> Result<ChildSas, String> {
    if c.protocol != 50 {
        return Err(format!("protocol {} (only ESP)", c.protocol));
    }
    let name = |dir: &str, spi: u32| format!("{IKE_PREFIX}{}/{}/{dir}-{spi:08x}", c.conn, c.child);
    let (l, r) = (c.local.ip(), c.remote.ip());
    let sa = |dir: &str, spi: u32, src: IpAddr, dst: IpAddr, ek: &[u8], ik: &[u8]| -> Result<SaConfig, String> {
        let mut p = SaParams::new(Proto::Esp, spi);
        p.mode = match c.mode {
            ipsec_ike::Mode::Tunnel => Mode::Tunnel,
            ipsec_ike::Mode::Transport => Mode::Transport,
        };
        p.tunnel = Some(Endpoints { src, dst });
        p.esn = c.suite.esn;
        keyed(&mut p, c.suite.encr, c.suite.integ, ek, ik)?;
        let mut cfg = SaConfig::new(name(dir, spi), p, None);
        // Part 1 does not rekey: the negotiated lifetime is reported (a soft expiry event),
        // the SA stays until the peer deletes it or goes away.
        cfg.lifetime.soft = Limits {
            seconds: Some(c.lifetimes.rekey_time.as_secs().max(1)),
            bytes: (c.lifetimes.rekey_bytes > 0).then_some(c.lifetimes.rekey_bytes),
            packets: (c.lifetimes.rekey_packets > 0).then_some(c.lifetimes.rekey_packets),
        };
        cfg.encap = c.encap.map(|e| {
            let (sport, dport) = if dir == "out" {
                (e.local_port, e.remote_port)
            } else {
                (e.remote_port, e.local_port)
            };
            ipsec_engine::UdpEncap { sport, dport, oa: None }
        });
        Ok(cfg)
    };
    let out = sa("out", c.spi_out, l, r, &c.encr_out, &c.integ_out)?;
    let inb = sa("in", c.spi_in, r, l, &c.encr_in, &c.integ_in)?;
    let mut sel = Vec::new();
    for lt in &c.local_ts {
        for rt in &c.remote_ts {
            sel.extend(selectors(lt, rt)?);
        }
    }
    if sel.is_empty() {
        return Err("the traffic selectors leave nothing to protect".into());
    }
    Ok(ChildSas {
        out,
        inb,
        selectors: sel,
    })
}

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
    fn peer_moved(&self, peer: IpAddr, to: SocketAddr) {
        use crate::underlay::UnderlayRx;
        for (u, _) in &self.natt {
            u.authenticated(peer, to);
        }
    }

    /// A child SA with `peer` is up, its IKE messages from `at`: sealed packets to it go
    /// there, and a peer not configured (a connection with `remote_addrs = %any`) joins the
    /// ESP-in-UDP sockets' peers. `false`: no room for another such peer.
    fn add_peer(&self, peer: IpAddr, at: SocketAddr) -> bool {
        self.natt
            .iter()
            .filter(|(_, l)| l.is_ipv4() == peer.is_ipv4())
            .all(|(u, _)| u.add_peer(peer, at))
    }

    /// `peer`'s last IKE SA is gone: a peer IKE added leaves the sockets' peers again.
    fn remove_peer(&self, peer: IpAddr) {
        for (u, _) in &self.natt {
            u.remove_peer(peer);
        }
    }

    fn send(&self, t: &ipsec_ike::Transmit) -> std::io::Result<()> {
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

/// The Wireshark key log (`--keylog DIR`): appends to `DIR/ikev2_decryption_table` and
/// `DIR/esp_sa`, mode 0600.
pub struct KeyLog {
    dir: PathBuf,
}

impl KeyLog {
    /// Opens (creates) the directory's tables, warning loudly.
    pub fn new(dir: PathBuf) -> std::io::Result<KeyLog> {
        std::fs::create_dir_all(&dir)?;
        warn!(
            "--keylog {}: EVERY IKE AND ESP KEY IS WRITTEN THERE (Wireshark's ikev2_decryption_table and esp_sa): anyone who reads it decrypts this host's traffic; for tests and debugging only",
            dir.display()
        );
        Ok(KeyLog { dir })
    }

    fn append(&self, file: &str, lines: &[String]) {
        use std::os::unix::fs::OpenOptionsExt;
        let p = self.dir.join(file);
        let r = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)
            .and_then(|mut f| lines.iter().try_for_each(|l| writeln!(f, "{l}")));
        if let Err(e) = r {
            warn!("--keylog: writing {}: {e}", p.display());
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
                    if !sockets.add_peer(c.remote.ip(), c.remote) {
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
            sockets.peer_moved(old.ip(), new);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_become_the_prefixes_that_cover_them_exactly() {
        let p = |a: &str, b: &str| -> Vec<String> {
            range_prefixes(ip(a), ip(b))
                .unwrap()
                .iter()
                .map(|p| format!("{}/{}", p.addr(), p.len()))
                .collect()
        };
        assert_eq!(p("10.1.0.0", "10.1.255.255"), ["10.1.0.0/16"]);
        assert_eq!(p("10.0.0.1", "10.0.0.1"), ["10.0.0.1/32"]);
        assert_eq!(p("0.0.0.0", "255.255.255.255"), ["0.0.0.0/0"]);
        assert_eq!(
            p("10.0.0.1", "10.0.0.6"),
            ["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"]
        );
        assert_eq!(p("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), ["::/0"]);
        assert_eq!(p("fd00::", "fd00::ffff:ffff:ffff:ffff"), ["fd00::/64"]);
        assert!(range_prefixes(ip("10.0.0.2"), ip("10.0.0.1")).is_err());
        assert!(range_prefixes(ip("10.0.0.1"), ip("fd00::1")).is_err());
        // Every address of an odd range is covered once, and nothing else.
        let v = range_prefixes(ip("10.0.0.3"), ip("10.0.1.17")).unwrap();
        for x in 0u32..1024 {
            let a = IpAddr::from((u32::from_be_bytes([10, 0, 0, 0]) + x).to_be_bytes());
            let n = v.iter().filter(|p| p.contains(a)).count();
            assert_eq!(n, usize::from((3..=256 + 17).contains(&x)), "{a}");
        }
    }
}

#[cfg(test)]
mod child_tests {
    use super::*;
    use ipsec_ike::alg::ChildSuite;

    fn ts(s: &str) -> TrafficSelector {
        TrafficSelector::from_str_config(s).unwrap()
    }

    fn info(encr: Encr, integ: Option<Integ>, ek: usize, ik: usize) -> ChildSaInfo {
        ChildSaInfo {
            conn: "gw".into(),
            child: "net".into(),
            protocol: 50,
            spi_in: 0xc000_0001,
            spi_out: 0xc000_0002,
            suite: ChildSuite { encr, integ, esn: true },
            mode: ipsec_ike::Mode::Tunnel,
            local_ts: vec![ts("10.1.0.0/16")],
            remote_ts: vec![ts("10.2.0.0/24"), ts("10.3.0.1")],
            lifetimes: Default::default(),
            encap: Some(ipsec_ike::UdpEncap {
                local_port: 4500,
                remote_port: 31000,
            }),
            local: "192.0.2.1:4500".parse().unwrap(),
            remote: "198.51.100.2:31000".parse().unwrap(),
            initiator: true,
            encr_out: zeroize::Zeroizing::new(vec![1; ek]),
            integ_out: zeroize::Zeroizing::new(vec![2; ik]),
            encr_in: zeroize::Zeroizing::new(vec![3; ek]),
            integ_in: zeroize::Zeroizing::new(vec![4; ik]),
        }
    }

    /// A negotiated child becomes two ESP SAs with the right keys per direction, ports
    /// mirrored, ESN kept, and one policy per selector pair each way.
    #[test]
    fn a_child_becomes_two_sas_and_a_policy_per_selector_pair() {
        let c = child_sas(&info(Encr::AesGcm16_128, None, 20, 0)).unwrap();
        assert_eq!(c.out.name, "ike:gw/net/out-c0000002");
        assert_eq!(c.inb.name, "ike:gw/net/in-c0000001");
        let (o, i) = (&c.out.params, &c.inb.params);
        assert_eq!((o.spi, i.spi), (0xc000_0002, 0xc000_0001));
        assert_eq!(
            o.aead.as_ref().map(|k| (k.alg, &k.key[..], k.icv_len)),
            Some((AeadAlg::AesGcm, &[1u8; 20][..], 16))
        );
        assert_eq!(i.aead.as_ref().map(|k| &k.key[..]), Some(&[3u8; 20][..]));
        assert!(o.esn && i.esn);
        let t = o.tunnel.unwrap();
        assert_eq!((t.src, t.dst), (ip("192.0.2.1"), ip("198.51.100.2")));
        assert_eq!(i.tunnel.unwrap().src, ip("198.51.100.2"));
        let (eo, ei) = (c.out.encap.unwrap(), c.inb.encap.unwrap());
        assert_eq!((eo.sport, eo.dport, ei.sport, ei.dport), (4500, 31000, 31000, 4500));
        assert_eq!(c.selectors.len(), 2);
        let (out, inb) = &c.selectors[1];
        assert_eq!(out.src.unwrap().to_string(), "10.1.0.0/16");
        assert_eq!(out.dst.unwrap().to_string(), "10.3.0.1/32");
        assert_eq!((inb.src, inb.dst), (out.dst, out.src));
        assert_eq!(c.out.lifetime.soft.seconds, Some(3600));
        assert_eq!(
            c.out.lifetime.hard.seconds, None,
            "part 1 does not rekey: no hard limit"
        );
        // The engine accepts them.
        let mut e = ipsec_engine::Engine::new();
        e.add_sa(c.out, Duration::ZERO).unwrap();
        e.add_sa(c.inb, Duration::ZERO).unwrap();
    }

    #[test]
    fn cbc_children_get_their_hmac_truncation() {
        for (integ, alg, icv, ik) in [
            (Integ::HmacSha256_128, IntegAlg::HmacSha256, 16, 32),
            (Integ::HmacSha384_192, IntegAlg::HmacSha384, 24, 48),
            (Integ::HmacSha512_256, IntegAlg::HmacSha512, 32, 64),
        ] {
            let c = child_sas(&info(Encr::AesCbc256, Some(integ), 32, ik)).unwrap();
            let p = &c.out.params;
            assert_eq!(p.enc.as_ref().map(|k| (k.alg, k.key.len())), Some((EncAlg::AesCbc, 32)));
            assert_eq!(
                p.integ.as_ref().map(|k| (k.alg, k.icv_len, k.key.len())),
                Some((alg, icv, ik))
            );
            let mut e = ipsec_engine::Engine::new();
            e.add_sa(c.out, Duration::ZERO).unwrap();
        }
        let c = child_sas(&info(Encr::ChaCha20Poly1305, None, 36, 0)).unwrap();
        assert_eq!(
            c.out.params.aead.as_ref().map(|k| k.alg),
            Some(AeadAlg::ChaCha20Poly1305)
        );
        assert!(
            child_sas(&info(Encr::AesCbc128, None, 16, 0)).is_err(),
            "CBC needs integrity"
        );
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
}

#[cfg(test)]
mod trap_tests {
    use super::*;

    fn udp(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut out = Vec::new();
        etherparse::PacketBuilder::ipv4(src, dst, 64)
            .udp(4000, 53)
            .write(&mut out, b"x")
            .unwrap();
        out
    }

    /// A packet from the local selectors to the remote ones asks for its connection and
    /// child (with its own selectors), at most once per `Traps::EVERY`; others do not.
    #[test]
    fn a_trap_matches_its_selectors_and_asks_at_a_bounded_rate() {
        let psk = ipsec_ike::Psk::new(b"k");
        let id = ipsec_ike::Identity::from_str_config("a").unwrap();
        let mut c = ipsec_ike::Connection::new(
            "gw",
            "192.0.2.1".parse().unwrap(),
            Some("192.0.2.2".parse().unwrap()),
            id,
            None,
            psk,
            "aes128gcm16-prfsha256-x25519",
        )
        .unwrap();
        let mut ch = ipsec_ike::ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes128gcm16").unwrap();
        ch.start_action = ipsec_ike::StartAction::Trap;
        c.children.push(ch);
        let mut none = c.clone();
        none.children[0].start_action = ipsec_ike::StartAction::Start;
        assert!(Traps::of(&ipsec_ike::Config::new(vec![none])).unwrap().is_none());
        let traps = Traps::of(&ipsec_ike::Config::new(vec![c])).unwrap().unwrap();
        let p = udp([10, 1, 0, 5], [10, 2, 3, 4]);
        let (conn, child, sel) = traps.matches(&p).expect("matches");
        assert_eq!((conn, child), ("gw", "net"));
        assert_eq!(
            (sel.src, sel.dst, sel.protocol, sel.dst_port),
            (ip("10.1.0.5"), ip("10.2.3.4"), 17, 53)
        );
        assert!(traps.matches(&p).is_none(), "again at once: rate-limited");
        assert!(
            traps.matches(&udp([10, 2, 0, 5], [10, 1, 3, 4])).is_none(),
            "the other way"
        );
        assert!(traps.matches(&udp([10, 3, 0, 5], [10, 2, 3, 4])).is_none(), "outside");
        assert!(traps.matches(b"\x45garbage").is_none());
        std::thread::sleep(Traps::EVERY + Duration::from_millis(20));
        assert!(traps.matches(&p).is_some(), "after the interval");
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
}
