//! `ipsec model`: the speedup models of McGregor & Lee, "Performance Impact of Data Compression
//! on Virtual Private Network Transactions", evaluated from measured rates.
//!
//! Four models, per packet (one TCP segment), `S >= 1` meaning compression helps:
//! - `ipsec-only` (the paper's table 2): `T_NET / (T_E + T_HC + T_SECNET + T_HV + T_D)`;
//! - `local-send`: `(T_E + T_HC) / (T_COMP + C_E + C_HC)`;
//! - `local-receive`: `(T_HV + T_D) / (C_HV + C_D + T_DECOMP)`;
//! - `complete`: `(T_E + T_HC + T_SECNET + T_HV + T_D) /
//!   (T_COMP + C_E + C_HC + C_SECNET + C_HV + C_D + T_DECOMP)`.
//!
//! Accounting (the one that reproduces table 2 within 0.01, see `tests/model_table2.rs`):
//! - byte counts come from [`wire_bytes`]: IPv6 (40) + TCP (20), AH (12 + 96-bit ICV) before
//!   ESP (8 header + 8 IV + padding to 8 + 2 trailer), IPComp (4) inside ESP, fragmented at the
//!   MTU (1280) with an 8-byte fragment header on each fragment;
//! - `T_NET`, `T_SECNET`, `C_SECNET` = all wire bytes (every fragment's headers) / (link × efficiency);
//! - `T_E` = `T_D` = ESP-encrypted bytes (TCP segment + padding + trailer) / cipher rate;
//! - `T_HC` = `T_HV` = AH-authenticated bytes (the whole IPv6 packet before fragmentation) / HMAC
//!   rate; computation and verification both count;
//! - rates are those measured at the packet's payload size (table 2 uses 4 KB);
//! - `T_COMP`, `T_DECOMP` = uncompressed TCP payload bytes / (de)compression rate (the TCP header
//!   is not compressed: only the payload was measured);
//! - the compressed payload *including* the IPComp header is `ceil(payload / ratio)` bytes (the
//!   paper's ratios count that header). Non-expansion (ratio <= 1, or a decompression rate of 0):
//!   the packet is sent uncompressed (`C_* = T_*`), compression time is still spent, nothing is
//!   decompressed, and Local Receive is undefined (empty in CSV, `n/a` in markdown).
//!
//! Break-even (`--break-even`): the smallest header-free ratio X with
//! `(1 - 1/X)(sum of 1/R saved) >= sum of 1/R added`, per model, compressor, data set, payload,
//! suite (and link for Complete, where `R_SECNET` = link × efficiency). `inf` when no ratio
//! pays; undefined where a decompression rate is 0.

mod formulas;
mod inputs;
mod wire;

pub use formulas::{break_even, complete, gain_cost, ipsec_only, local_receive, local_send, SecTimes};
pub use inputs::{AlgKind, AlgRates, CompressorRates, DataSetRates, PayloadSize, Rates, CRYPTO_FILE};
pub use wire::{wire_bytes, Overheads, PacketBytes};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Links evaluated by default (nominal rates).
pub const DEFAULT_LINKS: &str = "56k,1.54M,10M,100M,1G";
/// Fraction of the nominal link rate sustained, by default.
pub const DEFAULT_EFFICIENCY: f64 = 0.8;
/// Environment variable naming the input directory (overridden by `--inputs`).
pub const PAPER_ENV: &str = "IPSEC_PAPER";

/// Where inputs are read from without `--inputs`: `$IPSEC_PAPER`, else `../shared/paper`
/// relative to the workspace root.
pub fn default_inputs_dir() -> PathBuf {
    match std::env::var_os(PAPER_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("shared")
            .join("paper"),
    }
}

/// An IPsec suite: at most one ESP cipher and at most one AH integrity algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suite {
    pub cipher: Option<String>,
    pub integrity: Option<String>,
}

impl Suite {
    pub fn null() -> Suite {
        Suite {
            cipher: None,
            integrity: None,
        }
    }

