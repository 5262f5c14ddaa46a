//! The speedup models of McGregor & Lee, "Performance Impact of Data Compression on Virtual
//! Private Network Transactions", evaluated from measured rates (`ipsec model`; the command-line
//! glue is in the `ipsec` binary, this crate computes and formats).
//!
//! Four models, per packet (one TCP segment), `S >= 1` meaning compression helps:
//! - `ipsec-only` (the paper's table 2): `T_NET / (T_E + T_HC + T_SECNET + T_HV + T_D)`;
//! - `local-send`: `(T_E + T_HC) / (T_COMP + C_E + C_HC)`;
//! - `local-receive`: `(T_HV + T_D) / (C_HV + C_D + T_DECOMP)`;
//! - `complete`: `(T_E + T_HC + T_SECNET + T_HV + T_D) /
//!   (T_COMP + C_E + C_HC + C_SECNET + C_HV + C_D + T_DECOMP)`.
//!
//! Accounting (the one that reproduces table 2 within 0.01, see `tests/model_table2.rs`):
//! - byte counts come from [`wire_bytes`], which asks the SA engine's overhead calculator
//!   (`ipsec_engine::overhead`, checked against packets the transforms really seal): IPv6 (40) +
//!   TCP (20), AH (12 + 96-bit ICV) outside ESP (8 header + 8 IV + padding to 8 + 2 trailer),
//!   IPComp (4) inside ESP, fragmented at the MTU (1280) with an 8-byte fragment header on each
//!   fragment;
//! - `T_NET`, `T_SECNET`, `C_SECNET` = all wire bytes (every fragment's headers) / (link × efficiency);
//! - `T_E`, `T_D` = ESP-encrypted bytes (TCP segment + padding + trailer) / encryption,
//!   decryption rate (equal in the paper's tables; measured apart by the criterion bench);
//! - `T_HC`, `T_HV` = AH-authenticated bytes (the whole IPv6 packet before fragmentation) / ICV
//!   computation, verification rate; both count;
//! - rates are those measured at the packet's payload size (table 2 uses 4 KB);
//! - `T_COMP`, `T_DECOMP` = uncompressed TCP payload bytes / (de)compression rate (the TCP header
//!   is not compressed: only the payload was measured);
//! - the compressed payload *including* the IPComp header is `ceil(payload / ratio)` bytes (the
//!   paper's ratios count that header). Non-expansion (ratio <= 1, or a decompression rate of 0):
//!   the packet is sent uncompressed (`C_* = T_*`, RFC 3173 section 2.2), compression time is
//!   still spent, nothing is decompressed, and the receiver does exactly the work it would do
//!   without compression: Local Receive is 1.
//!
//! Break-even (`--break-even`): the smallest header-free ratio X with
//! `(1 - 1/X)(sum of 1/R saved) >= sum of 1/R added`, per model, compressor, data set, payload,
//! suite (and link for Complete, where `R_SECNET` = link × efficiency). `inf` when no ratio
//! pays; undefined where a decompression rate is 0.
//!
//! Inputs: the paper's CSV tables, built in ([`paper`], from the repository's
//! `data/mcgregor-lee/`) or read from a directory ([`Rates::from_paper_dir`]), or this machine's
//! criterion results ([`criterion::rates_from_criterion`]). Every cell is one `Cell` of one walk
//! (`cells`) that both the speedups and the break-even ratios use; inconsistent inputs are a
//! [`ModelError`], never a panic. [`Options::plot`] draws the same functions (see `plot`).

pub mod criterion;
mod formulas;
mod inputs;
pub mod paper;
mod plot;
mod report;
mod wire;

pub use formulas::{break_even, complete, gain_cost, ipsec_only, local_receive, local_send, SecTimes};
pub use inputs::{AlgKind, AlgRates, CompressorRates, DataSetRates, PayloadSize, Rates, CRYPTO_FILE};
pub use report::{rates_csv, rates_markdown, to_csv, to_markdown};
pub use wire::{wire_bytes, Overheads, PacketBytes, IPCOMP_HEADER};

