//! The daemon: opens the multi-queue TUN device and the sockets, runs one outbound thread
//! per worker (its TUN queue), one inbound thread per worker's UDP socket (ESP in UDP) and
//! one per raw socket, ticks once a second on the calling thread (engine
//! lifetimes, events logged, the stats file rewritten) and stops cleanly when the stop flag is
//! set: every loop wakes at least every [`WAIT`] to look at it, the threads are joined, and
//! the final counters are written before [`run`] returns.

use crate::control::{Control, ControlSocket};
use crate::raw::{RawRx, RawTx};
use crate::stats;
use crate::sys;
use crate::tun::{Tun, TunIo};
use crate::tunnel::{inbound_protocols, run_inbound, run_outbound, tun_mtu_for, Report, Tunnel};
use crate::udp::UdpEncap;
use crate::underlay::{ByFamily, UnderlayRx, UnderlayTx};
use ipsec_engine::udp_encap;
use ipsec_engine::Engine;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often the ticker runs.
pub const TICK: Duration = Duration::from_secs(1);
/// The longest a device read waits before its loop looks at the stop flag again.
pub const WAIT: Duration = Duration::from_millis(200);
/// The underlay MTU assumed when choosing the TUN MTU.
pub const UNDERLAY_MTU: u32 = 1500;
/// The TUN MTU when there is no outbound bundle to compute it from.
pub const FALLBACK_MTU: u32 = 1400;

/// What the daemon needs besides the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The TUN device's name (`%d` lets the kernel pick a number).
    pub tun: String,
    /// The TUN MTU; `None`: the largest inner packet every outbound bundle fits into an
    /// `underlay_mtu`-byte packet ([`tun_mtu_for`]).
    pub mtu: Option<u32>,
    /// The underlay's MTU, for the default TUN MTU.
    pub underlay_mtu: u32,
    /// This host's underlay addresses, at most one per IP version: the sockets of that
    /// version are bound to it (IPv6 and ESP in UDP need one, see
    /// [`ipsec_config::check_underlay`]).
    pub local: Vec<IpAddr>,
    /// The peers' underlay addresses, IPv4 or IPv6: sealed packets go to the one their
    /// outermost SA tunnels to; to any other address they are dropped. Empty: any address.
    pub peers: Vec<IpAddr>,
    /// Where to write the counters as JSON every tick.
    pub stats: Option<PathBuf>,
    /// The control socket's path (`None`: no control socket).
    pub control: Option<PathBuf>,
    /// A command run (by `sh -c`) with each event's JSON on its standard input.
    pub on_event: Option<String>,
    /// ESP in UDP (RFC 3948), `(source port, destination port)`: ESP goes in UDP datagrams
    /// from `local:sport` to each `peer:dport` (NAT-keepalives every 20 s to each, each
    /// peer's endpoint learned from packets its own SAs authenticated). Needs a peer and a
    /// local address of each peer's IP version. `None`: raw ESP.
    pub udp_encap: Option<(u16, u16)>,
    /// Worker threads, each with its own TUN queue, [`Worker`](ipsec_engine::Worker) and (ESP
    /// in UDP) UDP socket; 0: one per available core.
    pub workers: usize,
    /// Ask for TUN offloads (IFF_VNET_HDR, TSO4/TSO6, checksum): TCP super-packets read and
    /// segmented, opened packets coalesced; plain reads if the kernel refuses.
    pub offload: bool,
    /// The config file SIGHUP reloads ([`Control::reload`]); `None`: SIGHUP is not handled.
    pub reload: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tun: "ipsec0".into(),
            mtu: None,
            underlay_mtu: UNDERLAY_MTU,
            local: Vec::new(),
            peers: Vec::new(),
            stats: None,
            control: None,
            on_event: None,
            udp_encap: None,
            workers: 0,
            offload: true,
            reload: None,
        }
    }
}

fn context(what: String) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A flag that SIGINT and SIGTERM set (the signal handler does nothing else); a second
/// signal while it is already set ends the process with status 1, for a stop that hangs.
pub fn stop_on_signals() -> io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// Logs to standard error at `level` (`error`, `warn`, `info`, `debug`, `trace`).
pub fn init_logging(level: &str) -> Result<(), String> {
    let level: tracing::Level = level
        .parse()
        .map_err(|_| format!("bad log level `{level}`: use error, warn, info, debug or trace"))?;
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(io::stderr)
        .with_target(false)
        .try_init()
        .map_err(|e| e.to_string())
}

