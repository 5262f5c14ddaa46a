//! `ipsec`: offline IPsec work on pcap captures.

use clap::Parser;
use ipsec::bundle::{AnySa, Bundle};
use ipsec::cli::{Cli, Cmd};
use ipsec::spec;
use ipsec::tool::{self, usage_error, Direction};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (dir, common, seq, iv) = match cli.cmd {
        Cmd::Seal(a) => (Direction::Seal, a.common, a.seq, a.iv),
        Cmd::Open(a) => (Direction::Open, a.common, a.seq, None),
        Cmd::CheckConfig(a) => return ipsec::check_config::run(&a),
        Cmd::Overhead(a) => return ipsec::overhead_cmd::run(&a),
        Cmd::Process(a) => return ipsec::process_cmd::run(&a),
        Cmd::Sa { cmd, opts } => return ipsec::ctl_cmd::run_sa(&cmd, &opts),
        Cmd::Policy { cmd, opts } => return ipsec::ctl_cmd::run_policy(&cmd, &opts),
        Cmd::Show { opts, show } => return ipsec::ctl_cmd::run_show(&opts, &show),
        Cmd::Ike { cmd, opts } => return ipsec::ctl_cmd::run_ike(&cmd, &opts),
        Cmd::Profile(a) => return ipsec::profile_cmd::run(&a),
        Cmd::Pki { cmd } => return ipsec::pki_cmd::run(&cmd),
        Cmd::Monitor { opts, count } => return ipsec::ctl_cmd::run_monitor(&opts, count),
        Cmd::Model(a) => {
            return match ipsec::model_cmd::run(a) {
                Ok(text) => tool::print_stdout(&text, ExitCode::SUCCESS),
                Err(e) => usage_error(e),
            }
        }
    };
    if common.sa_file.as_deref().is_some_and(|p| p.as_os_str() == "-") && common.input.is_none() {
        return usage_error("--sa-file - reads the SAs from standard input: give the capture with --in");
    }
    let texts = match spec::collect(&common.sas, common.sa_file.as_deref()) {
        Ok(t) => t,
        Err(e) => return usage_error(e),
    };
    let mut specs = Vec::new();
    for t in &texts {
        match spec::parse(&t.text) {
            Ok(p) => specs.push((t.label.as_str(), p)),
            Err(e) => return usage_error(format!("{}: {e}", t.label)),
        }
    }
    let params: Vec<_> = specs.iter().map(|(l, p)| (*l, &p.params)).collect();
    if let Err(e) = spec::check_distinct(&params) {
        return usage_error(e);
    }
    let last = specs.len().saturating_sub(1);
    let mut encaps = Vec::new();
    for (i, (label, parsed)) in specs.iter().enumerate() {
        let Some(encap) = parsed.encap else { continue };
        if dir == Direction::Seal && i != last {
            return usage_error(format!(
                "{label}: an SA with `encap espinudp` must be the last of the bundle: ESP in UDP (RFC 3948) \
                 puts the UDP header right before its ESP header, the outermost"
            ));
        }
        encaps.push(tool::EncapSa {
            spi: parsed.params.spi,
            encap,
            transport: parsed.params.mode == ipsec::core::sa::Mode::Transport,
        });
    }
    let mut sas = Vec::new();
    for (label, mut parsed) in specs {
        if let Some(w) = spec::unauthenticated_esp(&parsed.params) {
            if !common.quiet {
                eprintln!("ipsec: {label}: warning: {w}");
            }
        }
        if let Some(n) = seq {
            parsed.params.initial_seq = n;
            if let Err(e) = parsed.params.validate() {
                return usage_error(format!("--seq {n} with {label}: {e}"));
            }
        }
        let mut sa = match AnySa::new(&parsed.params, parsed.comp) {
            Ok(sa) => sa,
            Err(e) => return usage_error(format!("{label}: {e}")),
        };
        if let Some(h) = &iv {
            let bytes = match hex::decode(h.trim_start_matches("0x")) {
                Ok(b) => b,
                Err(e) => return usage_error(format!("--iv: bad hex: {e}")),
            };
            if let Err(e) = sa.set_fixed_iv_for_testing(&bytes) {
                return usage_error(format!("--iv with {label}: {e}"));
            }
        }
        sas.push(sa);
    }
    let mut bundle = Bundle::new(sas);

    let input = match tool::open_input(common.input.as_deref()) {
        Ok(i) => i,
        Err(e) => return usage_error(e),
    };
    let output = match tool::open_output(common.output.as_deref()) {
        Ok(o) => o,
        Err(e) => return usage_error(e),
    };
    let verb = if dir == Direction::Seal { "seal" } else { "open" };
    let result = tool::run_encap(dir, &mut bundle, &encaps, input, output, |i, e| {
        eprintln!("packet {i}: {e}")
    });
    match result {
        Ok(s) => {
            if !common.quiet {
                let dropped = if s.keepalives + s.non_esp > 0 {
                    format!(
                        "; dropped {} NAT-keepalives and {} non-ESP (IKE) datagrams (RFC 3948)",
                        s.keepalives, s.non_esp
                    )
                } else {
                    String::new()
                };
                eprintln!(
                    "ipsec {verb}: {} read, {} written, {} rejected{dropped}",
                    s.read, s.written, s.rejected
                );
            }
            s.exit_code()
        }
        Err(e) => e.exit(
            &tool::input_name(common.input.as_deref()),
            &tool::output_name(common.output.as_deref()),
        ),
    }
}
