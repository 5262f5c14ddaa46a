//! `ipsec sa|policy|show|monitor`: clients of tunneld's control socket (line-delimited JSON,
//! protocol v1: see docs/control.md and `ipsec_tunnel::control`).

use ipsec_tunnel::control::{IkeRequest, Request, SaRequest};
use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use zeroize::Zeroizing;

/// The control socket's default path.
pub const DEFAULT_CONTROL: &str = "/run/tunneld.sock";

/// Options every control subcommand takes.
#[derive(clap::Args, Clone, Debug)]
pub struct ControlOpts {
    /// tunneld's control socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_CONTROL, global = true)]
    pub control: PathBuf,
    /// Print the daemon's JSON response (for monitor: one event per line) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Lifetime limits of an SA.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LifetimeArgs {
    /// Soft limit in seconds (an event; the SA still works).
    #[arg(long, value_name = "N")]
    pub soft_seconds: Option<u64>,
    /// Hard limit in seconds (the SA stops).
    #[arg(long, value_name = "N")]
    pub hard_seconds: Option<u64>,
    /// Soft limit in bytes.
    #[arg(long, value_name = "N")]
    pub soft_bytes: Option<u64>,
    /// Hard limit in bytes.
    #[arg(long, value_name = "N")]
    pub hard_bytes: Option<u64>,
    /// Soft limit in packets.
    #[arg(long, value_name = "N")]
    pub soft_packets: Option<u64>,
    /// Hard limit in packets.
    #[arg(long, value_name = "N")]
    pub hard_packets: Option<u64>,
}

impl LifetimeArgs {
    fn to_json(&self) -> Option<Value> {
        let table = |l: [(&str, Option<u64>); 3]| -> Map<String, Value> {
            l.into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_string(), v.into())))
                .collect()
        };
        let soft = table([
            ("seconds", self.soft_seconds),
            ("bytes", self.soft_bytes),
            ("packets", self.soft_packets),
        ]);
        let hard = table([
            ("seconds", self.hard_seconds),
            ("bytes", self.hard_bytes),
            ("packets", self.hard_packets),
        ]);
        (!soft.is_empty() || !hard.is_empty()).then(|| json!({"soft": soft, "hard": hard}))
    }
}

/// An SA to install: a name and a SPEC in `ip xfrm state` words.
#[derive(clap::Args, Clone, Debug)]
pub struct SaInstallArgs {
    /// The SA's name (policies name SAs by it).
    pub name: String,
    /// The SA in `ip xfrm state` words, e.g. `proto esp spi 0x1000 mode tunnel src 10.99.0.1
    /// dst 10.99.0.2 aead 'rfc4106(gcm(aes))' 0x<key> 128`. WARNING: a command line is
    /// visible to every local user; use --spec-file for real keys.
    #[arg(
        value_name = "SPEC",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "spec_file",
        conflicts_with = "spec_file"
    )]
    pub spec: Vec<String>,
    /// Read the SPEC from FILE (its first line that is not blank or a # comment; `-`:
    /// standard input).
    #[arg(long, value_name = "FILE")]
    pub spec_file: Option<PathBuf>,
    #[command(flatten)]
    pub lifetime: LifetimeArgs,
}

/// `ipsec ike ...`.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum IkeCmd {
    /// Start connection NAME (IKE_SA_INIT, IKE_AUTH with its first child SA), or with
    /// NAME = CONN/CHILD one further child (CREATE_CHILD_SA on the established IKE SA).
    Initiate {
        /// The connection (`[[connection]] name`), or CONN/CHILD.
        name: String,
    },
    /// Rekey connection NAME's IKE SA, or with NAME = CONN/CHILD that child's SAs
    /// (CREATE_CHILD_SA, make before break).
    Rekey {
        /// The connection, or CONN/CHILD.
        name: String,
    },
    /// Delete connection NAME's IKE SA and its child SAs (INFORMATIONAL with a Delete).
    Terminate {
        /// The connection.
        name: String,
    },
    /// The IKE SAs and their child SAs.
    List,
}

