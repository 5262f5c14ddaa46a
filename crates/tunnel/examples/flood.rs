//! The flood sender of `scripts/studies/flood-test.sh`: sends garbage and replayed IPsec datagrams
//! at a tunneld, bounded in count and time, as fast as sendmmsg(2) on one raw IPv4 socket
//! (IP_HDRINCL, [`ipsec_tunnel::dev::raw::RawTx`]) goes, or paced to `--rate` packets a second.
//! Needs CAP_NET_RAW (run it as root in the attacker's network namespace).
//!
//! ```text
//! flood --mode raw|udp --src A --dst B --count N [--secs S] [--rate PPS]
//!       [--esp-spi SPI] [--ah-spi SPI] [--cpi CPI] [--replay PCAP]
//! ```
//!
//! `--mode raw`: ESP (IP protocol 50) with unknown SPIs, ESP with the valid SPI `--esp-spi`
//! and a sequence number ahead of the window (only the ICV check rejects it: the attacker's
//! cheapest lever), truncated ESP, AH (51) with unknown SPIs and with the valid SPI
//! `--ah-spi` and a bad ICV, IPComp (108) with the CPI `--cpi` and garbage to inflate and
//! with unknown CPIs, and the IPsec packets to `B` found in `--replay` sent again as captured.
//! `--mode udp`: the same at UDP port 4500 (RFC 3948): ESP with unknown SPIs, with the valid
//! SPI and a bad ICV, NAT-keepalives, non-ESP (IKE) datagrams, runts, and the captured
//! ESP-in-UDP datagrams to `B` replayed. The kinds take turns, one packet each.
//!
//! Prints one JSON line: packets sent in all and per kind, seconds, send errors retried.

use ipsec_tunnel::dataplane::{UnderlayTx, BATCH};
use ipsec_tunnel::dev::raw::RawTx;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Packets built per kind (each differs: SPI, sequence number, length, bytes).
const POOL: usize = 64;

struct Args {
    udp: bool,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    count: u64,
    secs: f64,
    rate: f64,
    esp_spi: u32,
    ah_spi: u32,
    cpi: u16,
    replay: Option<String>,
}

fn num(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("bad number `{s}`"))
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        udp: false,
        src: Ipv4Addr::UNSPECIFIED,
        dst: Ipv4Addr::UNSPECIFIED,
        count: 0,
        secs: 30.0,
        rate: 0.0,
        esp_spi: 0,
        ah_spi: 0,
        cpi: 0,
        replay: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        let addr = |v: &str| v.parse::<Ipv4Addr>().map_err(|_| format!("bad IPv4 address `{v}`"));
        match k.as_str() {
            "--mode" => {
                a.udp = match v.as_str() {
                    "raw" => false,
                    "udp" => true,
                    _ => return Err(format!("--mode {v}: raw or udp")),
                }
            }
            "--src" => a.src = addr(&v)?,
            "--dst" => a.dst = addr(&v)?,
            "--count" => a.count = num(&v)?,
            "--secs" => a.secs = v.parse().map_err(|_| format!("bad --secs `{v}`"))?,
            "--rate" => a.rate = v.parse().map_err(|_| format!("bad --rate `{v}`"))?,
            "--esp-spi" => a.esp_spi = num(&v)? as u32,
            "--ah-spi" => a.ah_spi = num(&v)? as u32,
            "--cpi" => a.cpi = num(&v)? as u16,
            "--replay" => a.replay = Some(v),
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if a.dst.is_unspecified() || a.src.is_unspecified() || a.count == 0 {
        return Err("need --src, --dst and --count".into());
    }
    Ok(a)
}

