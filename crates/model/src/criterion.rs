//! Model inputs from this machine: the criterion results of `cargo bench --bench throughput`
//! (`benches/throughput/`) and the compression ratios that bench writes beside them.
//!
//! # Benchmark ids (shared with the bench; the reader depends on them)
//!
//! Criterion stores each benchmark as `<dir>/<group>/<function>/<parameter>/new/` with a
//! `benchmark.json` (group id, function id, parameter, throughput) and an `estimates.json`
//! (mean, median, ... in ns per iteration). Only the ids in `benchmark.json` are read, never the
//! directory names (criterion rewrites `/` and other characters in those).
//!
//! | group | functions | parameter | throughput (bytes per iteration) |
//! |---|---|---|---|
//! | `cipher/<xfrm name>/<key bits>` | `encrypt`, `decrypt` | buffer size | the buffer, rounded up to the cipher block |
//! | `integrity/<xfrm name>` | `compute`, `verify` | buffer size | the buffer |
//! | `compression/<algorithm>/<data set>` | `compress`, `decompress` | block size (1024, 4096, 64512) | uncompressed bytes of the sampled blocks (`decompress`: of those that compressed) |
//! | `esp/<suite>`, `ah/<xfrm name>`, `ipcomp/<algorithm>` | `primitive-seal`, `seal`, `primitive-open`, `open` | IPv4 packet size | the packet |
//!
//! `<xfrm name>` is the `ip xfrm` algorithm name (`cbc(aes)`, `rfc4106(gcm(aes))`,
//! `rfc7539esp(chacha20,poly1305)`, `hmac(sha1)`, ...). The framing groups are for reading
//! beside the primitives; the model does not use them.
//!
//! # What the model gets
//!
//! - Payload labels `1k`, `4k`, `63k` are the parameters 1024, 4096 and 64512 (only those the
//!   crypto benches have; other sizes are ignored).
//! - A rate is `throughput bytes × 8 / mean time`, in Mbps (10^6 bit/s) of input bytes: the
//!   forward rate from `encrypt`/`compute`, the reverse rate from `decrypt`/`verify`.
//! - Algorithms get model names in the paper's style ([`model_alg_name`]): `aes128-cbc`,
//!   `3des-cbc`, `aes256-gcm`, `chacha20-poly1305`, `hmac-sha1`, ... `cipher_null` is measured (it
//!   shows the harness floor) but is not a model algorithm: it does no work, and the model's
//!   `null` suite already stands for no encryption.
//! - Compressors and data sets come from [`RATIOS_FILE`]; their rates from the `compression`
//!   groups. A data set of which no sampled block compressed has a decompression rate of 0
//!   (nothing is decompressed), as in the paper's tables.

use super::inputs::{AlgKind, AlgRates, CompressorRates, DataSetRates, PayloadSize, Rates};
use std::fs;
use std::path::{Path, PathBuf};

/// The compression ratios file the bench writes into the criterion directory.
pub const RATIOS_FILE: &str = "ipsec-ratios.csv";
/// Its header.
pub const RATIOS_HEADER: &str = "compressor,dataset,payload,block_bytes,blocks,compressed_blocks,ratio,source";

/// Group prefix of the cipher and AEAD benches.
pub const CIPHER_GROUP: &str = "cipher";
/// Group prefix of the HMAC benches.
pub const INTEGRITY_GROUP: &str = "integrity";
/// Group prefix of the codec benches.
pub const COMPRESSION_GROUP: &str = "compression";

/// The payload sizes the model uses, with their labels.
pub const PAYLOADS: [(&str, usize); 3] = [("1k", 1024), ("4k", 4096), ("63k", 63 * 1024)];

/// One criterion result.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub group: String,
    pub function: Option<String>,
    pub parameter: Option<String>,
    /// Bytes processed per iteration (`None` without a byte throughput).
    pub bytes: Option<u64>,
    /// Mean time per iteration, ns.
    pub mean_ns: f64,
}

impl Measurement {
    /// Mbps of the throughput bytes; `None` without bytes or with a non-positive time.
    pub fn mbps(&self) -> Option<f64> {
        let b = self.bytes?;
        (self.mean_ns > 0.0).then(|| b as f64 * 8.0 * 1e3 / self.mean_ns)
    }
}