    /// `null`, or the algorithm names joined with `+` (cipher first).
    pub fn name(&self) -> String {
        let parts: Vec<&str> = self
            .cipher
            .iter()
            .chain(self.integrity.iter())
            .map(String::as_str)
            .collect();
        if parts.is_empty() {
            "null".to_string()
        } else {
            parts.join("+")
        }
    }
}

/// Null, each cipher, each integrity algorithm, then each cipher+integrity pair.
pub fn suites(rates: &Rates) -> Vec<Suite> {
    let mut out = vec![Suite::null()];
    out.extend(rates.ciphers().map(|c| Suite {
        cipher: Some(c.name.clone()),
        integrity: None,
    }));
    out.extend(rates.integrity().map(|i| Suite {
        cipher: None,
        integrity: Some(i.name.clone()),
    }));
    for c in rates.ciphers() {
        for i in rates.integrity() {
            out.push(Suite {
                cipher: Some(c.name.clone()),
                integrity: Some(i.name.clone()),
            });
        }
    }
    out
}

/// A network link.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// `56kbps`, `1.54Mbps`, ...
    pub name: String,
    /// Nominal rate, bit/s.
    pub bps: f64,
}

impl Link {
    /// `56k`, `1.54M`, `1G`, `100Mbps`, `56000` (bit/s; k/M/G are powers of 1000).
    pub fn parse(s: &str) -> Result<Link, String> {
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        let core = lower
            .strip_suffix("bps")
            .or_else(|| lower.strip_suffix("b/s"))
            .unwrap_or(&lower);
        let (num, mult, unit) = match core.chars().last() {
            Some('k') => (&core[..core.len() - 1], 1e3, "k"),
            Some('m') => (&core[..core.len() - 1], 1e6, "M"),
            Some('g') => (&core[..core.len() - 1], 1e9, "G"),
            _ => (core, 1.0, ""),
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("bad link rate `{s}` (expected e.g. 1.54M)"))?;
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("bad link rate `{s}`: must be > 0"));
        }
        Ok(Link {
            name: format!("{num}{unit}bps"),
            bps: v * mult,
        })
    }
}

/// Everything assumed rather than measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Env {
    pub links: Vec<Link>,
    /// Fraction of each link's nominal rate sustained (0 < e <= 1).
    pub efficiency: f64,
    pub overheads: Overheads,
}

impl Default for Env {
    /// The paper's: five links at 80%, IPv6/TCP, MTU 1280.
    fn default() -> Self {
        Env {
            links: DEFAULT_LINKS
                .split(',')
                .map(|l| Link::parse(l).expect("default links parse"))
                .collect(),
            efficiency: DEFAULT_EFFICIENCY,
            overheads: Overheads::default(),
        }
    }
}

impl Env {
    fn validate(&self) -> Result<(), String> {
        if !(self.efficiency > 0.0 && self.efficiency <= 1.0) {
            return Err(format!("efficiency {} must be in (0, 1]", self.efficiency));
        }
        if self.links.is_empty() {
            return Err("no links".into());
        }
        self.overheads.validate()
    }
}

/// The models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Model {
    IpsecOnly,
    LocalSend,
    LocalReceive,
    Complete,
}

impl Model {
    pub const ALL: [Model; 4] = [Model::IpsecOnly, Model::LocalSend, Model::LocalReceive, Model::Complete];

    pub fn name(self) -> &'static str {
        match self {
            Model::IpsecOnly => "ipsec-only",
            Model::LocalSend => "local-send",
            Model::LocalReceive => "local-receive",
            Model::Complete => "complete",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Model::IpsecOnly => "IPsec-only slowdown",
            Model::LocalSend => "Local Send",
            Model::LocalReceive => "Local Receive",
            Model::Complete => "Complete",
        }
    }

    fn uses_link(self) -> bool {
        matches!(self, Model::IpsecOnly | Model::Complete)
    }

    fn uses_compression(self) -> bool {
        self != Model::IpsecOnly
    }
}

