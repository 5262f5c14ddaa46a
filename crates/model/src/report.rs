//! The tables `ipsec model` prints: the rates it used (`--print-rates`) and the evaluated rows,
//! as CSV or Markdown.

use crate::{AlgKind, CompressorRates, Model, Rates, Row};
use std::fmt::Write as _;

/// `--print-rates --format csv`: one row per algorithm or compressor, data set and payload:
/// `kind,name,dataset,payload,forward_mbps,reverse_mbps,ratio`. Crypto: encryption/computation
/// and decryption/verification; compressors: compression and decompression, and the ratio.
pub fn rates_csv(r: &Rates) -> String {
    let mut s = String::from("kind,name,dataset,payload,forward_mbps,reverse_mbps,ratio\n");
    for a in &r.crypto {
        let kind = match a.kind {
            AlgKind::Cipher => "cipher",
            AlgKind::Integrity => "integrity",
        };
        for (i, p) in r.payloads.iter().enumerate() {
            let _ = writeln!(
                s,
                "{kind},{},,{},{:.3},{:.3},",
                a.name, p.label, a.mbps[i], a.reverse_mbps[i]
            );
        }
    }
    for c in &r.compressors {
        for d in &c.datasets {
            for (i, p) in r.payloads.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "compressor,{},{},{},{:.3},{:.3},{:.4}",
                    c.name, d.name, p.label, d.comp_mbps[i], d.decomp_mbps[i], d.ratio[i]
                );
            }
        }
    }
    s
}

/// `--print-rates`: the inputs as markdown tables laid out like the paper's tables 1, 4, 5
/// and 6. Crypto cells are `forward / reverse` where the two differ.
pub fn rates_markdown(r: &Rates) -> String {
    let labels: Vec<&str> = r.payloads.iter().map(|p| p.label.as_str()).collect();
    let mut s = String::from("### Crypto rates, Mbps (table 1 layout; encrypt / decrypt, compute / verify)\n\n");
    let _ = writeln!(s, "| algorithm | {} |", labels.join(" | "));
    let _ = writeln!(s, "|---|{}", "---:|".repeat(labels.len()));
    for a in &r.crypto {
        let cells: Vec<String> = (0..labels.len())
            .map(|i| {
                let (f, b) = (a.mbps[i], a.reverse_mbps[i]);
                if (f - b).abs() < 1e-9 * f.max(b) {
                    format!("{f:.0}")
                } else {
                    format!("{f:.0} / {b:.0}")
                }
            })
            .collect();
        let _ = writeln!(s, "| {} | {} |", a.name, cells.join(" | "));
    }
    if r.compressors.is_empty() {
        return s;
    }
    s.push_str("\n### Compression ratios (table 4 layout; header counted)\n\n");
    let head: Vec<String> = r
        .compressors
        .iter()
        .flat_map(|c| labels.iter().map(move |l| format!("{}_{l}", c.name)))
        .collect();
    let _ = writeln!(s, "| data set | {} |", head.join(" | "));
    let _ = writeln!(s, "|---|{}", "---:|".repeat(head.len()));
    let mut names: Vec<&str> = Vec::new();
    for d in r.compressors.iter().flat_map(|c| &c.datasets) {
        if !names.contains(&d.name.as_str()) {
            names.push(&d.name);
        }
    }
    let find = |c: &CompressorRates, n: &str| c.datasets.iter().find(|d| d.name == n).cloned();
    for n in &names {
        let cells: Vec<String> = r
            .compressors
            .iter()
            .flat_map(|c| {
                let d = find(c, n);
                (0..labels.len()).map(move |i| d.as_ref().map_or(String::new(), |d| format!("{:.2}", d.ratio[i])))
            })
            .collect();
        let _ = writeln!(s, "| {n} | {} |", cells.join(" | "));
    }
    for c in &r.compressors {
        let _ = writeln!(s, "\n### {} rates, Mbps (tables 5 and 6 layout)\n", c.name);
        let cols: Vec<String> = ["comp", "decomp"]
            .iter()
            .flat_map(|k| labels.iter().map(move |l| format!("{k}_{l}")))
            .collect();
        let _ = writeln!(s, "| data set | {} |", cols.join(" | "));
        let _ = writeln!(s, "|---|{}", "---:|".repeat(cols.len()));
        for d in &c.datasets {
            let cells: Vec<String> = d
                .comp_mbps
                .iter()
                .chain(&d.decomp_mbps)
                .map(|v| format!("{v:.0}"))
                .collect();
            let _ = writeln!(s, "| {} | {} |", d.name, cells.join(" | "));
        }
    }
    s
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
