//! Model inputs: measured (de)compression ratios and rates, read from the paper's CSV tables
//! (criterion results are read by `super::criterion`).
//!
//! All rates are in Mbps (10^6 bit/s) of *input* bytes processed: plaintext for ciphers and
//! hashes, uncompressed bytes for both compression and decompression.

use std::fs;
use std::path::Path;

/// The crypto rates table (table 1 of the paper).
pub const CRYPTO_FILE: &str = "table1_crypto_rates_mbps.csv";
/// The compression ratio table (table 4).
pub const RATIOS_FILE: &str = "table4_compression_ratios.csv";
/// Suffix of the per-compressor rate tables (`table5_deflate_rates_mbps.csv`, ...).
pub const COMPRESSOR_RATES_SUFFIX: &str = "_rates_mbps.csv";

/// One TCP payload size the rates were measured at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadSize {
    /// As in the CSV column names: `1k`, `4k`, `63k`.
    pub label: String,
    /// Bytes of TCP payload (`1k` = 1024).
    pub bytes: usize,
}

impl PayloadSize {
    /// `1k` -> 1024 bytes, `63k` -> 64512, `1500` -> 1500, `1m` -> 1048576.
    pub fn from_label(label: &str) -> Result<PayloadSize, String> {
        let l = label.trim();
        let (num, mult) = match l.chars().last() {
            Some('k' | 'K') => (&l[..l.len() - 1], 1024),
            Some('m' | 'M') => (&l[..l.len() - 1], 1024 * 1024),
            _ => (l, 1),
        };
        let n: usize = num
            .parse()
            .map_err(|_| format!("bad payload size `{label}` (expected e.g. 4k)"))?;
        if n == 0 {
            return Err(format!("bad payload size `{label}`: zero"));
        }
        Ok(PayloadSize {
            label: l.to_string(),
            bytes: n * mult,
        })
    }
}

/// What an algorithm does in the paper's setup: ESP encryption or AH integrity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlgKind {
    Cipher,
    Integrity,
}

impl AlgKind {
    /// Integrity algorithms are recognised by name (`hmac-*`, `*mac*`, `md5`, `sha*`, `xcbc`);
    /// everything else is a cipher.
    pub fn guess(name: &str) -> AlgKind {
        let n = name.to_ascii_lowercase();
        let integrity = ["hmac", "mac", "md5", "sha", "xcbc"].iter().any(|k| n.contains(k));
        if integrity {
            AlgKind::Integrity
        } else {
            AlgKind::Cipher
        }
    }
}

/// Throughput of one crypto algorithm at each of [`Rates::payloads`].
#[derive(Clone, Debug, PartialEq)]
pub struct AlgRates {
    pub name: String,
    pub kind: AlgKind,
    /// Encryption (cipher) or ICV computation (integrity) rate, Mbps, indexed like
    /// [`Rates::payloads`].
    pub mbps: Vec<f64>,
    /// Decryption or ICV verification rate, Mbps. The paper measured one rate for both
    /// directions, so its tables give `reverse_mbps == mbps`.
    pub reverse_mbps: Vec<f64>,
}

/// Compression figures of one data set for one compressor, indexed like [`Rates::payloads`].
#[derive(Clone, Debug, PartialEq)]
pub struct DataSetRates {
    pub name: String,
    /// Original size / (compressed size + IPComp header); <= 1 means the packet is sent
    /// uncompressed (non-expansion).
    pub ratio: Vec<f64>,
    /// Compression rate, Mbps of uncompressed input.
    pub comp_mbps: Vec<f64>,
    /// Decompression rate, Mbps of uncompressed output; 0 when nothing was decompressed.
    pub decomp_mbps: Vec<f64>,
}

/// All data sets measured with one compressor (`deflate`, `lzs`).
#[derive(Clone, Debug, PartialEq)]
pub struct CompressorRates {
    pub name: String,
    pub datasets: Vec<DataSetRates>,
}

/// Everything the models need that was measured rather than assumed.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates {
    pub payloads: Vec<PayloadSize>,
    /// In input order; ciphers and integrity algorithms mixed.
    pub crypto: Vec<AlgRates>,
    /// Empty when only the crypto rates are known (only the IPsec-only model can be evaluated).
    pub compressors: Vec<CompressorRates>,
}

