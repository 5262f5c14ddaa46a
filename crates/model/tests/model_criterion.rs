//! `ipsec model --from-criterion DIR` on a fake criterion tree written here: the rates it builds,
//! what it ignores, and how it fails.

use ipsec_model::criterion::{rates_from_criterion, ratios_csv, RatioRow, RATIOS_FILE};
use ipsec_model::{self as model, AlgKind, Format, Model, Options};
use std::fs;
use std::path::{Path, PathBuf};

/// A fresh empty directory under the system temp dir.
fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipsec-model-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// One benchmark as criterion 0.8 stores it: `<dir>/<group>/<function>/<param>/new/` with
/// criterion's directory-name mangling (`/` -> `_`), which the reader must not rely on.
fn bench(dir: &Path, group: &str, function: &str, param: usize, bytes: u64, mean_ns: f64) {
    let d = dir
        .join(group.replace('/', "_"))
        .join(function)
        .join(param.to_string())
        .join("new");
    fs::create_dir_all(&d).unwrap();
    let full = format!("{group}/{function}/{param}");
    fs::write(
        d.join("benchmark.json"),
        format!(
            r#"{{"group_id":"{group}","function_id":"{function}","value_str":"{param}","throughput":{{"Bytes":{bytes}}},"full_id":"{full}","directory_name":"{}","title":"{full}"}}"#,
            full.replace('/', "_")
        ),
    )
    .unwrap();
    let est = |v: f64| {
        format!(
            r#"{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":{},"upper_bound":{}}},"point_estimate":{v},"standard_error":1.0}}"#,
            v * 0.99,
            v * 1.01
        )
    };
    fs::write(
        d.join("estimates.json"),
        format!(
            r#"{{"mean":{},"median":{},"median_abs_dev":{},"slope":{},"std_dev":{}}}"#,
            est(mean_ns),
            // The reader must take the mean, not these.
            est(mean_ns * 3.0),
            est(1.0),
            est(mean_ns * 5.0),
            est(2.0)
        ),
    )
    .unwrap();
    // What criterion also keeps beside `new`: ignored.
    let base = d.parent().unwrap().join("base");
    fs::create_dir_all(&base).unwrap();
    fs::write(base.join("benchmark.json"), "not json").unwrap();
}

/// Mbps for `bytes` in `ns`.
fn mbps(bytes: f64, ns: f64) -> f64 {
    bytes * 8.0 * 1e3 / ns
}

fn ratio_row(comp: &str, ds: &str, payload: &str, block: usize, compressed: usize, ratio: f64) -> RatioRow {
    RatioRow {
        compressor: comp.into(),
        dataset: ds.into(),
        payload: payload.into(),
        block_bytes: block,
        blocks: 10,
        compressed_blocks: compressed,
        ratio,
        source: "generated".into(),
    }
}

/// AES-128-CBC and HMAC-SHA1 at 1 KB and 4 KB (not 63 KB), plus things the model ignores;
/// LZS on `text` (compresses) and `random` (does not).
fn fixture(dir: &Path) {
    for (size, enc, dec, hc, hv) in [
        (1024, 2000.0, 1000.0, 4000.0, 4100.0),
        (4096, 7000.0, 3500.0, 14000.0, 14100.0),
    ] {
        bench(dir, "cipher/cbc(aes)/128", "encrypt", size, size as u64, enc);
        bench(dir, "cipher/cbc(aes)/128", "decrypt", size, size as u64, dec);
        bench(dir, "integrity/hmac(sha1)", "compute", size, size as u64, hc);
        bench(dir, "integrity/hmac(sha1)", "verify", size, size as u64, hv);
        bench(dir, "cipher/cipher_null/0", "encrypt", size, size as u64, 1.0);
        bench(dir, "cipher/cipher_null/0", "decrypt", size, size as u64, 1.0);
        bench(dir, "esp/cbc(aes)/128+hmac(sha256)", "seal", size, size as u64, 9999.0);
    }
    // An odd size: not a model payload.
    bench(dir, "cipher/cbc(aes)/128", "encrypt", 1400, 1408, 10.0);
    // Only encryption at 63 KB: 63k is not a payload.
    bench(dir, "cipher/cbc(aes)/128", "encrypt", 64512, 64512, 100000.0);
    for (block, total, ns) in [(1024usize, 40960u64, 400_000.0), (4096, 40960, 300_000.0)] {
        bench(dir, "compression/lzs/text", "compress", block, total, ns);
        bench(dir, "compression/lzs/text", "decompress", block, total, ns / 2.0);
        bench(dir, "compression/lzs/random", "compress", block, total, ns * 2.0);
    }
    let rows = vec![
        ratio_row("lzs", "text", "1k", 1024, 40, 1.8),
        ratio_row("lzs", "text", "4k", 4096, 10, 2.2),
        ratio_row("lzs", "text", "63k", 64512, 1, 2.5),
        ratio_row("lzs", "random", "1k", 1024, 0, 1.0),
        ratio_row("lzs", "random", "4k", 4096, 0, 1.0),
        ratio_row("lzs", "random", "63k", 64512, 0, 1.0),
    ];
    fs::write(dir.join(RATIOS_FILE), ratios_csv(&rows)).unwrap();
}