/// One row of [`RATIOS_FILE`].
#[derive(Clone, Debug, PartialEq)]
pub struct RatioRow {
    /// `deflate`, `lzs`, `lzf`.
    pub compressor: String,
    pub dataset: String,
    /// `1k`, `4k`, `63k`.
    pub payload: String,
    pub block_bytes: usize,
    /// Blocks sampled.
    pub blocks: usize,
    /// Blocks that shrank by more than the IPComp header.
    pub compressed_blocks: usize,
    /// Mean over the blocks of original / (compressed + 4); 1.0 for a block sent uncompressed.
    pub ratio: f64,
    /// `corpus`, `generated` or `seeded-random`.
    pub source: String,
}

/// The CSV text of [`RATIOS_FILE`].
pub fn ratios_csv(rows: &[RatioRow]) -> String {
    let mut s = format!("{RATIOS_HEADER}\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{:.6},{}\n",
            r.compressor, r.dataset, r.payload, r.block_bytes, r.blocks, r.compressed_blocks, r.ratio, r.source
        ));
    }
    s
}

/// Parses [`RATIOS_FILE`].
pub fn parse_ratios(text: &str) -> Result<Vec<RatioRow>, String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let header = lines.next().ok_or("empty file")?;
    if header != RATIOS_HEADER {
        return Err(format!("header `{header}`, expected `{RATIOS_HEADER}`"));
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let [compressor, dataset, payload, block_bytes, blocks, compressed_blocks, ratio, source] = f[..] else {
            return Err(format!("row {}: {} fields, expected 8", i + 1, f.len()));
        };
        let int = |s: &str, what: &str| {
            s.parse::<usize>()
                .map_err(|_| format!("row {}: {what} `{s}` is not a count", i + 1))
        };
        let ratio: f64 = ratio
            .parse()
            .map_err(|_| format!("row {}: ratio `{ratio}` is not a number", i + 1))?;
        if !(ratio.is_finite() && ratio > 0.0) {
            return Err(format!("row {}: ratio {ratio} must be finite and > 0", i + 1));
        }
        rows.push(RatioRow {
            compressor: compressor.to_string(),
            dataset: dataset.to_string(),
            payload: payload.to_string(),
            block_bytes: int(block_bytes, "block_bytes")?,
            blocks: int(blocks, "blocks")?,
            compressed_blocks: int(compressed_blocks, "compressed_blocks")?,
            ratio,
            source: source.to_string(),
        });
    }
    Ok(rows)
}

/// Where criterion writes, as criterion itself decides: `$CRITERION_HOME`, else
/// `$CARGO_TARGET_DIR/criterion`, else `<target>/criterion` with `<target>` found from `exe`
/// (a bench binary lives in `<target>/<profile>/deps/`), else `target/criterion`.
pub fn criterion_dir(exe: Option<&Path>) -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    criterion_dir_from(var("CRITERION_HOME"), var("CARGO_TARGET_DIR"), exe)
}

/// [`criterion_dir`] with the environment given.
pub fn criterion_dir_from(criterion_home: Option<PathBuf>, target_dir: Option<PathBuf>, exe: Option<&Path>) -> PathBuf {
    if let Some(d) = criterion_home {
        return d;
    }
    if let Some(t) = target_dir {
        return t.join("criterion");
    }
    exe.and_then(|e| e.ancestors().nth(3))
        .filter(|t| !t.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("target").join("criterion"), |t| t.join("criterion"))
}

/// The model's name for an `ip xfrm` algorithm (with the key size for AES), in the paper's
/// style; `None` for `cipher_null` and `digest_null`. Unknown names are kept, with the key
/// bits appended and commas (the CSV separator) replaced.
pub fn model_alg_name(xfrm: &str, key_bits: Option<u32>) -> Option<String> {
    let bits = key_bits.map_or(String::new(), |b| b.to_string());
    Some(match xfrm {
        "cipher_null" | "digest_null" => return None,
        "cbc(des)" => "des-cbc".into(),
        "cbc(des3_ede)" => "3des-cbc".into(),
        "cbc(aes)" => format!("aes{bits}-cbc"),
        "rfc4106(gcm(aes))" => format!("aes{bits}-gcm"),
        "rfc7539esp(chacha20,poly1305)" => "chacha20-poly1305".into(),
        "hmac(md5)" => "hmac-md5".into(),
        "hmac(sha1)" => "hmac-sha1".into(),
        "hmac(sha256)" => "hmac-sha256".into(),
        "hmac(sha384)" => "hmac-sha384".into(),
        "hmac(sha512)" => "hmac-sha512".into(),
        other => {
            let base = other.replace(',', "-");
            if bits.is_empty() {
                base
            } else {
                format!("{base}-{bits}")
            }
        }
    })
}

fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Bytes per iteration of a serialized `criterion::Throughput` (`{"Bytes": n}`, ...).
fn throughput_bytes(t: &serde_json::Value) -> Option<u64> {
    if let Some(n) = t.get("Bytes").or_else(|| t.get("BytesDecimal")) {
        return n.as_u64();
    }
    if let Some(n) = t.get("Bits") {
        return n.as_u64().map(|b| b / 8);
    }
    t.get("ElementsAndBytes")?.get("bytes")?.as_u64()
}

fn parse_measurement(new_dir: &Path) -> Result<Measurement, String> {
    let bench_path = new_dir.join("benchmark.json");
    let b = read_json(&bench_path)?;
    let text = |k: &str| b.get(k).and_then(|v| v.as_str()).map(String::from);
    let group = text("group_id").ok_or_else(|| format!("{}: no group_id", bench_path.display()))?;
    let est_path = new_dir.join("estimates.json");
    let e = read_json(&est_path)?;
    let mean_ns = e
        .get("mean")
        .and_then(|m| m.get("point_estimate"))
        .and_then(|v| v.as_f64())
        .ok_or_else(|| format!("{}: no mean.point_estimate", est_path.display()))?;
    Ok(Measurement {
        group,
        function: text("function_id"),
        parameter: text("value_str"),
        bytes: b.get("throughput").and_then(throughput_bytes),
        mean_ns,
    })
}

