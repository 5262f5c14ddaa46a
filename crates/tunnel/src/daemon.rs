//! The daemon: opens the multi-queue TUN device and the sockets, runs one outbound thread
//! per worker (its TUN queue), one inbound thread per worker's UDP socket (ESP in UDP) and
//! one per raw socket, and the ticker on the calling thread, which sleeps until something is
//! due (the engine's next time limit, the next stats write, the control side's tick, the next
//! NAT-keepalive); it stops cleanly when the stop flag is set: every loop wakes at least every
//! [`WAIT`] to look at it, the threads are joined, and the final counters are written before
//! [`run`] returns. The signal handlers ([`Signals`]) are installed by the caller first thing.

use crate::control::{Control, ControlSocket};
use crate::dataplane::{inbound_protocols, run_inbound, run_outbound, tun_mtu_for, Report, Tunnel};
use crate::dev::packet_ring::{self, PacketRing};
use crate::dev::packet_tx::PacketTx;
use crate::dev::raw::{RawRx, RawTx};
use crate::dev::sys;
use crate::dev::tun::{Tun, TunIo};
use crate::dev::udp::UdpEncap;
use crate::dev::underlay::{ByFamily, UnderlayRx, UnderlayTx};
use crate::obs::stats;
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
                if let Some((conn, child, sel)) = traps.matches(p) {
                    h.acquire(conn, child, sel);
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
        Ok(IkeParts {
            handle,
            inputs,
            sockets,
            keylog,
            endpoint: ipsec_ike::Endpoint::new(config),
        })
    }
}

/// Opens the TUN device's `workers` queues, sets its MTU (the configured one, or the largest
/// inner packet every outbound bundle fits into the underlay MTU) and brings it up.
fn open_tun(engine: &Engine, opts: &Options, workers: usize) -> io::Result<(Vec<Tun>, u32)> {
    // ESP in UDP puts an 8-byte UDP header before each ESP header (RFC 3948).
    let underlay = opts.underlay_mtu as usize - if opts.udp_encap.is_some() { 8 } else { 0 };
    let mtu = opts
        .mtu
        .unwrap_or_else(|| tun_mtu_for(engine, underlay).map_or(FALLBACK_MTU, |m| m as u32));
    let tuns = Tun::open_queues(&opts.tun, workers, opts.offload, WAIT)
        .map_err(context(format!("creating TUN device {}", opts.tun)))?;
    sys::set_mtu(tuns[0].name(), mtu)?;
    sys::set_up(tuns[0].name())?;
    Ok((tuns, mtu))
}

/// The underlay's sockets: with ESP in UDP, a group of UDP sockets per IP version (one per
/// worker); else a raw sending socket per IP version; and a raw receiving socket per IP
/// protocol and version (with ESP in UDP, for AH and IPComp only).
struct Underlay {
    udp4: Option<Vec<UdpEncap>>,
    udp6: Option<Vec<UdpEncap>>,
    raw_tx4: Option<RawTx>,
    raw_tx6: Option<RawTx>,
    rxs: Vec<RawRx>,
    /// Raw mode with rings: one per worker and IP version (a fanout group per version).
    rings: Vec<PacketRing>,
    /// Raw mode through `AF_PACKET`: one sender per worker, per IP version (else the raw
    /// sending sockets).
    packet_tx4: Vec<PacketTx>,
    packet_tx6: Vec<PacketTx>,
}