impl Rates {
    /// Reads `table1_crypto_rates_mbps.csv` (required), `table4_compression_ratios.csv` and
    /// one `*_<compressor>_rates_mbps.csv` per compressor named in table 4 (optional as a group:
    /// without table 4 no compressor is loaded).
    pub fn from_paper_dir(dir: &Path) -> Result<Rates, String> {
        let read = |name: &str| {
            let p = dir.join(name);
            fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let crypto = read(CRYPTO_FILE)?;
        let ratios = match dir.join(RATIOS_FILE).exists() {
            true => Some(read(RATIOS_FILE)?),
            false => None,
        };
        let mut entries: Option<Vec<String>> = None;
        Rates::from_paper_tables(&crypto, ratios.as_deref(), |suffix| {
            if entries.is_none() {
                let listed = fs::read_dir(dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?
                    .filter_map(|e| e.ok().and_then(|e| e.file_name().into_string().ok()))
                    .collect();
                entries = Some(listed);
            }
            let names = entries.iter().flatten().map(String::as_str);
            let file = compressor_file(names, suffix).map_err(|e| format!("{}: {e}", dir.display()))?;
            Ok((file.to_string(), read(file)?))
        })
    }

    /// Reads the paper's tables from their texts: table 1 (`crypto`), table 4 (`ratios`; `None`:
    /// no compressors), and per compressor of table 4 the rate table `find` returns for the
    /// file-name suffix `_<compressor>_rates_mbps.csv`, as (file name, text).
    pub fn from_paper_tables(
        crypto: &str,
        ratios: Option<&str>,
        mut find: impl FnMut(&str) -> Result<(String, String), String>,
    ) -> Result<Rates, String> {
        let (payloads, crypto) = parse_crypto_csv(crypto).map_err(|e| format!("{CRYPTO_FILE}: {e}"))?;
        let mut rates = Rates {
            payloads,
            crypto,
            compressors: Vec::new(),
        };
        let Some(ratios) = ratios else {
            rates.validate()?;
            return Ok(rates);
        };
        let ratios = parse_ratios_csv(ratios, &rates.payloads).map_err(|e| format!("{RATIOS_FILE}: {e}"))?;
        for (comp, sets) in ratios {
            let (file, text) = find(&format!("_{comp}{COMPRESSOR_RATES_SUFFIX}"))?;
            let datasets = parse_compressor_csv(&text, &rates.payloads, sets).map_err(|e| format!("{file}: {e}"))?;
            rates.compressors.push(CompressorRates { name: comp, datasets });
        }
        rates.validate()?;
        Ok(rates)
    }

    /// Checks what the models rely on: every rate vector has one entry per payload, crypto and
    /// compression rates are finite and > 0, decompression rates finite and >= 0, ratios
    /// finite and > 0, names unique.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.payloads.len();
        if n == 0 {
            return Err("no payload sizes".into());
        }
        let check = |what: &str, v: &[f64], zero_ok: bool| -> Result<(), String> {
            if v.len() != n {
                return Err(format!("{what}: {} values for {n} payload sizes", v.len()));
            }
            match v
                .iter()
                .position(|&x| !(x.is_finite() && (x > 0.0 || (zero_ok && x == 0.0))))
            {
                Some(i) => Err(format!(
                    "{what} at {}: {} must be finite and {}",
                    self.payloads[i].label,
                    v[i],
                    if zero_ok { ">= 0" } else { "> 0" }
                )),
                None => Ok(()),
            }
        };
        for (i, a) in self.crypto.iter().enumerate() {
            if self.crypto[..i].iter().any(|b| b.name == a.name) {
                return Err(format!("algorithm `{}` appears twice", a.name));
            }
            check(&a.name, &a.mbps, false)?;
            check(&format!("{} (reverse)", a.name), &a.reverse_mbps, false)?;
        }
        for c in &self.compressors {
            for d in &c.datasets {
                let what = |w: &str| format!("{} {} {w}", c.name, d.name);
                check(&what("ratio"), &d.ratio, false)?;
                check(&what("compression rate"), &d.comp_mbps, false)?;
                check(&what("decompression rate"), &d.decomp_mbps, true)?;
            }
        }
        Ok(())
    }

    pub fn ciphers(&self) -> impl Iterator<Item = &AlgRates> {
        self.crypto.iter().filter(|a| a.kind == AlgKind::Cipher)
    }

    pub fn integrity(&self) -> impl Iterator<Item = &AlgRates> {
        self.crypto.iter().filter(|a| a.kind == AlgKind::Integrity)
    }

    pub fn alg(&self, name: &str) -> Option<&AlgRates> {
        self.crypto.iter().find(|a| a.name == name)
    }

    pub fn payload_index(&self, label: &str) -> Option<usize> {
        self.payloads.iter().position(|p| p.label == label)
    }
}

/// The one file among `names` holding a compressor's rates: named `*<suffix>` or `suffix`
/// without its leading `_` (`suffix` is `_<compressor>_rates_mbps.csv`).
pub fn compressor_file<'a>(names: impl Iterator<Item = &'a str>, suffix: &str) -> Result<&'a str, String> {
    let comp = suffix
        .strip_prefix('_')
        .and_then(|s| s.strip_suffix(COMPRESSOR_RATES_SUFFIX))
        .unwrap_or(suffix);
    let bare = suffix.strip_prefix('_').unwrap_or(suffix);
    let mut files: Vec<&str> = names.filter(|n| n.ends_with(suffix) || *n == bare).collect();
    files.sort();
    match files.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("no *{suffix} file for compressor `{comp}`")),
        _ => Err(format!("several *{suffix} files for compressor `{comp}`")),
    }
}