use std::fmt::Write as _;
use std::path::PathBuf;

/// Links evaluated by default (nominal rates).
pub const DEFAULT_LINKS: &str = "56k,1.54M,10M,100M,1G";
/// Fraction of the nominal link rate sustained, by default.
pub const DEFAULT_EFFICIENCY: f64 = 0.8;
/// Network MTU, by default (the paper's).
pub const DEFAULT_MTU: usize = 1280;
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
        let link = |name: &str, bps: f64| Link {
            name: name.to_string(),
            bps,
        };
        Env {
            // DEFAULT_LINKS, parsed (a test checks they agree).
            links: vec![
                link("56kbps", 56e3),
                link("1.54Mbps", 1.54e6),
                link("10Mbps", 10e6),
                link("100Mbps", 100e6),
                link("1Gbps", 1e9),
            ],
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
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
    /// `None` when undefined (a break-even ratio that needs a decompression rate of 0).
    pub value: Option<f64>,
}

const BITS_PER_MBIT: f64 = 1e6;

/// Why the models could not be evaluated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The rates are inconsistent (see [`Rates::validate`]).
    #[error("inconsistent rates: {0}")]
    Rates(String),
    /// The assumed environment is unusable (see [`Env`]).
    #[error("{0}")]
    Env(String),
    /// A suite names an algorithm the rates do not have.
    #[error("suite `{suite}` names `{alg}`, which has no rates")]
    UnknownAlgorithm { suite: String, alg: String },
    /// A packet's wire bytes cannot be computed (e.g. a payload too big for one IPv6 packet).
    #[error("{payload}-byte payload under suite `{suite}`: {error}")]
    Overhead {
        suite: String,
        payload: usize,
        error: ipsec_engine::overhead::OverheadError,
    },
}

/// A suite with its algorithms' rates looked up once.
#[derive(Clone, Copy, Debug)]
struct SuiteRates<'a> {
    cipher: Option<&'a AlgRates>,
    integrity: Option<&'a AlgRates>,
}

impl<'a> SuiteRates<'a> {
    fn resolve(rates: &'a Rates, s: &Suite) -> Result<Self, ModelError> {
        let find = |name: &Option<String>| match name {
            None => Ok(None),
            Some(n) => rates.alg(n).map(Some).ok_or_else(|| ModelError::UnknownAlgorithm {
                suite: s.name(),
                alg: n.clone(),
            }),
        };
        Ok(SuiteRates {
            cipher: find(&s.cipher)?,
            integrity: find(&s.integrity)?,
        })
    }

    /// Per-bit inverse rates (s/bit) at payload `pi`: encryption, decryption, computation,
    /// verification; 0 for a missing algorithm.
    fn inverse(&self, pi: usize) -> [f64; 4] {
        let inv = |a: Option<&AlgRates>, reverse: bool| {
            a.map_or(0.0, |a| {
                1.0 / (if reverse { a.reverse_mbps[pi] } else { a.mbps[pi] } * BITS_PER_MBIT)
            })
        };
        [
            inv(self.cipher, false),
            inv(self.cipher, true),
            inv(self.integrity, false),
            inv(self.integrity, true),
        ]
    }
}

/// The three models with compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CompModel {
    LocalSend,
    LocalReceive,
    Complete,
}

impl Model {
    fn compression_model(self) -> Option<CompModel> {
        match self {
            Model::IpsecOnly => None,
            Model::LocalSend => Some(CompModel::LocalSend),
            Model::LocalReceive => Some(CompModel::LocalReceive),
            Model::Complete => Some(CompModel::Complete),
        }
    }
}

/// What a cell evaluates: IPsec alone, or one compression model on one data set.
#[derive(Clone, Copy, Debug)]
enum Subject<'a> {
    IpsecOnly,
    Compression {
        model: CompModel,
        comp: &'a CompressorRates,
        ds: &'a DataSetRates,
    },
}