/// The IKE SAs of a `show` or `ike.list` response, as text: one block per IKE SA, its
/// algorithms in strongSwan's proposal words, then its child pairs (`child NAME: in SPI, out
/// SPI` and a line of their state and timers).
pub fn ike_text(v: &Value) -> String {
    let mut out = String::new();
    let dur = |x: &Value| match x.as_u64() {
        None => "-".to_string(),
        Some(t) if t >= 3600 => format!("{}h{:02}m", t / 3600, t % 3600 / 60),
        Some(t) if t >= 60 => format!("{}m{:02}s", t / 60, t % 60),
        Some(t) => format!("{t}s"),
    };
    for sa in v["ike_sas"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let c = &sa["counters"];
        out.push_str(&format!(
            "ike: {} ({}), {}, {} <-> {}{}\n  ids {} <-> {}; SPIs {}_i {}_r; {}\n  \
             message IDs: next request {}, peer's next {}; age {}, rekey in {}\n  \
             requests {} sent, {} answered, {} retransmitted; {} child rekeys\n",
            s(&sa["conn"]),
            s(&sa["role"]),
            s(&sa["state"]),
            s(&sa["local"]),
            s(&sa["remote"]),
            if sa["nat"] == true { ", NAT-T" } else { "" },
            s(&sa["local_id"]),
            s(&sa["remote_id"]),
            s(&sa["spi_i"]),
            s(&sa["spi_r"]),
            s(&sa["proposal"]),
            sa["message_ids"]["next_request"],
            sa["message_ids"]["peer_next"],
            dur(&sa["age_seconds"]),
            dur(&sa["rekey_in_seconds"]),
            c["requests_sent"],
            c["requests_answered"],
            c["retransmits"],
            c["child_rekeys"],
        ));
        for ch in sa["children"].as_array().map(Vec::as_slice).unwrap_or_default() {
            out.push_str(&format!(
                "  child {}: in {}, out {}\n    {}, {}, rekey in {}, expires in {}{}\n",
                s(&ch["child"]),
                s(&ch["spi_in"]),
                s(&ch["spi_out"]),
                s(&ch["state"]),
                s(&ch["proposal"]),
                dur(&ch["rekey_in_seconds"]),
                dur(&ch["expires_in_seconds"]),
                ch["rekeys"]
                    .as_str()
                    .map_or(String::new(), |r| format!(", replaced {r}")),
            ));
        }
    }
    out
}

/// `CONN` or `CONN/CHILD` from an answer.
fn name_of(v: &Value) -> String {
    match v["child"].as_str() {
        Some(ch) => format!("{}/{ch}", s(&v["conn"])),
        None => s(&v["conn"]),
    }
}

/// `ipsec ike ...`.
pub fn run_ike(cmd: &IkeCmd, opts: &ControlOpts) -> ExitCode {
    match cmd {
        IkeCmd::Initiate { name } => respond(opts, &Request::Ike(IkeRequest::initiate(name)).to_line(), |v| {
            if v["spi"].is_string() {
                format!("{}: initiating (IKE SPI {})", s(&v["conn"]), s(&v["spi"]))
            } else {
                format!("{}: initiating", name_of(v))
            }
        }),
        IkeCmd::Terminate { name } => respond(
            opts,
            &Request::Ike(IkeRequest::Terminate { conn: name.clone() }).to_line(),
            |v| format!("{}: deleting", s(&v["conn"])),
        ),
        IkeCmd::Rekey { name } => respond(opts, &Request::Ike(IkeRequest::rekey(name)).to_line(), |v| {
            format!("{}: rekeying", name_of(v))
        }),
        IkeCmd::List => respond(opts, &Request::Ike(IkeRequest::List).to_line(), |v| {
            let t = ike_text(v);
            if t.is_empty() {
                "no IKE SA".into()
            } else {
                t
            }
        }),
    }
}

