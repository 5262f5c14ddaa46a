//! `ipsec process`: captures through engines built from the example configs of two hosts.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;
use common::read_pcap;

fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ipv4(src, dst, 64).udp(sport, dport);
    let payload: Vec<u8> = b"a compressible payload, a compressible payload; "
        .iter()
        .cycle()
        .take(len)
        .copied()
        .collect();
    let mut out = Vec::new();
    b.write(&mut out, &payload).unwrap();
    out
}

fn write_pcap(path: &Path, packets: &[(u64, Vec<u8>)]) {
    let h = PcapHeader {
        datalink: DataLink::RAW,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), h).unwrap();
    for (t, p) in packets {
        w.write_packet(&PcapPacket::new(Duration::from_secs(*t), p.len() as u32, p))
            .unwrap();
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipsec-process-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config").join(name)
}

/// Runs `ipsec process`; returns (exit code, stderr, stats JSON).
fn process(config: &Path, dir: &str, input: &Path, output: &Path) -> (i32, String, serde_json::Value) {
    let stats = output.with_extension("json");
    let out = Command::new(env!("CARGO_BIN_EXE_ipsec"))
        .args(["process", "--config"])
        .arg(config)
        .args(["--dir", dir, "--in"])
        .arg(input)
        .arg("--out")
        .arg(output)
        .arg("--stats")
        .arg(&stats)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap_or_else(|_| panic!("{stderr}"))).unwrap();
    (out.status.code().unwrap(), stderr, json)
}

fn sa<'a>(stats: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    stats["sas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

