//! tunneld's counters in the Prometheus text exposition format (version 0.0.4, which
//! node_exporter's textfile collector and every Prometheus server read), for
//! `ipsec show --format prometheus` and `tunneld --metrics ADDR` ([`serve`]).
//!
//! The input is either tunneld's stats file (`tunneld --stats FILE`: the daemon's counters,
//! the engine's snapshot under `engine`, the peers) or the control socket's `show` response
//! (the SAs and the drops not charged to an SA, at the top level). Names follow Prometheus
//! conventions: an `ipsec_` prefix, counters end in `_total`, sizes in bytes and times in
//! seconds, and what varies goes in labels (`sa`, `spi`, `proto`, `direction`, `reason`,
//! `peer`). Labels carry names, SPIs and addresses only: no key material is ever in the input
//! (neither the stats file nor `show` carries keys), so none can reach the output.

use crate::control::response::{Counters, Drops, Show};
use crate::obs::ike::RadiusServerReport;
use serde::Deserialize;
use std::fmt::Write as _;

/// A label value escaped as the exposition format requires (backslash, double quote, newline).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// One metric family: its HELP and TYPE lines, then its samples.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, u64)>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Family {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: &[(&str, &str)], value: u64) {
        let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", esc(v))).collect();
        let l = if l.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", l.join(","))
        };
        self.samples.push((l, value));
    }

    fn write(&self, out: &mut String) {
        if self.samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for (l, v) in &self.samples {
            let _ = writeln!(out, "{}{l} {v}", self.name);
        }
    }
}

/// Counts by name, in their order (drops by reason, the daemon's and IKE's counters); a
/// value that is not a count is left out when read.
pub type Counts = Drops;

/// One direction of an SA.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Direction {
    /// Packets.
    pub packets: u64,
    /// Bytes before sealing or opening.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
    /// IPComp: not compressed.
    pub not_compressed: u64,
    /// Drops by reason.
    pub drops: Counts,
}

impl From<&Counters> for Direction {
    fn from(c: &Counters) -> Direction {
        Direction {
            packets: c.packets,
            bytes_before: c.bytes_before,
            bytes_after: c.bytes_after,
            not_compressed: c.not_compressed,
            drops: c.drops.clone(),
        }
    }
}

/// One SA's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct SaSample {
    /// Its name.
    pub name: String,
    /// `esp`, `ah`, `comp`.
    pub proto: String,
    /// SPI (IPComp: CPI).
    pub spi: Option<u32>,
    /// `tunnel` or `transport`.
    pub mode: String,
    /// `mature`, `dying`, ...
    pub state: String,
    /// Seconds since installed.
    pub age_seconds: Option<u64>,
    /// Inbound.
    pub inbound: Option<Direction>,
    /// Outbound.
    pub outbound: Option<Direction>,
}

/// An ESP-in-UDP peer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PeerSample {
    /// Its address.
    pub peer: Option<String>,
    /// Its endpoint.
    pub endpoint: Option<String>,
    /// Learned from its packets (true) or configured.
    pub learned: Option<bool>,
}

/// The engine's part.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
struct EngineStats {
    sas: Vec<SaSample>,
    inbound_drops: Counts,
    outbound_drops: Counts,
}

/// The stats file as read: tunneld's (`tunneld --stats FILE`, its engine under `engine`) or
/// `ipsec process`'s (the engine's snapshot itself).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct StatsFile {
    uptime_seconds: Option<u64>,
    daemon: Counts,
    engine: Option<EngineStats>,
    peers: Vec<PeerSample>,
    ike: IkeStats,
    #[serde(flatten)]
    top: EngineStats,
}

/// IKE's part: its counts and gauges, and the address pools.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct IkeStats {
    pools: Vec<PoolSample>,
    radius_servers: Vec<RadiusServerReport>,
    #[serde(flatten)]
    counts: Counts,
}

/// An address pool's gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PoolSample {
    /// Its name.
    pub name: String,
    /// Addresses it leases.
    pub size: u64,
    /// Leases held by an IKE SA.
    pub leased: u64,
    /// Leases kept for an identity whose IKE SA is gone.
    pub offline: u64,
}