/// `ipsec sa ...`.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum SaCmd {
    /// Install an SA.
    Add(SaInstallArgs),
    /// Replace SA NAME by a new one, make before break: the new SA is installed, the policies
    /// that named the old one switch to it, the old one stays for inbound packets still in
    /// flight until it has been idle for 5 s or expires.
    Update(SaInstallArgs),
    /// Remove SA NAME.
    Del {
        /// The SA's name.
        name: String,
    },
    /// List the SAs (without keys unless --keys).
    List {
        /// Show the keys too (as SPEC words that install the same SA).
        #[arg(long)]
        keys: bool,
    },
    /// One SA (without keys unless --keys).
    Get {
        /// The SA's name.
        name: String,
        /// Show the keys too.
        #[arg(long)]
        keys: bool,
    },
}

/// `ipsec policy ...`.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum PolicyCmd {
    /// Append a policy (after the others of its direction), as a config file's `[[policy]]`.
    Add {
        /// in or out.
        #[arg(long)]
        dir: String,
        /// Source prefix or address (default any).
        #[arg(long)]
        src: Option<String>,
        /// Destination prefix or address (default any).
        #[arg(long)]
        dst: Option<String>,
        /// IP protocol name or number (default any).
        #[arg(long)]
        proto: Option<String>,
        /// Source port, lo-hi or any (ICMP: type).
        #[arg(long)]
        src_port: Option<String>,
        /// Destination port, lo-hi or any (ICMP: code).
        #[arg(long)]
        dst_port: Option<String>,
        /// protect, bypass or discard.
        #[arg(long)]
        action: String,
        /// For protect: the SA names, in seal order, comma-separated.
        #[arg(long, value_delimiter = ',')]
        bundle: Vec<String>,
    },
    /// Remove the policy at INDEX (as `policy list` numbers them, from 1).
    Del {
        /// Its index.
        index: u64,
    },
    /// List the policies in match order.
    List,
}

fn read_spec(a: &SaInstallArgs) -> Result<Zeroizing<String>, String> {
    let Some(p) = &a.spec_file else {
        return Ok(Zeroizing::new(a.spec.join(" ")));
    };
    let texts = ipsec_config::spec::collect(&[], Some(p))?;
    let mut it = texts.into_iter();
    match (it.next(), it.next()) {
        (Some(t), None) => Ok(t.text),
        (None, _) => Err(format!("--spec-file {}: no SPEC in it", p.display())),
        (Some(_), Some(_)) => Err(format!("--spec-file {}: more than one SPEC", p.display())),
    }
}

fn install_request(update: bool, a: &SaInstallArgs) -> Result<Zeroizing<String>, String> {
    let r = SaRequest {
        name: a.name.clone(),
        spec: read_spec(a)?,
        lifetime: a.lifetime.to_json(),
    };
    Ok(if update {
        Request::SaUpdate(r)
    } else {
        Request::SaAdd(r)
    }
    .to_line())
}

/// Connects to the control socket (errors say how to start tunneld with it).
fn connect(path: &Path) -> Result<UnixStream, String> {
    let s = UnixStream::connect(path).map_err(|e| {
        format!(
            "{}: {} (is tunneld running with --control {}?)",
            path.display(),
            ipsec_config::io_reason(&e),
            path.display()
        )
    })?;
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    Ok(s)
}

/// Sends one request and returns the response.
pub fn call(path: &Path, request: &str) -> Result<Value, String> {
    let mut s = connect(path)?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    s.write_all(request.as_bytes())
        .and_then(|()| s.write_all(b"\n"))
        .map_err(|e| format!("sending the request: {}", ipsec_config::io_reason(&e)))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("reading the response: {}", ipsec_config::io_reason(&e)))?;
    serde_json::from_str(&line).map_err(|_| "tunneld's response is not JSON".to_string())
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("ipsec: {e}");
    ExitCode::FAILURE
}