/// IKEv2 for the daemon ([`crate::ike`]): the endpoint's configuration and the key log.
pub struct IkeSetup {
    /// The connections (ports: 500, and the ESP-in-UDP port for NAT-T).
    pub config: ipsec_ike::Config,
    /// `--keylog DIR`: Wireshark's key tables (off by default).
    pub keylog: Option<PathBuf>,
}

/// Runs the daemon until `stop` is set; returns the final counters (also written to the
/// stats file). Fails only while setting up (device, sockets, interface settings).
pub fn run(engine: Engine, opts: &Options, stop: &AtomicBool) -> io::Result<Report> {
    run_with_ike(engine, opts, None, stop)
}

/// [`run`], with IKEv2 when `ike` is given: UDP port 500 is bound on the local addresses, the
/// ESP-in-UDP sockets (which must be configured: `opts.udp_encap`) hand their non-ESP
/// datagrams to the IKE thread, which installs the child SAs it negotiates.
pub fn run_with_ike(engine: Engine, opts: &Options, ike: Option<IkeSetup>, stop: &AtomicBool) -> io::Result<Report> {
    let protocols = inbound_protocols(&engine);
    if protocols.is_empty() {
        warn!("no inbound policy protects anything: nothing will be received from the peer");
    }
    // ESP in UDP puts an 8-byte UDP header before each ESP header (RFC 3948).
    let underlay = opts.underlay_mtu as usize - if opts.udp_encap.is_some() { 8 } else { 0 };
    let mtu = opts
        .mtu
        .unwrap_or_else(|| tun_mtu_for(&engine, underlay).map_or(FALLBACK_MTU, |m| m as u32));
    let workers = match opts.workers {
        0 => thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let tuns = Tun::open_queues(&opts.tun, workers, opts.offload, WAIT)
        .map_err(context(format!("creating TUN device {}", opts.tun)))?;
    let name = tuns[0].name().to_string();
    sys::set_mtu(&name, mtu)?;
    sys::set_up(&name)?;
    ipsec_config::check_underlay(&opts.local, &opts.peers, opts.udp_encap.is_some())
        .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    let local4 = opts.local.iter().find_map(|a| match a {
        IpAddr::V4(a) => Some(*a),
        IpAddr::V6(_) => None,
    });
    let local6 = opts.local.iter().find_map(|a| match a {
        IpAddr::V6(a) => Some(*a),
        IpAddr::V4(_) => None,
    });
    let (want4, want6) = underlay_versions(&engine, &opts.local, &opts.peers);
    let local6 = match (want6, local6) {
        (false, _) => Ipv6Addr::UNSPECIFIED, // no IPv6 socket is opened
        (true, Some(a)) => a,
        (true, None) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the SAs tunnel to IPv6 addresses: an IPv6 underlay needs an IPv6 local address ([tunnel] local)",
            ))
        }
    };
    let peers_of = |v6: bool| -> Vec<IpAddr> { opts.peers.iter().copied().filter(|p| p.is_ipv6() == v6).collect() };
    let mut udp4 = None;
    let mut udp6 = None;
    if let Some((sport, dport)) = opts.udp_encap {
        for (want, v6, slot) in [(want4, false, &mut udp4), (want6, true, &mut udp6)] {
            let peers = peers_of(v6);
            if !want || peers.is_empty() {
                continue;
            }
            let local = if v6 {
                IpAddr::V6(local6)
            } else {
                IpAddr::V4(local4.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "ESP in UDP needs an IPv4 local address")
                })?)
            };
            *slot = Some(
                UdpEncap::open_group(local, sport, &peers, dport, workers, WAIT)
                    .map_err(context(format!("opening UDP port {sport} on {local} for ESP in UDP")))?,
            );
        }
    }
    let udp = opts.udp_encap.is_some();
    let raw_tx4 = match want4 && !udp {
        true => Some(RawTx::open().map_err(context("opening the raw IPv4 sending socket".into()))?),
        false => None,
    };
    let raw_tx6 = match want6 && !udp {
        true => Some(RawTx::open_v6().map_err(context(
            "opening the raw IPv6 sending socket (IPV6_HDRINCL: Linux 4.5 or later)".into(),
        ))?),
        false => None,
    };
    // With ESP in UDP, ESP arrives on the UDP sockets; AH and IPComp still on raw sockets.
    let raw_protocols: Vec<u8> = protocols.iter().copied().filter(|&p| !udp || p != 50).collect();
    let mut rxs = Vec::new();
    for &p in &raw_protocols {
        if want4 {
            rxs.push(
                RawRx::open(p, local4, WAIT)
                    .map_err(context(format!("opening the raw IPv4 socket for protocol {p}")))?,
            );
        }
        if want6 {
            rxs.push(
                RawRx::open_v6(p, local6, WAIT)
                    .map_err(context(format!("opening the raw IPv6 socket for protocol {p}")))?,
            );
        }
    }
    let list = |a: &[IpAddr]| match a {
        [] => "any".to_string(),
        a => a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "),
    };
    info!(
        "tunneld: {name} up with MTU {mtu}, {workers} workers, offloads {}; underlay {} -> {} (IPv4 {}, IPv6 {}); receiving IP protocols {protocols:?}{}",
        if tuns[0].offload() { "on" } else { "off" },
        list(&opts.local),
        list(&opts.peers),
        if want4 { "on" } else { "off" },
        if want6 { "on" } else { "off" },
        opts.udp_encap
            .map_or(String::new(), |(s, d)| format!("; ESP in UDP {s} -> {d}")),
    );
    let control = Control::new(&engine, opts.on_event.clone());
    let socket = match &opts.control {
        Some(p) => {
            Some(ControlSocket::bind(p).map_err(context(format!("binding the control socket {}", p.display())))?)
        }
        None => None,
    };
    let mut tunnel = Tunnel::new(engine, opts.peers.clone());
    let mut ike_parts = None;
    if let Some(setup) = ike {
        let Some((sport, _)) = opts.udp_encap else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "IKE needs the ESP-in-UDP sockets (its child SAs go in UDP)",
            ));
        };
        let (handle, inputs) = crate::ike::IkeHandle::new();
        let locals: Vec<IpAddr> = [local4.map(IpAddr::V4), (want6).then_some(IpAddr::V6(local6))]
            .into_iter()
            .flatten()
            .collect();
        let mut sockets = Vec::new();
        for &l in &locals {
            let s = std::net::UdpSocket::bind(SocketAddr::new(l, setup.config.ike_port)).map_err(context(format!(
                "binding UDP port {} on {l} for IKE",
                setup.config.ike_port
            )))?;
            s.set_nonblocking(true)?;
            sockets.push(s);
        }
        let h = handle.clone();
        let (l4, l6) = (local4, local6);
        tunnel.set_non_esp(Box::new(move |d: &[u8], from: SocketAddr| {
            let local = match from {
                SocketAddr::V4(_) => SocketAddr::new(IpAddr::V4(l4.unwrap_or(Ipv4Addr::UNSPECIFIED)), sport),
                SocketAddr::V6(_) => SocketAddr::new(IpAddr::V6(l6), sport),
            };
            h.datagram(local, from, d);
        }));
        let keylog = match &setup.keylog {
            Some(d) => Some(crate::ike::KeyLog::new(d.clone()).map_err(context(format!("--keylog {}", d.display())))?),
            None => None,
        };
        let mut config = setup.config;
        config.natt_port = sport;
        config.export_ike_keys = keylog.is_some();
        info!(
            "IKE: {} connection(s), UDP {} and {sport} on {}",
            config.connections.len(),
            config.ike_port,
            list(&locals)
        );
        ike_parts = Some((handle, inputs, sockets, keylog, ipsec_ike::Endpoint::new(config)));
    }
    // Worker i: TUN queue i -> engine -> its sender (per IP version); its UDP sockets (ESP in
    // UDP) -> engine -> TUN queue i. Raw sockets (one per protocol and version: each raw
    // socket gets a copy of every packet, so they cannot be spread) write to queue 0.
    fn sender<'a>(udp: &'a Option<Vec<UdpEncap>>, raw: &'a Option<RawTx>, i: usize) -> Option<&'a dyn UnderlayTx> {
        match (udp, raw) {
            (Some(u), _) => Some(&u[i] as &dyn UnderlayTx),
            (None, Some(r)) => Some(r as &dyn UnderlayTx),
            (None, None) => None,
        }
    }
    let txs: Vec<ByFamily> = (0..workers)
        .map(|i| ByFamily {
            v4: sender(&udp4, &raw_tx4, i),
            v6: sender(&udp6, &raw_tx6, i),
        })
        .collect();
    let mut readers: Vec<(String, &dyn UnderlayRx, &Tun)> = rxs
        .iter()
        .map(|rx| {
            let v = if rx.is_v6() { "6" } else { "" };
            (format!("underlay{v}-{}", rx.proto()), rx as &dyn UnderlayRx, &tuns[0])
        })
        .collect();
    for (v, group) in [("", &udp4), ("6", &udp6)] {
        if let Some(u) = group {
            for (i, (s, q)) in u.iter().zip(&tuns).enumerate() {
                readers.push((format!("underlay-udp{v}-{i}"), s, q));
            }
        }
    }
    let udp_firsts: Vec<&UdpEncap> = [&udp4, &udp6].into_iter().flatten().map(|g| &g[0]).collect();
    let hup = Arc::new(AtomicBool::new(false));
    let hup_id = match &opts.reload {
        Some(_) => Some(signal_hook::flag::register(
            signal_hook::consts::SIGHUP,
            Arc::clone(&hup),
        )?),
        None => None,
    };
    let reload = opts.reload.as_deref().map(|path| Reload {
        path,
        flag: &hup,
        peers: &opts.peers,
        protocols: &protocols,
    });
    let spawned = thread::scope(|s| -> io::Result<()> {
        let t = &tunnel;
        let mut result = Ok(());
        for (i, (tun, tx)) in tuns.iter().zip(&txs).enumerate() {
            if result.is_err() {
                break;
            }
            result = thread::Builder::new()
                .name(format!("tun-{i}"))
                .spawn_scoped(s, move || run_outbound(t, tun, tx, stop))
                .map(drop);
        }
        for (thread_name, rx, tun) in readers {
            if result.is_err() {
                break;
            }
            result = thread::Builder::new()
                .name(thread_name)
                .spawn_scoped(s, move || run_inbound(t, rx, tun, stop))
                .map(drop);
        }
        if result.is_err() {
            // Let the threads already started end, so the scope can.
            stop.store(true, Ordering::Relaxed);
            return result;
        }
        if let Some((handle, inputs, sockets, keylog, endpoint)) = ike_parts.take() {
            control.set_ike(handle);
            let c = &control;
            let natt: Vec<(&UdpEncap, IpAddr)> = [&udp4, &udp6]
                .into_iter()
                .flatten()
                .map(|g| (&g[0], g[0].local()))
                .collect();
            result = thread::Builder::new()
                .name("ike".into())
                .spawn_scoped(s, move || {
                    let socks = crate::ike::IkeSockets { ike: sockets, natt };
                    crate::ike::run(t, c, endpoint, &socks, &inputs, keylog.as_ref(), stop)
                })
                .map(drop);
            if result.is_err() {
                stop.store(true, Ordering::Relaxed);
                return result;
            }
        }
        if let Some(sock) = &socket {
            let c = &control;
            result = thread::Builder::new()
                .name("control".into())
                .spawn_scoped(s, move || sock.serve(t, c, stop))
                .map(drop);
            if result.is_err() {
                stop.store(true, Ordering::Relaxed);
                return result;
            }
        }
        ticker(
            t,
            opts.stats.as_deref(),
            Some(&control),
            reload.as_ref(),
            &udp_firsts,
            stop,
        );
        Ok(())
    });
    if let Some(id) = hup_id {
        signal_hook::low_level::unregister(id);
    }
    spawned?;
    let (mut report, _) = tunnel.tick();
    add_endpoints(&mut report, &udp_firsts);
    if let Some(p) = &opts.stats {
        if let Err(e) = stats::write_json(p, &report) {
            warn!("writing {}: {e}", p.display());
        }
    }
    let d = &report.daemon;
    info!(
        "tunneld: stopped; {} packets sealed and sent, {} received and opened; {} dropped by the engine, {} by the daemon, {} I/O errors",
        d.underlay_tx_packets,
        d.tun_tx_packets,
        d.engine_in_drops + d.engine_out_drops,
        d.not_ip + d.bypass_dropped + d.not_to_peer,
        d.tun_read_errors + d.tun_write_errors + d.underlay_recv_errors + d.underlay_send_errors,
    );
    Ok(report)
}

