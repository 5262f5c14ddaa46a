//! What the load generators (`ike-clients.rs`, `ike-load.rs`) share: their command line
//! (`--key value` pairs) and the spread of a set of times as JSON. `mod common;` from each;
//! not an example of its own (Cargo builds `examples/*.rs` and `examples/*/main.rs` only).

/// Prints `PROG: MSG` and where the options are documented, exits with status 2.
pub fn usage(prog: &str, msg: &str) -> ! {
    eprintln!("{prog}: {msg}\nsee the doc comment of crates/ike/examples/{prog}.rs for the options");
    std::process::exit(2)
}

/// The value after `--k` on the command line, if `--k` is there (a `--k` with no value after
/// it: a usage error of `prog`).
pub fn arg(prog: &str, args: &[String], k: &str) -> Option<String> {
    args.iter().position(|a| a == &format!("--{k}")).map(|i| {
        args.get(i + 1)
            .cloned()
            .unwrap_or_else(|| usage(prog, &format!("--{k} needs a value")))
    })
}

/// Whether the flag `--k` (no value) is on the command line.
#[allow(dead_code)] // used by ike-clients only
pub fn flag(args: &[String], k: &str) -> bool {
    args.iter().any(|a| a == &format!("--{k}"))
}

/// Median, 90th percentile and maximum in ms, as a JSON object (`null` when empty).
pub fn spread(v: &mut [f64]) -> String {
    if v.is_empty() {
        return "null".into();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "{{\"median\":{:.3},\"p90\":{:.3},\"max\":{:.3}}}",
        at(0.5),
        at(0.9),
        v[v.len() - 1]
    )
}