/// One output value's coordinates: model, link (models that use one), compressor and data set
/// (compression models), payload and suite.
#[derive(Clone, Copy, Debug)]
struct Cell<'a> {
    model: Model,
    subject: Subject<'a>,
    link: Option<&'a Link>,
    pi: usize,
    payload: &'a PayloadSize,
    suite: &'a Suite,
    rates: SuiteRates<'a>,
}

impl Cell<'_> {
    fn row(&self, value: Option<f64>) -> Row {
        let (compressor, dataset) = match self.subject {
            Subject::IpsecOnly => (None, None),
            Subject::Compression { comp, ds, .. } => (Some(comp.name.clone()), Some(ds.name.clone())),
        };
        Row {
            model: self.model,
            network: self.link.map(|l| l.name.clone()),
            compressor,
            dataset,
            payload: self.payload.label.clone(),
            suite: self.suite.name(),
            value,
        }
    }
}

/// Every cell of `models`, in output order: per model, compressor (compression models),
/// payload, link (models that use one), data set (compression models), suite.
fn cells<'a>(
    rates: &'a Rates,
    env: &'a Env,
    models: &'a [Model],
    suites: &'a [(Suite, SuiteRates<'a>)],
) -> impl Iterator<Item = Cell<'a>> + 'a {
    models.iter().flat_map(move |&model| {
        let comps: Vec<Option<(CompModel, &'a CompressorRates)>> = match model.compression_model() {
            Some(cm) => rates.compressors.iter().map(|c| Some((cm, c))).collect(),
            None => vec![None],
        };
        comps.into_iter().flat_map(move |comp| {
            rates.payloads.iter().enumerate().flat_map(move |(pi, payload)| {
                let links: Vec<Option<&'a Link>> = if model.uses_link() {
                    env.links.iter().map(Some).collect()
                } else {
                    vec![None]
                };
                links.into_iter().flat_map(move |link| {
                    let subjects: Vec<Subject<'a>> = match comp {
                        Some((cm, c)) => c
                            .datasets
                            .iter()
                            .map(|ds| Subject::Compression { model: cm, comp: c, ds })
                            .collect(),
                        None => vec![Subject::IpsecOnly],
                    };
                    subjects.into_iter().flat_map(move |subject| {
                        suites.iter().map(move |(suite, sr)| Cell {
                            model,
                            subject,
                            link,
                            pi,
                            payload,
                            suite,
                            rates: *sr,
                        })
                    })
                })
            })
        })
    })
}

/// Checks rates and environment and looks the suites' algorithms up.
fn prepare<'a>(rates: &'a Rates, env: &Env) -> Result<Vec<(Suite, SuiteRates<'a>)>, ModelError> {
    rates.validate().map_err(ModelError::Rates)?;
    env.validate().map_err(ModelError::Env)?;
    suites(rates)
        .into_iter()
        .map(|s| SuiteRates::resolve(rates, &s).map(|r| (s, r)))
        .collect()
}

/// Per-packet times of `pkt` under a suite at payload index `pi`; `secnet` is 0 without a link.
fn sec_times(s: SuiteRates, pi: usize, pkt: &PacketBytes, link_bps: Option<f64>) -> SecTimes {
    let [e, d, hc, hv] = s.inverse(pi);
    let bits = |bytes: usize| bytes as f64 * 8.0;
    SecTimes {
        e: bits(pkt.encrypted) * e,
        d: bits(pkt.encrypted) * d,
        hc: bits(pkt.authenticated) * hc,
        hv: bits(pkt.authenticated) * hv,
        secnet: link_bps.map_or(0.0, |b| bits(pkt.wire) / b),
    }
}