/// xorshift64*: garbage needs no better.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// An IPv4 packet (header checksum and ID left to the kernel) around `payload`.
fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0];
    p[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

/// A UDP datagram to port 4500 (checksum 0: none, allowed over IPv4) in an IPv4 packet.
fn udp(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::with_capacity(8 + payload.len());
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&4500u16.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    ipv4(src, dst, 17, &u)
}

fn esp(rng: &mut Rng, spi: u32, seq: u32, body: usize) -> Vec<u8> {
    let mut e = spi.to_be_bytes().to_vec();
    e.extend_from_slice(&seq.to_be_bytes());
    e.extend(rng.bytes(body));
    e
}

/// An AH header for a 16-byte ICV (HMAC-SHA-256-128), garbage ICV, then garbage.
fn ah(rng: &mut Rng, spi: u32, seq: u32, body: usize) -> Vec<u8> {
    let mut h = vec![4, 5, 0, 0]; // next header IPv4; length (12 + 16) / 4 - 2
    h.extend_from_slice(&spi.to_be_bytes());
    h.extend_from_slice(&seq.to_be_bytes());
    h.extend(rng.bytes(16 + body));
    h
}

/// The IPv4 packets of a classic pcap (Ethernet or raw IP) addressed to `dst` that `keep`
/// accepts.
fn captured(path: &str, dst: Ipv4Addr, keep: impl Fn(&[u8]) -> bool) -> Result<Vec<Vec<u8>>, String> {
    let data = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if data.len() < 24 {
        return Err(format!("{path}: not a pcap file"));
    }
    let le = match data[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return Err(format!("{path}: not a classic pcap file")),
    };
    let u32_at = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let linktype = u32_at(&data[20..24]);
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= data.len() {
        let incl = u32_at(&data[off + 8..off + 12]) as usize;
        let Some(frame) = data.get(off + 16..off + 16 + incl) else {
            break;
        };
        off += 16 + incl;
        let ip = match linktype {
            1 if frame.len() > 14 && frame[12..14] == [8, 0] => &frame[14..],
            101 => frame,
            _ => continue,
        };
        if ip.len() >= 20 && ip[0] >> 4 == 4 && ip[16..20] == dst.octets() && keep(ip) {
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
            out.push(ip[..total].to_vec());
        }
    }
    Ok(out)
}

/// Each kind of packet with its pool.
type Kinds = Vec<(&'static str, Vec<Vec<u8>>)>;

/// The kinds of packet and their pools.
fn build(a: &Args) -> Result<Kinds, String> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id()));
    let (s, d) = (a.src, a.dst);
    let mut kinds: Kinds = Vec::new();
    let ahead = |i: usize| 0x7fff_0000u32 + i as u32; // far right of any window: ICV decides
    let unknown = |i: usize| 0xdead_0000u32 + i as u32; // the examples' SPIs are small
    if !a.udp {
        let mut k = |name, f: &mut dyn FnMut(&mut Rng, usize) -> Vec<u8>| {
            kinds.push((name, (0..POOL).map(|i| f(&mut rng, i)).collect()));
        };
        k("esp_unknown_spi", &mut |r, i| {
            ipv4(s, d, 50, &esp(r, unknown(i), 1, 40 + i))
        });
        if a.esp_spi != 0 {
            k("esp_bad_icv", &mut |r, i| {
                ipv4(s, d, 50, &esp(r, a.esp_spi, ahead(i), 100 + 4 * i))
            });
        }
        k("esp_truncated", &mut |r, i| ipv4(s, d, 50, &r.bytes(1 + i % 7)));
        k("ah_unknown_spi", &mut |r, i| {
            ipv4(s, d, 51, &ah(r, unknown(i), 1, 40 + 4 * i))
        });
        if a.ah_spi != 0 {
            k("ah_bad_icv", &mut |r, i| {
                ipv4(s, d, 51, &ah(r, a.ah_spi, ahead(i), 60 + 4 * i))
            });
        }
        k("ipcomp_unknown_cpi", &mut |r, i| {
            let mut c = vec![4, 0, 0xf0, i as u8];
            c.extend(r.bytes(40 + i));
            ipv4(s, d, 108, &c)
        });
        if a.cpi != 0 {
            k("ipcomp_garbage", &mut |r, i| {
                let mut c = vec![4, 0];
                c.extend_from_slice(&a.cpi.to_be_bytes());
                c.extend(r.bytes(40 + 8 * i));
                ipv4(s, d, 108, &c)
            });
        }
        if let Some(p) = &a.replay {
            let pkts = captured(p, d, |ip| matches!(ip[9], 50 | 51 | 108))?;
            if pkts.is_empty() {
                return Err(format!("{p}: no ESP, AH or IPComp packet to {d}"));
            }
            kinds.push(("replayed", pkts));
        }
    } else {
        let port = |i: usize| 40000 + i as u16;
        let mut k = |name, f: &mut dyn FnMut(&mut Rng, usize) -> Vec<u8>| {
            kinds.push((name, (0..POOL).map(|i| f(&mut rng, i)).collect()));
        };
        k("udp_esp_unknown_spi", &mut |r, i| {
            udp(s, d, port(i), &esp(r, unknown(i), 1, 40 + i))
        });
        if a.esp_spi != 0 {
            k("udp_esp_bad_icv", &mut |r, i| {
                udp(s, d, port(i), &esp(r, a.esp_spi, ahead(i), 100 + 4 * i))
            });
        }
        k("udp_keepalive", &mut |_, i| udp(s, d, port(i), &[0xff]));
        k("udp_non_esp", &mut |r, i| {
            let mut p = vec![0; 4];
            p.extend(r.bytes(30 + i));
            udp(s, d, port(i), &p)
        });
        k("udp_runt", &mut |r, i| {
            let mut p = r.bytes(i % 8);
            if p.first() == Some(&0xff) && p.len() == 1 {
                p[0] = 0xfe; // not a keepalive
            }
            if p.len() >= 4 && p[..4] == [0; 4] {
                p[0] = 1;
            }
            udp(s, d, port(i), &p)
        });
        if let Some(p) = &a.replay {
            let mut pkts = captured(p, d, |ip| {
                let ihl = usize::from(ip[0] & 15) * 4;
                ip[9] == 17
                    && ip.len() > ihl + 16
                    && ip[ihl + 2..ihl + 4] == [0x11, 0x94]
                    && ip[ihl + 8..ihl + 12] != [0; 4]
            })?;
            if pkts.is_empty() {
                return Err(format!("{p}: no ESP-in-UDP datagram to {d}:4500"));
            }
            // A capture on a veth may hold checksums the sender left to offload: send no
            // checksum (0, allowed over IPv4) so the kernel does not drop them as corrupt.
            for ip in &mut pkts {
                let ihl = usize::from(ip[0] & 15) * 4;
                ip[ihl + 6..ihl + 8].copy_from_slice(&[0, 0]);
            }
            kinds.push(("udp_replayed", pkts));
        }
    }
    Ok(kinds)
}

