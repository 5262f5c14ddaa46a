//! `ipsec model` fed the paper's table 1 reproduces its table 2 (IPsec-only slowdowns, 4 KB
//! payloads) to within 0.01 in every cell. Both tables are the built-in ones
//! (`data/mcgregor-lee/`), so this always runs.

use ipsec_model::{self as model, paper, Env, Format, Model, Options, Rates, Row};

const TOLERANCE: f64 = 0.01;

/// Table 2 column (`rc5_md5`) -> suite name (`rc5-cbc+hmac-md5`): each `_`-separated token names
/// the input algorithm having it as a `-`-separated word.
fn suite_for(column: &str, rates: &Rates) -> String {
    let mut cipher = None;
    let mut integrity = None;
    for tok in column.split('_') {
        let alg = rates
            .crypto
            .iter()
            .find(|a| a.name.split('-').any(|w| w == tok))
            .unwrap_or_else(|| panic!("no algorithm for `{tok}` of column `{column}`"));
        match alg.kind {
            model::AlgKind::Cipher => cipher = Some(alg.name.clone()),
            model::AlgKind::Integrity => integrity = Some(alg.name.clone()),
        }
    }
    model::Suite { cipher, integrity }.name()
}

#[test]
fn reproduces_table2() {
    let rates = paper::rates().unwrap();
    let rows = model::evaluate(&rates, &Env::default(), &[Model::IpsecOnly]).unwrap();
    let table2: Vec<Row> = rows.into_iter().filter(|r| r.payload == "4k").collect();
    println!("{}", model::to_markdown(&table2, false));

    let mut lines = paper::TABLE2.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[0], "network");
    let suites: Vec<String> = header[1..].iter().map(|c| suite_for(c, &rates)).collect();
    let (mut cells, mut worst, mut rounding_differs) = (0, 0.0f64, Vec::new());
    let mut failures = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        for (suite, want) in suites.iter().zip(&f[1..]) {
            let want: f64 = want.trim().parse().unwrap();
            let got = table2
                .iter()
                .find(|r| r.network.as_deref() == Some(f[0]) && r.suite == *suite)
                .unwrap_or_else(|| panic!("no value for {} {suite}", f[0]))
                .value
                .unwrap();
            cells += 1;
            let diff = (got - want).abs();
            worst = worst.max(diff);
            if ((got * 100.0).round() / 100.0 - want).abs() > 1e-9 {
                rounding_differs.push(format!("{} {suite}: {got:.4} vs {want:.2}", f[0]));
            }
            if diff > TOLERANCE + 1e-12 {
                failures.push(format!("{} {suite}: {got:.4} vs {want:.2} (off by {diff:.4})", f[0]));
            }
        }
    }
    assert_eq!(cells, 40, "table 2 is 5 networks x 8 suites");
    println!("worst |model - table 2| = {worst:.4}; cells rounding differently: {rounding_differs:#?}");
    assert!(failures.is_empty(), "cells beyond {TOLERANCE}: {failures:#?}");
}

#[test]
fn run_outputs_every_combination() {
    let args = |format, break_even| Options {
        format,
        break_even,
        ..Options::default()
    };
    let csv = model::run(&args(Format::Csv, false)).unwrap();
    let md = model::run(&args(Format::Markdown, false)).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("model,network,compressor,dataset,payload,suite,speedup")
    );
    // 9 suites; 3 payloads; 5 links; 2 compressors x 8 data sets.
    let count = |m: &str| csv.lines().filter(|l| l.starts_with(&format!("{m},"))).count();
    assert_eq!(count("ipsec-only"), 9 * 3 * 5);
    assert_eq!(count("local-send"), 9 * 3 * 2 * 8);
    assert_eq!(count("local-receive"), 9 * 3 * 2 * 8);
    assert_eq!(count("complete"), 9 * 3 * 5 * 2 * 8);
    // Every cell has a value; Local Receive is exactly 1 where nothing is decompressed (gif,
    // random: every payload's decompression rate is 0 in tables 5 and 6), and differs from 1
    // elsewhere.
    assert!(csv.lines().all(|l| !l.ends_with(',')), "an empty cell");
    let mut unchanged = 0;
    for l in csv.lines().filter(|l| l.starts_with("local-receive,")) {
        let v: f64 = l.rsplit(',').next().unwrap().parse().unwrap();
        let non_expanding = l.contains(",gif,") || l.contains(",random,");
        assert_eq!(v == 1.0, non_expanding, "{l}");
        unchanged += usize::from(non_expanding);
    }
    assert_eq!(unchanged, 9 * 3 * 2 * 2);
    assert!(md.contains("### Local Receive, lzs, 4k payload"));
    assert!(csv.contains("\nipsec-only,1Gbps,,,4k,3des-cbc+hmac-sha1,0.016"));

    assert!(md.contains("> Rates: the paper's tables, built in (data/mcgregor-lee)."));
    assert!(md.contains("### IPsec-only slowdown, 4k payload (the paper's table 2)"));
    assert!(md.contains("### Complete, deflate, 63k payload, 1Gbps"));

    let be = model::run(&args(Format::Csv, true)).unwrap();
    assert!(be.starts_with("model,network,compressor,dataset,payload,suite,break_even\n"));
    assert!(!be.contains("\nipsec-only,"));
    let be_md = model::run(&args(Format::Markdown, true)).unwrap();
    assert!(be_md.contains("### Local Send break-even compression ratio, lzs, 4k payload"));
}