/// What the Prometheus text is made of, typed: from a `show` response ([`Metrics::of_show`]),
/// or from the stats file's JSON ([`Metrics::of_stats_json`], which the daemon's `--metrics`
/// reads too, from the same report).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Seconds since tunneld started.
    pub uptime_seconds: Option<u64>,
    /// The SAs.
    pub sas: Vec<SaSample>,
    /// Inbound drops not charged to an SA.
    pub inbound_drops: Counts,
    /// Outbound drops likewise.
    pub outbound_drops: Counts,
    /// The daemon's counters.
    pub daemon: Counts,
    /// IKE's figures.
    pub ike: Counts,
    /// The peers.
    pub peers: Vec<PeerSample>,
    /// The address pools.
    pub pools: Vec<PoolSample>,
    /// The RADIUS servers.
    pub radius_servers: Vec<RadiusServerReport>,
}

impl Metrics {
    /// A `show` response's figures (the SAs and the drops not charged to an SA).
    pub fn of_show(s: &Show) -> Metrics {
        Metrics {
            uptime_seconds: Some(s.uptime_seconds),
            sas: s
                .sas
                .iter()
                .map(|x| SaSample {
                    name: x.sa.name.clone(),
                    proto: x.sa.proto.clone(),
                    spi: Some(x.sa.spi),
                    mode: x.sa.mode.clone(),
                    state: x.sa.state.clone(),
                    age_seconds: Some(x.age_seconds),
                    inbound: Some((&x.inbound).into()),
                    outbound: Some((&x.outbound).into()),
                })
                .collect(),
            inbound_drops: s.inbound_drops.clone(),
            outbound_drops: s.outbound_drops.clone(),
            ..Default::default()
        }
    }

    /// The stats file's figures (`tunneld --stats FILE`: the daemon's counters, the engine's
    /// snapshot under `engine`, the peers, IKE's).
    pub fn of_stats_json(json: &[u8]) -> Result<Metrics, String> {
        let f: StatsFile = serde_json::from_slice(json).map_err(|e| format!("not tunneld's stats JSON: {e}"))?;
        let engine = f.engine.unwrap_or(f.top);
        Ok(Metrics {
            uptime_seconds: f.uptime_seconds,
            sas: engine.sas,
            inbound_drops: engine.inbound_drops,
            outbound_drops: engine.outbound_drops,
            daemon: f.daemon,
            ike: f.ike.counts,
            peers: f.peers,
            pools: f.ike.pools,
            radius_servers: f.ike.radius_servers,
        })
    }

    /// The daemon's report, as its stats file has it.
    pub fn of_report(r: &crate::dataplane::Report) -> Metrics {
        serde_json::to_vec(r)
            .ok()
            .and_then(|j| Metrics::of_stats_json(&j).ok())
            .unwrap_or_default()
    }
}

/// The daemon counters that are not plain `_total` counters of packets, bytes or errors are
/// all the same kind: every field of the stats file's `daemon` object is a counter.
fn daemon_name(field: &str) -> Option<String> {
    field
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        .then(|| format!("ipsec_tunneld_{field}_total"))
}

