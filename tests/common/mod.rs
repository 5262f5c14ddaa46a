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
