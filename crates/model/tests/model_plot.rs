//! `ipsec model --plot DIR` writes both SVGs with the series it should have.

use ipsec_model::{self as model, Options};
use std::fs;
use std::path::PathBuf;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipsec-plot-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Paper-format inputs: two ciphers, two HMACs, two compressors, three data sets.
fn inputs() -> PathBuf {
    let d = temp_dir("inputs");
    fs::write(
        d.join("table1_crypto_rates_mbps.csv"),
        "algorithm,payload_1k,payload_4k\nhmac-md5,229,299\nhmac-sha1,214,274\nrc5-cbc,96,97\n3des-cbc,28,28\n",
    )
    .unwrap();
    fs::write(
        d.join("table4_compression_ratios.csv"),
        "benchmark,deflate_1k,deflate_4k,lzs_1k,lzs_4k\npaper2,1.74,2.08,1.28,1.50\npic,26.1,67.48,10.04,12.7\nrandom,0.99,1.00,0.89,0.89\n",
    )
    .unwrap();
    fs::write(
        d.join("table5_deflate_rates_mbps.csv"),
        "benchmark,comp_1k,comp_4k,decomp_1k,decomp_4k\npaper2,17,25,67,123\npic,34,72,166,299\nrandom,14,29,0,0\n",
    )
    .unwrap();
    fs::write(
        d.join("table6_lzs_rates_mbps.csv"),
        "benchmark,comp_1k,comp_4k,decomp_1k,decomp_4k\npaper2,178,179,224,214\npic,983,1047,498,537\nrandom,186,161,0,0\n",
    )
    .unwrap();
    d
}

/// The texts of an SVG's `<text>` elements (plotters writes each on its own line).
fn texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text") {
        rest = &rest[i..];
        let start = rest.find('>').unwrap() + 1;
        let end = rest.find("</text>").unwrap();
        out.push(rest[start..end].trim().to_string());
        rest = &rest[end..];
    }
    out
}

#[test]
fn writes_both_plots() {
    let input = inputs();
    let out = temp_dir("out").join("plots");
    let printed = model::run(&Options {
        inputs: Some(input.clone()),
        plot: Some(out.clone()),
        ..Options::default()
    })
    .unwrap();
    assert!(
        printed.contains("speedup.svg") && printed.contains("break-even.svg"),
        "{printed}"
    );

    let speed = fs::read_to_string(out.join("speedup.svg")).unwrap();
    assert!(speed.starts_with("<svg"));
    let t = texts(&speed);
    for want in [
        "IPComp speedup (Complete model), data set paper2, 4k payload",
        "no IPsec (IPComp alone)",
        "AH only",
        "ESP only (encryption)",
        "ESP + AH",
        "S = 1 (break-even)",
        "deflate, null",
        "lzs, null",
        "lzs, hmac-md5 (fastest)",
        "lzs, hmac-sha1 (slowest)",
        "deflate, rc5-cbc (fastest)",
        "deflate, 3des-cbc (slowest)",
        "lzs, rc5-cbc+hmac-md5 (fastest)",
        "lzs, 3des-cbc+hmac-sha1 (slowest)",
    ] {
        assert!(t.iter().any(|x| x == want), "speedup.svg lacks `{want}`: {t:?}");
    }

    let be = fs::read_to_string(out.join("break-even.svg")).unwrap();
    let t = texts(&be);
    for want in [
        "Local Send: fastest and slowest suite per class",
        "Local Receive: fastest and slowest suite per class",
        "Complete, rc5-cbc+hmac-md5 (fastest ESP + AH)",
        "Complete, 3des-cbc+hmac-sha1 (slowest ESP + AH)",
        "break-even, rc5-cbc+hmac-md5",
        "break-even, 56kbps",
        "break-even, 1Gbps",
        "deflate measured (one point per data set)",
        "lzs measured (one point per data set)",
    ] {
        assert!(t.iter().any(|x| x == want), "break-even.svg lacks `{want}`: {t:?}");
    }
    // Measured points: paper2 and pic per compressor in 4 panels (random never compressed).
    assert!(
        be.matches("<circle").count() >= 2 * 2 * 4,
        "{}",
        be.matches("<circle").count()
    );

    // Another payload and data set; unknown ones are errors.
    let out2 = temp_dir("out2");
    model::run(&Options {
        inputs: Some(input.clone()),
        plot: Some(out2.clone()),
        plot_payload: Some("1k".into()),
        plot_dataset: Some("pic".into()),
        ..Options::default()
    })
    .unwrap();
    let speed = fs::read_to_string(out2.join("speedup.svg")).unwrap();
    assert!(texts(&speed)
        .iter()
        .any(|x| x == "IPComp speedup (Complete model), data set pic, 1k payload"));
    let bad = |payload: Option<&str>, ds: Option<&str>| {
        model::run(&Options {
            inputs: Some(input.clone()),
            plot: Some(out2.clone()),
            plot_payload: payload.map(String::from),
            plot_dataset: ds.map(String::from),
            ..Options::default()
        })
        .unwrap_err()
    };
    assert!(bad(Some("63k"), None).contains("no payload `63k`"));
    assert!(bad(None, Some("book1")).contains("no data set `book1`"));
    for d in [input, out.parent().unwrap().to_path_buf(), out2] {
        fs::remove_dir_all(d).unwrap();
    }
}
