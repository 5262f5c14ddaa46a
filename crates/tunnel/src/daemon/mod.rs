//! The daemon: opens the multi-queue TUN device and the sockets, runs one outbound thread
//! per worker (its TUN queue), one inbound thread per worker's UDP socket (ESP in UDP) and
//! one per raw socket, and the ticker on the calling thread, which sleeps until something is
//! due (the engine's next time limit, the next stats write, the control side's tick, the next
//! NAT-keepalive); it stops cleanly when the stop flag is set: every loop wakes at least every
//! [`WAIT`] to look at it, the threads are joined, and the final counters are written before
//! [`run`] returns. The signal handlers ([`Signals`]) are installed by the caller first thing.

mod devices;
mod ticker;

use crate::control::{Control, ControlSocket};
use crate::dataplane::{inbound_protocols, run_inbound, run_outbound, tun_mtu_for, Report, Tunnel};
use crate::dev::packet_ring::{self, PacketRing};
use crate::dev::packet_tx::PacketTx;
use crate::dev::raw::{RawRx, RawTx};
use crate::dev::sys;
use crate::dev::tun::{Tun, TunIo};
use crate::dev::udp::EncapSocket;
use crate::dev::underlay::{ByFamily, UnderlayRx, UnderlayTx};
use crate::obs::stats;
use devices::{open_tun, underlay_versions, Underlay};
use ipsec_engine::udp_encap;
use ipsec_engine::Engine;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use ticker::{add_endpoints, finish, Reload, Ticker};
use tracing::{info, warn};

/// How often the stats file is rewritten and the control side ticks.
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
    /// Raw ESP, AH and IPComp (no ESP in UDP): receive through one `AF_PACKET` ring per
    /// worker ([`crate::dev::packet_ring`]) for each IP version with a local address, the raw
    /// sockets keeping only what a ring cannot take, and send through an `AF_PACKET` socket
    /// per worker to the next hop ([`crate::dev::packet_tx`]); the raw sockets alone where the
    /// kernel refuses (or this is off).
    pub af_packet: bool,
    /// With [`af_packet`](Self::af_packet): `PACKET_QDISC_BYPASS` on the senders (no qdisc,
    /// and no capture on this host sees the outgoing packets).
    pub qdisc_bypass: bool,
    /// The config file SIGHUP reloads ([`Control::reload`]); `None`: SIGHUP is not handled.
    pub reload: Option<PathBuf>,
    /// The group whose members may use the control socket besides root (mode 0660).
    pub control_group: Option<String>,
    /// Serve the counters in the Prometheus text format at `http://ADDR/metrics`
    /// ([`crate::obs::metrics::serve`]); `None`: no such listener.
    pub metrics: Option<SocketAddr>,
    /// Once every device, socket and the control socket are open, run as this user (a name
    /// or a uid) with no capability and no way to regain one ([`sys::drop_privileges`]).
    pub user: Option<String>,
    /// TCP MSS clamping on the TUN device, both ways ([`crate::dataplane::mss`]).
    pub mss_clamp: ipsec_config::MssClampSetting,
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
            af_packet: true,
            qdisc_bypass: false,
            reload: None,
            metrics: None,
            control_group: None,
            user: None,
            mss_clamp: ipsec_config::MssClampSetting::Off,
        }
    }
}

fn context(what: String) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The flags the signal handlers set: `stop` by SIGINT and SIGTERM (a second signal while it
/// is already set ends the process with status 1, for a stop that hangs), `hup` by SIGHUP
/// (a config reload once running). Installed first thing at start-up ([`Signals::install`]):
/// until a handler is installed a signal's default action applies, and SIGHUP's is to end the
/// process, so a SIGHUP sent while a large config is read or the devices are set up would
/// kill tunneld. One that arrives before tunneld runs makes it reload once it does.
pub struct Signals {
    /// Set by SIGINT and SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// Set by SIGHUP.
    pub hup: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers (each only sets its flag).
    pub fn install() -> io::Result<Signals> {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))?;
            signal_hook::flag::register(sig, Arc::clone(&stop))?;
        }
        let hup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup))?;
        Ok(Signals { stop, hup })
    }
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
    /// The `[radius]` servers EAP-RADIUS connections pass EAP to, in the order of
    /// preference (the IKE thread's socket toward them, [`crate::ike::RadiusSocket`]); empty:
    /// none.
    pub radius: Vec<SocketAddr>,
    /// RADIUS accounting (`[radius] accounting = true`), its requests on the same socket.
    pub radius_accounting: Option<crate::ike::Accountant>,
}