/// TCP payload bytes actually carried after compression, *excluding* the IPComp header, or
/// `None` when the packet is sent uncompressed (non-expansion). `ratio` counts the header.
pub fn compressed_payload(payload: usize, ratio: f64, decomp_mbps: f64) -> Option<usize> {
    if ratio <= 1.0 || decomp_mbps <= 0.0 {
        return None;
    }
    let with_header = (payload as f64 / ratio).ceil() as usize;
    (with_header < payload).then(|| with_header.saturating_sub(IPCOMP_HEADER))
}

/// The value of `subject` for one packet of `payload` bytes under suite `s` at payload index
/// `pi`, with a sustained link rate of `bps` (bit/s; `None`: no link, for the local models;
/// for `ipsec-only` an infinitely fast link, so 0).
fn speedup(
    subject: &Subject,
    suite: &Suite,
    s: SuiteRates,
    pi: usize,
    payload: usize,
    bps: Option<f64>,
    o: &Overheads,
) -> Result<Option<f64>, ModelError> {
    let bytes = |payload: usize, suite: &Suite, ipcomp: bool| {
        wire_bytes(payload, suite, ipcomp, o).map_err(|error| ModelError::Overhead {
            suite: suite.name(),
            payload,
            error,
        })
    };
    let t = sec_times(s, pi, &bytes(payload, suite, false)?, bps);
    Ok(match *subject {
        Subject::IpsecOnly => {
            let t_net = match bps {
                Some(b) => bytes(payload, &Suite::null(), false)?.wire as f64 * 8.0 / b,
                None => 0.0,
            };
            Some(ipsec_only(t_net, &t))
        }
        Subject::Compression { model, ds, .. } => {
            let sent = compressed_payload(payload, ds.ratio[pi], ds.decomp_mbps[pi]);
            let t_comp = payload as f64 * 8.0 / (ds.comp_mbps[pi] * BITS_PER_MBIT);
            let t_decomp = sent.map(|_| payload as f64 * 8.0 / (ds.decomp_mbps[pi] * BITS_PER_MBIT));
            let c = match sent {
                Some(n) => sec_times(s, pi, &bytes(n, suite, true)?, bps),
                None => t,
            };
            match model {
                CompModel::LocalSend => Some(local_send(&t, &c, t_comp)),
                CompModel::LocalReceive => Some(local_receive(&t, &c, t_decomp)),
                CompModel::Complete => Some(complete(&t, &c, t_comp, t_decomp.unwrap_or(0.0))),
            }
        }
    })
}

/// The gain side of a model's break-even inequality (s/bit): the inverse rates of the work
/// compression shrinks, under suite `s` at payload index `pi` with a sustained link rate of
/// `bps` (Complete only; `None`: no network term).
fn gain(model: CompModel, s: SuiteRates, pi: usize, bps: Option<f64>) -> f64 {
    let [e, d, hc, hv] = s.inverse(pi);
    match model {
        CompModel::LocalSend => e + hc,
        CompModel::LocalReceive => d + hv,
        CompModel::Complete => e + d + hc + hv + bps.map_or(0.0, |b| 1.0 / b),
    }
}

/// Both sides of a model's break-even inequality (s/bit) for `ds`; `None` where a rate the
/// cost side needs is 0 (nothing was decompressed).
fn inequality(model: CompModel, ds: &DataSetRates, s: SuiteRates, pi: usize, bps: Option<f64>) -> Option<(f64, f64)> {
    let (rc, rd) = (ds.comp_mbps[pi] * BITS_PER_MBIT, ds.decomp_mbps[pi] * BITS_PER_MBIT);
    let cost_rates: &[f64] = match model {
        CompModel::LocalSend => &[rc],
        CompModel::LocalReceive => &[rd],
        CompModel::Complete => &[rc, rd],
    };
    let (_, cost) = gain_cost(&[], cost_rates)?;
    Some((gain(model, s, pi, bps), cost))
}