/// One output value: a speedup, or a break-even ratio.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub model: Model,
    /// `None` for the link-independent local models.
    pub network: Option<String>,
    /// `None` for `ipsec-only`.
    pub compressor: Option<String>,
    pub dataset: Option<String>,
    /// Payload label: `1k`, `4k`, `63k`.
    pub payload: String,
    /// [`Suite::name`].
    pub suite: String,
    /// `None` when undefined (Local Receive with nothing decompressed).
    pub value: Option<f64>,
}

const BITS_PER_MBIT: f64 = 1e6;

/// Per-packet times of `pkt` under `suite` at payload index `pi`; `secnet` is 0 without a link.
fn sec_times(rates: &Rates, suite: &Suite, pi: usize, pkt: &PacketBytes, link_bps: Option<f64>) -> SecTimes {
    let rate = |name: &Option<String>| {
        name.as_deref()
            .map(|n| rates.alg(n).expect("suite from rates").mbps[pi])
    };
    let bits = |bytes: usize| bytes as f64 * 8.0;
    let e = rate(&suite.cipher).map_or(0.0, |r| bits(pkt.encrypted) / (r * BITS_PER_MBIT));
    let h = rate(&suite.integrity).map_or(0.0, |r| bits(pkt.authenticated) / (r * BITS_PER_MBIT));
    let secnet = link_bps.map_or(0.0, |b| bits(pkt.wire) / b);
    SecTimes {
        e,
        d: e,
        hc: h,
        hv: h,
        secnet,
    }
}

/// TCP payload bytes actually carried after compression, *excluding* the IPComp header, or
/// `None` when the packet is sent uncompressed (non-expansion). `ratio` counts the header.
pub fn compressed_payload(payload: usize, ratio: f64, decomp_mbps: f64, o: &Overheads) -> Option<usize> {
    if ratio <= 1.0 || decomp_mbps <= 0.0 {
        return None;
    }
    let with_header = (payload as f64 / ratio).ceil() as usize;
    (with_header < payload).then(|| with_header.saturating_sub(o.ipcomp_header))
}

/// Evaluates `models` for every link, compressor, data set, payload and suite.
pub fn evaluate(rates: &Rates, env: &Env, models: &[Model]) -> Vec<Row> {
    let o = &env.overheads;
    let suites = suites(rates);
    let mut rows = Vec::new();
    for &model in models {
        if model == Model::IpsecOnly {
            for (pi, p) in rates.payloads.iter().enumerate() {
                for link in &env.links {
                    let bps = link.bps * env.efficiency;
                    let t_net = wire_bytes(p.bytes, &Suite::null(), false, o).wire as f64 * 8.0 / bps;
                    for s in &suites {
                        let t = sec_times(rates, s, pi, &wire_bytes(p.bytes, s, false, o), Some(bps));
                        rows.push(Row {
                            model,
                            network: Some(link.name.clone()),
                            compressor: None,
                            dataset: None,
                            payload: p.label.clone(),
                            suite: s.name(),
                            value: Some(ipsec_only(t_net, &t)),
                        });
                    }
                }
            }
            continue;
        }
        for comp in &rates.compressors {
            for (pi, p) in rates.payloads.iter().enumerate() {
                let links: Vec<Option<&Link>> = if model.uses_link() {
                    env.links.iter().map(Some).collect()
                } else {
                    vec![None]
                };
                for link in links {
                    let bps = link.map(|l| l.bps * env.efficiency);
                    for ds in &comp.datasets {
                        let sent = compressed_payload(p.bytes, ds.ratio[pi], ds.decomp_mbps[pi], o);
                        let t_comp = p.bytes as f64 * 8.0 / (ds.comp_mbps[pi] * BITS_PER_MBIT);
                        let t_decomp = sent.map(|_| p.bytes as f64 * 8.0 / (ds.decomp_mbps[pi] * BITS_PER_MBIT));
                        for s in &suites {
                            let t = sec_times(rates, s, pi, &wire_bytes(p.bytes, s, false, o), bps);
                            let c = match sent {
                                Some(n) => sec_times(rates, s, pi, &wire_bytes(n, s, true, o), bps),
                                None => t,
                            };
                            let value = match model {
                                Model::LocalSend => Some(local_send(&t, &c, t_comp)),
                                Model::LocalReceive => local_receive(&t, &c, t_decomp),
                                Model::Complete => Some(complete(&t, &c, t_comp, t_decomp.unwrap_or(0.0))),
                                Model::IpsecOnly => unreachable!(),
                            };
                            rows.push(Row {
                                model,
                                network: link.map(|l| l.name.clone()),
                                compressor: Some(comp.name.clone()),
                                dataset: Some(ds.name.clone()),
                                payload: p.label.clone(),
                                suite: s.name(),
                                value,
                            });
                        }
                    }
                }
            }
        }
    }
    rows
}

