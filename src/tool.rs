//! The `ipsec seal` / `ipsec open` loop: one output packet per input packet, rejected packets
//! reported with their index and reason, nothing allocated per packet.

use crate::bundle::{outer_ipsec, AnySa, Bundle, PacketError};
use crate::pcapio::Link;
use ipsec_core::ip::{self, proto};
use ipsec_core::sa::Mode;
use ipsec_core::PacketBuf;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Seal or open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Apply the SAs.
    Seal,
    /// Undo them.
    Open,
}

/// Room kept around each packet: enough for any bundle of a few SAs.
const HEADROOM: usize = 512;
const TAILROOM: usize = 512;
/// Largest frame: a maximum-size IP packet plus a VLAN-tagged Ethernet header.
const MAX_FRAME: usize = 65535 + 40 + 18;

/// What a run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Packets read.
    pub read: usize,
    /// Packets written.
    pub written: usize,
    /// Packets rejected.
    pub rejected: usize,
}

impl Summary {
    /// The exit code of a run that finished: 1 if any packet was rejected, else 0.
    pub fn exit_code(&self) -> ExitCode {
        if self.rejected > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// Prints `ipsec: <msg>` on standard error; the exit code of a usage, config or I/O error (2).
pub fn usage_error(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ipsec: {msg}");
    ExitCode::from(2)
}

/// A failure that stops the whole run (I/O, a broken capture).
#[derive(Debug)]
pub struct RunError(pub String);

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Processes one frame in place in `scratch` with `apply`. Returns the frame's range in
/// `scratch`.
fn process<E: From<PacketError>>(
    link: Link,
    apply: &mut impl FnMut(&mut PacketBuf) -> Result<(), E>,
    scratch: &mut [u8],
    frame: &[u8],
) -> Result<(usize, usize), E> {
    if frame.len() > MAX_FRAME {
        return Err(PacketError::Ipsec(ipsec_core::Error::TooBig).into());
    }
    let l2 = link.ip_offset(frame)?;
    // The transforms grow the packet into the headroom, over the link-layer header: keep it.
    let mut l2_header = [0u8; 18];
    l2_header[..l2].copy_from_slice(&frame[..l2]);
    let start = HEADROOM;
    scratch[start..start + frame.len()].copy_from_slice(frame);
    let (ip_start, ip_len) = {
        let mut buf = PacketBuf::new(scratch, start + l2, frame.len() - l2).map_err(PacketError::from)?;
        apply(&mut buf)?;
        (buf.head(), buf.len())
    };
    // Put the link-layer header back in front of the transformed packet.
    scratch[ip_start - l2..ip_start].copy_from_slice(&l2_header[..l2]);
    let out_start = ip_start - l2;
    link.fix_frame(&mut scratch[out_start..ip_start + ip_len], l2)?;
    Ok((out_start, l2 + ip_len))
}

/// Reads a capture from `input`, applies or undoes `bundle` on every packet and writes the
/// results to `output`. Each rejected packet is reported through `report` as
/// `(index, reason)`, with indexes counted from 1 as Wireshark numbers frames.
pub fn run<R: Read, W: Write>(
    dir: Direction,
    bundle: &mut Bundle,
    input: R,
    output: W,
    report: impl FnMut(usize, &PacketError),
) -> Result<Summary, RunError> {
    let apply = |buf: &mut PacketBuf, _: Duration| match dir {
        Direction::Seal => bundle.seal(buf),
        Direction::Open => open_packet(bundle, buf),
    };
    run_with(apply, input, output, report)
}

/// `ipsec open` of one packet: [`Bundle::open`], then, if no IPComp SA of the bundle took part,
/// the one that takes a packet its peer sent uncompressed (RFC 3173 section 2.2), as the
/// engine's inbound does: in transport mode the plain packet, left as it is; in tunnel mode an
/// IP-in-IP packet between the SA's endpoints, whose outer header the SA removes. A packet
/// with no IPsec header at all is taken so only by a bundle of IPComp SAs alone: any other SA
/// of the bundle must have left its header.
fn open_packet(bundle: &mut Bundle, buf: &mut PacketBuf) -> Result<(), PacketError> {
    let before = comp_received(bundle);
    let result = bundle.open(buf).map(|_| ());
    if comp_received(bundle) != before {
        return result;
    }
    let plain = match outer_ipsec(buf.packet()) {
        Ok(Err(next)) => next,
        _ => return result,
    };
    match result {
        Ok(()) => take_uncompressed(bundle, buf, plain).map(|_| ()),
        Err(e) if bundle.sas_mut().iter().all(|s| matches!(s, AnySa::Comp(_))) => {
            match take_uncompressed(bundle, buf, plain)? {
                true => Ok(()),
                false => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Packets the bundle's IPComp SAs have received, compressed or not.
fn comp_received(bundle: &mut Bundle) -> u64 {
    let count = |s: &AnySa| match s {
        AnySa::Comp(c) => c.counters().decompressed + c.counters().received_uncompressed,
        _ => 0,
    };
    bundle.sas_mut().iter().map(count).sum()
}

/// Gives a packet without an IPsec header (`next`: its first upper-layer protocol) to the
/// IPComp SA that takes it as sent uncompressed, if any: a tunnel-mode one when it is IP-in-IP
/// between that SA's endpoints, else a transport-mode one.
fn take_uncompressed(bundle: &mut Bundle, buf: &mut PacketBuf, next: u8) -> Result<bool, PacketError> {
    let (src, dst) = ip::addrs(buf.packet())?;
    let ipip = matches!(next, proto::IPIP | proto::IPV6);
    let takes = |s: &&mut AnySa, mode: Mode| match s {
        AnySa::Comp(c) => {
            let cfg = c.config();
            cfg.mode == mode
                && (mode == Mode::Transport || (ipip && cfg.tunnel.is_some_and(|t| (t.src, t.dst) == (src, dst))))
        }
        _ => false,
    };
    let sas = bundle.sas_mut();
    let sa = match sas.iter_mut().find(|s| takes(s, Mode::Tunnel)) {
        Some(sa) => Some(sa),
        None => sas.iter_mut().find(|s| takes(s, Mode::Transport)),
    };
    match sa {
        Some(sa) => sa.open(buf).map(|()| true),
        None => Ok(false),
    }
}

/// The loop of [`run`] with any per-packet step: `apply` gets each packet's IP buffer and
/// its capture timestamp, and either transforms it in place (written out) or rejects it
/// (reported, not written).
pub fn run_with<R: Read, W: Write, E: From<PacketError>>(
    mut apply: impl FnMut(&mut PacketBuf, Duration) -> Result<(), E>,
    input: R,
    output: W,
    mut report: impl FnMut(usize, &E),
) -> Result<Summary, RunError> {
    let mut reader = PcapReader::new(input).map_err(|e| RunError(format!("reading pcap header: {e}")))?;
    let header = reader.header();
    let link = Link::from_datalink(header.datalink).map_err(RunError)?;
    let out_header = PcapHeader {
        snaplen: 262_144,
        ..header
    };
    let mut writer =
        PcapWriter::with_header(output, out_header).map_err(|e| RunError(format!("writing pcap header: {e}")))?;
    let mut scratch = vec![0u8; HEADROOM + MAX_FRAME + TAILROOM];
    let mut summary = Summary::default();
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.map_err(|e| RunError(format!("reading packet {}: {e}", summary.read + 1)))?;
        summary.read += 1;
        let ts = pkt.timestamp;
        match process(link, &mut |buf: &mut PacketBuf| apply(buf, ts), &mut scratch, &pkt.data) {
            Ok((s, l)) => {
                let data = &scratch[s..s + l];
                writer
                    .write_packet(&PcapPacket::new(pkt.timestamp, l as u32, data))
                    .map_err(|e| RunError(format!("writing packet {}: {e}", summary.read)))?;
                summary.written += 1;
            }
            Err(e) => {
                summary.rejected += 1;
                report(summary.read, &e);
            }
        }
    }
    writer
        .into_writer()
        .flush()
        .map_err(|e| RunError(format!("flushing output: {e}")))?;
    Ok(summary)
}

/// The capture to read: the file, or standard input.
pub fn open_input(path: Option<&Path>) -> Result<Box<dyn Read>, String> {
    Ok(match path {
        Some(p) => Box::new(BufReader::new(
            File::open(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        None => Box::new(BufReader::new(io::stdin().lock())),
    })
}

/// Where to write a capture: the file, or standard output unless it is a terminal.
pub fn open_output(path: Option<&Path>) -> Result<Box<dyn Write>, String> {
    Ok(match path {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        None if io::stdout().is_terminal() => {
            return Err("refusing to write a pcap to a terminal: use --out F.pcap or a pipe".into())
        }
        None => Box::new(BufWriter::new(io::stdout().lock())),
    })
}