/// Evaluates `models` for every link, compressor, data set, payload and suite.
pub fn evaluate(rates: &Rates, env: &Env, models: &[Model]) -> Result<Vec<Row>, ModelError> {
    let suites = prepare(rates, env)?;
    let o = &env.overheads;
    cells(rates, env, models, &suites)
        .map(|c| {
            let bps = c.link.map(|l| l.bps * env.efficiency);
            Ok(c.row(speedup(&c.subject, c.suite, c.rates, c.pi, c.payload.bytes, bps, o)?))
        })
        .collect()
}

/// Break-even compression ratios of the crate documentation's inequalities (rates header-free). `ipsec-only`
/// has none and is skipped. `value` is `Some(inf)` when compression never pays and `None` when
/// undefined (no decompression rate).
pub fn break_even_rows(rates: &Rates, env: &Env, models: &[Model]) -> Result<Vec<Row>, ModelError> {
    let suites = prepare(rates, env)?;
    let models: Vec<Model> = models.iter().copied().filter(|m| m.uses_compression()).collect();
    Ok(cells(rates, env, &models, &suites)
        .filter_map(|c| match c.subject {
            Subject::IpsecOnly => None,
            Subject::Compression { model, ds, .. } => {
                let bps = c.link.map(|l| l.bps * env.efficiency);
                let value = inequality(model, ds, c.rates, c.pi, bps).map(|(g, k)| break_even(g, k));
                Some(c.row(value))
            }
        })
        .collect())
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    Csv,
    Markdown,
}

/// What [`run`] evaluates and prints (the `ipsec model` command line, without the parsing).
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// A directory with the input CSVs in the paper's layout (`table1_crypto_rates_mbps.csv`,
    /// `table4_compression_ratios.csv`, `*_<compressor>_rates_mbps.csv`). `None`: the
    /// built-in [`paper`] tables.
    pub inputs: Option<PathBuf>,
    /// Read the rates measured on this machine instead: a criterion directory
    /// ([`criterion::rates_from_criterion`]); takes precedence over `inputs`.
    pub from_criterion: Option<PathBuf>,
    /// Only these algorithms (all when empty), see [`restrict_algs`].
    pub algs: Vec<String>,
    /// Links, nominal rates as [`Link::parse`] reads them.
    pub links: Vec<String>,
    /// Fraction of each link's nominal rate actually sustained.
    pub efficiency: f64,
    /// Network MTU (bytes); larger packets are fragmented.
    pub mtu: usize,
    /// Models to evaluate (all when empty).
    pub models: Vec<Model>,
    /// Output format.
    pub format: Format,
    /// Break-even compression ratios instead of speedups.
    pub break_even: bool,
    /// The input rates and ratios as read instead of the models.
    pub print_rates: bool,
    /// Write the SVG plots into this directory instead of printing tables.
    pub plot: Option<PathBuf>,
    /// Data set of speedup.svg (default: paper2 if present, else the first data set).
    pub plot_dataset: Option<String>,
    /// Payload of both plots (default: 4k if present, else the first).
    pub plot_payload: Option<String>,
}

impl Default for Options {
    /// What the command line gives without options.
    fn default() -> Self {
        Options {
            inputs: None,
            from_criterion: None,
            algs: Vec::new(),
            links: DEFAULT_LINKS.split(',').map(String::from).collect(),
            efficiency: DEFAULT_EFFICIENCY,
            mtu: DEFAULT_MTU,
            models: Vec::new(),
            format: Format::Markdown,
            break_even: false,
            print_rates: false,
            plot: None,
            plot_dataset: None,
            plot_payload: None,
        }
    }
}

/// Keeps only the algorithms named in `names` (all when empty).
pub fn restrict_algs(mut rates: Rates, names: &[String]) -> Result<Rates, String> {
    if names.is_empty() {
        return Ok(rates);
    }
    if let Some(n) = names.iter().find(|n| rates.alg(n).is_none()) {
        let known: Vec<&str> = rates.crypto.iter().map(|a| a.name.as_str()).collect();
        return Err(format!(
            "--algs: no algorithm `{n}` in the inputs (have: {})",
            known.join(", ")
        ));
    }
    rates.crypto.retain(|a| names.contains(&a.name));
    Ok(rates)
}