impl Underlay {
    /// `dynamic`: IKE adds peers while running, so the ESP-in-UDP sockets open even for an IP
    /// version with no configured peer.
    fn open(
        opts: &Options,
        workers: usize,
        want4: bool,
        want6: bool,
        protocols: &[u8],
        dynamic: bool,
    ) -> io::Result<Underlay> {
        let local4 = opts.local.iter().find_map(|a| match a {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        });
        let local6 = opts.local.iter().find_map(|a| match a {
            IpAddr::V6(a) => Some(*a),
            IpAddr::V4(_) => None,
        });
        let local6 =
            match (want6, local6) {
                (false, _) => Ipv6Addr::UNSPECIFIED, // no IPv6 socket is opened
                (true, Some(a)) => a,
                (true, None) => return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the SAs tunnel to IPv6 addresses: an IPv6 underlay needs an IPv6 local address ([tunnel] local)",
                )),
            };
        let peers_of = |v6: bool| -> Vec<IpAddr> { opts.peers.iter().copied().filter(|p| p.is_ipv6() == v6).collect() };
        let mut udp4 = None;
        let mut udp6 = None;
        if let Some((sport, dport)) = opts.udp_encap {
            for (want, v6, slot) in [(want4, false, &mut udp4), (want6, true, &mut udp6)] {
                let peers = peers_of(v6);
                if !want || (peers.is_empty() && !dynamic) {
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
        let mut rxs = Vec::new();
        for &p in protocols.iter().filter(|&&p| !udp || p != 50) {
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
        let rings = match opts.af_packet && !udp && !protocols.is_empty() {
            true => open_rings(
                opts,
                workers,
                want4.then_some(local4).flatten(),
                // IPv6 is received on the raw sockets (see open_rings: its fragments would be
                // lost); AF_PACKET sends both versions.
                None,
                protocols,
                &rxs,
            ),
            false => Vec::new(),
        };
        if let (true, Some(a)) = (rings.is_empty() && want4 && !udp, local4) {
            // IPv4 on the raw sockets alone (the rings are IPv4 only): no tc filter a killed
            // tunneld left behind may take their packets.
            match packet_ring::IngressDrop::remove_stale(a) {
                Ok(true) => warn!("removed a tc ingress filter a previous tunneld left for {a}"),
                Ok(false) => {}
                Err(e) => info!("looking for a stale tc ingress filter for {a}: {e}"),
            }
        }
        let senders = |want: bool, v6: bool| -> Vec<PacketTx> {
            if !(want && opts.af_packet && !udp) {
                return Vec::new();
            }
            match (0..workers).map(|_| PacketTx::open(v6, opts.qdisc_bypass)).collect() {
                Ok(s) => s,
                Err(e) => {
                    warn!(
                        "AF_PACKET sender for IPv{} refused ({e}): sending through the raw socket",
                        if v6 { 6 } else { 4 }
                    );
                    Vec::new()
                }
            }
        };
        let (packet_tx4, packet_tx6) = (senders(want4, false), senders(want6, true));
        if !packet_tx4.is_empty() || !packet_tx6.is_empty() {
            info!(
                "sending raw IP packets through AF_PACKET to the next hop{}, the raw socket where there is none",
                if opts.qdisc_bypass {
                    " (PACKET_QDISC_BYPASS)"
                } else {
                    ""
                }
            );
        }
        Ok(Underlay {
            udp4,
            udp6,
            raw_tx4,
            raw_tx6,
            rxs,
            rings,
            packet_tx4,
            packet_tx6,
        })
    }

    /// Worker `i`'s sender: its UDP socket of each IP version, else the raw sockets.
    fn sender<'a>(&'a self, i: usize) -> ByFamily<'a> {
        fn one<'a>(udp: &'a Option<Vec<UdpEncap>>, raw: &'a Option<RawTx>, i: usize) -> Option<&'a dyn UnderlayTx> {
            match (udp, raw) {
                (Some(u), _) => Some(&u[i] as &dyn UnderlayTx),
                (None, Some(r)) => Some(r as &dyn UnderlayTx),
                (None, None) => None,
            }
        }
        let packet = |p: &'a [PacketTx]| p.get(i).map(|t| t as &dyn UnderlayTx);
        ByFamily {
            v4: packet(&self.packet_tx4).or_else(|| one(&self.udp4, &self.raw_tx4, i)),
            v6: packet(&self.packet_tx6).or_else(|| one(&self.udp6, &self.raw_tx6, i)),
        }
    }

    /// The receiving sockets, each with its thread's name and the TUN queue it writes to:
    /// raw sockets (one per protocol and version: each gets a copy of every packet, so they
    /// cannot be spread) write to queue 0, worker `i`'s UDP sockets to queue `i`.
    fn readers<'a>(&'a self, tuns: &'a [Tun]) -> Vec<(String, &'a dyn UnderlayRx, &'a Tun)> {
        let mut readers: Vec<(String, &dyn UnderlayRx, &Tun)> = self
            .rxs
            .iter()
            .map(|rx| {
                let v = if rx.is_v6() { "6" } else { "" };
                (format!("underlay{v}-{}", rx.proto()), rx as &dyn UnderlayRx, &tuns[0])
            })
            .collect();
        for (i, r) in self.rings.iter().enumerate() {
            readers.push((format!("underlay-ring-{i}"), r, &tuns[i % tuns.len()]));
        }
        for (v, group) in [("", &self.udp4), ("6", &self.udp6)] {
            if let Some(u) = group {
                for (i, (s, q)) in u.iter().zip(tuns).enumerate() {
                    readers.push((format!("underlay-udp{v}-{i}"), s, q));
                }
            }
        }
        readers
    }

    /// One socket of each UDP group (they share the peers' endpoints and the GSO/GRO tallies).
    fn udp_firsts(&self) -> Vec<&UdpEncap> {
        [&self.udp4, &self.udp6].into_iter().flatten().map(|g| &g[0]).collect()
    }
}