/// Renders `m` as Prometheus text.
pub fn prometheus(m: &Metrics) -> String {
    let mut fams = Vec::new();

    let mut up = Family::new("ipsec_uptime_seconds", "gauge", "Seconds since tunneld started.");
    if let Some(u) = m.uptime_seconds {
        up.add(&[], u);
    }
    fams.push(up);

    let mut sa_info = Family::new(
        "ipsec_sa_info",
        "gauge",
        "One per installed SA (value 1): its protocol, mode and state.",
    );
    let mut age = Family::new("ipsec_sa_age_seconds", "gauge", "Seconds since the SA was installed.");
    let mut packets = Family::new(
        "ipsec_sa_packets_total",
        "counter",
        "Packets the SA sealed (direction out) or opened (direction in).",
    );
    let mut bytes = Family::new(
        "ipsec_sa_bytes_total",
        "counter",
        "Bytes of the packets the SA handled: layer inner before sealing or after opening, outer on the wire.",
    );
    let mut drops = Family::new("ipsec_sa_drops_total", "counter", "Packets the SA dropped, by reason.");
    let mut uncompressed = Family::new(
        "ipsec_sa_not_compressed_total",
        "counter",
        "IPComp: packets sent or received uncompressed.",
    );
    for sa in &m.sas {
        let name = sa.name.clone();
        let spi = sa.spi.map_or_else(String::new, |s| format!("{s:#x}"));
        let proto = sa.proto.clone();
        let id = [("sa", name.as_str()), ("spi", spi.as_str()), ("proto", proto.as_str())];
        sa_info.add(&[id[0], id[1], id[2], ("mode", &sa.mode), ("state", &sa.state)], 1);
        if let Some(a) = sa.age_seconds {
            age.add(&id, a);
        }
        for (c, dir) in [(&sa.inbound, "in"), (&sa.outbound, "out")] {
            let Some(c) = c else { continue };
            let with = |extra: (&'static str, &str)| -> Vec<(&str, String)> {
                vec![
                    ("sa", name.clone()),
                    ("spi", spi.clone()),
                    ("proto", proto.clone()),
                    ("direction", dir.to_string()),
                    (extra.0, extra.1.to_string()),
                ]
            };
            let base = [id[0], id[1], id[2], ("direction", dir)];
            packets.add(&base, c.packets);
            // Sealing turns inner bytes into outer ones; opening the reverse.
            let (inner, outer) = if dir == "out" {
                (c.bytes_before, c.bytes_after)
            } else {
                (c.bytes_after, c.bytes_before)
            };
            for (layer, v) in [("inner", inner), ("outer", outer)] {
                let l = with(("layer", layer));
                let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
                bytes.add(&l, v);
            }
            if proto == "comp" {
                uncompressed.add(&base, c.not_compressed);
            }
            for (reason, n) in &c.drops.0 {
                let l = with(("reason", reason));
                let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
                drops.add(&l, *n);
            }
        }
    }
    fams.extend([sa_info, age, packets, bytes, drops, uncompressed]);

    let mut unattributed = Family::new(
        "ipsec_drops_total",
        "counter",
        "Packets the engine dropped that no SA was charged for (no SA, policy, malformed ...), by reason.",
    );
    for (d, dir) in [(&m.inbound_drops, "in"), (&m.outbound_drops, "out")] {
        for (reason, n) in &d.0 {
            unattributed.add(&[("direction", dir), ("reason", reason)], *n);
        }
    }
    fams.push(unattributed);

    let mut out = String::new();
    for f in &fams {
        f.write(&mut out);
    }
    for (field, n) in &m.daemon.0 {
        let Some(name) = daemon_name(field) else { continue };
        let _ = writeln!(out, "# HELP {name} tunneld counter {field}.");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {n}");
    }
    for (field, n) in &m.ike.0 {
        if !field.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            continue;
        }
        let (name, kind) = if field == "ike_sas" || field == "child_sas" || field == "half_open" {
            (format!("ipsec_ike_{field}"), "gauge")
        } else {
            (format!("ipsec_ike_{field}_total"), "counter")
        };
        let _ = writeln!(out, "# HELP {name} IKEv2: {}.", field.replace('_', " "));
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {n}");
    }
    let mut peers = Family::new(
        "ipsec_peer_endpoint_learned",
        "gauge",
        "ESP in UDP: 1 when the peer's endpoint was learned from its authenticated packets, 0 when configured.",
    );
    for p in &m.peers {
        if let Some(learned) = p.learned {
            let t = |x: &Option<String>| x.clone().unwrap_or_default();
            peers.add(&[("peer", &t(&p.peer)), ("endpoint", &t(&p.endpoint))], learned as u64);
        }
    }
    peers.write(&mut out);
    pool_metrics(&m.pools, &mut out);
    radius_server_metrics(&m.radius_servers, &mut out);
    out
}