/// Break-even compression ratios of the README's inequalities (rates header-free). `ipsec-only`
/// has none and is skipped. `value` is `Some(inf)` when compression never pays and `None` when
/// undefined (no decompression rate).
pub fn break_even_rows(rates: &Rates, env: &Env, models: &[Model]) -> Vec<Row> {
    let suites = suites(rates);
    let mut rows = Vec::new();
    for &model in models.iter().filter(|m| m.uses_compression()) {
        for comp in &rates.compressors {
            for (pi, p) in rates.payloads.iter().enumerate() {
                let links: Vec<Option<&Link>> = if model.uses_link() {
                    env.links.iter().map(Some).collect()
                } else {
                    vec![None]
                };
                for link in links {
                    for ds in &comp.datasets {
                        let (rc, rd) = (ds.comp_mbps[pi] * BITS_PER_MBIT, ds.decomp_mbps[pi] * BITS_PER_MBIT);
                        for s in &suites {
                            let r = |n: &Option<String>| {
                                n.as_deref()
                                    .map(|n| rates.alg(n).expect("suite").mbps[pi] * BITS_PER_MBIT)
                            };
                            let (re, rh) = (r(&s.cipher), r(&s.integrity));
                            // One side of each inequality: the crypto work compression shrinks.
                            let mut gain: Vec<f64> = Vec::new();
                            let cost: Vec<f64> = match model {
                                Model::LocalSend => {
                                    gain.extend(re.into_iter().chain(rh));
                                    vec![rc]
                                }
                                Model::LocalReceive => {
                                    // Decryption and verification run at the encryption and computation rates.
                                    gain.extend(re.into_iter().chain(rh));
                                    vec![rd]
                                }
                                _ => {
                                    gain.extend(re.into_iter().chain(re).chain(rh).chain(rh));
                                    gain.extend(link.map(|l| l.bps * env.efficiency));
                                    vec![rc, rd]
                                }
                            };
                            let value = gain_cost(&gain, &cost).map(|(g, c)| break_even(g, c));
                            rows.push(Row {
                                model,
                                network: link.map(|l| l.name.clone()),
                                compressor: Some(comp.name.clone()),
                                dataset: Some(ds.name.clone()),
                                payload: p.label.clone(),
                                suite: s.name(),
                                value,
                            });
                        }
                    }
                }
            }
        }
    }
    rows
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Csv,
    Markdown,
}

