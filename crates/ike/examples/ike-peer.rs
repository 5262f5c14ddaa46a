//! Drives `ipsec-ike` over real UDP sockets as an initiator or a responder, printing each
//! event as one JSON line on stdout (keys only with `--print-keys`), for interop tests
//! against strongSwan before the daemon integrates the crate.
//!
//! ```text
//! ike-peer --role initiator --local 10.0.0.1 --remote 10.0.0.2 --psk SECRET \
//!   [--local-id ID] [--remote-id ID|%any] [--ike aes128gcm16-prfsha256-x25519] \
//!   [--esp aes128gcm16] [--local-ts 10.1.0.0/16] [--remote-ts 10.2.0.0/16] \
//!   [--ike-port 500] [--natt-port 4500] [--remote-port 500] [--remote-natt-port 4500] \
//!   [--encap] [--transport] [--dpd SECS] [--print-keys] [--keylog-dir DIR] \
//!   [--exit-after-up] [--terminate-after SECS] [--timeout SECS]
//! ```
//! Exit status 0 when the run ended as asked (up, or up then down), 1 otherwise.
use ipsec_ike::*;
use rand_core::OsRng;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn usage(msg: &str) -> ! {
    eprintln!("ike-peer: {msg}\nsee the doc comment of crates/ike/examples/ike-peer.rs for the options");
    std::process::exit(2)
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn ts_list(t: &[ts::TrafficSelector]) -> String {
    format!(
        "[{}]",
        t.iter().map(|t| json_str(&t.to_string())).collect::<Vec<_>>().join(",")
    )
}

struct Opts {
    map: HashMap<String, String>,
    flags: Vec<String>,
}

impl Opts {
    fn parse() -> Self {
        let mut map = HashMap::new();
        let mut flags = Vec::new();
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            let Some(k) = a.strip_prefix("--") else {
                usage(&format!("unexpected {a}"))
            };
            if ["encap", "transport", "print-keys", "exit-after-up", "remote-any"].contains(&k) {
                flags.push(k.to_string());
            } else {
                let v = it.next().unwrap_or_else(|| usage(&format!("--{k} needs a value")));
                map.insert(k.to_string(), v);
            }
        }
        Opts { map, flags }
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.map.get(k).map(String::as_str)
    }
    fn req(&self, k: &str) -> &str {
        self.get(k).unwrap_or_else(|| usage(&format!("--{k} is required")))
    }
    fn flag(&self, k: &str) -> bool {
        self.flags.iter().any(|f| f == k)
    }
    fn num<T: std::str::FromStr>(&self, k: &str, d: T) -> T {
        self.get(k)
            .map(|v| v.parse().unwrap_or_else(|_| usage(&format!("--{k}: not a number"))))
            .unwrap_or(d)
    }
}