/// Runs the daemon until `stop` is set; returns the final counters (also written to the
/// stats file). Fails only while setting up (device, sockets, interface settings). SIGHUP
/// reloads `opts.reload` from here on ([`run_with`] takes a flag set by handlers installed
/// earlier, as tunneld does with [`Signals`]).
pub fn run(engine: Engine, opts: &Options, stop: &AtomicBool) -> io::Result<Report> {
    let hup = Arc::new(AtomicBool::new(false));
    let id = match &opts.reload {
        Some(_) => Some(signal_hook::flag::register(
            signal_hook::consts::SIGHUP,
            Arc::clone(&hup),
        )?),
        None => None,
    };
    let r = run_with(engine, opts, stop, &hup);
    if let Some(id) = id {
        signal_hook::low_level::unregister(id);
    }
    r
}

/// [`run`], with `hup` the flag that asks for a reload of `opts.reload` (when set).
pub fn run_with(engine: Engine, opts: &Options, stop: &AtomicBool, hup: &AtomicBool) -> io::Result<Report> {
    run_with_ike(engine, opts, None, stop, hup)
}

/// [`run_with`], with IKEv2 when `ike` is given: UDP port 500 is bound on the local
/// addresses, the ESP-in-UDP sockets (which must be configured: `opts.udp_encap`) hand their
/// non-ESP datagrams to the IKE thread, which installs the child SAs it negotiates
/// ([`crate::ike`]).
pub fn run_with_ike(
    engine: Engine,
    opts: &Options,
    ike: Option<IkeSetup>,
    stop: &AtomicBool,
    hup: &AtomicBool,
) -> io::Result<Report> {
    let protocols = inbound_protocols(&engine);
    // With IKE the policies come when its child SAs are up.
    if protocols.is_empty() && ike.is_none() {
        warn!("no inbound policy protects anything: nothing will be received from the peer");
    }
    let workers = match opts.workers {
        0 => thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let (tuns, mtu) = open_tun(&engine, opts, workers)?;
    // An IKE connection that takes any remote address: its peers are added while running.
    let dynamic = ike
        .as_ref()
        .is_some_and(|s| s.config.connections.iter().any(|c| c.remote_addr.is_none()));
    let udp = opts.udp_encap.is_some() && !(dynamic && opts.peers.is_empty());
    ipsec_config::check_underlay(&opts.local, &opts.peers, udp)
        .map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    let (mut want4, mut want6) = underlay_versions(&engine, &opts.local, &opts.peers);
    if dynamic {
        want4 |= opts.local.iter().any(IpAddr::is_ipv4);
        want6 |= opts.local.iter().any(IpAddr::is_ipv6);
    }
    let underlay = Underlay::open(opts, workers, want4, want6, &protocols, dynamic)?;
    let list = |a: &[IpAddr]| match a {
        [] => "any".to_string(),
        a => a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "),
    };
    info!(
        "tunneld: {} up with MTU {mtu}, {workers} workers, offloads {}; underlay {} -> {} (IPv4 {}, IPv6 {}); receiving IP protocols {protocols:?}{}",
        tuns[0].name(),
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
            let mut sock =
                ControlSocket::bind(p).map_err(context(format!("binding the control socket {}", p.display())))?;
            if let Some(g) = &opts.control_group {
                let gid = sys::lookup_group(g).map_err(context(format!("--control-group {g}")))?;
                sock.allow_group(gid)
                    .map_err(context(format!("giving the control socket to group {g}")))?;
            }
            Some(sock)
        }
        None => None,
    };
    let mut tunnel = Tunnel::new(engine, opts.peers.clone());
    if dynamic {
        tunnel.allow_any_peer();
    }
    let clamp = match opts.mss_clamp {
        ipsec_config::MssClampSetting::Off => crate::dataplane::mss::MssClamp::OFF,
        ipsec_config::MssClampSetting::Auto => crate::dataplane::mss::MssClamp::auto(mtu),
        ipsec_config::MssClampSetting::Mss(n) => crate::dataplane::mss::MssClamp::fixed(n),
    };
    if clamp.is_on() {
        let (v4, v6) = clamp.limits();
        info!("TCP MSS clamping on: SYNs' MSS at most {v4} over IPv4, {v6} over IPv6");
    }
    tunnel.set_mss_clamp(clamp);
    let ike = match ike {
        Some(setup) => Some(IkeParts::open(setup, opts, &mut tunnel, want6)?),
        None => None,
    };
    let reload = opts.reload.as_deref().map(|path| Reload {
        path,
        flag: hup,
        peers: &opts.peers,
        protocols: &protocols,
        esp_in_udp: opts.udp_encap.is_some(),
    });
    let ticker = Ticker {
        stats: opts.stats.as_deref(),
        control: Some(&control),
        reload: reload.as_ref(),
        udp: underlay.udp_firsts(),
        notify: crate::obs::sd_notify::Notifier::from_env(),
    };
    let metrics = match opts.metrics {
        Some(a) => {
            Some(std::net::TcpListener::bind(a).map_err(context(format!("--metrics {a}: binding the listener")))?)
        }
        None => None,
    };
    if let Some(u) = &opts.user {
        let (uid, gid) = sys::lookup_user(u).map_err(context(format!("--user {u}")))?;
        sys::drop_privileges(uid, gid).map_err(context(format!("dropping privileges to {u}")))?;
        info!("running as {u} (uid {uid}, gid {gid}) with no capabilities and no new privileges: everything tunneld needs is open");
    }
    let services = Services {
        socket: socket.as_ref(),
        ike,
        metrics,
    };
    serve(&tunnel, &tuns, &underlay, services, &control, &ticker, stop)?;
    Ok(finish(&tunnel, &ticker))
}

