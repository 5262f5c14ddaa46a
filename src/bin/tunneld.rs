//! `tunneld`: carries a TUN device's packets to one or more peer hosts through the SA
//! engine. Packets the kernel routes into the TUN device are sealed (ESP, AH, IPComp, as the
//! config's outbound policies say) and sent to the peer the outermost SA tunnels to, over
//! IPv4 or IPv6 raw sockets (or ESP in UDP); ESP/AH/IPComp packets from the peers are opened,
//! checked against the inbound policies and written to the TUN device. Counters go to `--stats FILE` as JSON every second; SIGINT or SIGTERM stops it;
//! SIGHUP reads the config file again and applies what changed in its SAs and policies
//! (make before break; unchanged SAs are not touched; a file that cannot be applied changes
//! nothing), logged and sent to `ipsec monitor` as events.
//!
//! The config is the `ipsec check-config` format (TOML or setkey) plus, in TOML, a
//! `[tunnel]` table (`tun`, `mtu`, `local`, `peer` or `peers`, `encap = "espinudp"`,
//! `encap_sport`, `encap_dport`, `workers`, `offload`: see `ipsec::config::TunnelConfig`).
//! ESP in UDP may also come from the SAs (`encap espinudp SPORT DPORT OADDR`); all ESP SAs
//! must agree.
//! The daemon itself is the `ipsec-tunnel` crate; this binary reads the config, builds the
//! engine and hands it over.
//!
//! Exit status: 0 after a clean stop, 1 when setting up the devices failed, 2 for a bad
//! command line or config.

use clap::Parser;
use ipsec::cli::TunneldArgs as Args;
use ipsec::config;
use ipsec_tunnel::daemon::{self, Options};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    // First of all: until a handler is installed, SIGHUP ends the process, and reading a
    // large config and setting up the devices takes a while.
    let signals = match daemon::Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tunneld: installing the signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let args = Args::parse();
    if let Err(e) = daemon::init_logging(&args.log) {
        eprintln!("tunneld: {e}");
        return ExitCode::from(2);
    }
    let file = args.config.display().to_string();
    let loaded = match config::load(&args.config, None) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tunneld: {}", e.in_file(&file));
            return ExitCode::from(2);
        }
    };
    for w in &loaded.warnings {
        eprintln!("tunneld: {file}:{}: warning: {}", w.line, w.message);
    }
    let mut t = loaded.config.tunnel.clone().unwrap_or_default();
    if !args.local.is_empty() {
        t.local = args.local.clone();
    }
    if !args.peer.is_empty() {
        t.peers = args.peer.clone();
    }
    // ESP in UDP from the SAs' `encap espinudp` or [tunnel] encap (they must agree).
    let mut udp_encap = match loaded.config.udp_encap_for_tunneld() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("tunneld: {}", e.in_file(&file));
            return ExitCode::from(2);
        }
    };
    // IKEv2 connections: their keys from the secrets file; their peers join [tunnel]'s; their
    // child SAs go in UDP (port 4500), so the ESP-in-UDP sockets are opened.
    let ike = match ike_setup(&loaded.config, &args, &t) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tunneld: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(i) = &ike {
        for c in &i.config.connections {
            if !t.local.contains(&c.local_addr) {
                t.local.push(c.local_addr);
            }
            if let Some(r) = c.remote_addr {
                if !t.peers.contains(&r) {
                    t.peers.push(r);
                }
            }
        }
        udp_encap = Some(udp_encap.unwrap_or((4500, 4500)));
    }
    // A connection with `remote_addrs = %any` (a responder for any peer): its peers are
    // added while running, so no configured peer is needed for ESP in UDP.
    let dynamic = ike
        .as_ref()
        .is_some_and(|i| i.config.connections.iter().any(|c| c.remote_addr.is_none()));
    let udp = udp_encap.is_some() && !(dynamic && t.peers.is_empty());
    let road_warriors = ike
        .as_ref()
        .is_some_and(|i| i.config.connections.iter().any(|c| !c.pools.is_empty()));
    if let Err(e) = config::check_underlay(&t.local, &t.peers, udp) {
        eprintln!("tunneld: {e}");
        return ExitCode::from(2);
    }
    let engine = match loaded
        .config
        .build(Duration::ZERO)
        .and_then(|e| loaded.config.check_for_tunneld(&t.peers).map(|()| e))
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("tunneld: {}", e.in_file(&file));
            return ExitCode::from(2);
        }
    };
    // The stats file is written as FILE.tmp, then renamed: both must be possible, and that
    // is found out now rather than every second once running (following no symbolic link).
    if let Some(p) = &args.stats {
        if let Err(e) = ipsec_tunnel::obs::stats::check_path(p) {
            eprintln!("tunneld: --stats {e}");
            return ExitCode::from(2);
        }
    }
    if signals.stop.load(std::sync::atomic::Ordering::Relaxed) {
        // SIGINT or SIGTERM while the config was read: nothing was set up yet.
        return ExitCode::SUCCESS;
    }
    let opts = Options {
        tun: args.tun.or(t.tun).unwrap_or_else(|| Options::default().tun),
        mtu: t.mtu,
        local: t.local,
        peers: t.peers,
        udp_encap,
        stats: args.stats,
        control: args.control.or(t.control),
        on_event: args.on_event,
        workers: args.workers.map(usize::from).or(t.workers).unwrap_or(0),
        offload: !args.no_offload && t.offload.unwrap_or(true),
        af_packet: !args.no_af_packet && t.af_packet.unwrap_or(true),
        qdisc_bypass: args.qdisc_bypass || t.qdisc_bypass.unwrap_or(false),
        reload: Some(args.config.clone()),
        user: args.user.clone(),
        metrics: args.metrics,
        control_group: args.control_group.clone(),
        // Clients given addresses from a pool are road warriors behind links of every MTU:
        // clamping is on unless the config says otherwise ("connected, but pages do not
        // load" is every VPN server's first complaint); elsewhere off unless asked for.
        mss_clamp: t.mss_clamp.unwrap_or(if road_warriors {
            ipsec::config::MssClampSetting::Auto
        } else {
            ipsec::config::MssClampSetting::Off
        }),
        ..Options::default()
    };
    // The parsed config is not needed any more (the engine, IKE's settings and the options
    // hold what the daemon uses); what parsing it took goes back to the system.
    drop(loaded);
    ipsec_tunnel::dev::sys::release_freed_memory();
    match daemon::run_with_ike(engine, &opts, ike, &signals.stop, &signals.hup) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tunneld: {e}");
            ExitCode::from(1)
        }
    }
}