/// Each RADIUS server's counters and whether it is marked down (`stats.ike.radius_servers`).
fn radius_server_metrics(servers: &[RadiusServerReport], out: &mut String) {
    if servers.is_empty() {
        return;
    }
    let c = |n: &'static str, h: &'static str| Family::new(n, "counter", h);
    let mut f = [
        c(
            "ipsec_radius_server_sent_total",
            "Datagrams sent to the RADIUS server (retransmissions included).",
        ),
        c(
            "ipsec_radius_server_retransmitted_total",
            "Retransmissions to the RADIUS server.",
        ),
        c(
            "ipsec_radius_server_answers_total",
            "Authenticated answers taken from the RADIUS server.",
        ),
        c(
            "ipsec_radius_server_timeouts_total",
            "Requests whose every try on the RADIUS server timed out.",
        ),
        c(
            "ipsec_radius_server_failovers_to_total",
            "Requests the RADIUS server took over from one that timed out.",
        ),
        c(
            "ipsec_radius_server_marked_down_total",
            "Times the RADIUS server was marked down.",
        ),
        Family::new(
            "ipsec_radius_server_down",
            "gauge",
            "1 while the RADIUS server is marked down (skipped).",
        ),
    ];
    for s in servers {
        let l = [("server", s.server.as_str())];
        for (fam, v) in f.iter_mut().zip([
            s.sent,
            s.retransmitted,
            s.answers,
            s.timeouts,
            s.failovers_to,
            s.marked_down,
            u64::from(s.down),
        ]) {
            fam.add(&l, v);
        }
    }
    for fam in f {
        fam.write(out);
    }
}

/// The address pools' gauges (`stats.ike.pools`): size, leased, offline, by pool.
fn pool_metrics(pools: &[PoolSample], out: &mut String) {
    let mut size = Family::new("ipsec_pool_size", "gauge", "Addresses the pool leases.");
    let mut leased = Family::new("ipsec_pool_leased", "gauge", "Leases of the pool held by an IKE SA.");
    let mut offline = Family::new(
        "ipsec_pool_offline",
        "gauge",
        "Leases of the pool kept for an identity whose IKE SA is gone.",
    );
    for p in pools {
        let l = [("pool", p.name.as_str())];
        size.add(&l, p.size);
        leased.add(&l, p.leased);
        offline.add(&l, p.offline);
    }
    for f in [size, leased, offline] {
        f.write(out);
    }
}