/// SIGHUP's config reload: the file, the flag the signal sets, what it is checked against.
struct Reload<'a> {
    path: &'a Path,
    flag: &'a AtomicBool,
    peers: &'a [IpAddr],
    /// The IP protocols the raw sockets opened at start-up receive.
    protocols: &'a [u8],
}

impl Reload<'_> {
    fn run_if_asked(&self, t: &Tunnel, control: Option<&Control>) {
        let Some(c) = control else { return };
        if !self.flag.swap(false, Ordering::AcqRel) {
            return;
        }
        info!("SIGHUP: reloading {}", self.path.display());
        if c.reload(t, self.path, self.peers).is_ok() {
            let now = inbound_protocols(&t.engine());
            if now.iter().any(|p| !self.protocols.contains(p)) {
                warn!(
                    "the reloaded config receives IP protocols {now:?}, but the raw sockets opened at start receive {:?}: restart tunneld to receive the others",
                    self.protocols
                );
            }
        }
    }
}

/// The IP versions the underlay needs, `(IPv4, IPv6)`: the peers' when any are given; else
/// those of the addresses the SAs tunnel to (outbound bundles' outer destinations, inbound
/// SAs' destinations) and of the local addresses; IPv4 when there are none.
fn underlay_versions(engine: &Engine, local: &[IpAddr], peers: &[IpAddr]) -> (bool, bool) {
    let mut v = (false, false);
    let mut note = |a: &IpAddr| match a {
        IpAddr::V4(_) => v.0 = true,
        IpAddr::V6(_) => v.1 = true,
    };
    if !peers.is_empty() {
        peers.iter().for_each(&mut note);
    } else {
        local.iter().for_each(&mut note);
        let plane = engine.data_plane();
        for p in plane.spd().policies() {
            let ipsec_engine::Action::Protect(ids) = &p.action else {
                continue;
            };
            for id in ids {
                if let Some(t) = plane.sad().get(*id).and_then(|e| e.config.params.tunnel) {
                    // Outbound: the peer's address; inbound: ours. Either way, a version in use.
                    note(&t.dst);
                }
            }
        }
    }
    if v == (false, false) {
        v.0 = true;
    }
    v
}

