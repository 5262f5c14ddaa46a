//! The paper's measured input tables, built into the crate so that `ipsec model` works from any
//! directory: the CSVs of the repository's `data/mcgregor-lee/` (see its README for where each
//! figure comes from), embedded with `include_str!`. `--inputs DIR` reads the same layout from
//! a directory instead ([`Rates::from_paper_dir`]).

use super::inputs::{compressor_file, Rates, CRYPTO_FILE, RATIOS_FILE};

/// Where the tables come from, as shown in the output's notes.
pub const SOURCE: &str = "data/mcgregor-lee";

/// Table 1: crypto rates (Mbps) per payload size.
pub const TABLE1: &str = include_str!("../../../data/mcgregor-lee/table1_crypto_rates_mbps.csv");
/// Table 2: the IPsec-only slowdowns the paper computed from table 1 (a result, not an input:
/// the model must reproduce it).
pub const TABLE2: &str = include_str!("../../../data/mcgregor-lee/table2_ipsec_slowdowns.csv");
/// Table 4: compression ratios (IPComp header counted).
pub const TABLE4: &str = include_str!("../../../data/mcgregor-lee/table4_compression_ratios.csv");
/// Table 5: DEFLATE (zlib 1.1.3) rates, Mbps.
pub const TABLE5: &str = include_str!("../../../data/mcgregor-lee/table5_deflate_rates_mbps.csv");
/// Table 6: the authors' LZS rates, Mbps.
pub const TABLE6: &str = include_str!("../../../data/mcgregor-lee/table6_lzs_rates_mbps.csv");

/// File name of table 2.
pub const TABLE2_FILE: &str = "table2_ipsec_slowdowns.csv";

/// Every built-in table as (file name in `data/mcgregor-lee/`, text).
pub const TABLES: [(&str, &str); 5] = [
    (CRYPTO_FILE, TABLE1),
    (TABLE2_FILE, TABLE2),
    (RATIOS_FILE, TABLE4),
    ("table5_deflate_rates_mbps.csv", TABLE5),
    ("table6_lzs_rates_mbps.csv", TABLE6),
];

/// The model inputs of the built-in tables (1, 4, 5 and 6), read as
/// [`Rates::from_paper_dir`] reads a directory holding the same files.
pub fn rates() -> Result<Rates, String> {
    Rates::from_paper_tables(TABLE1, Some(TABLE4), |suffix| {
        let file =
            compressor_file(TABLES.iter().map(|(n, _)| *n), suffix).map_err(|e| format!("built-in {SOURCE}: {e}"))?;
        let text = TABLES.iter().find(|(n, _)| *n == file).map_or("", |(_, t)| *t);
        Ok((file.to_string(), text.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_tables_read_like_the_directory() {
        // The same files read from the repository's directory give the same rates.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/mcgregor-lee");
        let from_dir = Rates::from_paper_dir(&dir).unwrap();
        let built_in = rates().unwrap();
        assert_eq!(built_in, from_dir);
        // Tables 1, 4, 5, 6 as the paper's README describes them: 3 payload sizes, 4 crypto
        // algorithms, 2 compressors x 8 data sets.
        let labels: Vec<&str> = built_in.payloads.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["1k", "4k", "63k"]);
        assert_eq!(built_in.crypto.len(), 4);
        let comps: Vec<(&str, usize)> = built_in
            .compressors
            .iter()
            .map(|c| (c.name.as_str(), c.datasets.len()))
            .collect();
        assert_eq!(comps, [("deflate", 8), ("lzs", 8)]);
    }
}