fn respond(opts: &ControlOpts, request: &str, text: impl Fn(&Value) -> String) -> ExitCode {
    let v = match call(&opts.control, request) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    if v["ok"] != true {
        if opts.json {
            println!("{v}");
        }
        return fail(v["error"].as_str().unwrap_or("tunneld refused the request"));
    }
    if opts.json {
        println!("{v}");
    } else {
        let t = text(&v);
        if !t.is_empty() {
            println!("{}", t.trim_end());
        }
    }
    ExitCode::SUCCESS
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn sa_line(sa: &Value, keys: bool) -> String {
    let spec = if keys { &sa["spec_with_keys"] } else { &sa["spec"] };
    format!("{} (id {}, {}): {}", s(&sa["name"]), sa["id"], s(&sa["state"]), s(spec))
}

/// `ipsec sa ...`.
pub fn run_sa(cmd: &SaCmd, opts: &ControlOpts) -> ExitCode {
    match cmd {
        SaCmd::Add(a) | SaCmd::Update(a) => {
            let req = match install_request(matches!(cmd, SaCmd::Update(_)), a) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            respond(opts, &req, |v| match v.get("old_id") {
                Some(old) => format!("SA {} replaced: id {} (old id {old} kept until idle)", a.name, v["id"]),
                None => format!("SA {} added: id {}", a.name, v["id"]),
            })
        }
        SaCmd::Del { name } => respond(opts, &Request::SaDel { name: name.clone() }.to_line(), |v| {
            format!("SA {name} removed (id {})", v["id"])
        }),
        SaCmd::List { keys } => respond(opts, &Request::SaList { keys: *keys }.to_line(), |v| {
            let sas = v["sas"].as_array().cloned().unwrap_or_default();
            if sas.is_empty() {
                return "no SAs".into();
            }
            sas.iter().map(|sa| sa_line(sa, *keys) + "\n").collect()
        }),
        SaCmd::Get { name, keys } => respond(
            opts,
            &Request::SaGet {
                name: name.clone(),
                keys: *keys,
            }
            .to_line(),
            |v| sa_line(&v["sa"], *keys),
        ),
    }
}

fn policy_line(p: &Value) -> String {
    let mut l = format!(
        "{:>3}  {:<3} {} -> {} proto {} sport {} dport {}  {}",
        p["index"],
        s(&p["dir"]),
        s(&p["src"]),
        s(&p["dst"]),
        s(&p["proto"]),
        s(&p["src_port"]),
        s(&p["dst_port"]),
        s(&p["action"])
    );
    if let Some(b) = p["bundle"].as_array().filter(|b| !b.is_empty()) {
        let names: Vec<String> = b.iter().map(s).collect();
        l.push_str(&format!(" [{}]", names.join(", ")));
    }
    l
}

/// `ipsec policy ...`.
pub fn run_policy(cmd: &PolicyCmd, opts: &ControlOpts) -> ExitCode {
    match cmd {
        PolicyCmd::Add {
            dir,
            src,
            dst,
            proto,
            src_port,
            dst_port,
            action,
            bundle,
        } => {
            let mut p = Map::new();
            p.insert("dir".into(), dir.as_str().into());
            for (k, v) in [
                ("src", src),
                ("dst", dst),
                ("proto", proto),
                ("src_port", src_port),
                ("dst_port", dst_port),
            ] {
                if let Some(v) = v {
                    p.insert(k.into(), v.as_str().into());
                }
            }
            p.insert("action".into(), action.as_str().into());
            if !bundle.is_empty() {
                p.insert("bundle".into(), json!(bundle));
            }
            respond(opts, &Request::PolicyAdd { policy: p }.to_line(), |v| {
                format!("policy added at index {}", v["index"])
            })
        }
        PolicyCmd::Del { index } => respond(opts, &Request::PolicyDel { index: *index }.to_line(), |v| {
            format!("removed: {}", policy_line(&v["policy"]).trim_start())
        }),
        PolicyCmd::List => respond(opts, &Request::PolicyList.to_line(), |v| {
            let ps = v["policies"].as_array().cloned().unwrap_or_default();
            if ps.is_empty() {
                return "no policies".into();
            }
            ps.iter().map(|p| policy_line(p) + "\n").collect()
        }),
    }
}

fn alg(a: &Value, what: &str) -> Option<String> {
    if a.is_null() {
        return None;
    }
    let mut t = format!("{what} {} {}-bit key", s(&a["alg"]), a["key_bits"]);
    if let Some(i) = a["icv_bits"].as_u64() {
        t.push_str(&format!(", {i}-bit ICV"));
    }
    Some(t)
}

fn drops(d: &Value) -> String {
    let nonzero: Vec<String> = d
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, n)| n.as_u64().unwrap_or(0) > 0)
                .map(|(k, n)| format!("{k} {n}"))
                .collect()
        })
        .unwrap_or_default();
    if nonzero.is_empty() {
        "none".into()
    } else {
        nonzero.join(", ")
    }
}