/// A small CSV reader: comma-separated, no quoting; blank lines skipped.
fn parse_table(text: &str) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let header: Vec<String> = lines
        .next()
        .ok_or("empty file")?
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let row: Vec<String> = line.split(',').map(|s| s.trim().to_string()).collect();
        if row.len() != header.len() {
            return Err(format!(
                "row {}: {} fields, header has {}",
                i + 1,
                row.len(),
                header.len()
            ));
        }
        rows.push(row);
    }
    Ok((header, rows))
}

fn number(s: &str, what: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{what}: `{s}` is not a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{what}: `{s}` must be finite and >= 0"));
    }
    Ok(v)
}

/// Table 1: `algorithm,payload_1k,payload_4k,payload_63k[,average]`. Columns not starting with
/// `payload_` are ignored. Rates must be > 0.
pub fn parse_crypto_csv(text: &str) -> Result<(Vec<PayloadSize>, Vec<AlgRates>), String> {
    let (header, rows) = parse_table(text)?;
    let cols: Vec<(usize, PayloadSize)> = header
        .iter()
        .enumerate()
        .filter_map(|(i, h)| h.strip_prefix("payload_").map(|l| (i, l)))
        .map(|(i, l)| PayloadSize::from_label(l).map(|p| (i, p)))
        .collect::<Result<_, _>>()?;
    if cols.is_empty() {
        return Err("no payload_<size> columns".into());
    }
    let mut algs = Vec::new();
    for row in rows {
        let name = row[0].clone();
        let mbps = cols
            .iter()
            .map(|(i, p)| {
                let v = number(&row[*i], &format!("{name} at {}", p.label))?;
                if v == 0.0 {
                    return Err(format!("{name} at {}: rate must be > 0", p.label));
                }
                Ok(v)
            })
            .collect::<Result<Vec<f64>, String>>()?;
        algs.push(AlgRates {
            kind: AlgKind::guess(&name),
            name,
            reverse_mbps: mbps.clone(),
            mbps,
        });
    }
    Ok((cols.into_iter().map(|(_, p)| p).collect(), algs))
}

/// One data set's compression ratios, indexed like the payloads.
pub type DataSetRatios = (String, Vec<f64>);

/// Table 4: `benchmark,<comp>_<size>,...`. Returns, per compressor in column order, the data sets
/// with their ratios (indexed like `payloads`).
pub fn parse_ratios_csv(text: &str, payloads: &[PayloadSize]) -> Result<Vec<(String, Vec<DataSetRatios>)>, String> {
    let (header, rows) = parse_table(text)?;
    let mut comps: Vec<String> = Vec::new();
    for h in &header[1..] {
        let (c, _) = h
            .rsplit_once('_')
            .ok_or_else(|| format!("column `{h}` is not <compressor>_<size>"))?;
        if !comps.iter().any(|x| x == c) {
            comps.push(c.to_string());
        }
    }
    let col = |c: &str, p: &PayloadSize| {
        let name = format!("{c}_{}", p.label);
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("missing column `{name}`"))
    };
    let mut out = Vec::new();
    for c in comps {
        let idx: Vec<usize> = payloads.iter().map(|p| col(&c, p)).collect::<Result<_, _>>()?;
        let mut sets = Vec::new();
        for row in &rows {
            let ratio = idx
                .iter()
                .map(|&i| number(&row[i], &format!("{} {}", row[0], header[i])))
                .collect::<Result<Vec<f64>, String>>()?;
            sets.push((row[0].clone(), ratio));
        }
        out.push((c, sets));
    }
    Ok(out)
}

