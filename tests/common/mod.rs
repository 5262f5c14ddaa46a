//! Helpers shared by the CLI integration tests: running a binary, raw-IP pcap files.
#![allow(dead_code)] // each test file uses its own subset

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Runs `program` with `args`: exit status (-1 if killed), stdout, stderr.
pub fn run(program: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(program).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `packets` (raw IP, link type RAW) to a pcap file, packet `i` at `i` seconds.
pub fn write_pcap(path: &Path, packets: &[Vec<u8>]) {
    let h = PcapHeader {
        datalink: DataLink::RAW,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), h).unwrap();
    for (i, p) in packets.iter().enumerate() {
        w.write_packet(&PcapPacket::new(Duration::from_secs(i as u64), p.len() as u32, p))
            .unwrap();
    }
}

/// Every packet's bytes of a pcap file.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.to_vec());
    }
    v
}

/// Runs the `ipsec` binary of this build in `dir`.
pub fn ipsec_in(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ipsec"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The standard output of a command that must have succeeded (its stderr in the panic).
pub fn ok(o: std::process::Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// A fresh, empty directory under the system's temporary one, named by `prefix`, `tag` and
/// this process.
pub fn fresh_dir(prefix: &str, tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `ipsec pki server` in `dir`: a server certificate for `name` (server.pem, server.key)
/// signed by the CA in ca.pem / ca.key there.
pub fn pki_server(dir: &Path, name: &str) {
    ok(ipsec_in(
        &[
            "pki",
            "server",
            "--name",
            name,
            "--ca-cert",
            "ca.pem",
            "--ca-key",
            "ca.key",
            "--cert",
            "server.pem",
            "--key",
            "server.key",
        ],
        dir,
    ));
}
