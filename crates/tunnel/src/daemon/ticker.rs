//! The control thread's periodic work ([`Ticker`]): the engine's time limits and events
//! handed to the control side, the stats file, NAT-keepalives, SIGHUP's reload
//! ([`Reload`]), and the final report ([`finish`]).

use super::*;

/// The final counters, written to the stats file and summed up in the log.
pub(super) fn finish(t: &Tunnel, ticker: &Ticker) -> Report {
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
pub(super) struct Reload<'a> {
    pub(super) path: &'a Path,
    pub(super) flag: &'a AtomicBool,
    pub(super) peers: &'a [IpAddr],
    /// The IP protocols the raw sockets opened at start-up receive.
    pub(super) protocols: &'a [u8],
    /// ESP arrives on the ESP-in-UDP sockets, not on a raw socket.
    pub(super) esp_in_udp: bool,
}

impl Reload<'_> {
    /// Reloads if SIGHUP asked for it; whether it tried.
    pub(super) fn run_if_asked(
        &self,
        t: &Tunnel,
        control: Option<&Control>,
        sd: &crate::obs::sd_notify::Notifier,
    ) -> bool {
        let Some(c) = control else { return false };
        if !self.flag.swap(false, Ordering::AcqRel) {
            return false;
        }
        let _ = sd.reloading();
        let r = self.reload_now(t, c);
        let _ = sd.ready("carrying packets (reloaded)");
        r
    }

    pub(super) fn reload_now(&self, t: &Tunnel, c: &Control) -> bool {
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

/// Fills in each peer's ESP-in-UDP endpoint in `report` from the socket groups (one socket
/// of each), and the groups' UDP GSO/GRO tallies.
pub(super) fn add_endpoints(report: &mut Report, udp: &[&EncapSocket]) {
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
pub(super) struct Ticker<'a> {
    pub(super) stats: Option<&'a Path>,
    pub(super) control: Option<&'a Control>,
    pub(super) reload: Option<&'a Reload<'a>>,
    /// One socket of each ESP-in-UDP group.
    pub(super) udp: Vec<&'a EncapSocket>,
    /// systemd's notification socket (`Type=notify`; nothing outside systemd).
    pub(super) notify: crate::obs::sd_notify::Notifier,
}

/// How often the ticker looks at the stop flag, SIGHUP's flag and the events the data plane
/// raised, between its deadlines.
pub(super) const GLANCE: Duration = Duration::from_millis(20);

impl Ticker<'_> {
    /// Until `stop`. It sleeps until the next thing that is due, not scanning anything in
    /// between: the engine's next time limit ([`Tunnel::poll_timeout`], polled only then or
    /// when the data plane raised an event), the next stats write (every [`TICK`]: the only
    /// time the engine's snapshot of every SA is taken), the control side's tick (every
    /// [`TICK`]: it retires replaced SAs once idle), and with ESP in UDP the next
    /// NAT-keepalive to every peer (every [`udp_encap::KEEPALIVE_INTERVAL_SECS`], the first
    /// right away). It glances every [`GLANCE`] at the stop flag, SIGHUP and the data plane's
    /// event flag (atomic loads).
    pub(super) fn run(&self, t: &Tunnel, stop: &AtomicBool) {
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