fn limits(l: &Value) -> String {
    let parts: Vec<String> = [("seconds", "s"), ("bytes", "B"), ("packets", "packets")]
        .iter()
        .filter_map(|(k, unit)| l[*k].as_u64().map(|n| format!("{n} {unit}")))
        .collect();
    if parts.is_empty() {
        "unlimited".into()
    } else {
        parts.join(", ")
    }
}

/// `ipsec show`'s text: per SA, like `wg show`.
pub fn show_text(v: &Value) -> String {
    let mut out = format!("uptime: {} s\n", v["uptime_seconds"]);
    let ike = ike_text(v);
    if !ike.is_empty() {
        out.push('\n');
        out.push_str(&ike);
    }
    for sa in v["sas"].as_array().cloned().unwrap_or_default() {
        let ends = match (sa["src"].as_str(), sa["dst"].as_str()) {
            (Some(a), Some(b)) => format!(", {a} -> {b}"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "\nsa: {}{}\n  id {}, {} spi {}, {} mode{ends}\n",
            s(&sa["name"]),
            if sa["retiring"] == true { " (retiring)" } else { "" },
            sa["id"],
            s(&sa["proto"]),
            sa["spi"].as_u64().map_or("-".into(), |n| format!("{n:#x}")),
            s(&sa["mode"]),
        ));
        let algs: Vec<String> = [
            alg(&sa["enc"], "enc"),
            alg(&sa["auth"], "auth"),
            alg(&sa["aead"], "aead"),
        ]
        .into_iter()
        .flatten()
        .chain(sa["comp"].as_str().map(|c| format!("comp {c}")))
        .collect();
        if !algs.is_empty() {
            out.push_str(&format!("  algorithms: {}\n", algs.join("; ")));
        }
        out.push_str(&format!("  state: {}, age {} s\n", s(&sa["state"]), sa["age_seconds"]));
        for dir in ["inbound", "outbound"] {
            let c = &sa[dir];
            out.push_str(&format!(
                "  {dir}: {} packets, {} bytes; drops: {}\n",
                c["packets"],
                c["bytes_before"],
                drops(&c["drops"])
            ));
        }
        out.push_str(&format!(
            "  lifetime left: soft {}; hard {}\n",
            limits(&sa["lifetime_left"]["soft"]),
            limits(&sa["lifetime_left"]["hard"])
        ));
        if !sa["replay_top"].is_null() {
            out.push_str(&format!(
                "  replay window: {} packets, highest received {}; next sequence number sent {}\n",
                sa["replay_window"],
                sa["replay_top"],
                s(&sa["next_seq"])
            ));
        }
    }
    out.push_str(&format!(
        "\nnot charged to an SA: inbound drops: {}; outbound drops: {}\n",
        drops(&v["inbound_drops"]),
        drops(&v["outbound_drops"])
    ));
    out
}

/// How `ipsec show` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShowFormat {
    /// Per SA, like `wg show`.
    #[default]
    Text,
    /// The daemon's JSON (the same as --json).
    Json,
    /// The Prometheus text format (for node_exporter's textfile collector).
    Prometheus,
}

/// `ipsec show`'s own options.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ShowArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = ShowFormat::Text)]
    pub format: ShowFormat,
    /// Read tunneld's stats file (`tunneld --stats FILE`) instead of asking the control
    /// socket: it has the daemon's and the peers' counters too, and needs no root.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
}