/// Evaluate the McGregor-Lee speedup models (IPsec-only slowdown, Local Send, Local Receive,
/// Complete) from measured crypto and (de)compression rates.
#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// Directory with the input CSVs (table1_crypto_rates_mbps.csv, table4_compression_ratios.csv,
    /// *_<compressor>_rates_mbps.csv) [default: $IPSEC_PAPER, else ../shared/paper from the
    /// workspace root].
    #[arg(long, value_name = "DIR")]
    pub inputs: Option<PathBuf>,
    /// Links, comma-separated nominal rates (k/M/G = 10^3/10^6/10^9 bit/s).
    #[arg(long, value_name = "RATES", value_delimiter = ',', default_value = DEFAULT_LINKS)]
    pub links: Vec<String>,
    /// Fraction of each link's nominal rate actually sustained.
    #[arg(long, value_name = "E", default_value_t = DEFAULT_EFFICIENCY)]
    pub efficiency: f64,
    /// Network MTU (bytes); larger packets are fragmented.
    #[arg(long, value_name = "BYTES", default_value_t = 1280)]
    pub mtu: usize,
    /// Models to evaluate, comma-separated [default: all].
    #[arg(long = "model", value_name = "MODEL", value_enum, value_delimiter = ',')]
    pub models: Vec<Model>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Markdown)]
    pub format: Format,
    /// Print the break-even compression ratios instead of the speedups.
    #[arg(long)]
    pub break_even: bool,
}

/// Runs `ipsec model`; returns the text to print.
pub fn run(args: &ModelArgs) -> Result<String, String> {
    let dir = args.inputs.clone().unwrap_or_else(default_inputs_dir);
    let rates = Rates::from_paper_dir(&dir)?;
    let env = Env {
        links: args.links.iter().map(|l| Link::parse(l)).collect::<Result<_, _>>()?,
        efficiency: args.efficiency,
        overheads: Overheads {
            mtu: args.mtu,
            ..Overheads::default()
        },
    };
    env.validate()?;
    let mut notes = Vec::new();
    let models: Vec<Model> = if args.models.is_empty() {
        if rates.compressors.is_empty() {
            notes.push(format!(
                "no compression inputs in {}: only the ipsec-only model is evaluated",
                dir.display()
            ));
            vec![Model::IpsecOnly]
        } else {
            Model::ALL.to_vec()
        }
    } else {
        if rates.compressors.is_empty() && args.models.iter().any(|m| m.uses_compression()) {
            return Err(format!(
                "{}: no compression inputs (table 4 and rate tables) for the compression models",
                dir.display()
            ));
        }
        args.models.clone()
    };
    if args.break_even && !models.iter().any(|m| m.uses_compression()) {
        return Err("break-even ratios exist only for the compression models".into());
    }
    let rows = if args.break_even {
        break_even_rows(&rates, &env, &models)
    } else {
        evaluate(&rates, &env, &models)
    };
    Ok(match args.format {
        Format::Csv => to_csv(&rows, if args.break_even { "break_even" } else { "speedup" }),
        Format::Markdown => {
            let mut s = String::new();
            for n in notes {
                let _ = writeln!(s, "> {n}\n");
            }
            s + &to_markdown(&rows, args.break_even)
        }
    })
}

fn csv_value(v: Option<f64>) -> String {
    match v {
        None => String::new(),
        Some(x) if x.is_infinite() => "inf".into(),
        Some(x) => format!("{x:.6}"),
    }
}

/// CSV: `model,network,compressor,dataset,payload,suite,<value_column>`; empty fields where not
/// applicable or undefined.
pub fn to_csv(rows: &[Row], value_column: &str) -> String {
    let mut s = format!("model,network,compressor,dataset,payload,suite,{value_column}\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{}",
            r.model.name(),
            r.network.as_deref().unwrap_or(""),
            r.compressor.as_deref().unwrap_or(""),
            r.dataset.as_deref().unwrap_or(""),
            r.payload,
            r.suite,
            csv_value(r.value)
        );
    }
    s
}

fn md_value(v: Option<f64>) -> String {
    match v {
        None => "n/a".into(),
        Some(x) if x.is_infinite() => "never".into(),
        Some(x) => format!("{x:.2}"),
    }
}