/// The content type of [`prometheus`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `GET /metrics` on `listener` until `stop`, each answer rendered from `report()`
/// (the same JSON the stats file holds). A minimal HTTP/1.x responder on purpose: one
/// request per connection, the request head read with a 2 s deadline and at most 8 KiB, one
/// connection at a time (a scraper every few seconds is the whole load); anything but
/// `GET /metrics` is a 404 or 405. Bind it to a loopback address: the counters are not
/// secret, but they are nobody else's business.
pub fn serve(listener: &std::net::TcpListener, report: &dyn Fn() -> Metrics, stop: &std::sync::atomic::AtomicBool) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let _ = listener.set_nonblocking(true);
    while !stop.load(Ordering::Relaxed) {
        let mut conn = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(_) => continue,
        };
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 && std::time::Instant::now() < deadline {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut words = line.split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let (status, body, ctype) = match (method, path.split('?').next().unwrap_or("")) {
            ("GET", "/metrics") => ("200 OK", prometheus(&report()), CONTENT_TYPE),
            ("GET", _) => ("404 Not Found", "only /metrics is here\n".to_string(), "text/plain"),
            _ => ("405 Method Not Allowed", "GET /metrics\n".to_string(), "text/plain"),
        };
        let _ = write!(
            conn,
            "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn of(v: Value) -> Metrics {
        Metrics::of_stats_json(v.to_string().as_bytes()).unwrap()
    }

    fn stats() -> Metrics {
        of(stats_json())
    }

    fn stats_json() -> Value {
        json!({
            "uptime_seconds": 4,
            "daemon": {"tun_rx_packets": 10, "udp_gro_reads": 3},
            "engine": {
                "sas": [{
                    "id": 0, "name": "esp-\"ab\"", "proto": "esp", "spi": 12289, "mode": "tunnel",
                    "state": "mature", "age_seconds": 4,
                    "inbound": {"packets": 0, "bytes_before": 0, "bytes_after": 0, "not_compressed": 0,
                                "drops": {"bad_icv": 2, "replay": 0}},
                    "outbound": {"packets": 7, "bytes_before": 700, "bytes_after": 900, "not_compressed": 0,
                                 "drops": {"bad_icv": 0, "replay": 0}}
                }],
                "inbound_drops": {"no_sa": 5},
                "outbound_drops": {"policy_discard": 1}
            },
            "peers": [{"peer": "10.99.0.2", "endpoint": "10.99.0.2:4500", "learned": true}]
        })
    }

    #[test]
    fn every_counter_is_a_labelled_total_with_help_and_type() {
        let t = prometheus(&stats());
        for want in [
            "ipsec_uptime_seconds 4",
            r#"ipsec_sa_packets_total{sa="esp-\"ab\"",spi="0x3001",proto="esp",direction="out"} 7"#,
            r#"ipsec_sa_bytes_total{sa="esp-\"ab\"",spi="0x3001",proto="esp",direction="out",layer="inner"} 700"#,
            r#"ipsec_sa_bytes_total{sa="esp-\"ab\"",spi="0x3001",proto="esp",direction="out",layer="outer"} 900"#,
            r#"ipsec_sa_drops_total{sa="esp-\"ab\"",spi="0x3001",proto="esp",direction="in",reason="bad_icv"} 2"#,
            r#"ipsec_drops_total{direction="in",reason="no_sa"} 5"#,
            "ipsec_tunneld_tun_rx_packets_total 10",
            "ipsec_tunneld_udp_gro_reads_total 3",
            r#"ipsec_peer_endpoint_learned{peer="10.99.0.2",endpoint="10.99.0.2:4500"} 1"#,
        ] {
            assert!(t.lines().any(|l| l == want), "missing `{want}` in\n{t}");
        }
        // Each family's samples follow its own HELP and TYPE, once.
        let mut current = "";
        for l in t.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                current = rest.split(' ').next().unwrap();
                assert_eq!(t.matches(&format!("# TYPE {current} ")).count(), 1, "{current}");
            } else if !l.starts_with('#') {
                assert!(l.starts_with(current), "`{l}` outside its family {current}");
                let kind = t
                    .lines()
                    .find_map(|x| x.strip_prefix(&format!("# TYPE {current} ")))
                    .unwrap();
                assert!(kind != "counter" || current.ends_with("_total"), "{current}");
            }
        }
    }

    /// IKE's figures from the stats file: the SA counts and the half-open SAs as gauges, the
    /// flood defences' counters as totals (docs/ike-dos.md).
    #[test]
    fn ike_gauges_and_totals() {
        let ike = crate::obs::ike::IkeReport {
            ike_sas: 21,
            half_open: 20,
            cookies_sent: 199_981,
            half_open_refused: 3,
            ..Default::default()
        };
        let t = prometheus(&of(json!({"uptime_seconds": 1, "ike": ike})));
        for want in [
            "# TYPE ipsec_ike_ike_sas gauge",
            "ipsec_ike_ike_sas 21",
            "# TYPE ipsec_ike_half_open gauge",
            "ipsec_ike_half_open 20",
            "# TYPE ipsec_ike_cookies_sent_total counter",
            "ipsec_ike_cookies_sent_total 199981",
            "ipsec_ike_half_open_refused_total 3",
            "ipsec_ike_too_large_total 0",
        ] {
            assert!(t.lines().any(|l| l == want), "missing `{want}` in\n{t}");
        }
    }

    /// The address pools' gauges, by pool (docs/remote-access.md).
    #[test]
    fn pool_gauges() {
        let pool = |name: &str, size, leased, offline| crate::obs::ike::PoolReport {
            name: name.into(),
            size,
            leased,
            offline,
        };
        let ike = crate::obs::ike::IkeReport {
            pools: vec![pool("rw4", 254, 2, 1), pool("rw6", u64::MAX, 0, 0)],
            ..Default::default()
        };
        let t = prometheus(&of(json!({"uptime_seconds": 1, "ike": ike})));
        for want in [
            "# TYPE ipsec_pool_size gauge",
            r#"ipsec_pool_size{pool="rw4"} 254"#,
            r#"ipsec_pool_leased{pool="rw4"} 2"#,
            r#"ipsec_pool_offline{pool="rw4"} 1"#,
            r#"ipsec_pool_size{pool="rw6"} 18446744073709551615"#,
            r#"ipsec_pool_leased{pool="rw6"} 0"#,
        ] {
            assert!(t.lines().any(|l| l == want), "missing `{want}` in\n{t}");
        }
        // No pools: no pool families.
        let t = prometheus(&of(
            json!({"uptime_seconds": 1, "ike": crate::obs::ike::IkeReport::default()}),
        ));
        assert!(!t.contains("ipsec_pool_"));
    }

    /// The RADIUS servers' counters and down gauge, by server (from the stats JSON).
    #[test]
    fn radius_server_families() {
        let json = br#"{"ike":{"radius_servers":[{"server":"10.0.0.1:1812","sent":3,"timeouts":1,"marked_down":1,"down":true},{"server":"10.0.0.2:1812","sent":4,"answers":3,"failovers_to":1,"down":false}]}}"#;
        let m = Metrics::of_stats_json(json).unwrap();
        let text = prometheus(&m);
        for want in [
            r#"ipsec_radius_server_sent_total{server="10.0.0.1:1812"} 3"#,
            r#"ipsec_radius_server_down{server="10.0.0.1:1812"} 1"#,
            r#"ipsec_radius_server_down{server="10.0.0.2:1812"} 0"#,
            r#"ipsec_radius_server_failovers_to_total{server="10.0.0.2:1812"} 1"#,
            r#"ipsec_radius_server_answers_total{server="10.0.0.2:1812"} 3"#,
        ] {
            assert!(text.contains(want), "{want} not in\n{text}");
        }
        assert!(!prometheus(&Metrics::default()).contains("ipsec_radius_server"));
    }

    /// `serve` answers a real HTTP GET /metrics with the text, a 404 elsewhere, and a client
    /// that sends nothing is cut off without holding the next one past its deadline.
    #[test]
    fn metrics_are_served_over_http() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let get = |path: &str| {
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).unwrap();
            out
        };
        std::thread::scope(|s| {
            s.spawn(|| serve(&l, &stats, &stop));
            let idle = std::net::TcpStream::connect(addr).unwrap();
            let r = get("/metrics");
            assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
            assert!(
                r.contains(CONTENT_TYPE) && r.contains("\nipsec_tunneld_tun_rx_packets_total 10\n"),
                "{r}"
            );
            assert!(get("/").starts_with("HTTP/1.1 404"));
            drop(idle);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }

    #[test]
    fn the_show_response_works_too_and_odd_input_is_skipped() {
        // The last `show` of the control golden transcript: an SA in UDP, IPComp, AH.
        let line = include_str!("../control/golden.txt")
            .lines()
            .filter_map(|l| l.strip_prefix("< "))
            .rfind(|l| l.contains(r#""uptime_seconds""#))
            .unwrap();
        let show: Show = crate::control::response::Reply::parse(line).unwrap();
        let t = prometheus(&Metrics::of_show(&show));
        for want in [
            "ipsec_uptime_seconds 9",
            r#"ipsec_sa_info{sa="c",spi="0x4100",proto="comp",mode="tunnel",state="mature"} 1"#,
            r#"ipsec_sa_not_compressed_total{sa="c",spi="0x4100",proto="comp",direction="in"} 0"#,
            r#"ipsec_sa_drops_total{sa="u",spi="0x40",proto="esp",direction="out",reason="encap_mismatch"} 0"#,
            r#"ipsec_drops_total{direction="out",reason="no_room"} 0"#,
        ] {
            assert!(t.lines().any(|l| l == want), "missing `{want}` in\n{t}");
        }
        // A daemon field that is not a metric name, or not a count, is left out, not written
        // raw; a file that is not a stats file is refused.
        let odd = json!({"daemon": {"bad name\n": 1, "ok": "x"}});
        assert_eq!(prometheus(&of(odd)), "");
        assert!(Metrics::of_stats_json(br#"{"engine": {"sas": "nope"}}"#).is_err());
        // `ipsec process`'s file: the engine's snapshot at the top.
        let top = stats_json()["engine"].clone();
        assert_eq!(of(top).sas, stats().sas);
    }
}