/// The control side's threads besides the ticker: the control socket's and IKE's.
struct Services<'a> {
    socket: Option<&'a ControlSocket>,
    ike: Option<IkeParts>,
    metrics: Option<std::net::TcpListener>,
}

/// What the IKE thread runs with, opened before the threads start.
struct IkeParts {
    handle: crate::ike::IkeHandle,
    inputs: crate::ike::Inputs,
    sockets: Vec<std::net::UdpSocket>,
    keylog: Option<crate::ike::KeyLog>,
    endpoint: ipsec_ike::Endpoint,
    radius: Option<crate::ike::RadiusSocket>,
}

impl IkeParts {
    /// Binds UDP port 500 on the local addresses and routes the non-ESP datagrams of
    /// `tunnel`'s ESP-in-UDP sockets to the IKE thread.
    fn open(setup: IkeSetup, opts: &Options, tunnel: &mut Tunnel, want6: bool) -> io::Result<IkeParts> {
        let Some((sport, _)) = opts.udp_encap else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "IKE needs the ESP-in-UDP sockets (its child SAs go in UDP)",
            ));
        };
        let local4 = opts.local.iter().copied().find(IpAddr::is_ipv4);
        let local6 = opts.local.iter().copied().find(IpAddr::is_ipv6).filter(|_| want6);
        let (handle, inputs) = crate::ike::IkeHandle::new();
        let locals: Vec<IpAddr> = [local4, local6].into_iter().flatten().collect();
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
        tunnel.set_non_esp(Box::new(move |d: &[u8], from: SocketAddr| {
            let local = match from {
                SocketAddr::V4(_) => local4,
                SocketAddr::V6(_) => local6,
            };
            let local = SocketAddr::new(local.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), sport);
            h.datagram(local, from, d);
        }));
        if let Some(traps) = crate::ike::Traps::of(&setup.config).map_err(io::Error::other)? {
            let h = handle.clone();
            tunnel.set_trap(Box::new(move |p: &[u8]| {
                if let Some((child, sel)) = traps.matches(p) {
                    h.acquire(child, sel);
                }
            }));
        }
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
            locals.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
        );
        let radius = match setup.radius.as_slice() {
            [] => None,
            servers => {
                let s = crate::ike::RadiusSocket::open_many(servers).map_err(context(format!(
                    "opening a UDP socket toward the RADIUS servers {servers:?}"
                )))?;
                Some(match setup.radius_accounting {
                    Some(a) => s.with_accounting(a),
                    None => s,
                })
            }
        };
        Ok(IkeParts {
            handle,
            inputs,
            sockets,
            keylog,
            endpoint: ipsec_ike::Endpoint::new(config),
            radius,
        })
    }
}