/// `ipsec show`.
pub fn run_show(opts: &ControlOpts, a: &ShowArgs) -> ExitCode {
    let format = if opts.json { ShowFormat::Json } else { a.format };
    let Some(path) = &a.stats else {
        return match format {
            ShowFormat::Prometheus => respond(
                &ControlOpts {
                    json: false,
                    ..opts.clone()
                },
                &Request::Show.to_line(),
                ipsec_tunnel::obs::metrics::prometheus,
            ),
            ShowFormat::Json => respond(
                &ControlOpts {
                    json: true,
                    ..opts.clone()
                },
                &Request::Show.to_line(),
                show_text,
            ),
            ShowFormat::Text => respond(opts, &Request::Show.to_line(), show_text),
        };
    };
    let v: Value = match std::fs::read(path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("not tunneld's stats JSON: {e}")))
    {
        Ok(v) => v,
        Err(e) => return fail(format!("{}: {e}", path.display())),
    };
    let out = match format {
        ShowFormat::Prometheus => ipsec_tunnel::obs::metrics::prometheus(&v),
        ShowFormat::Json => format!("{v}\n"),
        ShowFormat::Text => {
            // The stats file keeps the engine's snapshot under `engine`.
            let mut flat = v["engine"].clone();
            flat["uptime_seconds"] = v["uptime_seconds"].clone();
            show_text(&flat)
        }
    };
    print!("{out}");
    ExitCode::SUCCESS
}

/// One event as `ipsec monitor` prints it.
pub fn event_text(ev: &Value) -> String {
    let mut t = format!("[{}] {}", ev["time"], s(&ev["event"]));
    if let Some(name) = ev["sa"].as_str() {
        t.push_str(&format!(" {name} (id {}", ev["id"]));
        if let (Some(p), Some(spi)) = (ev["proto"].as_str(), ev["spi"].as_str()) {
            t.push_str(&format!(", {p} spi {spi}"));
        }
        t.push(')');
    }
    for k in ["old_id", "limit", "why"] {
        if !ev[k].is_null() {
            t.push_str(&format!(" {k} {}", s(&ev[k])));
        }
    }
    if ev["policy"].is_object() {
        t.push_str(&format!(": {}", policy_line(&ev["policy"]).trim_start()));
    }
    t
}