fn run(a: &Args) -> Result<String, String> {
    let kinds = build(a)?;
    let tx = RawTx::open().map_err(|e| format!("opening a raw socket: {e}"))?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(a.secs);
    let mut sent: BTreeMap<&str, u64> = kinds.iter().map(|(k, _)| (*k, 0)).collect();
    let (mut total, mut errors, mut turn) = (0u64, 0u64, 0usize);
    let dsts = [ipsec_engine::Route {
        sa: ipsec_engine::SaId(0),
        spi: 0,
        to: std::net::IpAddr::V4(a.dst),
    }; BATCH];
    while total < a.count && Instant::now() < deadline {
        let n = (a.count - total).min(BATCH as u64) as usize;
        let mut batch: [&[u8]; BATCH] = [&[]; BATCH];
        let mut which = [0usize; BATCH];
        for (j, slot) in batch[..n].iter_mut().enumerate() {
            let k = (turn + j) % kinds.len();
            let pool = &kinds[k].1;
            *slot = &pool[((turn + j) / kinds.len()) % pool.len()];
            which[j] = k;
        }
        let mut done = 0;
        while done < n && Instant::now() < deadline {
            match tx.send_batch(&batch[done..n], &dsts[done..n]) {
                Ok(m) => {
                    for &k in &which[done..done + m] {
                        *sent.get_mut(kinds[k].0).expect("every kind is in the map") += 1;
                    }
                    done += m;
                }
                Err(_) => {
                    // ENOBUFS and the like: the queue is full; wait a little and go on.
                    errors += 1;
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
        total += done as u64;
        turn += n;
        if a.rate > 0.0 {
            let due = start + Duration::from_secs_f64(total as f64 / a.rate);
            if let Some(w) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(w);
            }
        }
    }
    let kinds_json: Vec<String> = sent.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    Ok(format!(
        "{{\"sent\":{total},\"seconds\":{:.3},\"send_errors\":{errors},\"by_kind\":{{{}}}}}",
        start.elapsed().as_secs_f64(),
        kinds_json.join(",")
    ))
}

fn main() -> ExitCode {
    match parse().and_then(|a| run(&a)) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flood: {e}");
            ExitCode::from(2)
        }
    }
}