fn main() {
    let o = Opts::parse();
    let initiator = match o.req("role") {
        "initiator" => true,
        "responder" => false,
        r => usage(&format!("--role {r}: initiator or responder")),
    };
    let local: IpAddr = o
        .req("local")
        .parse()
        .unwrap_or_else(|_| usage("--local: an IP address"));
    let remote: Option<IpAddr> = match o.get("remote") {
        Some("%any") | None => None,
        Some(r) => Some(r.parse().unwrap_or_else(|_| usage("--remote: an IP address or %any"))),
    };
    let local_id = Identity::from_str_config(o.get("local-id").unwrap_or(&local.to_string()))
        .unwrap_or_else(|e| usage(&e.to_string()));
    let remote_id = match o.get("remote-id") {
        Some("%any") => None,
        Some(s) => Some(Identity::from_str_config(s).unwrap_or_else(|e| usage(&e.to_string()))),
        None => remote.map(|r| Identity::from_str_config(&r.to_string()).unwrap()),
    };
    let mut conn = Connection::new(
        "peer",
        local,
        remote,
        local_id,
        remote_id,
        Psk::new(o.req("psk").as_bytes()),
        o.get("ike").unwrap_or("aes128gcm16-prfsha256-x25519"),
    )
    .unwrap_or_else(|e| usage(&format!("--ike: {e}")));
    conn.remote_port = o.num("remote-port", 500);
    conn.remote_natt_port = o.num("remote-natt-port", 4500);
    conn.encap = o.flag("encap");
    conn.dpd_delay = o.get("dpd").map(|_| Duration::from_secs(o.num("dpd", 30)));
    let mut child = ChildConfig::new(
        "net",
        o.get("local-ts").unwrap_or(""),
        o.get("remote-ts").unwrap_or(""),
        o.get("esp").unwrap_or("aes128gcm16"),
    )
    .unwrap_or_else(|e| usage(&format!("child: {e}")));
    if o.flag("transport") {
        child.mode = Mode::Transport;
    }
    conn.children.push(child);
    let mut cfg = Config::new(vec![conn]);
    cfg.ike_port = o.num("ike-port", 500);
    cfg.natt_port = o.num("natt-port", 4500);
    cfg.export_ike_keys = o.flag("print-keys") || o.get("keylog-dir").is_some();
    let print_keys = o.flag("print-keys");
    let keylog_dir = o.get("keylog-dir").map(std::path::PathBuf::from);
    let timeout = Duration::from_secs(o.num("timeout", 60));
    let terminate_after = o
        .get("terminate-after")
        .map(|_| Duration::from_secs(o.num("terminate-after", 0)));
    let exit_after_up = o.flag("exit-after-up");

    let bind = |port: u16| {
        let s = UdpSocket::bind(SocketAddr::new(local, port))
            .unwrap_or_else(|e| usage(&format!("bind {local}:{port}: {e}")));
        s.set_nonblocking(true).unwrap();
        s
    };
    let sockets = [bind(cfg.ike_port), bind(cfg.natt_port)];
    let mut ep = Endpoint::new(cfg.clone());
    let start = Instant::now();
    let now = || start.elapsed();
    let mut rng = OsRng;
    if initiator {
        ep.initiate(now(), "peer", &mut rng)
            .unwrap_or_else(|e| usage(&e.to_string()));
    }
    let mut up_at: Option<Duration> = None;
    let mut terminated = false;
    let mut buf = vec![0u8; 65536];
    let status = loop {
        let t = now();
        if t > timeout {
            println!("{{\"event\":\"timeout\",\"after_s\":{}}}", t.as_secs());
            break 1;
        }
        if let (Some(u), Some(after)) = (up_at, terminate_after) {
            if !terminated && t >= u + after {
                terminated = true;
                let _ = ep.terminate(t, "peer", &mut rng);
            }
        }
        let mut got = false;
        for s in &sockets {
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                got = true;
                let to = s.local_addr().unwrap();
                if let Err(d) = ep.handle_datagram(now(), to, from, &buf[..n], &mut rng) {
                    if !matches!(d, Dropped::NotIke | Dropped::Keepalive) {
                        println!(
                            "{{\"event\":\"dropped\",\"from\":{},\"why\":{}}}",
                            json_str(&from.to_string()),
                            json_str(&d.to_string())
                        );
                    }
                }
            }
        }
        if ep.poll_timeout().is_some_and(|d| d <= now()) {
            ep.handle_timeout(now(), &mut rng);
        }
        while let Some(tx) = ep.poll_transmit() {
            let s = if tx.local.port() == cfg.natt_port {
                &sockets[1]
            } else {
                &sockets[0]
            };
            if let Err(e) = s.send_to(&tx.payload, tx.remote) {
                println!(
                    "{{\"event\":\"send_error\",\"to\":{},\"error\":{}}}",
                    json_str(&tx.remote.to_string()),
                    json_str(&e.to_string())
                );
            }
        }
        let mut done = None;
        while let Some(e) = ep.poll_event() {
            println!("{}", event_json(&e, print_keys));
            if let Some(dir) = &keylog_dir {
                write_keylog(dir, &e);
            }
            match e {
                Event::ChildUp(_) => {
                    up_at.get_or_insert(now());
                    if exit_after_up {
                        done = Some(0);
                    }
                }
                Event::IkeUp { .. } => {
                    up_at.get_or_insert(now());
                }
                Event::IkeDown { reason, .. } => {
                    done = Some(
                        if terminate_after.is_some() && up_at.is_some() || reason == DownReason::Peer && up_at.is_some()
                        {
                            0
                        } else {
                            1
                        },
                    );
                }
                _ => {}
            }
        }
        if let Some(s) = done {
            // Let the last datagrams (a Delete's response) go out.
            while let Some(tx) = ep.poll_transmit() {
                let s = if tx.local.port() == cfg.natt_port {
                    &sockets[1]
                } else {
                    &sockets[0]
                };
                let _ = s.send_to(&tx.payload, tx.remote);
            }
            break s;
        }
        if !got {
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    std::process::exit(status);
}

fn write_keylog(dir: &std::path::Path, e: &Event) {
    use std::io::Write;
    let append = |name: &str, lines: &[String]| {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
        {
            for l in lines {
                let _ = writeln!(f, "{l}");
            }
        }
    };
    match e {
        Event::IkeUp { keys: Some(k), .. } | Event::IkeRekeyed { keys: Some(k), .. } => {
            append("ikev2_decryption_table", &[keylog::ikev2_line(k)])
        }
        Event::ChildUp(c) => append("esp_sa", &keylog::esp_sa_lines(c)),
        _ => {}
    }
}

fn event_json(e: &Event, keys: bool) -> String {
    match e {
        Event::IkeUp { info, keys: k } => {
            let mut s = format!(
                "{{\"event\":\"ike_up\",\"conn\":{},\"spi_i\":\"{:016x}\",\"spi_r\":\"{:016x}\",\"role\":\"{}\",\"local\":{},\"remote\":{},\"encr\":\"{}\",\"integ\":{},\"prf\":\"{}\",\"dh\":\"{}\",\"local_id\":{},\"remote_id\":{},\"nat\":{}",
                json_str(&info.conn),
                info.spi_i,
                info.spi_r,
                if info.role == Role::Initiator { "initiator" } else { "responder" },
                json_str(&info.local.to_string()),
                json_str(&info.remote.to_string()),
                info.suite.encr.name(),
                info.suite.integ.map_or("null".into(), |i| json_str(i.name())),
                info.suite.prf.name(),
                info.suite.dh.name(),
                json_str(&info.local_id.to_string()),
                json_str(&info.remote_id.to_string()),
                info.nat
            );
            if keys {
                if let Some(k) = k {
                    let _ = write!(
                        s,
                        ",\"sk_ei\":\"{}\",\"sk_er\":\"{}\",\"sk_ai\":\"{}\",\"sk_ar\":\"{}\",\"wireshark_ikev2\":{}",
                        hex(&k.sk_ei),
                        hex(&k.sk_er),
                        hex(&k.sk_ai),
                        hex(&k.sk_ar),
                        json_str(&keylog::ikev2_line(k))
                    );
                }
            }
            s.push('}');
            s
        }
        Event::ChildUp(c) => {
            let mut s = format!(
                "{{\"event\":\"child_up\",\"conn\":{},\"child\":{},\"protocol\":{},\"spi_in\":\"{:08x}\",\"spi_out\":\"{:08x}\",\"encr\":\"{}\",\"encr_id\":{},\"integ\":{},\"esn\":{},\"mode\":\"{}\",\"local_ts\":{},\"remote_ts\":{},\"encap\":{},\"local\":{},\"remote\":{},\"rekey_time_s\":{},\"life_time_s\":{}",
                json_str(&c.conn),
                json_str(&c.child),
                c.protocol,
                c.spi_in,
                c.spi_out,
                c.suite.encr.name(),
                c.suite.encr.id(),
                c.suite.integ.map_or("null".into(), |i| json_str(i.name())),
                c.suite.esn,
                if c.mode == Mode::Tunnel { "tunnel" } else { "transport" },
                ts_list(&c.local_ts),
                ts_list(&c.remote_ts),
                c.encap.map_or("null".into(), |e| format!("{{\"local_port\":{},\"remote_port\":{}}}", e.local_port, e.remote_port)),
                json_str(&c.local.to_string()),
                json_str(&c.remote.to_string()),
                c.lifetimes.rekey_time.as_secs(),
                c.lifetimes.life_time.as_secs(),
            );
            if keys {
                let [a, b] = keylog::esp_sa_lines(c);
                let _ = write!(
                    s,
                    ",\"encr_out\":\"{}\",\"integ_out\":\"{}\",\"encr_in\":\"{}\",\"integ_in\":\"{}\",\"wireshark_esp_sa\":[{},{}]",
                    hex(&c.encr_out),
                    hex(&c.integ_out),
                    hex(&c.encr_in),
                    hex(&c.integ_in),
                    json_str(&a),
                    json_str(&b)
                );
            }
            s.push('}');
            s
        }
        Event::IkeDown {
            conn, spi_i, spi_r, reason, ..
        } => {
            format!("{{\"event\":\"ike_down\",\"conn\":{},\"spi_i\":\"{spi_i:016x}\",\"spi_r\":\"{spi_r:016x}\",\"reason\":\"{reason:?}\"}}", json_str(conn))
        }
        Event::ChildDown { conn, child, spi_in, spi_out, reason } => format!(
            "{{\"event\":\"child_down\",\"conn\":{},\"child\":{},\"spi_in\":\"{spi_in:08x}\",\"spi_out\":\"{spi_out:08x}\",\"reason\":\"{reason:?}\"}}",
            json_str(conn),
            json_str(child)
        ),
        Event::AuthFailed { conn, local, .. } => format!("{{\"event\":\"auth_failed\",\"conn\":{},\"refused_by\":\"{}\"}}", json_str(conn), if *local { "us" } else { "peer" }),
        Event::ProposalMismatch { conn, child } => {
            format!("{{\"event\":\"proposal_mismatch\",\"conn\":{},\"child\":{}}}", json_str(conn), child.as_deref().map_or("null".into(), json_str))
        }
        Event::TsUnacceptable { conn, child } => format!("{{\"event\":\"ts_unacceptable\",\"conn\":{},\"child\":{}}}", json_str(conn), json_str(child)),
        Event::PeerEndpointChanged { conn, old, new, .. } => format!(
            "{{\"event\":\"peer_endpoint_changed\",\"conn\":{},\"old\":{},\"new\":{}}}",
            json_str(conn),
            json_str(&old.to_string()),
            json_str(&new.to_string())
        ),
        Event::MobikeRefused { conn, from, reason, .. } => format!(
            "{{\"event\":\"mobike_refused\",\"conn\":{},\"from\":{},\"reason\":{}}}",
            json_str(conn),
            json_str(&from.to_string()),
            json_str(&reason.to_string())
        ),
        Event::Alive { conn, at } => format!("{{\"event\":\"alive\",\"conn\":{},\"at_s\":{:.3}}}", json_str(conn), at.as_secs_f64()),
        Event::IkeRekeyed { old_spi_i, info, .. } => format!(
            "{{\"event\":\"ike_rekeyed\",\"conn\":{},\"old_spi_i\":\"{:016x}\",\"spi_i\":\"{:016x}\",\"spi_r\":\"{:016x}\"}}",
            json_str(&info.conn),
            old_spi_i,
            info.spi_i,
            info.spi_r
        ),
        Event::LeaseAssigned { conn, pool, identity, address, .. } => format!(
            "{{\"event\":\"lease_assigned\",\"conn\":{},\"pool\":{},\"id\":{},\"address\":\"{address}\"}}",
            json_str(conn),
            json_str(pool),
            json_str(&identity.to_string())
        ),
        Event::LeaseReleased { pool, identity, address } => format!(
            "{{\"event\":\"lease_released\",\"pool\":{},\"id\":{},\"address\":\"{address}\"}}",
            json_str(pool),
            json_str(&identity.to_string())
        ),
        Event::PoolExhausted { conn, identity, .. } => format!(
            "{{\"event\":\"pool_exhausted\",\"conn\":{},\"id\":{}}}",
            json_str(conn),
            json_str(&identity.to_string())
        ),
        Event::VirtualIp { conn, addresses, .. } => format!(
            "{{\"event\":\"virtual_ip\",\"conn\":{},\"addresses\":{}}}",
            json_str(conn),
            json_str(&addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(","))
        ),
        Event::RadiusServer { server, up } => {
            format!("{{\"event\":\"radius_server\",\"server\":{server},\"up\":{up}}}")
        }
    }
}