/// Markdown tables laid out like the paper's: suites across; networks down for `ipsec-only`
/// (one table per payload; 4k is table 2), data sets down for the others (one table per
/// compressor and payload, and per network for Complete).
pub fn to_markdown(rows: &[Row], break_even: bool) -> String {
    // Groups in first-appearance order; within a group, row labels and suites likewise.
    type Key<'a> = (Model, Option<&'a str>, &'a str, Option<&'a str>);
    let mut groups: Vec<(Key, Vec<&Row>)> = Vec::new();
    for r in rows {
        let net = if r.model == Model::IpsecOnly {
            None
        } else {
            r.network.as_deref()
        };
        let key = (r.model, r.compressor.as_deref(), r.payload.as_str(), net);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let mut s = String::new();
    for ((model, comp, payload, net), rs) in groups {
        let mut title = format!(
            "{}{}",
            model.title(),
            if break_even {
                " break-even compression ratio"
            } else {
                ""
            }
        );
        if let Some(c) = comp {
            let _ = write!(title, ", {c}");
        }
        let _ = write!(title, ", {payload} payload");
        if let Some(n) = net {
            let _ = write!(title, ", {n}");
        }
        if model == Model::IpsecOnly && payload == "4k" {
            title.push_str(" (the paper's table 2)");
        }
        let _ = writeln!(s, "### {title}\n");
        let label = |r: &Row| -> String {
            if model == Model::IpsecOnly {
                r.network.clone().unwrap_or_default()
            } else {
                r.dataset.clone().unwrap_or_default()
            }
        };
        let mut labels: Vec<String> = Vec::new();
        let mut suites: Vec<&str> = Vec::new();
        for r in &rs {
            let l = label(r);
            if !labels.contains(&l) {
                labels.push(l);
            }
            if !suites.contains(&r.suite.as_str()) {
                suites.push(&r.suite);
            }
        }
        let head = if model == Model::IpsecOnly {
            "network"
        } else {
            "data set"
        };
        let _ = writeln!(s, "| {head} | {} |", suites.join(" | "));
        let _ = writeln!(s, "|---|{}", "---:|".repeat(suites.len()));
        for l in &labels {
            let cells: Vec<String> = suites
                .iter()
                .map(|su| {
                    rs.iter()
                        .find(|r| label(r) == *l && r.suite == *su)
                        .map_or(String::new(), |r| md_value(r.value))
                })
                .collect();
            let _ = writeln!(s, "| {l} | {} |", cells.join(" | "));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_rates() -> Rates {
        let p = |l: &str| PayloadSize::from_label(l).unwrap();
        Rates {
            payloads: vec![p("4k")],
            crypto: vec![
                AlgRates {
                    name: "rc5-cbc".into(),
                    kind: AlgKind::Cipher,
                    mbps: vec![100.0],
                },
                AlgRates {
                    name: "hmac-md5".into(),
                    kind: AlgKind::Integrity,
                    mbps: vec![300.0],
                },
            ],
            compressors: vec![CompressorRates {
                name: "lzs".into(),
                datasets: vec![
                    DataSetRates {
                        name: "text".into(),
                        ratio: vec![2.0],
                        comp_mbps: vec![200.0],
                        decomp_mbps: vec![250.0],
                    },
                    DataSetRates {
                        name: "random".into(),
                        ratio: vec![0.89],
                        comp_mbps: vec![180.0],
                        decomp_mbps: vec![0.0],
                    },
                ],
            }],
        }
    }

    #[test]
    fn links_parse() {
        let l = Link::parse("1.54M").unwrap();
        assert_eq!((l.name.as_str(), l.bps), ("1.54Mbps", 1.54e6));
        assert_eq!(Link::parse("56k").unwrap().name, "56kbps");
        assert_eq!(Link::parse("1Gbps").unwrap().bps, 1e9);
        assert_eq!(Link::parse("56000").unwrap().name, "56000bps");
        assert!(Link::parse("fast").is_err());
        assert!(Link::parse("0M").is_err());
        let names: Vec<String> = Env::default().links.into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["56kbps", "1.54Mbps", "10Mbps", "100Mbps", "1Gbps"]);
    }

    #[test]
    fn suite_enumeration() {
        let names: Vec<String> = suites(&tiny_rates()).iter().map(Suite::name).collect();
        assert_eq!(names, ["null", "rc5-cbc", "hmac-md5", "rc5-cbc+hmac-md5"]);
    }

    #[test]
    fn ipsec_only_worked_cell() {
        // 100 Mbps at 80%, rc5-cbc+hmac-md5, 4 KB: T_NET = 4308 B, T_SECNET = 4352 B on the wire,
        // 4120 B encrypted (twice), 4200 B authenticated (twice).
        let rates = tiny_rates();
        let env = Env {
            links: vec![Link::parse("100M").unwrap()],
            ..Env::default()
        };
        let rows = evaluate(&rates, &env, &[Model::IpsecOnly]);
        let v = rows
            .iter()
            .find(|r| r.suite == "rc5-cbc+hmac-md5")
            .unwrap()
            .value
            .unwrap();
        let bps = 80e6;
        let want =
            (4308.0 * 8.0 / bps) / (4352.0 * 8.0 / bps + 2.0 * 4120.0 * 8.0 / 100e6 + 2.0 * 4200.0 * 8.0 / 300e6);
        assert!((v - want).abs() < 1e-12, "{v} vs {want}");
        let null = rows.iter().find(|r| r.suite == "null").unwrap().value.unwrap();
        assert!((null - 1.0).abs() < 1e-12);
    }

    #[test]
    fn compression_models_hand() {
        let rates = tiny_rates();
        let env = Env {
            links: vec![Link::parse("10M").unwrap()],
            ..Env::default()
        };
        let rows = evaluate(&rates, &env, &[Model::LocalSend, Model::LocalReceive, Model::Complete]);
        let get = |m: Model, ds: &str, s: &str| {
            rows.iter()
                .find(|r| r.model == m && r.dataset.as_deref() == Some(ds) && r.suite == s)
                .unwrap()
                .value
        };
        // text, ratio 2: 4096 / 2 = 2048 bytes including IPComp header -> 2044 + 4 + 20 = 2068
        // upper layer; ESP: 2068 + 2 -> 2072 encrypted; AH authenticates 40 + 24 + 16 + 2072.
        let t_e = 4120.0 * 8.0 / 100e6;
        let t_h = 4200.0 * 8.0 / 300e6;
        let c_e = 2072.0 * 8.0 / 100e6;
        let c_h = (40.0 + 24.0 + 16.0 + 2072.0) * 8.0 / 300e6;
        let t_comp = 4096.0 * 8.0 / 200e6;
        let t_decomp = 4096.0 * 8.0 / 250e6;
        let ls = get(Model::LocalSend, "text", "rc5-cbc+hmac-md5").unwrap();
        assert!((ls - (t_e + t_h) / (t_comp + c_e + c_h)).abs() < 1e-12);
        let lr = get(Model::LocalReceive, "text", "rc5-cbc+hmac-md5").unwrap();
        assert!((lr - (t_h + t_e) / (c_h + c_e + t_decomp)).abs() < 1e-12);
        let bps = 8e6;
        let t_net = 4352.0 * 8.0 / bps;
        let c_net = wire_bytes(2044, &suites(&rates)[3], true, &Overheads::default()).wire as f64 * 8.0 / bps;
        let cp = get(Model::Complete, "text", "rc5-cbc+hmac-md5").unwrap();
        let want = (2.0 * t_e + 2.0 * t_h + t_net) / (t_comp + 2.0 * c_e + 2.0 * c_h + c_net + t_decomp);
        assert!((cp - want).abs() < 1e-12);
        // Non-expansion: sent uncompressed, compression time wasted, nothing decompressed.
        assert_eq!(get(Model::LocalReceive, "random", "rc5-cbc"), None);
        let ls = get(Model::LocalSend, "random", "rc5-cbc").unwrap();
        let t_comp = 4096.0 * 8.0 / 180e6;
        assert!((ls - t_e / (t_comp + t_e)).abs() < 1e-12);
        let cp = get(Model::Complete, "random", "rc5-cbc").unwrap();
        let t_net = 4328.0 * 8.0 / bps;
        assert!((cp - (2.0 * t_e + t_net) / (t_comp + 2.0 * t_e + t_net)).abs() < 1e-12);
        // Null suite: Local Send is all cost.
        assert_eq!(get(Model::LocalSend, "text", "null"), Some(0.0));
    }

    #[test]
    fn compressed_sizes() {
        let o = Overheads::default();
        assert_eq!(compressed_payload(4096, 2.0, 100.0, &o), Some(2044));
        assert_eq!(compressed_payload(4096, 1.0, 100.0, &o), None);
        assert_eq!(compressed_payload(4096, 0.89, 0.0, &o), None);
        assert_eq!(compressed_payload(4096, 2.0, 0.0, &o), None);
        assert_eq!(compressed_payload(1024, 1000.0, 1.0, &o), Some(0));
    }

    #[test]
    fn break_even_rows_satisfy_equality() {
        let rates = tiny_rates();
        let env = Env {
            links: vec![Link::parse("1.54M").unwrap()],
            ..Env::default()
        };
        let rows = break_even_rows(&rates, &env, &Model::ALL);
        assert!(rows.iter().all(|r| r.model != Model::IpsecOnly));
        // Complete, text, rc5+md5: gain = 2/R_E + 2/R_H + 1/R_NET, cost = 1/R_C + 1/R_DC.
        let r = rows
            .iter()
            .find(|r| {
                r.model == Model::Complete && r.dataset.as_deref() == Some("text") && r.suite == "rc5-cbc+hmac-md5"
            })
            .unwrap();
        let x = r.value.unwrap();
        let gain = 2.0 / 100e6 + 2.0 / 300e6 + 1.0 / (1.54e6 * 0.8);
        let cost = 1.0 / 200e6 + 1.0 / 250e6;
        assert!(((1.0 - 1.0 / x) * gain - cost).abs() < 1e-9 * cost);
        // Local Send with LZS at 200 Mbps against rc5 (100) + md5 (300): X = gain / (gain - cost).
        let r = rows
            .iter()
            .find(|r| {
                r.model == Model::LocalSend && r.dataset.as_deref() == Some("text") && r.suite == "rc5-cbc+hmac-md5"
            })
            .unwrap();
        let (g, c) = (1.0 / 100e6 + 1.0 / 300e6, 1.0 / 200e6);
        assert!((r.value.unwrap() - g / (g - c)).abs() < 1e-12);
        assert!(((1.0 - 1.0 / r.value.unwrap()) * g - c).abs() < 1e-9 * c);
        // Null suite never pays locally; no decompression rate: undefined.
        let null = rows
            .iter()
            .find(|r| r.model == Model::LocalSend && r.suite == "null")
            .unwrap();
        assert_eq!(null.value, Some(f64::INFINITY));
        let random = rows
            .iter()
            .find(|r| r.model == Model::LocalReceive && r.dataset.as_deref() == Some("random"))
            .unwrap();
        assert_eq!(random.value, None);
    }

    #[test]
    fn outputs() {
        let rates = tiny_rates();
        let env = Env::default();
        let rows = evaluate(&rates, &env, &Model::ALL);
        let csv = to_csv(&rows, "speedup");
        assert!(csv.starts_with("model,network,compressor,dataset,payload,suite,speedup\n"));
        assert!(csv.contains("\nipsec-only,1Gbps,,,4k,rc5-cbc+hmac-md5,0."));
        assert!(csv.contains("\nlocal-receive,,lzs,random,4k,rc5-cbc,\n"));
        assert_eq!(csv.lines().count(), 1 + rows.len());
        let md = to_markdown(&rows, false);
        assert!(md.contains("### IPsec-only slowdown, 4k payload (the paper's table 2)"));
        assert!(md.contains("| network | null | rc5-cbc | hmac-md5 | rc5-cbc+hmac-md5 |"));
        assert!(md.contains("| random | n/a | n/a | n/a | n/a |"));
        assert!(md.contains("### Complete, lzs, 4k payload, 56kbps"));
    }
}