#[test]
fn rates_from_a_criterion_tree() {
    let dir = temp_dir("criterion");
    fixture(&dir);
    let rates = rates_from_criterion(&dir).unwrap();
    let labels: Vec<&str> = rates.payloads.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(labels, ["1k", "4k"]);
    assert_eq!(rates.payloads[1].bytes, 4096);
    let names: Vec<&str> = rates.crypto.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        ["aes128-cbc", "hmac-sha1"],
        "cipher_null and framing groups are not algorithms"
    );
    let aes = rates.alg("aes128-cbc").unwrap();
    assert_eq!(aes.kind, AlgKind::Cipher);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b;
    assert!(close(aes.mbps[0], mbps(1024.0, 2000.0)), "{}", aes.mbps[0]);
    assert!(close(aes.reverse_mbps[0], mbps(1024.0, 1000.0)));
    assert!(close(aes.mbps[1], mbps(4096.0, 7000.0)));
    let sha1 = rates.alg("hmac-sha1").unwrap();
    assert_eq!(sha1.kind, AlgKind::Integrity);
    assert!(close(sha1.reverse_mbps[1], mbps(4096.0, 14100.0)));

    assert_eq!(rates.compressors.len(), 1);
    let lzs = &rates.compressors[0];
    assert_eq!(lzs.name, "lzs");
    let text = lzs.datasets.iter().find(|d| d.name == "text").unwrap();
    assert_eq!(text.ratio, vec![1.8, 2.2]);
    assert!(close(text.comp_mbps[0], mbps(40960.0, 400_000.0)));
    assert!(close(text.decomp_mbps[1], mbps(40960.0, 150_000.0)));
    let random = lzs.datasets.iter().find(|d| d.name == "random").unwrap();
    assert_eq!(random.decomp_mbps, vec![0.0, 0.0], "nothing decompressed");
    assert!(close(random.comp_mbps[1], mbps(40960.0, 600_000.0)));

    // The whole command on it.
    let args = |format, break_even| Options {
        from_criterion: Some(dir.clone()),
        format,
        break_even,
        ..Options::default()
    };
    let csv = model::run(&args(Format::Csv, false)).unwrap();
    let count = |m: &str| csv.lines().filter(|l| l.starts_with(&format!("{m},"))).count();
    // Suites: null, aes128-cbc, hmac-sha1, aes128-cbc+hmac-sha1; 2 payloads; 5 links; 2 data sets.
    assert_eq!(count("ipsec-only"), 4 * 2 * 5);
    assert_eq!(count("local-send"), 4 * 2 * 2);
    assert_eq!(count("complete"), 4 * 2 * 5 * 2);
    // Nothing of `random` was decompressed: the receiver's work is unchanged.
    assert!(csv.contains("\nlocal-receive,,lzs,random,4k,aes128-cbc+hmac-sha1,1.000000\n"));
    let md = model::run(&args(Format::Markdown, false)).unwrap();
    assert!(md.starts_with("> Rates: criterion results in "), "{}", &md[..80]);
    assert!(md.contains("| network | null | aes128-cbc | hmac-sha1 | aes128-cbc+hmac-sha1 |"));
    let be = model::run(&args(Format::Csv, true)).unwrap();
    assert!(be.contains("\nlocal-send,,lzs,text,1k,aes128-cbc,"));

    // One IPsec-only cell by hand: 4 KB over 100 Mbps at 80%, aes128-cbc+hmac-sha1.
    let rows = model::evaluate(&rates, &model::Env::default(), &[Model::IpsecOnly]).unwrap();
    let v = rows
        .iter()
        .find(|r| r.payload == "4k" && r.network.as_deref() == Some("100Mbps") && r.suite == "aes128-cbc+hmac-sha1")
        .unwrap()
        .value
        .unwrap();
    let bps = 80e6;
    let t_net = 4308.0 * 8.0 / bps;
    let (e, d) = (mbps(4096.0, 7000.0) * 1e6, mbps(4096.0, 3500.0) * 1e6);
    let (hc, hv) = (mbps(4096.0, 14000.0) * 1e6, mbps(4096.0, 14100.0) * 1e6);
    let want = t_net / (4352.0 * 8.0 / bps + 4120.0 * 8.0 * (1.0 / e + 1.0 / d) + 4200.0 * 8.0 * (1.0 / hc + 1.0 / hv));
    assert!((v - want).abs() < 1e-12, "{v} vs {want}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn algs_filter_and_crypto_only() {
    let dir = temp_dir("crypto-only");
    fixture(&dir);
    fs::remove_file(dir.join(RATIOS_FILE)).unwrap();
    let md = model::run(&Options {
        from_criterion: Some(dir.clone()),
        algs: vec!["hmac-sha1".into()],
        ..Options::default()
    })
    .unwrap();
    assert!(md.contains("only the ipsec-only model is evaluated"));
    assert!(md.contains("| network | null | hmac-sha1 |"));
    let err = model::run(&Options {
        from_criterion: Some(dir.clone()),
        algs: vec!["aes999-cbc".into()],
        ..Options::default()
    })
    .unwrap_err();
    assert!(err.contains("have: aes128-cbc, hmac-sha1"), "{err}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_results_are_errors() {
    // No such directory.
    let err = rates_from_criterion(Path::new("/nonexistent/criterion")).unwrap_err();
    assert!(err.contains("cargo bench"), "{err}");
    // No crypto results at all.
    let empty = temp_dir("empty");
    assert!(rates_from_criterion(&empty).unwrap_err().contains("no `cipher/...`"));
    // A data set that compressed but has no decompression result.
    let dir = temp_dir("no-decompress");
    fixture(&dir);
    fs::remove_dir_all(dir.join("compression_lzs_text").join("decompress")).unwrap();
    let err = rates_from_criterion(&dir).unwrap_err();
    assert!(err.contains("`compression/lzs/text` `decompress`"), "{err}");
    // A ratios row missing for a payload.
    let dir2 = temp_dir("no-ratio");
    fixture(&dir2);
    let text = fs::read_to_string(dir2.join(RATIOS_FILE)).unwrap();
    let cut: String = text
        .lines()
        .filter(|l| !l.starts_with("lzs,text,4k"))
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(dir2.join(RATIOS_FILE), cut).unwrap();
    assert!(rates_from_criterion(&dir2)
        .unwrap_err()
        .contains("no lzs text row at 4096"));
    // A broken estimates file.
    let dir3 = temp_dir("broken");
    fixture(&dir3);
    fs::write(
        dir3.join("cipher_cbc(aes)_128/encrypt/1024/new/estimates.json"),
        r#"{"median":{}}"#,
    )
    .unwrap();
    assert!(rates_from_criterion(&dir3)
        .unwrap_err()
        .contains("no mean.point_estimate"));
    for d in [empty, dir, dir2, dir3] {
        fs::remove_dir_all(d).unwrap();
    }
}