/// The IKE setup of the config's `[[connection]]`s (None: there are none): each with its
/// pre-shared key from the secrets file (`--secrets` or `[tunnel] secrets`).
fn ike_setup(c: &config::Config, args: &Args, t: &config::TunnelConfig) -> Result<Option<daemon::IkeSetup>, String> {
    if c.connections.is_empty() {
        if args.keylog.is_some() {
            return Err("--keylog: the config has no [[connection]] (IKE)".into());
        }
        return Ok(None);
    }
    let path = args
        .secrets
        .clone()
        .or_else(|| t.secrets.clone())
        .ok_or("the config has IKE connections: their pre-shared keys come from a secrets file (--secrets FILE or [tunnel] secrets)")?;
    let secrets = ipsec_config::connection::Secrets::load(&path)?;
    let mut conns = Vec::new();
    for conn in &c.connections {
        conns.push(conn.to_ike_with(&secrets, c.radius.as_ref())?);
    }
    // RADIUS accounting (`[radius] accounting = true`) for the clients of the EAP-RADIUS
    // connections, to the servers' accounting ports.
    let radius_conns: Vec<String> = c
        .connections
        .iter()
        .filter(|x| x.remote.radius)
        .map(|x| x.name.clone())
        .collect();
    let radius_accounting = match c.radius.as_ref().filter(|_| !radius_conns.is_empty()) {
        Some(r) => r
            .accounting_with(&|a| secrets.radius_secret_for(a).map(|s| s.0.as_bytes().to_vec()))?
            .map(|cfg| {
                ipsec_tunnel::ike::Accountant::new(cfg, r.acct_addresses(), &r.nas_identifier, radius_conns)
                    .with_interim(r.interim_interval)
            }),
        None => None,
    };
    let mut config = ipsec_ike::Config::new(conns);
    config.pools = ipsec_config::pools::to_ike(&c.pools)?;
    Ok(Some(daemon::IkeSetup {
        config: c.ike.apply(config),
        keylog: args.keylog.clone(),
        // The socket toward the RADIUS server only when a connection passes EAP to it.
        radius: c
            .radius
            .as_ref()
            .filter(|_| c.connections.iter().any(|x| x.remote.radius))
            .map(|r| r.addresses())
            .unwrap_or_default(),
        radius_accounting,
    }))
}