#[test]
fn host_a_seals_and_host_b_opens_with_counted_drops() {
    const A: [u8; 4] = [192, 0, 2, 1];
    const B: [u8; 4] = [192, 0, 2, 2];
    let data = udp(A, B, 4000, 5000, 600);
    let ike = udp(A, B, 500, 500, 100);
    let stray = udp(A, [192, 0, 2, 9], 4000, 5000, 100);
    let plain = tmp("plain.pcap");
    write_pcap(
        &plain,
        &[
            (0, data.clone()),
            (1, ike.clone()),
            (2, stray),
            (3, data.clone()),
            (4, data.clone()),
        ],
    );

    let sealed = tmp("sealed.pcap");
    let (code, err, stats) = process(&example("host-a.toml"), "out", &plain, &sealed);
    assert_eq!(code, 1, "the stray packet is dropped: {err}");
    assert!(err.contains("packet 3: dropped: policy_discard"), "{err}");
    assert_eq!(stats["outbound_drops"]["policy_discard"], 1);
    let wire = read_pcap(&sealed);
    assert_eq!(wire.len(), 4);
    assert_eq!(wire[1], ike, "IKE bypasses");
    assert_eq!(wire[0][9], 51, "AH outermost");
    for name in ["comp-ab", "esp-ab", "ah-ab"] {
        assert_eq!(sa(&stats, name)["outbound"]["packets"], 3, "{name}");
    }
    assert!(sa(&stats, "comp-ab")["outbound"]["overhead_bytes"].as_i64().unwrap() < 0);

    // Host B: two data packets, IKE, a replay of the first, and a forged third one.
    let mut forged = wire[3].clone();
    let n = forged.len();
    forged[n - 30] ^= 4;
    let received = tmp("received.pcap");
    write_pcap(
        &received,
        &[
            (10, wire[0].clone()),
            (11, wire[1].clone()),
            (12, wire[2].clone()),
            (13, wire[0].clone()),
            (14, forged),
        ],
    );
    let opened = tmp("opened.pcap");
    let (code, err, stats) = process(&example("host-b.toml"), "in", &received, &opened);
    assert_eq!(code, 1, "{err}");
    assert_eq!(read_pcap(&opened), vec![data.clone(), ike, data]);
    let ah = &sa(&stats, "ah-ab")["inbound"];
    assert_eq!(
        (ah["packets"].as_u64(), ah["drops"]["replay"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(ah["drops"]["bad_icv"], 1, "{stats}");
    assert_eq!(sa(&stats, "esp-ab")["inbound"]["packets"], 2);
    assert!(err.contains("packet 4: dropped: replay"), "{err}");
    assert!(err.contains("packet 5: dropped: bad_icv"), "{err}");
}

#[test]
fn lifetimes_run_on_the_capture_clock() {
    let cfg = tmp("life.toml");
    std::fs::write(
        &cfg,
        r#"
[[sa]]
name = "esp"
proto = "esp"
spi = 0x100
src = "10.0.0.1"
dst = "10.0.0.2"
aead = { alg = "rfc4106(gcm(aes))", key = "0x000102030405060708090a0b0c0d0e0f10111213", icv = 128 }
lifetime = { soft = { seconds = 60 }, hard = { seconds = 120, packets = 100 } }

[[policy]]
dir = "out"
src = "10.0.0.0/24"
dst = "10.0.0.0/24"
action = "protect"
bundle = ["esp"]
"#,
    )
    .unwrap();
    let p = udp([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 50);
    let plain = tmp("life.pcap");
    // Capture timestamps: 1000 s, +30 s, +61 s (soft), +119 s, +120 s (hard: dropped).
    write_pcap(
        &plain,
        &[
            (1000, p.clone()),
            (1030, p.clone()),
            (1061, p.clone()),
            (1119, p.clone()),
            (1120, p),
        ],
    );
    let out = tmp("life-out.pcap");
    let (code, err, stats) = process(&cfg, "out", &plain, &out);
    assert_eq!(code, 1, "{err}");
    assert_eq!(read_pcap(&out).len(), 4);
    assert!(
        err.contains("packet 3 (t=61.000s): sa `esp` reached its soft seconds limit"),
        "{err}"
    );
    assert!(
        err.contains("packet 5 (t=120.000s): sa `esp` reached its hard seconds limit"),
        "{err}"
    );
    assert!(err.contains("packet 5: dropped: expired"), "{err}");
    let s = sa(&stats, "esp");
    assert_eq!(s["state"], "expired");
    assert_eq!(s["expired_by"], "seconds");
    assert_eq!(s["outbound"]["packets"], 4);
    assert_eq!(s["outbound"]["drops"]["expired"], 1);
}

#[test]
fn a_bad_config_is_a_usage_error_naming_the_line() {
    let cfg = tmp("bad.toml");
    std::fs::write(
        &cfg,
        "[[sa]]\nname = \"x\"\nproto = \"esp\"\nspi = 1\nenc = { alg = \"cbc(aes)\", key = \"0x00\" }\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ipsec"))
        .args([
            "process",
            "--dir",
            "out",
            "--in",
            "/dev/null",
            "--out",
            "/dev/null",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.toml:5"), "{err}");
}

/// `ipsec show --stats FILE --format prometheus` on the counters `ipsec process` wrote: each
/// SA's packets and drops as labelled `_total` samples equal to the JSON's, and (where
/// Debian's `prometheus` package is installed, as scripts/test.sh does) `promtool check
/// metrics` accepts the output.
#[test]
fn counters_render_as_prometheus_text_that_promtool_accepts() {
    const A: [u8; 4] = [192, 0, 2, 1];
    const B: [u8; 4] = [192, 0, 2, 2];
    let plain = tmp("prom-plain.pcap");
    write_pcap(
        &plain,
        &[(0, udp(A, B, 4000, 5000, 600)), (1, udp(A, [192, 0, 2, 9], 1, 2, 50))],
    );
    let sealed = tmp("prom-sealed.pcap");
    let (_, err, stats) = process(&example("host-a.toml"), "out", &plain, &sealed);
    let out = Command::new(env!("CARGO_BIN_EXE_ipsec"))
        .args(["show", "--format", "prometheus", "--stats"])
        .arg(sealed.with_extension("json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{err} {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let esp = sa(&stats, "esp-ab");
    let want = format!(
        "ipsec_sa_packets_total{{sa=\"esp-ab\",spi=\"{:#x}\",proto=\"esp\",direction=\"out\"}} {}",
        esp["spi"].as_u64().unwrap(),
        esp["outbound"]["packets"]
    );
    assert!(text.lines().any(|l| l == want), "missing `{want}` in\n{text}");
    assert!(
        text.lines()
            .any(|l| l == "ipsec_drops_total{direction=\"out\",reason=\"policy_discard\"} 1"),
        "{text}"
    );
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(mut p) => {
            use std::io::Write;
            p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
            let o = p.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "promtool check metrics: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Err(_) => {
            eprintln!("NOTE: promtool not installed (Debian package prometheus): the format was checked here only")
        }
    }
}