/// Raw mode: with an IPv4 local address, one `AF_PACKET` ring per worker on the interface
/// that has that address (one fanout group), taking the `protocols` to it; the IPv4 raw
/// sockets then keep, of what comes in on that interface, only the packets too long for the
/// rings (and all that comes in elsewhere). Without a local address IPv4 stays on the raw
/// sockets: a ring could not tell packets to this host from packets it forwards. IPv6 stays
/// on the raw sockets too: the kernel reassembles IPv6 fragments (and walks extension
/// headers) only for them, and a raw IPv6 socket hands over the payload without saying
/// whether it came in fragments, so a ring beside it would lose the ESP packets that were
/// fragmented on the way. A failure (no CAP_NET_RAW for packet sockets, a kernel before 4.20,
/// an address on no interface) is logged and leaves IPv4 on the raw sockets.
fn open_rings(
    opts: &Options,
    workers: usize,
    local4: Option<Ipv4Addr>,
    local6: Option<Ipv6Addr>,
    protocols: &[u8],
    rxs: &[RawRx],
) -> Vec<PacketRing> {
    let max_len = packet_ring::max_len_for(opts.underlay_mtu);
    let mut rings = Vec::new();
    let locals = [local4.map(IpAddr::V4), local6.map(IpAddr::V6)];
    for (k, local) in locals.into_iter().flatten().enumerate() {
        let v6 = local.is_ipv6();
        let filter = packet_ring::RingFilter {
            protocols: protocols.to_vec(),
            local4: local4.filter(|_| !v6),
            local6: local6.filter(|_| v6),
            max_len,
        };
        // One fanout group per daemon and IP version, its id from the process id (another
        // daemon's group with the same id makes the join fail, and the raw sockets carry on).
        let group = (std::process::id() as u16).wrapping_mul(2).wrapping_add(k as u16);
        let opened = packet_ring::interface_of(local).and_then(|i| {
            let i = i.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no interface has {local}")))?;
            let r: io::Result<Vec<PacketRing>> = (0..workers)
                .map(|_| PacketRing::open(&filter, i, opts.underlay_mtu, group, WAIT))
                .collect();
            Ok((i, r?))
        });
        let (ifindex, mut these) = match opened {
            Ok(x) => x,
            Err(e) => {
                warn!("AF_PACKET receive rings for {local} refused ({e}): received on the raw sockets only");
                continue;
            }
        };
        let mine: Vec<&RawRx> = rxs.iter().filter(|rx| rx.is_v6() == v6).collect();
        if let Err(e) = mine.iter().try_for_each(|rx| rx.keep_longer_than(ifindex, max_len)) {
            warn!("filtering the raw sockets for {local} ({e}): received on the raw sockets only");
            for rx in &mine {
                let _ = rx.keep_all();
            }
            continue;
        }
        info!(
            "receiving raw IP protocols {protocols:?} to {local} through {workers} AF_PACKET ring(s) on interface {ifindex} (packets over {max_len} bytes, and from other interfaces, on the raw sockets)"
        );
        if std::env::var("TUNNELD_RING_INGRESS").as_deref() != Ok("off") {
            match packet_ring::IngressDrop::install(ifindex, &filter) {
                Ok(d) => {
                    info!("the packets the rings take end at interface {ifindex}'s tc ingress (before the IP stack)");
                    these[0].hold(d);
                }
                Err(e) => info!("no tc ingress filter on interface {ifindex} ({e}): the IP stack sees the packets the rings took too"),
            }
        }
        rings.append(&mut these);
    }
    rings
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
                        serde_json::to_value(&r).unwrap_or_default()
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
            let natt: Vec<(&UdpEncap, IpAddr)> = underlay.udp_firsts().into_iter().map(|u| (u, u.local())).collect();
            result = thread::Builder::new()
                .name("ike".into())
                .spawn_scoped(s, move || {
                    let socks = crate::ike::IkeSockets { ike: ike.sockets, natt };
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

/// The final counters, written to the stats file and summed up in the log.
fn finish(t: &Tunnel, ticker: &Ticker) -> Report {
    let (mut report, _) = t.tick();
    add_endpoints(&mut report, &ticker.udp);
    if let Some(p) = ticker.stats {
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
    report
}

/// SIGHUP's config reload: the file, the flag the signal sets, what it is checked against.
struct Reload<'a> {
    path: &'a Path,
    flag: &'a AtomicBool,
    peers: &'a [IpAddr],
    /// The IP protocols the raw sockets opened at start-up receive.
    protocols: &'a [u8],
    /// ESP arrives on the ESP-in-UDP sockets, not on a raw socket.
    esp_in_udp: bool,
}

impl Reload<'_> {
    /// Reloads if SIGHUP asked for it; whether it tried.
    fn run_if_asked(&self, t: &Tunnel, control: Option<&Control>, sd: &crate::obs::sd_notify::Notifier) -> bool {
        let Some(c) = control else { return false };
        if !self.flag.swap(false, Ordering::AcqRel) {
            return false;
        }
        let _ = sd.reloading();
        let r = self.reload_now(t, c);
        let _ = sd.ready("carrying packets (reloaded)");
        r
    }

    fn reload_now(&self, t: &Tunnel, c: &Control) -> bool {
        info!("SIGHUP: reloading {}", self.path.display());
        if c.reload(t, self.path, self.peers).is_ok() {
            let mut now = inbound_protocols(&t.engine());
            if self.esp_in_udp {
                now.retain(|&p| p != 50);
            }
            if now.iter().any(|p| !self.protocols.contains(p)) {
                warn!(
                    "the reloaded config receives IP protocols {now:?}, but the raw sockets opened at start receive {:?}: restart tunneld to receive the others",
                    self.protocols
                );
            }
        }
        true
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
    // The rows still without an endpoint, by peer address, in order (O(peers): with 10,000
    // peers a search per endpoint would cost 50 million comparisons per report).
    let mut open: std::collections::HashMap<IpAddr, std::collections::VecDeque<usize>> =
        std::collections::HashMap::new();
    for (i, r) in report.peers.iter().enumerate().filter(|(_, r)| r.endpoint.is_none()) {
        open.entry(r.peer).or_default().push_back(i);
    }
    for (peer, endpoint, learned) in udp.iter().flat_map(|u| u.endpoints()) {
        // One row per endpoint: clients behind one NAT address have one each.
        match open.get_mut(&peer).and_then(|q| q.pop_front()) {
            Some(i) => {
                let r = &mut report.peers[i];
                r.endpoint = Some(endpoint);
                r.learned = Some(learned);
            }
            // A peer IKE added (a connection with `remote_addrs = %any`).
            None => report.peers.push(crate::PeerReport {
                peer,
                endpoint: Some(endpoint),
                learned: Some(learned),
            }),
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

/// The control thread's periodic work: the engine's time limits and events (handed to the
/// control side), the stats file (with each peer's ESP-in-UDP endpoint), NAT-keepalives, and
/// a reload as soon as SIGHUP asks for one.
struct Ticker<'a> {
    stats: Option<&'a Path>,
    control: Option<&'a Control>,
    reload: Option<&'a Reload<'a>>,
    /// One socket of each ESP-in-UDP group.
    udp: Vec<&'a UdpEncap>,
    /// systemd's notification socket (`Type=notify`; nothing outside systemd).
    notify: crate::obs::sd_notify::Notifier,
}

/// How often the ticker looks at the stop flag, SIGHUP's flag and the events the data plane
/// raised, between its deadlines.
const GLANCE: Duration = Duration::from_millis(20);

impl Ticker<'_> {
    /// Until `stop`. It sleeps until the next thing that is due, not scanning anything in
    /// between: the engine's next time limit ([`Tunnel::poll_timeout`], polled only then or
    /// when the data plane raised an event), the next stats write (every [`TICK`]: the only
    /// time the engine's snapshot of every SA is taken), the control side's tick (every
    /// [`TICK`]: it retires replaced SAs once idle), and with ESP in UDP the next
    /// NAT-keepalive to every peer (every [`udp_encap::KEEPALIVE_INTERVAL_SECS`], the first
    /// right away). It glances every [`GLANCE`] at the stop flag, SIGHUP and the data plane's
    /// event flag (atomic loads).
    fn run(&self, t: &Tunnel, stop: &AtomicBool) {
        let mut failures: u64 = 0;
        let start = Instant::now();
        t.set_ticker(thread::current());
        let (mut next_keepalive, mut next_stats, mut next_control) = (start, start, start);
        // systemd: ready once the threads run (this is the last thing the daemon starts);
        // the watchdog from here on.
        let sd = &self.notify;
        let _ = sd.ready("carrying packets");
        let mut next_watchdog = sd.watchdog_every().map(|_| start);
        // Polled once at start, then at each deadline the engine reports.
        let mut next_poll = Some(start);
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if !self.udp.is_empty() && now >= next_keepalive {
                next_keepalive = now + Duration::from_secs(udp_encap::KEEPALIVE_INTERVAL_SECS);
                for u in &self.udp {
                    let (sent, err) = u.send_keepalives();
                    crate::obs::counters::add(&t.counters().udp_keepalives_tx, sent as u64);
                    if let Some(e) = err {
                        warn!("sending a NAT-keepalive: {e}");
                    }
                }
            }
            if let (Some(at), Some(every)) = (next_watchdog, sd.watchdog_every()) {
                if now >= at {
                    let _ = sd.watchdog();
                    next_watchdog = Some(now + every);
                }
            }
            let mut events = Vec::new();
            if next_poll.is_some_and(|p| now >= p) || t.events_pending() {
                events = t.poll();
                // The deadline is on the tunnel's clock; a second's slack at most is lost to
                // rounding (the engine checks time limits in whole seconds).
                next_poll = t.poll_timeout().map(|at| now + at.saturating_sub(t.now()));
            }
            if let Some(c) = self.control {
                if now >= next_control || !events.is_empty() {
                    next_control = now + TICK;
                    c.tick(t, &events);
                }
            }
            if let Some(p) = self.stats {
                if now >= next_stats {
                    next_stats = now + TICK;
                    let mut report = t.report();
                    add_endpoints(&mut report, &self.udp);
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
            }
            let mut wake = [
                next_poll,
                self.stats.map(|_| next_stats),
                self.control.map(|_| next_control),
                (!self.udp.is_empty()).then_some(next_keepalive),
                next_watchdog,
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(3600));
            while !stop.load(Ordering::Relaxed) && Instant::now() < wake {
                if let Some(r) = self.reload {
                    if r.run_if_asked(t, self.control, sd) {
                        // The reload may have added SAs with earlier limits.
                        next_poll = Some(Instant::now());
                        wake = Instant::now();
                    }
                }
                if t.events_pending() {
                    break;
                }
                // Parked, not asleep: a batch that raises an engine event wakes it at once.
                thread::park_timeout(GLANCE.min(wake.saturating_duration_since(Instant::now())));
            }
        }
        let _ = sd.stopping();
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