/// Fills in each peer's ESP-in-UDP endpoint in `report` from the socket groups (one socket
/// of each), and the groups' UDP GSO/GRO tallies.
fn add_endpoints(report: &mut Report, udp: &[&UdpEncap]) {
    for (peer, endpoint, learned) in udp.iter().flat_map(|u| u.endpoints()) {
        if let Some(r) = report.peers.iter_mut().find(|r| r.peer == peer) {
            r.endpoint = Some(endpoint);
            r.learned = Some(learned);
        }
    }
    let d = &mut report.daemon;
    for r in udp.iter().map(|u| u.runs()) {
        d.udp_gso_sends += r.gso_sends;
        d.udp_gso_datagrams += r.gso_datagrams;
        d.udp_gro_reads += r.gro_reads;
        d.udp_gro_datagrams += r.gro_datagrams;
    }
}

/// Every [`TICK`] until `stop`: lifetimes and events (handed to the control socket), and the
/// stats file (with each peer's ESP-in-UDP endpoint); a reload as soon as SIGHUP asks for
/// one; with ESP in UDP, a NAT-keepalive to every peer every
/// [`udp_encap::KEEPALIVE_INTERVAL_SECS`] (the first right away).
fn ticker(
    t: &Tunnel,
    stats_path: Option<&Path>,
    control: Option<&Control>,
    reload: Option<&Reload>,
    udp: &[&UdpEncap],
    stop: &AtomicBool,
) {
    let mut failures: u64 = 0;
    let mut next_keepalive = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next_keepalive {
            next_keepalive = Instant::now() + Duration::from_secs(udp_encap::KEEPALIVE_INTERVAL_SECS);
            for u in udp {
                let (sent, err) = u.send_keepalives();
                crate::counters::add(&t.counters().udp_keepalives_tx, sent as u64);
                if let Some(e) = err {
                    warn!("sending a NAT-keepalive: {e}");
                }
            }
        }
        let (mut report, events) = t.tick();
        add_endpoints(&mut report, udp);
        if let Some(c) = control {
            c.tick(t, &events);
        }
        if let Some(p) = stats_path {
            match stats::write_json(p, &report) {
                Ok(()) => failures = 0,
                Err(e) => {
                    failures += 1;
                    if failures.is_power_of_two() {
                        warn!("writing {}: {e} ({failures} times in a row)", p.display());
                    }
                }
            }
        }
        let until = Instant::now() + TICK;
        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
            if let Some(r) = reload {
                r.run_if_asked(t, control);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logging_levels_are_checked() {
        assert!(init_logging("loud").unwrap_err().contains("bad log level"));
    }

    #[test]
    fn setup_errors_name_what_failed() {
        // A name the kernel would truncate is refused before anything is created.
        let opts = Options {
            tun: "a-name-far-too-long".into(),
            ..Options::default()
        };
        let e = run(Engine::new(), &opts, &AtomicBool::new(true)).unwrap_err();
        assert!(e.to_string().contains("creating TUN device a-name-far-too-long"), "{e}");
    }

    #[test]
    fn ticker_writes_stats_until_stopped() {
        let dir = std::env::temp_dir().join(format!("tunnel-ticker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        let t = Tunnel::new(Engine::new(), Vec::new());
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| ticker(&t, Some(&p), None, None, &[], &stop));
            let t0 = Instant::now();
            while !p.exists() && t0.elapsed() < Duration::from_secs(5) {
                thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, Ordering::Relaxed);
        });
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["daemon"]["tun_rx_packets"], 0);
        assert!(v["engine"]["sas"].as_array().unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
