//! `ipsec sa|policy|show|monitor`: clients of tunneld's control socket (line-delimited JSON,
//! protocol v1: see docs/control.md and `ipsec_tunnel::control`).

use ipsec_tunnel::control::event::{Event, PolicyInfo};
use ipsec_tunnel::control::response::{
    Alg, Counters, Drops, Empty, IdAnswer, IkeList, IkeSaInfo, IkeStarted, Left, OnePolicy, OneSa, PolicyIndex,
    PolicyList, Replaced, Reply, SaInfo, SaList, Show, ShowSa, Usage,
};
use ipsec_tunnel::control::{IkeRequest, Request, SaRequest};
use ipsec_tunnel::obs::metrics::{prometheus, Metrics};
use serde::de::DeserializeOwned;
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
    /// Our own address changed (a laptop from Wi-Fi to LTE; RFC 4555 3.5): tunneld's sockets
    /// of that IP version are bound to ADDR, and connection NAME's IKE SAs that use MOBIKE
    /// send from there and tell the peer (UPDATE_SA_ADDRESSES): the same IKE and child SAs go
    /// on from the new address. Refused (nothing moves) when the SA does not use MOBIKE.
    Update {
        /// The connection.
        name: String,
        /// The new local address (one this host has).
        #[arg(long)]
        local: std::net::IpAddr,
    },
}

/// The IKE SAs of a `show` or `ike.list` response, as text: one block per IKE SA (a
/// remote-access client's: its outer address and port, virtual IP, identity — the EAP
/// identity and method when EAP authenticated it — and age, its uptime), its algorithms in
/// strongSwan's proposal words, then its child pairs (`child NAME: in SPI, out SPI` and a
/// line of their state, timers and the data plane's bytes).
pub fn ike_text(sas: &[IkeSaInfo]) -> String {
    let mut out = String::new();
    let dur = |x: Option<u64>| match x {
        None => "-".to_string(),
        Some(t) if t >= 3600 => format!("{}h{:02}m", t / 3600, t % 3600 / 60),
        Some(t) if t >= 60 => format!("{}m{:02}s", t / 60, t % 60),
        Some(t) => format!("{t}s"),
    };
    let o = |x: &Option<String>| x.clone().unwrap_or_else(|| "-".into());
    for sa in sas {
        let c = &sa.counters;
        out.push_str(&format!(
            "ike: {} ({}), {}, {} <-> {}{}{}\n  ids {} <-> {}; SPIs {}_i {}_r; {}\n  \
             message IDs: next request {}, peer's next {}; age {}, rekey in {}\n  \
             requests {} sent, {} answered, {} retransmitted; {} child rekeys\n",
            sa.conn,
            sa.role,
            sa.state,
            sa.local,
            sa.remote,
            if sa.nat { ", NAT-T" } else { "" },
            if sa.virtual_ips.is_empty() {
                String::new()
            } else {
                format!(", virtual IP {}", sa.virtual_ips.join(" "))
            } + if sa.mobike { ", MOBIKE" } else { "" },
            o(&sa.local_id),
            match &sa.eap_method {
                Some(m) => format!("{} ({m})", o(&sa.remote_id)),
                None => o(&sa.remote_id),
            },
            sa.spi_i,
            sa.spi_r,
            o(&sa.proposal),
            sa.message_ids.next_request,
            sa.message_ids.peer_next,
            dur(Some(sa.age_seconds)),
            dur(sa.rekey_in_seconds),
            c.requests_sent,
            c.requests_answered,
            c.retransmits,
            c.child_rekeys,
        ));
        for ch in &sa.children {
            out.push_str(&format!(
                "  child {}: in {}, out {}\n    {}, {}, rekey in {}, expires in {}{}{}\n",
                ch.child,
                ch.spi_in,
                ch.spi_out,
                ch.state,
                ch.proposal,
                dur(ch.rekey_in_seconds),
                dur(ch.expires_in_seconds),
                ch.rekeys.as_ref().map_or(String::new(), |r| format!(", replaced {r}")),
                match (ch.bytes_in, ch.bytes_out) {
                    (None, None) => String::new(),
                    (i, o) => format!(
                        "; bytes in {}, out {}",
                        i.map_or("-".into(), |b| b.to_string()),
                        o.map_or("-".into(), |b| b.to_string())
                    ),
                },
            ));
        }
    }
    out
}