/// `ipsec monitor`: prints events until `count` events (exit 0) or until the daemon goes
/// away (exit 1, saying so).
pub fn run_monitor(opts: &ControlOpts, count: Option<u64>) -> ExitCode {
    let mut s = match connect(&opts.control) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if let Err(e) = s.write_all(format!("{}\n", Request::Monitor.to_line().as_str()).as_bytes()) {
        return fail(format!("sending the request: {e}"));
    }
    let mut r = BufReader::new(s);
    let mut line = String::new();
    let mut seen = 0u64;
    let mut first = true;
    loop {
        line.clear();
        match r.read_line(&mut line) {
            // The daemon closed the connection: it stopped, or (before the first line) it
            // refused without a word. Either way the events end here, which a script should
            // hear about.
            Ok(0) if first => return fail("tunneld closed the connection without answering"),
            Ok(0) => {
                return fail(format!(
                    "tunneld closed the connection after {seen} events (did it stop?)"
                ))
            }
            Ok(_) => {}
            Err(e) => return fail(format!("reading events: {e}")),
        }
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            return fail("tunneld sent something that is not JSON");
        };
        if first {
            first = false;
            if v["ok"] != true {
                return fail(v["error"].as_str().unwrap_or("tunneld refused to monitor"));
            }
            continue;
        }
        if opts.json {
            println!("{v}");
        } else {
            println!("{}", event_text(&v));
        }
        let _ = std::io::stdout().flush();
        seen += 1;
        if count.is_some_and(|c| seen >= c) {
            return ExitCode::SUCCESS;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child line keeps the form the interop harness reads (`child NAME: in SPI, out
    /// SPI`); durations are readable; missing fields print `-`.
    #[test]
    fn ike_list_text_is_readable() {
        let v = json!({"ike_sas": [{
            "conn": "gw", "state": "established", "role": "initiator", "spi_i": "0123456789abcdef",
            "spi_r": "fedcba9876543210", "local": "10.0.0.1:4500", "remote": "10.0.0.2:4500",
            "local_id": "a.example", "remote_id": "b.example", "nat": true,
            "proposal": "aes128gcm16-prfsha256-x25519",
            "message_ids": {"next_request": 3, "peer_next": 2}, "age_seconds": 75, "rekey_in_seconds": 14100,
            "counters": {"requests_sent": 3, "requests_answered": 2, "retransmits": 0, "child_rekeys": 1},
            "children": [{"child": "net", "state": "installed", "spi_in": "c0000001", "spi_out": "c0000002",
                "proposal": "aes128gcm16-noesn", "rekeys": "c0000003", "rekey_in_seconds": 3300, "expires_in_seconds": null}]
        }]});
        let t = ike_text(&v);
        assert!(
            t.contains("ike: gw (initiator), established, 10.0.0.1:4500 <-> 10.0.0.2:4500, NAT-T\n"),
            "{t}"
        );
        assert!(t.contains("; aes128gcm16-prfsha256-x25519\n"), "{t}");
        assert!(t.contains("age 1m15s, rekey in 3h55m"), "{t}");
        assert!(t.contains("\n  child net: in c0000001, out c0000002\n"), "{t}");
        assert!(
            t.contains("installed, aes128gcm16-noesn, rekey in 55m00s, expires in -, replaced c0000003"),
            "{t}"
        );
    }

    /// What `ipsec` prints for every response and event line of tunneld's golden transcripts
    /// (`crates/tunnel/src/control/golden.txt`, `crates/tunnel/src/ike/golden.txt`), against
    /// `src/ctl_golden.txt` (`GOLDEN_UPDATE=1 cargo test --lib ctl_cmd` rewrites it).
    #[test]
    fn text_of_every_golden_line_is_unchanged() {
        let golden = [
            include_str!("../crates/tunnel/src/control/golden.txt"),
            include_str!("../crates/tunnel/src/ike/golden.txt"),
        ]
        .concat();
        let mut out = String::new();
        for line in golden.lines() {
            let line = line
                .strip_prefix("< ")
                .or_else(|| line.strip_prefix("! "))
                .unwrap_or(line);
            if line.starts_with(r#"{"v":1,"op""#) || line.starts_with('>') {
                continue;
            }
            out.push_str(&render(line));
            out.push_str("\n--\n");
        }
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/ctl_golden.txt");
        if std::env::var_os("GOLDEN_UPDATE").is_some() {
            std::fs::write(path, &out).unwrap();
            return;
        }
        let want = std::fs::read_to_string(path).unwrap_or_default();
        for (i, (w, g)) in want.lines().zip(out.lines()).enumerate() {
            assert_eq!(g, w, "{path}:{}: the text changed", i + 1);
        }
        assert_eq!(
            out.lines().count(),
            want.lines().count(),
            "{path}: lines added or missing"
        );
    }
}

/// A golden line as `ipsec` prints it (the test's dispatcher: each response by its shape).
#[cfg(test)]
fn render(line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap();
    if v.get("event").is_some() {
        return event_text(&v);
    }
    if v["ok"] != true {
        return format!(
            "ipsec: {}",
            v["error"].as_str().unwrap_or("tunneld refused the request")
        );
    }
    if v.get("uptime_seconds").is_some() {
        return format!("{}\n{}", show_text(&v), ipsec_tunnel::obs::metrics::prometheus(&v));
    }
    if let Some(sas) = v["sas"].as_array() {
        return sas
            .iter()
            .map(|sa| sa_line(sa, false) + "\n" + &sa_line(sa, true) + "\n")
            .collect();
    }
    if v["sa"].is_object() {
        return sa_line(&v["sa"], false) + "\n" + &sa_line(&v["sa"], true);
    }
    if let Some(ps) = v["policies"].as_array() {
        return ps.iter().map(|p| policy_line(p) + "\n").collect();
    }
    if v["policy"].is_object() {
        return format!("removed: {}", policy_line(&v["policy"]).trim_start());
    }
    if v.get("ike_sas").is_some() {
        return ike_text(&v);
    }
    if let Some(old) = v.get("old_id") {
        return format!("SA x replaced: id {} (old id {old} kept until idle)", v["id"]);
    }
    if v.get("id").is_some() {
        return format!("SA x added: id {}", v["id"]);
    }
    if v.get("index").is_some() {
        return format!("policy added at index {}", v["index"]);
    }
    String::new()
}