/// Every `*/new/benchmark.json` (with its `estimates.json`) under `dir`, sorted by id.
pub fn read_measurements(dir: &Path) -> Result<Vec<Measurement>, String> {
    fn walk(d: &Path, out: &mut Vec<Measurement>) -> Result<(), String> {
        let entries = fs::read_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
        for entry in entries {
            let p = entry.map_err(|e| format!("{}: {e}", d.display()))?.path();
            if !p.is_dir() {
                continue;
            }
            if p.file_name().is_some_and(|n| n == "new") && p.join("benchmark.json").is_file() {
                out.push(parse_measurement(&p)?);
            } else {
                walk(&p, out)?;
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    out.sort_by(|a, b| (&a.group, &a.function, &a.parameter).cmp(&(&b.group, &b.function, &b.parameter)));
    Ok(out)
}

/// The rate of `group`/`function` at parameter `bytes`, if measured.
fn rate(ms: &[Measurement], group: &str, function: &str, bytes: usize) -> Option<f64> {
    let param = bytes.to_string();
    ms.iter()
        .find(|m| m.group == group && m.function.as_deref() == Some(function) && m.parameter.as_deref() == Some(&param))
        .and_then(Measurement::mbps)
}

/// An algorithm group: its kind, `ip xfrm` name, key bits, and the forward/reverse functions.
fn parse_alg_group(group: &str) -> Option<(AlgKind, &str, Option<u32>)> {
    let (prefix, rest) = group.split_once('/')?;
    let kind = match prefix {
        CIPHER_GROUP => AlgKind::Cipher,
        INTEGRITY_GROUP => AlgKind::Integrity,
        _ => return None,
    };
    // `<xfrm name>[/<key bits>]`; xfrm names contain no `/`.
    Some(match rest.rsplit_once('/') {
        Some((name, bits)) => (kind, name, Some(bits.parse().ok()?)),
        None => (kind, rest, None),
    })
}

fn functions(kind: AlgKind) -> (&'static str, &'static str) {
    match kind {
        AlgKind::Cipher => ("encrypt", "decrypt"),
        AlgKind::Integrity => ("compute", "verify"),
    }
}

/// Builds the model's [`Rates`] from criterion results in `dir` (e.g. `target/criterion`) and
/// the ratios file beside them. Without the ratios file only the crypto rates are loaded (the
/// IPsec-only model).
pub fn rates_from_criterion(dir: &Path) -> Result<Rates, String> {
    if !dir.is_dir() {
        return Err(format!(
            "{}: not a directory (run `cargo bench --bench throughput` first)",
            dir.display()
        ));
    }
    let ms = read_measurements(dir)?;

    // Algorithms, in bench order (groups sorted by id).
    let mut algs: Vec<(AlgKind, String, String)> = Vec::new(); // kind, model name, group
    for m in &ms {
        if let Some((kind, xfrm, bits)) = parse_alg_group(&m.group) {
            if let Some(name) = model_alg_name(xfrm, bits) {
                if !algs.iter().any(|(_, _, g)| *g == m.group) {
                    if algs.iter().any(|(_, n, _)| *n == name) {
                        return Err(format!("two benchmark groups map to the algorithm name `{name}`"));
                    }
                    algs.push((kind, name, m.group.clone()));
                }
            }
        }
    }
    if algs.is_empty() {
        return Err(format!(
            "{}: no `{CIPHER_GROUP}/...` or `{INTEGRITY_GROUP}/...` results (run `cargo bench --bench throughput`)",
            dir.display()
        ));
    }
    // Ciphers first, then integrity, as the paper's table 1 lists them.
    algs.sort_by_key(|(k, _, _)| *k == AlgKind::Integrity);

    // Payloads every algorithm was measured at, both ways.
    let payloads: Vec<PayloadSize> = PAYLOADS
        .iter()
        .filter(|(_, bytes)| {
            algs.iter().all(|(kind, _, g)| {
                let (f, r) = functions(*kind);
                rate(&ms, g, f, *bytes).is_some() && rate(&ms, g, r, *bytes).is_some()
            })
        })
        .map(|(label, bytes)| PayloadSize {
            label: label.to_string(),
            bytes: *bytes,
        })
        .collect();
    if payloads.is_empty() {
        let sizes: Vec<String> = PAYLOADS.iter().map(|(_, b)| b.to_string()).collect();
        return Err(format!(
            "{}: no payload size ({}) measured for every algorithm in both directions",
            dir.display(),
            sizes.join(", ")
        ));
    }
    let crypto = algs
        .into_iter()
        .map(|(kind, name, g)| {
            let (f, r) = functions(kind);
            let get = |func: &str| {
                payloads
                    .iter()
                    .map(|p| rate(&ms, &g, func, p.bytes).unwrap_or(0.0))
                    .collect()
            };
            AlgRates {
                name,
                kind,
                mbps: get(f),
                reverse_mbps: get(r),
            }
        })
        .collect();

    let mut rates = Rates {
        payloads,
        crypto,
        compressors: Vec::new(),
    };
    let ratios_path = dir.join(RATIOS_FILE);
    if !ratios_path.is_file() {
        return Ok(rates);
    }
    let text = fs::read_to_string(&ratios_path).map_err(|e| format!("{}: {e}", ratios_path.display()))?;
    let rows = parse_ratios(&text).map_err(|e| format!("{}: {e}", ratios_path.display()))?;
    for r in &rows {
        let ci = match rates.compressors.iter().position(|c| c.name == r.compressor) {
            Some(i) => i,
            None => {
                rates.compressors.push(CompressorRates {
                    name: r.compressor.clone(),
                    datasets: Vec::new(),
                });
                rates.compressors.len() - 1
            }
        };
        let comp = &mut rates.compressors[ci];
        if !comp.datasets.iter().any(|d| d.name == r.dataset) {
            comp.datasets.push(DataSetRates {
                name: r.dataset.clone(),
                ratio: Vec::new(),
                comp_mbps: Vec::new(),
                decomp_mbps: Vec::new(),
            });
        }
    }
    for comp in &mut rates.compressors {
        for ds in &mut comp.datasets {
            let group = format!("{COMPRESSION_GROUP}/{}/{}", comp.name, ds.name);
            for p in &rates.payloads {
                let row = rows
                    .iter()
                    .find(|r| r.compressor == comp.name && r.dataset == ds.name && r.block_bytes == p.bytes)
                    .ok_or_else(|| format!("{RATIOS_FILE}: no {} {} row at {} bytes", comp.name, ds.name, p.bytes))?;
                let missing = |f: &str| {
                    format!(
                        "{}: no `{group}` `{f}` result at {} (run `cargo bench --bench throughput`)",
                        dir.display(),
                        p.bytes
                    )
                };
                let c = rate(&ms, &group, "compress", p.bytes).ok_or_else(|| missing("compress"))?;
                let d = if row.compressed_blocks == 0 {
                    0.0
                } else {
                    rate(&ms, &group, "decompress", p.bytes).ok_or_else(|| missing("decompress"))?
                };
                ds.ratio.push(row.ratio);
                ds.comp_mbps.push(c);
                ds.decomp_mbps.push(d);
            }
        }
    }
    rates.validate().map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(rates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(model_alg_name("cbc(aes)", Some(128)).as_deref(), Some("aes128-cbc"));
        assert_eq!(
            model_alg_name("rfc4106(gcm(aes))", Some(256)).as_deref(),
            Some("aes256-gcm")
        );
        assert_eq!(model_alg_name("cbc(des3_ede)", Some(192)).as_deref(), Some("3des-cbc"));
        assert_eq!(model_alg_name("hmac(md5)", None).as_deref(), Some("hmac-md5"));
        assert_eq!(model_alg_name("cipher_null", Some(0)), None);
        assert_eq!(model_alg_name("foo(a,b)", Some(64)).as_deref(), Some("foo(a-b)-64"));
    }

    #[test]
    fn groups() {
        assert_eq!(
            parse_alg_group("cipher/rfc7539esp(chacha20,poly1305)/256"),
            Some((AlgKind::Cipher, "rfc7539esp(chacha20,poly1305)", Some(256)))
        );
        assert_eq!(
            parse_alg_group("integrity/hmac(sha1)"),
            Some((AlgKind::Integrity, "hmac(sha1)", None))
        );
        assert_eq!(parse_alg_group("esp/cbc(aes)/128+hmac(sha256)"), None);
        assert_eq!(parse_alg_group("cipher/cbc(aes)/x"), None);
    }

    #[test]
    fn ratios_round_trip() {
        let rows = vec![RatioRow {
            compressor: "lzs".into(),
            dataset: "paper2".into(),
            payload: "4k".into(),
            block_bytes: 4096,
            blocks: 10,
            compressed_blocks: 10,
            ratio: 1.83,
            source: "corpus".into(),
        }];
        assert_eq!(parse_ratios(&ratios_csv(&rows)).unwrap(), rows);
        assert!(parse_ratios("compressor,dataset\nlzs,x\n").is_err());
        assert!(parse_ratios(&format!("{RATIOS_HEADER}\nlzs,x,4k,4096,10,10,nan,corpus\n")).is_err());
    }

    #[test]
    fn throughput_forms() {
        let j = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        assert_eq!(throughput_bytes(&j(r#"{"Bytes":1024}"#)), Some(1024));
        assert_eq!(throughput_bytes(&j(r#"{"Bits":8192}"#)), Some(1024));
        assert_eq!(
            throughput_bytes(&j(r#"{"ElementsAndBytes":{"elements":3,"bytes":99}}"#)),
            Some(99)
        );
        assert_eq!(throughput_bytes(&j(r#"{"Elements":3}"#)), None);
    }

    #[test]
    fn target_dir() {
        let exe = Path::new("/x/target/release/deps/throughput-0123");
        assert_eq!(
            criterion_dir_from(None, None, Some(exe)),
            Path::new("/x/target/criterion")
        );
        assert_eq!(criterion_dir_from(None, None, None), Path::new("target/criterion"));
        assert_eq!(
            criterion_dir_from(None, None, Some(Path::new("deps/x"))),
            Path::new("target/criterion")
        );
        assert_eq!(
            criterion_dir_from(None, Some("/t".into()), Some(exe)),
            Path::new("/t/criterion")
        );
        assert_eq!(
            criterion_dir_from(Some("/c".into()), Some("/t".into()), Some(exe)),
            Path::new("/c")
        );
    }
}