/// Worker `i`: TUN queue `i` -> engine -> its sender; each receiving socket -> engine -> its
/// TUN queue; the control socket's thread; and the ticker on this thread, until `stop`.
fn serve(
    t: &Tunnel,
    tuns: &[Tun],
    underlay: &Underlay,
    services: Services<'_>,
    control: &Control,
    ticker: &Ticker,
    stop: &AtomicBool,
) -> io::Result<()> {
    let Services { socket, ike, metrics } = services;
    let txs: Vec<ByFamily> = (0..tuns.len()).map(|i| underlay.sender(i)).collect();
    thread::scope(|s| -> io::Result<()> {
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
        for (thread_name, rx, tun) in underlay.readers(tuns) {
            if result.is_err() {
                break;
            }
            result = thread::Builder::new()
                .name(thread_name)
                .spawn_scoped(s, move || run_inbound(t, rx, tun, stop))
                .map(drop);
        }
        if result.is_ok() {
            if let Some(sock) = socket {
                result = thread::Builder::new()
                    .name("control".into())
                    .spawn_scoped(s, move || sock.serve(t, control, stop))
                    .map(drop);
            }
        }
        if result.is_err() {
            // Let the threads already started end, so the scope can.
            stop.store(true, Ordering::Relaxed);
            return result;
        }
        if let Some(l) = metrics {
            let udp = underlay.udp_firsts();
            result = thread::Builder::new()
                .name("metrics".into())
                .spawn_scoped(s, move || {
                    let report = || {
                        let mut r = t.report();
                        add_endpoints(&mut r, &udp);
                        crate::obs::metrics::Metrics::of_report(&r)
                    };
                    crate::obs::metrics::serve(&l, &report, stop)
                })
                .map(drop);
            if result.is_err() {
                stop.store(true, Ordering::Relaxed);
                return result;
            }
        }
        if let Some(ike) = ike {
            control.set_ike(ike.handle.clone());
            let natt: Vec<(&EncapSocket, std::cell::Cell<IpAddr>)> = underlay
                .udp_firsts()
                .into_iter()
                .map(|u| (u, std::cell::Cell::new(u.local())))
                .collect();
            let groups = underlay.udp_groups();
            result = thread::Builder::new()
                .name("ike".into())
                .spawn_scoped(s, move || {
                    let socks = crate::ike::IkeSockets {
                        ike: ike.sockets,
                        natt,
                        groups,
                        radius: ike.radius,
                    };
                    crate::ike::run(t, control, ike.endpoint, &socks, &ike.inputs, ike.keylog.as_ref(), stop)
                })
                .map(drop);
            if result.is_err() {
                stop.store(true, Ordering::Relaxed);
                return result;
            }
        }
        ticker.run(t, stop);
        Ok(())
    })
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

    /// With no stats file and no control side, the ticker sleeps until the engine's next
    /// time limit and polls it then: an SA with a 1 s soft limit and no traffic is dying
    /// shortly after.
    #[test]
    fn ticker_polls_the_engine_at_its_deadline() {
        use ipsec_core::sa::{Keyed, Proto, SaParams};
        use ipsec_core::AeadAlg;
        use ipsec_engine::{Lifetime, Limits, SaConfig, State};
        let mut p = SaParams::new(Proto::Esp, 0x77);
        p.aead = Some(Keyed::new(AeadAlg::AesGcm, &[7; 20], 16));
        let mut c = SaConfig::new("soon", p, None);
        c.lifetime = Lifetime {
            soft: Limits {
                seconds: Some(1),
                ..Limits::default()
            },
            ..Lifetime::default()
        };
        let mut e = Engine::new();
        let id = e.add_sa(c, Duration::ZERO).unwrap();
        let t = Tunnel::new(e, Vec::new());
        assert_eq!(t.poll_timeout(), Some(Duration::from_secs(1)));
        let stop = AtomicBool::new(false);
        let state = || t.engine().sad().get(id).unwrap().state();
        thread::scope(|s| {
            let ticker = Ticker {
                stats: None,
                control: None,
                reload: None,
                udp: Vec::new(),
                notify: crate::obs::sd_notify::Notifier::new(None, None),
            };
            let (t, stop) = (&t, &stop);
            s.spawn(move || ticker.run(t, stop));
            let t0 = Instant::now();
            while state() != State::Dying && t0.elapsed() < Duration::from_secs(5) {
                thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert_eq!(state(), State::Dying);
        assert_eq!(t.poll_timeout(), None, "no limit left to wait for");
    }

    #[test]
    fn ticker_writes_stats_until_stopped() {
        let dir = std::env::temp_dir().join(format!("tunnel-ticker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.json");
        let t = Tunnel::new(Engine::new(), Vec::new());
        let stop = AtomicBool::new(false);
        // systemd's side: READY when the ticker starts, WATCHDOG every half WatchdogSec
        // (here 200 ms: every 100 ms), STOPPING at the end.
        let sock = dir.join("notify.sock");
        let _ = std::fs::remove_file(&sock);
        let sd = std::os::unix::net::UnixDatagram::bind(&sock).unwrap();
        thread::scope(|s| {
            let ticker = Ticker {
                stats: Some(&p),
                control: None,
                reload: None,
                udp: Vec::new(),
                notify: crate::obs::sd_notify::Notifier::new(Some(sock.display().to_string()), Some(200_000)),
            };
            let (t, stop) = (&t, &stop);
            s.spawn(move || ticker.run(t, stop));
            let t0 = Instant::now();
            while !p.exists() && t0.elapsed() < Duration::from_secs(5) {
                thread::sleep(Duration::from_millis(5));
            }
            thread::sleep(Duration::from_millis(450));
            stop.store(true, Ordering::Relaxed);
        });
        sd.set_nonblocking(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n) = sd.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        assert!(got.first().is_some_and(|m| m.starts_with("READY=1\n")), "{got:?}");
        assert_eq!(got.last().map(String::as_str), Some("STOPPING=1"), "{got:?}");
        let dogs = got.iter().filter(|m| *m == "WATCHDOG=1").count();
        assert!((2..=8).contains(&dogs), "{dogs} watchdog pings in ~0.45 s: {got:?}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["daemon"]["tun_rx_packets"], 0);
        assert!(v["engine"]["sas"].as_array().unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
