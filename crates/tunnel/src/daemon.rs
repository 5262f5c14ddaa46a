//! The daemon: opens the multi-queue TUN device and the sockets, runs one outbound thread
//! per worker (its TUN queue), one inbound thread per worker's UDP socket (ESP in UDP) and
//! one per raw socket, ticks once a second on the calling thread (engine
//! lifetimes, events logged, the stats file rewritten) and stops cleanly when the stop flag is
//! set: every loop wakes at least every [`WAIT`] to look at it, the threads are joined, and
//! the final counters are written before [`run`] returns.

use crate::control::{Control, ControlSocket};
use crate::encap;
use crate::stats;
use crate::sys::{self, RawRx, RawTx, Tun, UdpEncap};
use crate::tunnel::{
    inbound_protocols, run_inbound, run_outbound, tun_mtu_for, Report, TunIo, Tunnel, UnderlayRx, UnderlayTx,
};
use ipsec_engine::Engine;
use std::io;
use std::net::Ipv4Addr;
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
    /// This host's underlay address: the raw sockets receive only packets addressed to it.
    pub local: Option<Ipv4Addr>,
    /// The peer's underlay address: sealed packets to any other address are dropped.
    pub peer: Option<Ipv4Addr>,
    /// Where to write the counters as JSON every tick.
    pub stats: Option<PathBuf>,
    /// The control socket's path (`None`: no control socket).
    pub control: Option<PathBuf>,
    /// A command run (by `sh -c`) with each event's JSON on its standard input.
    pub on_event: Option<String>,
    /// ESP in UDP (RFC 3948), `(source port, destination port)`: ESP goes in UDP datagrams
    /// from `local:sport` to `peer:dport` (NAT-keepalives every 20 s, the peer's endpoint
    /// learned from authenticated packets). Needs `local` and `peer`. `None`: raw ESP.
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
            local: None,
            peer: None,
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

/// Runs the daemon until `stop` is set; returns the final counters (also written to the
/// stats file). Fails only while setting up (device, sockets, interface settings).
pub fn run(engine: Engine, opts: &Options, stop: &AtomicBool) -> io::Result<Report> {
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
    let udp = match opts.udp_encap {
        None => None,
        Some((sport, dport)) => {
            let (Some(local), Some(peer)) = (opts.local, opts.peer) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "ESP in UDP needs the local and the peer address",
                ));
            };
            Some(
                UdpEncap::open_group(local, sport, peer, dport, workers, WAIT)
                    .map_err(context(format!("opening UDP port {sport} for ESP in UDP")))?,
            )
        }
    };
    let raw_tx = match udp {
        None => Some(RawTx::open().map_err(context("opening the raw sending socket".into()))?),
        Some(_) => None,
    };
    // With ESP in UDP, ESP arrives on the UDP socket; AH and IPComp still on raw sockets.
    let raw_protocols: Vec<u8> = protocols
        .iter()
        .copied()
        .filter(|&p| udp.is_none() || p != 50)
        .collect();
    let rxs = raw_protocols
        .iter()
        .map(|&p| RawRx::open(p, opts.local, WAIT).map_err(context(format!("opening the raw socket for protocol {p}"))))
        .collect::<io::Result<Vec<_>>>()?;
    info!(
        "tunneld: {name} up with MTU {mtu}, {workers} workers, offloads {}; underlay {} -> {}; receiving IP protocols {protocols:?}{}",
        if tuns[0].offload() { "on" } else { "off" },
        opts.local.map_or("any".to_string(), |a| a.to_string()),
        opts.peer.map_or("any".to_string(), |a| a.to_string()),
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
    let tunnel = Tunnel::new(engine, opts.peer);
    // Worker i: TUN queue i -> engine -> its sender; its UDP socket (ESP in UDP) -> engine ->
    // TUN queue i. Raw sockets (one per protocol: each raw socket gets a copy of every packet,
    // so they cannot be spread) write to queue 0.
    let txs: Vec<&dyn UnderlayTx> = (0..workers)
        .map(|i| match (&udp, &raw_tx) {
            (Some(u), _) => &u[i] as &dyn UnderlayTx,
            (None, Some(r)) => r as &dyn UnderlayTx,
            (None, None) => unreachable!("one of the two is opened above"),
        })
        .collect();
    let mut readers: Vec<(String, &dyn UnderlayRx, &Tun)> = rxs
        .iter()
        .map(|rx| (format!("underlay-{}", rx.proto()), rx as &dyn UnderlayRx, &tuns[0]))
        .collect();
    if let Some(u) = &udp {
        for (i, (s, q)) in u.iter().zip(&tuns).enumerate() {
            readers.push((format!("underlay-udp-{i}"), s, q));
        }
    }
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
        peer: opts.peer,
        protocols: &protocols,
    });
    let spawned = thread::scope(|s| -> io::Result<()> {
        let t = &tunnel;
        let mut result = Ok(());
        for (i, (tun, &tx)) in tuns.iter().zip(&txs).enumerate() {
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
            udp.as_ref().map(|u| &u[0]),
            stop,
        );
        Ok(())
    });
    if let Some(id) = hup_id {
        signal_hook::low_level::unregister(id);
    }
    spawned?;
    let (report, _) = tunnel.tick();
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
    peer: Option<Ipv4Addr>,
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
        if c.reload(t, self.path, self.peer).is_ok() {
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

/// Every [`TICK`] until `stop`: lifetimes and events (handed to the control socket), and the
/// stats file; a reload as soon as SIGHUP asks for one; with ESP in UDP, a NAT-keepalive
/// every [`encap::KEEPALIVE_INTERVAL_SECS`] (the first right away).
fn ticker(
    t: &Tunnel,
    stats_path: Option<&Path>,
    control: Option<&Control>,
    reload: Option<&Reload>,
    udp: Option<&UdpEncap>,
    stop: &AtomicBool,
) {
    let mut failures: u64 = 0;
    let mut next_keepalive = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let Some(u) = udp.filter(|_| Instant::now() >= next_keepalive) {
            next_keepalive = Instant::now() + Duration::from_secs(encap::KEEPALIVE_INTERVAL_SECS);
            match u.send_keepalive() {
                Ok(()) => crate::counters::inc(&t.counters().udp_keepalives_tx),
                Err(e) => warn!("sending a NAT-keepalive: {e}"),
            }
        }
        let (report, events) = t.tick();
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
        let t = Tunnel::new(Engine::new(), None);
        let stop = AtomicBool::new(false);
        thread::scope(|s| {
            s.spawn(|| ticker(&t, Some(&p), None, None, None, &stop));
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
