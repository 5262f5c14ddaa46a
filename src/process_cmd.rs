//! `ipsec process --config FILE --dir out|in`: runs a capture through the SA engine built from
//! a config (TOML or setkey), as a host with that config would: outbound packets are matched
//! to policies and sealed, inbound packets are opened and checked against the inbound
//! policies. Dropped packets are reported with the reason they were counted under; SA
//! lifetime events are reported as they happen; `--stats` writes the engine's counter
//! snapshot as JSON.
//!
//! Time is the capture's: the SAs are installed at the first packet's timestamp, so lifetimes
//! in seconds run on the capture's clock (useful to replay a long trace offline).

use crate::bundle::PacketError;
use crate::config;
use crate::tool::{self, usage_error, RunError};
use ipsec_engine::{Direction, Dropped, Engine, Event, Verdict};
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Which way the capture's packets go through the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DirArg {
    /// Outbound: match the outbound policies and seal.
    Out,
    /// Inbound: open, then check the inbound policies.
    In,
}

/// The arguments of `ipsec process`.
#[derive(Debug, clap::Args)]
pub struct ProcessArgs {
    /// The config file (TOML or setkey, as `ipsec check-config` takes it).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Direction of the capture's packets.
    #[arg(long, value_enum)]
    pub dir: DirArg,
    /// Input pcap (default: standard input).
    #[arg(long = "in", value_name = "F.pcap")]
    pub input: Option<PathBuf>,
    /// Output pcap (default: standard output): the packets the engine passed.
    #[arg(long = "out", value_name = "F.pcap")]
    pub output: Option<PathBuf>,
    /// Write the counter snapshot (per SA and direction, drops by reason) as JSON here.
    #[arg(long, value_name = "FILE.json")]
    pub stats: Option<PathBuf>,
    /// Print nothing but dropped packets and events.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Why one packet did not come out.
#[derive(Debug)]
enum Rejected {
    /// The frame is not something the engine can be given (link type, not IP).
    Frame(PacketError),
    /// The engine dropped it (and counted it).
    Dropped(Dropped),
}

impl From<PacketError> for Rejected {
    fn from(e: PacketError) -> Self {
        Rejected::Frame(e)
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::Frame(e) => write!(f, "{e}"),
            Rejected::Dropped(d) => write!(f, "dropped: {d}"),
        }
    }
}

fn describe(engine: &Engine, ev: &Event) -> String {
    let (sa, what, limit) = match *ev {
        Event::SoftExpired { sa, limit } => (sa, "soft", limit),
        Event::HardExpired { sa, limit } => (sa, "hard", limit),
    };
    let name = engine.sad().get(sa).map_or("?", |e| e.config.name.as_str());
    format!("SA `{name}` reached its {what} {limit:?} limit").to_lowercase()
}

/// Runs the command; returns the exit code (0 all passed, 1 some dropped, 2 usage/config).
pub fn run(args: &ProcessArgs) -> ExitCode {
    let file = args.config.display().to_string();
    let loaded = match config::load(&args.config, None) {
        Ok(l) => l,
        Err(e) => return usage_error(e.in_file(&file)),
    };
    for w in &loaded.warnings {
        eprintln!("ipsec: {file}:{}: warning: {}", w.line, w.message);
    }
    // Found out now, not after the whole capture has been processed.
    if let Some(p) = &args.stats {
        if let Err(e) = tool::check_writable(p) {
            return usage_error(format!("--stats {e}"));
        }
    }
    let mut engine = match loaded.config.build(Duration::ZERO) {
        Ok(e) => e,
        Err(e) => return usage_error(e.in_file(&file)),
    };
    let input = match tool::open_input(args.input.as_deref()) {
        Ok(i) => i,
        Err(e) => return usage_error(e),
    };
    let output = match tool::open_output(args.output.as_deref()) {
        Ok(o) => o,
        Err(e) => return usage_error(e),
    };
    let dir = match args.dir {
        DirArg::Out => Direction::Out,
        DirArg::In => Direction::In,
    };
    let mut start: Option<Duration> = None;
    let mut now = Duration::ZERO;
    let mut index = 0usize;
    let apply = |buf: &mut ipsec_core::PacketBuf, ts: Duration| -> Result<(), Rejected> {
        index += 1;
        let t0 = *start.get_or_insert(ts);
        now = ts.saturating_sub(t0);
        engine.poll(now);
        let r = match dir {
            Direction::Out => engine.outbound(buf, now),
            Direction::In => engine.inbound(buf, now),
        };
        while let Some(ev) = engine.next_event() {
            eprintln!(
                "packet {index} (t={:.3}s): {}",
                now.as_secs_f64(),
                describe(&engine, &ev)
            );
        }
        match r {
            Ok(Verdict::Protected(_) | Verdict::Bypass) => Ok(()),
            Err(d) => Err(Rejected::Dropped(d)),
        }
    };
    let report = |i: usize, e: &Rejected| eprintln!("packet {i}: {e}");
    let result: Result<tool::Summary, RunError> = tool::run_with(apply, input, output, report);
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            return e.exit(
                &tool::input_name(args.input.as_deref()),
                &tool::output_name(args.output.as_deref()),
            )
        }
    };
    if let Some(p) = &args.stats {
        let json = serde_json::to_string_pretty(&engine.snapshot(now)).expect("snapshot is plain data");
        if let Err(e) = std::fs::write(p, json + "\n") {
            return usage_error(format!("{}: {}", p.display(), tool::io_reason(&e)));
        }
    }
    if !args.quiet {
        eprintln!(
            "ipsec process: {} read, {} passed, {} dropped",
            summary.read, summary.written, summary.rejected
        );
    }
    summary.exit_code()
}