/// Runs `ipsec model`; returns the text to print (or, with [`Options::plot`], the list of
/// files written).
pub fn run(args: &Options) -> Result<String, String> {
    let (rates, place, source) = match (&args.from_criterion, &args.inputs) {
        (Some(d), _) => (
            criterion::rates_from_criterion(d)?,
            d.display().to_string(),
            format!("criterion results in {} (measured on this machine)", d.display()),
        ),
        (None, Some(d)) => {
            let r = Rates::from_paper_dir(d)?;
            (
                r,
                d.display().to_string(),
                format!("the paper's tables in {}", d.display()),
            )
        }
        (None, None) => (
            paper::rates()?,
            format!("the built-in {}", paper::SOURCE),
            format!("the paper's tables, built in ({})", paper::SOURCE),
        ),
    };
    let rates = restrict_algs(rates, &args.algs)?;
    let env = Env {
        links: args.links.iter().map(|l| Link::parse(l)).collect::<Result<_, _>>()?,
        efficiency: args.efficiency,
        overheads: Overheads {
            mtu: args.mtu,
            ..Overheads::default()
        },
    };
    env.validate()?;
    if let Some(out) = &args.plot {
        if rates.compressors.is_empty() {
            return Err(format!("{}: no compression inputs to plot", place));
        }
        let files = plot::write_plots(
            &rates,
            &env,
            out,
            args.plot_dataset.as_deref(),
            args.plot_payload.as_deref(),
        )?;
        return Ok(files.iter().map(|f| format!("wrote {}\n", f.display())).collect());
    }
    if args.print_rates {
        return Ok(match args.format {
            Format::Csv => rates_csv(&rates),
            Format::Markdown => format!("> Rates: {source}.\n\n{}", rates_markdown(&rates)),
        });
    }
    let mut notes = vec![format!("Rates: {source}.")];
    let models: Vec<Model> = if args.models.is_empty() {
        if rates.compressors.is_empty() {
            notes.push(format!(
                "no compression inputs in {}: only the ipsec-only model is evaluated",
                place
            ));
            vec![Model::IpsecOnly]
        } else {
            Model::ALL.to_vec()
        }
    } else {
        if rates.compressors.is_empty() && args.models.iter().any(|m| m.uses_compression()) {
            return Err(format!(
                "{}: no compression inputs (ratios and rates) for the compression models",
                place
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
    }
    .map_err(|e| e.to_string())?;
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
                    reverse_mbps: vec![100.0],
                },
                AlgRates {
                    name: "hmac-md5".into(),
                    kind: AlgKind::Integrity,
                    mbps: vec![300.0],
                    reverse_mbps: vec![300.0],
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
        let parsed: Vec<Link> = DEFAULT_LINKS.split(',').map(|l| Link::parse(l).unwrap()).collect();
        assert_eq!(parsed, Env::default().links);
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
        let rows = evaluate(&rates, &env, &[Model::IpsecOnly]).unwrap();
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
        let rows = evaluate(&rates, &env, &[Model::LocalSend, Model::LocalReceive, Model::Complete]).unwrap();
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
        let c_net = wire_bytes(2044, &suites(&rates)[3], true, &Overheads::default())
            .unwrap()
            .wire as f64
            * 8.0
            / bps;
        let cp = get(Model::Complete, "text", "rc5-cbc+hmac-md5").unwrap();
        let want = (2.0 * t_e + 2.0 * t_h + t_net) / (t_comp + 2.0 * c_e + 2.0 * c_h + c_net + t_decomp);
        assert!((cp - want).abs() < 1e-12);
        // Non-expansion: sent uncompressed, compression time wasted, nothing decompressed, so
        // the receiver's work is unchanged (Local Receive 1, also for the null suite's 0/0).
        for suite in ["null", "rc5-cbc", "hmac-md5", "rc5-cbc+hmac-md5"] {
            assert_eq!(get(Model::LocalReceive, "random", suite), Some(1.0), "{suite}");
        }
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
        assert_eq!(compressed_payload(4096, 2.0, 100.0), Some(2044));
        assert_eq!(compressed_payload(4096, 1.0, 100.0), None);
        assert_eq!(compressed_payload(4096, 0.89, 0.0), None);
        assert_eq!(compressed_payload(4096, 2.0, 0.0), None);
        assert_eq!(compressed_payload(1024, 1000.0, 1.0), Some(0));
    }

    #[test]
    fn break_even_rows_satisfy_equality() {
        let rates = tiny_rates();
        let env = Env {
            links: vec![Link::parse("1.54M").unwrap()],
            ..Env::default()
        };
        let rows = break_even_rows(&rates, &env, &Model::ALL).unwrap();
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
        let rows = evaluate(&rates, &env, &Model::ALL).unwrap();
        let csv = to_csv(&rows, "speedup");
        assert!(csv.starts_with("model,network,compressor,dataset,payload,suite,speedup\n"));
        assert!(csv.contains("\nipsec-only,1Gbps,,,4k,rc5-cbc+hmac-md5,0."));
        assert!(csv.contains("\nlocal-receive,,lzs,random,4k,rc5-cbc,1.000000\n"));
        assert_eq!(csv.lines().count(), 1 + rows.len());
        let md = to_markdown(&rows, false);
        assert!(md.contains("### IPsec-only slowdown, 4k payload (the paper's table 2)"));
        assert!(md.contains("| network | null | rc5-cbc | hmac-md5 | rc5-cbc+hmac-md5 |"));
        assert!(md.contains("| random | 1.00 | 1.00 | 1.00 | 1.00 |"));
        assert!(!md.contains("n/a"));
        // Break-even: Local Receive of a data set never decompressed has no R_DECOMP to compare.
        let be = to_markdown(&break_even_rows(&rates, &env, &Model::ALL).unwrap(), true);
        assert!(be.contains("| random | n/a | n/a | n/a | n/a |"), "{be}");
        assert!(md.contains("### Complete, lzs, 4k payload, 56kbps"));
    }

    #[test]
    fn typed_errors_not_panics() {
        let env = Env::default();
        // A rate vector shorter than the payload list.
        let mut r = tiny_rates();
        r.crypto[0].reverse_mbps.clear();
        assert!(matches!(evaluate(&r, &env, &Model::ALL), Err(ModelError::Rates(_))));
        // A zero crypto rate.
        let mut r = tiny_rates();
        r.crypto[1].mbps[0] = 0.0;
        assert!(matches!(
            break_even_rows(&r, &env, &Model::ALL),
            Err(ModelError::Rates(_))
        ));
        // A compression ratio that is not a number.
        let mut r = tiny_rates();
        r.compressors[0].datasets[0].ratio[0] = f64::NAN;
        assert!(matches!(evaluate(&r, &env, &Model::ALL), Err(ModelError::Rates(_))));
        // No links; efficiency out of range.
        let no_links = Env {
            links: Vec::new(),
            ..Env::default()
        };
        assert!(matches!(
            evaluate(&tiny_rates(), &no_links, &Model::ALL),
            Err(ModelError::Env(_))
        ));
        let bad_eff = Env {
            efficiency: 1.5,
            ..Env::default()
        };
        assert!(matches!(
            break_even_rows(&tiny_rates(), &bad_eff, &Model::ALL),
            Err(ModelError::Env(_))
        ));
        // A suite naming an algorithm without rates.
        let r = tiny_rates();
        let s = Suite {
            cipher: Some("twofish-cbc".into()),
            integrity: None,
        };
        assert_eq!(
            SuiteRates::resolve(&r, &s).unwrap_err(),
            ModelError::UnknownAlgorithm {
                suite: "twofish-cbc".into(),
                alg: "twofish-cbc".into()
            }
        );
    }

    #[test]
    fn one_cell_walk_for_both() {
        // Speedups and break-even ratios are reported for the same coordinates, in the same order.
        let rates = tiny_rates();
        let env = Env::default();
        let key = |r: &Row| {
            (
                r.model,
                r.network.clone(),
                r.compressor.clone(),
                r.dataset.clone(),
                r.payload.clone(),
                r.suite.clone(),
            )
        };
        let models = [Model::LocalSend, Model::LocalReceive, Model::Complete];
        let sp: Vec<_> = evaluate(&rates, &env, &models).unwrap().iter().map(key).collect();
        let be: Vec<_> = break_even_rows(&rates, &env, &Model::ALL)
            .unwrap()
            .iter()
            .map(key)
            .collect();
        assert_eq!(sp, be);
        // 4 suites x 2 data sets x (1 + 1 + 5 links).
        assert_eq!(sp.len(), 4 * 2 * 7);
        let only: Vec<_> = evaluate(&rates, &env, &[Model::IpsecOnly]).unwrap();
        assert_eq!(only.len(), 4 * 5);
        assert!(only.iter().all(|r| r.compressor.is_none() && r.network.is_some()));
    }

    #[test]
    fn reverse_rates_are_used_where_they_belong() {
        // Decryption twice as fast as encryption: Local Send unchanged, Local Receive changes.
        let env = Env::default();
        let base = evaluate(&tiny_rates(), &env, &Model::ALL).unwrap();
        let mut fast_dec = tiny_rates();
        fast_dec.crypto[0].reverse_mbps = vec![200.0];
        let fast = evaluate(&fast_dec, &env, &Model::ALL).unwrap();
        let pick = |rows: &[Row], m: Model| {
            rows.iter()
                .find(|r| r.model == m && r.dataset.as_deref() == Some("text") && r.suite == "rc5-cbc")
                .unwrap()
                .value
                .unwrap()
        };
        assert_eq!(pick(&base, Model::LocalSend), pick(&fast, Model::LocalSend));
        assert_ne!(pick(&base, Model::LocalReceive), pick(&fast, Model::LocalReceive));
        // Local Receive by hand: T_D = 4120 B / 200 Mbps, C_D = 2072 B / 200 Mbps.
        let (t_d, c_d, t_dc) = (4120.0 * 8.0 / 200e6, 2072.0 * 8.0 / 200e6, 4096.0 * 8.0 / 250e6);
        assert!((pick(&fast, Model::LocalReceive) - t_d / (c_d + t_dc)).abs() < 1e-12);
    }

    #[test]
    fn restricting_algorithms() {
        let r = restrict_algs(tiny_rates(), &["hmac-md5".to_string()]).unwrap();
        let names: Vec<String> = suites(&r).iter().map(Suite::name).collect();
        assert_eq!(names, ["null", "hmac-md5"]);
        assert!(restrict_algs(tiny_rates(), &["rc6".to_string()])
            .unwrap_err()
            .contains("have: rc5-cbc, hmac-md5"));
    }

    #[test]
    fn printing_rates() {
        let mut r = tiny_rates();
        r.crypto[0].reverse_mbps = vec![150.0];
        let md = rates_markdown(&r);
        assert!(md.contains("| rc5-cbc | 100 / 150 |"), "{md}");
        assert!(md.contains("| hmac-md5 | 300 |"));
        assert!(md.contains("| data set | lzs_4k |"));
        assert!(md.contains("| random | 0.89 |"));
        assert!(md.contains("| text | 200 | 250 |"));
        let csv = rates_csv(&r);
        assert!(csv.contains("\ncipher,rc5-cbc,,4k,100.000,150.000,\n"));
        assert!(csv.contains("\ncompressor,lzs,random,4k,180.000,0.000,0.8900\n"));
        assert_eq!(csv.lines().count(), 1 + 2 + 2);
    }
}