/// `CONN` or `CONN/CHILD` from an answer.
fn name_of(v: &IkeStarted) -> String {
    match &v.child {
        Some(ch) => format!("{}/{ch}", v.conn),
        None => v.conn.clone(),
    }
}

/// `ipsec ike ...`.
pub fn run_ike(cmd: &IkeCmd, opts: &ControlOpts) -> ExitCode {
    match cmd {
        IkeCmd::Initiate { name } => respond(
            opts,
            &Request::Ike(IkeRequest::initiate(name)).to_line(),
            |v: &IkeStarted| match &v.spi {
                Some(spi) => format!("{}: initiating (IKE SPI {spi})", v.conn),
                None => format!("{}: initiating", name_of(v)),
            },
        ),
        IkeCmd::Terminate { name } => respond(
            opts,
            &Request::Ike(IkeRequest::Terminate { conn: name.clone() }).to_line(),
            |v: &IkeStarted| format!("{}: deleting", v.conn),
        ),
        IkeCmd::Rekey { name } => respond(
            opts,
            &Request::Ike(IkeRequest::rekey(name)).to_line(),
            |v: &IkeStarted| format!("{}: rekeying", name_of(v)),
        ),
        IkeCmd::Update { name, local } => respond(
            opts,
            &Request::Ike(IkeRequest::Update {
                conn: name.clone(),
                local: *local,
            })
            .to_line(),
            |v: &IkeStarted| {
                format!(
                    "{}: moving to {local}: UPDATE_SA_ADDRESSES on {} IKE SA(s)",
                    v.conn,
                    v.pairs.unwrap_or(0)
                )
            },
        ),
        IkeCmd::List => respond(opts, &Request::Ike(IkeRequest::List).to_line(), |v: &IkeList| {
            let t = ike_text(&v.ike_sas);
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

/// Sends one request and returns the response line.
pub fn call(path: &Path, request: &str) -> Result<String, String> {
    let mut s = connect(path)?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    s.write_all(request.as_bytes())
        .and_then(|()| s.write_all(b"\n"))
        .map_err(|e| format!("sending the request: {}", ipsec_config::io_reason(&e)))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("reading the response: {}", ipsec_config::io_reason(&e)))?;
    Ok(line.trim_end().to_string())
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("ipsec: {e}");
    ExitCode::FAILURE
}

/// Sends `request` and prints its answer, read as `T` (the type the request calls for), as
/// `text` words it; with `--json` the daemon's line as it came.
fn respond<T: DeserializeOwned>(opts: &ControlOpts, request: &str, text: impl Fn(&T) -> String) -> ExitCode {
    let line = match call(&opts.control, request) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let answer = Reply::parse::<T>(&line);
    if opts.json && (answer.is_ok() || serde_json::from_str::<serde::de::IgnoredAny>(&line).is_ok()) {
        println!("{line}");
    }
    match answer {
        Err(e) => fail(e),
        Ok(_) if opts.json => ExitCode::SUCCESS,
        Ok(v) => {
            let t = text(&v);
            if !t.is_empty() {
                println!("{}", t.trim_end());
            }
            ExitCode::SUCCESS
        }
    }
}

fn sa_line(sa: &SaInfo, keys: bool) -> String {
    let spec = if keys {
        sa.spec_with_keys.as_deref().unwrap_or("-")
    } else {
        &sa.spec
    };
    format!("{} (id {}, {}): {}", sa.name, sa.id, sa.state, spec)
}

/// `ipsec sa ...`.
pub fn run_sa(cmd: &SaCmd, opts: &ControlOpts) -> ExitCode {
    match cmd {
        SaCmd::Add(a) => {
            let req = match install_request(false, a) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            respond(opts, &req, |v: &IdAnswer| format!("SA {} added: id {}", a.name, v.id))
        }
        SaCmd::Update(a) => {
            let req = match install_request(true, a) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            respond(opts, &req, |v: &Replaced| {
                format!(
                    "SA {} replaced: id {} (old id {} kept until idle)",
                    a.name, v.id, v.old_id
                )
            })
        }
        SaCmd::Del { name } => respond(
            opts,
            &Request::SaDel { name: name.clone() }.to_line(),
            |v: &IdAnswer| format!("SA {name} removed (id {})", v.id),
        ),
        SaCmd::List { keys } => respond(opts, &Request::SaList { keys: *keys }.to_line(), |v: &SaList| {
            if v.sas.is_empty() {
                return "no SAs".into();
            }
            v.sas.iter().map(|sa| sa_line(sa, *keys) + "\n").collect()
        }),
        SaCmd::Get { name, keys } => respond(
            opts,
            &Request::SaGet {
                name: name.clone(),
                keys: *keys,
            }
            .to_line(),
            |v: &OneSa| sa_line(&v.sa, *keys),
        ),
    }
}

fn policy_line(p: &PolicyInfo) -> String {
    let mut l = format!(
        "{}  {:<3} {} -> {} proto {} sport {} dport {}  {}",
        p.index, p.dir, p.src, p.dst, p.proto, p.src_port, p.dst_port, p.action
    );
    if !p.bundle.is_empty() {
        l.push_str(&format!(" [{}]", p.bundle.join(", ")));
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
            respond(opts, &Request::PolicyAdd { policy: p }.to_line(), |v: &PolicyIndex| {
                format!("policy added at index {}", v.index)
            })
        }
        PolicyCmd::Del { index } => respond(
            opts,
            &Request::PolicyDel { index: *index }.to_line(),
            |v: &OnePolicy| format!("removed: {}", policy_line(&v.policy).trim_start()),
        ),
        PolicyCmd::List => respond(opts, &Request::PolicyList.to_line(), |v: &PolicyList| {
            if v.policies.is_empty() {
                return "no policies".into();
            }
            v.policies.iter().map(|p| policy_line(p) + "\n").collect()
        }),
    }
}

fn alg(a: &Option<Alg>, what: &str) -> Option<String> {
    let a = a.as_ref()?;
    let mut t = format!("{what} {} {}-bit key", a.alg, a.key_bits);
    if let Some(i) = a.icv_bits {
        t.push_str(&format!(", {i}-bit ICV"));
    }
    Some(t)
}

fn drops(d: &Drops) -> String {
    let nonzero: Vec<String> =
        d.0.iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
    if nonzero.is_empty() {
        "none".into()
    } else {
        nonzero.join(", ")
    }
}

fn limits(l: &Left) -> String {
    let parts: Vec<String> = [(l.seconds, "s"), (l.bytes, "B"), (l.packets, "packets")]
        .iter()
        .filter_map(|(n, unit)| n.map(|n| format!("{n} {unit}")))
        .collect();
    if parts.is_empty() {
        "unlimited".into()
    } else {
        parts.join(", ")
    }
}

/// `ipsec show`'s text: per SA, like `wg show`.
pub fn show_text(v: &Show) -> String {
    let mut out = format!("uptime: {} s\n", v.uptime_seconds);
    let ike = ike_text(v.ike_sas.as_deref().unwrap_or_default());
    if !ike.is_empty() {
        out.push('\n');
        out.push_str(&ike);
    }
    for sa in &v.sas {
        let i = &sa.sa;
        let ends = match (&i.src, &i.dst) {
            (Some(a), Some(b)) => format!(", {a} -> {b}"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "\nsa: {}{}\n  id {}, {} spi {:#x}, {} mode{ends}\n",
            i.name,
            if sa.retiring { " (retiring)" } else { "" },
            i.id,
            i.proto,
            i.spi,
            i.mode,
        ));
        let algs: Vec<String> = [alg(&i.enc, "enc"), alg(&i.auth, "auth"), alg(&i.aead, "aead")]
            .into_iter()
            .flatten()
            .chain(i.comp.as_ref().map(|c| format!("comp {c}")))
            .collect();
        if !algs.is_empty() {
            out.push_str(&format!("  algorithms: {}\n", algs.join("; ")));
        }
        out.push_str(&format!("  state: {}, age {} s\n", i.state, sa.age_seconds));
        for (dir, c) in [("inbound", &sa.inbound), ("outbound", &sa.outbound)] {
            out.push_str(&format!(
                "  {dir}: {} packets, {} bytes; drops: {}\n",
                c.packets,
                c.bytes_before,
                drops(&c.drops)
            ));
        }
        out.push_str(&format!(
            "  lifetime left: soft {}; hard {}\n",
            limits(&sa.lifetime_left.soft),
            limits(&sa.lifetime_left.hard)
        ));
        if let Some(q) = &sa.seq {
            out.push_str(&format!(
                "  replay window: {} packets, highest received {}; next sequence number sent {}\n",
                i.replay_window,
                q.replay_top,
                q.next_seq.map_or("-".to_string(), |n| n.to_string())
            ));
        }
    }
    out.push_str(&format!(
        "\nnot charged to an SA: inbound drops: {}; outbound drops: {}\n",
        drops(&v.inbound_drops),
        drops(&v.outbound_drops)
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
                |v: &Show| prometheus(&Metrics::of_show(v)),
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
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return fail(format!("{}: {e}", path.display())),
    };
    let out = match format {
        ShowFormat::Prometheus => match Metrics::of_stats_json(&bytes) {
            Ok(m) => prometheus(&m),
            Err(e) => return fail(format!("{}: {e}", path.display())),
        },
        ShowFormat::Json => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => format!("{v}\n"),
            Err(e) => return fail(format!("{}: not tunneld's stats JSON: {e}", path.display())),
        },
        ShowFormat::Text => match serde_json::from_slice::<StatsFile>(&bytes) {
            Ok(f) => show_text(&f.show()),
            Err(e) => return fail(format!("{}: not tunneld's stats JSON: {e}", path.display())),
        },
    };
    print!("{out}");
    ExitCode::SUCCESS
}

/// The stats file (`tunneld --stats FILE`) as `ipsec show --stats` reads it: the engine's
/// snapshot under `engine`, its SAs without their parameters.
#[derive(serde::Deserialize)]
struct StatsFile {
    #[serde(default)]
    uptime_seconds: u64,
    engine: StatsEngine,
}

#[derive(serde::Deserialize)]
struct StatsEngine {
    sas: Vec<StatsSa>,
    inbound_drops: Drops,
    outbound_drops: Drops,
}

#[derive(serde::Deserialize)]
struct StatsSa {
    id: u32,
    name: String,
    proto: String,
    spi: u32,
    mode: String,
    state: String,
    #[serde(default)]
    expired_by: Option<String>,
    usage: Usage,
    age_seconds: u64,
    inbound: Counters,
    outbound: Counters,
}

impl StatsFile {
    /// As a `show` answer: the parameters the file does not have are left out.
    fn show(self) -> Show {
        Show {
            uptime_seconds: self.uptime_seconds,
            sas: self
                .engine
                .sas
                .into_iter()
                .map(|x| ShowSa {
                    sa: SaInfo {
                        name: x.name,
                        lifetime: Default::default(),
                        proto: x.proto,
                        spi: x.spi,
                        mode: x.mode,
                        src: None,
                        dst: None,
                        enc: None,
                        auth: None,
                        aead: None,
                        comp: None,
                        adaptive: None,
                        link_bps: None,
                        alternative: None,
                        replay_window: 0,
                        esn: false,
                        encap: None,
                        id: x.id,
                        state: x.state,
                        spec: String::new(),
                        spec_with_keys: None,
                    },
                    retiring: false,
                    expired_by: x.expired_by,
                    usage: x.usage,
                    age_seconds: x.age_seconds,
                    inbound: x.inbound,
                    outbound: x.outbound,
                    lifetime_left: Default::default(),
                    seq: None,
                })
                .collect(),
            inbound_drops: self.engine.inbound_drops,
            outbound_drops: self.engine.outbound_drops,
            ike_sas: None,
        }
    }
}

/// One event as `ipsec monitor` prints it.
pub fn event_text(ev: &Event) -> String {
    let mut t = format!("[{}] {}", ev.time(), ev.kind());
    if let Some(sa) = ev.sa() {
        t.push_str(&format!(" {} (id {}", sa.sa, sa.id));
        if let (Some(p), Some(spi)) = (&sa.proto, &sa.spi) {
            t.push_str(&format!(", {p} spi {spi}"));
        }
        t.push(')');
        if let Some(old) = sa.old_id {
            t.push_str(&format!(" old_id {old}"));
        }
        if let Some(l) = &sa.limit {
            t.push_str(&format!(" limit {l}"));
        }
    }
    if let Some(why) = ev.why() {
        t.push_str(&format!(" why {why}"));
    }
    if let Some(p) = ev.policy() {
        t.push_str(&format!(": {}", policy_line(p).trim_start()));
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
        let l = line.trim_end();
        if first {
            first = false;
            if let Err(e) = Reply::parse::<Empty>(l) {
                return fail(if e == "tunneld refused the request" {
                    "tunneld refused to monitor".into()
                } else {
                    e
                });
            }
            continue;
        }
        if opts.json {
            if serde_json::from_str::<serde::de::IgnoredAny>(l).is_err() {
                return fail("tunneld sent something that is not JSON");
            }
            println!("{l}");
        } else {
            match Event::parse(l) {
                Ok(ev) => println!("{}", event_text(&ev)),
                Err(_) if serde_json::from_str::<serde::de::IgnoredAny>(l).is_ok() => {
                    // An event this client does not know (a newer tunneld): its line.
                    println!("{l}")
                }
                Err(_) => return fail("tunneld sent something that is not JSON"),
            }
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
        let v: IkeList = serde_json::from_value(v).unwrap();
        let t = ike_text(&v.ike_sas);
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
        // A road warrior's IKE SA shows its virtual IP (docs/remote-access.md).
        let mut v = v;
        v.ike_sas[0].virtual_ips = vec!["10.3.0.2".into()];
        let t = ike_text(&v.ike_sas);
        assert!(t.contains("<-> 10.0.0.2:4500, NAT-T, virtual IP 10.3.0.2\n"), "{t}");
        assert!(
            !t.contains("bytes") && t.contains("ids a.example <-> b.example;"),
            "{t}"
        );
        // An EAP client: its EAP identity and method; its children's bytes (#36).
        v.ike_sas[0].remote_id = Some("alice".into());
        v.ike_sas[0].eap_method = Some("eap-mschapv2".into());
        v.ike_sas[0].children[0].bytes_in = Some(1200);
        v.ike_sas[0].children[0].bytes_out = Some(34_000);
        let t = ike_text(&v.ike_sas);
        assert!(t.contains("ids a.example <-> alice (eap-mschapv2);"), "{t}");
        assert!(t.contains("replaced c0000003; bytes in 1200, out 34000\n"), "{t}");
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

    /// A golden line as `ipsec` prints it (the test's dispatcher: each response by its shape,
    /// read as the type the request calls for).
    fn render(line: &str) -> String {
        fn p<T: DeserializeOwned>(line: &str) -> T {
            Reply::parse(line).unwrap_or_else(|e| panic!("{line}: {e}"))
        }
        if line.contains(r#""event":"#) {
            return event_text(&Event::parse(line).unwrap());
        }
        if let Err(e) = Reply::parse::<Empty>(line) {
            return format!("ipsec: {e}");
        }
        if line.contains(r#""uptime_seconds""#) {
            let v: Show = p(line);
            return format!("{}\n{}", show_text(&v), prometheus(&Metrics::of_show(&v)));
        }
        if line.contains(r#""sas""#) {
            let v: SaList = p(line);
            return v
                .sas
                .iter()
                .map(|sa| sa_line(sa, false) + "\n" + &sa_line(sa, true) + "\n")
                .collect();
        }
        if line.contains(r#""sa""#) {
            let v: OneSa = p(line);
            return sa_line(&v.sa, false) + "\n" + &sa_line(&v.sa, true);
        }
        if line.contains(r#""policies""#) {
            let v: PolicyList = p(line);
            return v.policies.iter().map(|x| policy_line(x) + "\n").collect();
        }
        if line.contains(r#""policy""#) {
            let v: OnePolicy = p(line);
            return format!("removed: {}", policy_line(&v.policy).trim_start());
        }
        if line.contains(r#""ike_sas""#) {
            let v: IkeList = p(line);
            return ike_text(&v.ike_sas);
        }
        if line.contains(r#""old_id""#) {
            let v: Replaced = p(line);
            return format!("SA x replaced: id {} (old id {} kept until idle)", v.id, v.old_id);
        }
        if line.contains(r#""id""#) {
            let v: IdAnswer = p(line);
            return format!("SA x added: id {}", v.id);
        }
        if line.contains(r#""index""#) {
            let v: PolicyIndex = p(line);
            return format!("policy added at index {}", v.index);
        }
        String::new()
    }
}