/// Tables 5/6: `benchmark,comp_<size>...,decomp_<size>...`, joined with the ratios of the same
/// compressor (every data set of table 4 must appear).
pub fn parse_compressor_csv(
    text: &str,
    payloads: &[PayloadSize],
    ratios: Vec<DataSetRatios>,
) -> Result<Vec<DataSetRates>, String> {
    let (header, rows) = parse_table(text)?;
    let col = |prefix: &str, p: &PayloadSize| {
        let name = format!("{prefix}_{}", p.label);
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("missing column `{name}`"))
    };
    let comp_idx: Vec<usize> = payloads.iter().map(|p| col("comp", p)).collect::<Result<_, _>>()?;
    let decomp_idx: Vec<usize> = payloads.iter().map(|p| col("decomp", p)).collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for (name, ratio) in ratios {
        let row = rows
            .iter()
            .find(|r| r[0] == name)
            .ok_or_else(|| format!("no row for data set `{name}`"))?;
        let get = |idx: &[usize]| {
            idx.iter()
                .map(|&i| number(&row[i], &format!("{name} {}", header[i])))
                .collect::<Result<Vec<f64>, String>>()
        };
        let comp_mbps = get(&comp_idx)?;
        if let Some(i) = comp_mbps.iter().position(|&v| v == 0.0) {
            return Err(format!("{name}: compression rate at {} must be > 0", payloads[i].label));
        }
        let decomp_mbps = get(&decomp_idx)?;
        out.push(DataSetRates {
            name,
            ratio,
            comp_mbps,
            decomp_mbps,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_labels() {
        assert_eq!(PayloadSize::from_label("1k").unwrap().bytes, 1024);
        assert_eq!(PayloadSize::from_label("63k").unwrap().bytes, 63 * 1024);
        assert_eq!(PayloadSize::from_label("1500").unwrap().bytes, 1500);
        assert!(PayloadSize::from_label("k").is_err());
        assert!(PayloadSize::from_label("0k").is_err());
    }

    #[test]
    fn kinds() {
        assert_eq!(AlgKind::guess("hmac-md5"), AlgKind::Integrity);
        assert_eq!(AlgKind::guess("hmac-sha1"), AlgKind::Integrity);
        assert_eq!(AlgKind::guess("rc5-cbc"), AlgKind::Cipher);
        assert_eq!(AlgKind::guess("3des-cbc"), AlgKind::Cipher);
    }

    #[test]
    fn parses_tables() {
        let (p, a) =
            parse_crypto_csv("algorithm,payload_1k,payload_4k,average\nhmac-md5,229,299,287\nrc5-cbc,96,97,96\n")
                .unwrap();
        assert_eq!(p.iter().map(|p| p.bytes).collect::<Vec<_>>(), vec![1024, 4096]);
        assert_eq!(a[0].mbps, vec![229.0, 299.0]);
        assert_eq!(a[0].reverse_mbps, a[0].mbps);
        assert_eq!(a[1].kind, AlgKind::Cipher);
        let r = parse_ratios_csv(
            "benchmark,deflate_1k,deflate_4k,lzs_1k,lzs_4k\nobj2,1.76,2.08,1.52,1.67\n",
            &p,
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].0, "lzs");
        assert_eq!(r[1].1[0].1, vec![1.52, 1.67]);
        let d = parse_compressor_csv(
            "benchmark,comp_1k,comp_4k,decomp_1k,decomp_4k\nobj2,14,21,66,121\n",
            &p,
            r[0].1.clone(),
        )
        .unwrap();
        assert_eq!(d[0].comp_mbps, vec![14.0, 21.0]);
        assert_eq!(d[0].decomp_mbps, vec![66.0, 121.0]);
        assert!(parse_crypto_csv("algorithm,payload_1k\nx,0\n").is_err());
        assert!(parse_crypto_csv("algorithm,payload_1k\nx,1,2\n").is_err());
    }
}
