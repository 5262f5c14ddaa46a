//! The `ipsec seal` / `ipsec open` loop: one output packet per input packet, rejected packets
//! reported with their index and reason, nothing allocated per packet.

use crate::bundle::{outer_ipsec, AnySa, Bundle, PacketError};
use crate::pcapio::Link;
use ipsec_core::ip::{self, proto};
use ipsec_core::sa::Mode;
use ipsec_core::PacketBuf;
use ipsec_engine::udp_encap::{self, EncapError, UdpEncap};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::PcapError;
use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::rc::Rc;
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
    /// NAT-keepalives dropped (ESP in UDP, RFC 3948 2.3): not written, not rejected.
    pub keepalives: usize,
    /// Non-ESP (IKE) datagrams dropped (ESP in UDP, RFC 3948 2.2): not written, not rejected.
    pub non_esp: usize,
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

/// A failure that stops the whole run.
#[derive(Debug)]
pub enum RunError {
    /// The input capture cannot be read: the cause, without the file's name (see
    /// [`RunError::describe`]).
    Input(String),
    /// The output cannot be written (the cause, without the file's name).
    Output(String),
    /// The output is a pipe whose reader has gone (`ipsec seal ... | head -c 100`): not an
    /// error to report; the command ends quietly.
    BrokenPipe,
}

impl RunError {
    /// The message to print, naming the input or output.
    pub fn describe(&self, input: &str, output: &str) -> String {
        match self {
            RunError::Input(m) => format!("{input}: {m}"),
            RunError::Output(m) => format!("{output}: {m}"),
            RunError::BrokenPipe => format!("{output}: the reader closed the pipe"),
        }
    }

    /// The exit code: 0 for [`RunError::BrokenPipe`] (printing nothing), else the message on
    /// standard error and 2.
    pub fn exit(&self, input: &str, output: &str) -> ExitCode {
        match self {
            RunError::BrokenPipe => ExitCode::SUCCESS,
            _ => usage_error(self.describe(input, output)),
        }
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Input(m) | RunError::Output(m) => f.write_str(m),
            RunError::BrokenPipe => f.write_str("broken pipe"),
        }
    }
}

/// An I/O error's cause as a message, without Rust's `(os error N)` suffix: `is a directory`,
/// `No such file or directory`, ... (shared with the config loaders).
pub use ipsec_config::io_reason;

/// The length of a pcap file header.
const PCAP_HEADER_LEN: u64 = 24;
/// The length of a pcap record header.
const PCAP_RECORD_HEADER_LEN: u64 = 16;

/// Why a pcap read failed, in words: the file's I/O error, or which part is missing.
/// `consumed` is how many bytes the reader had taken from the input when it failed.
fn pcap_read_error(e: PcapError, at: Option<(usize, u64)>, consumed: u64) -> RunError {
    let eof = matches!(&e, PcapError::IoError(io) if io.kind() == io::ErrorKind::UnexpectedEof);
    RunError::Input(match (e, at) {
        (_, None) if eof && consumed == 0 => "empty file (no pcap header)".into(),
        (_, None) if eof => {
            format!("truncated pcap header ({consumed} of {PCAP_HEADER_LEN} bytes): not a pcap capture")
        }
        (_, Some((n, offset))) if eof => format!("truncated pcap record at packet {n} (byte {offset})"),
        (PcapError::IoError(io), None) => format!("reading the pcap header: {}", io_reason(&io)),
        (PcapError::IoError(io), Some((n, _))) => format!("reading packet {n}: {}", io_reason(&io)),
        (other, None) => format!("not a pcap capture: {other}"),
        (other, Some((n, offset))) => format!("bad pcap record at packet {n} (byte {offset}): {other}"),
    })
}

/// A pcap write error: [`RunError::BrokenPipe`] when the reader of a pipe has gone.
fn pcap_write_error(e: PcapError, what: String) -> RunError {
    match e {
        PcapError::IoError(io) => io_write_error(io, what),
        other => RunError::Output(format!("{what}: {other}")),
    }
}

fn io_write_error(e: io::Error, what: String) -> RunError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        RunError::BrokenPipe
    } else {
        RunError::Output(format!("{what}: {}", io_reason(&e)))
    }
}

/// Counts the bytes taken from a reader (to tell an empty input from a truncated one).
struct Counting<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Writes `text` to standard output. A closed pipe (`ipsec check-config f | head -1`) is not
/// an error: the output is simply not wanted any more, and `code` is returned as if all had
/// been written. Another write error is reported (exit 2).
///
/// Why not restore SIGPIPE's default action instead: that needs `libc` and `unsafe` in
/// `main`, and a process killed by SIGPIPE exits with status 141, which `set -o pipefail`
/// scripts take as a failure; treating `BrokenPipe` as a quiet end gives status 0 everywhere.
pub fn print_stdout(text: &str, code: ExitCode) -> ExitCode {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => code,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => code,
        Err(e) => usage_error(format!("standard output: {}", io_reason(&e))),
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
    run_encap(dir, bundle, &[], input, output, report)
}

/// An ESP SA of the command with `encap espinudp` (RFC 3948).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncapSa {
    /// Its SPI.
    pub spi: u32,
    /// Its ports and original address.
    pub encap: UdpEncap,
    /// Whether it is a transport-mode SA (its opened packets get the RFC 3948 3.1.2 checksum
    /// fix-up when it has an original address).
    pub transport: bool,
}

/// As [`run`], with ESP in UDP for the SAs of `encaps`. Sealing, the packet the bundle made
/// (whose outermost SA must be the one of `encaps`) is put in UDP from its `sport` to its
/// `dport`. Opening, a UDP datagram to the `dport` of one of `encaps` is taken out of UDP and
/// must then be ESP of that SA; NAT-keepalives and non-ESP (IKE) datagrams on that port are
/// dropped and counted ([`Summary::keepalives`], [`Summary::non_esp`]), not reported; plain
/// ESP for an SA of `encaps` is refused. The source port is not checked: a NAT may rewrite
/// it (RFC 3948 has the receiver follow the peer's new port).
pub fn run_encap<R: Read, W: Write>(
    dir: Direction,
    bundle: &mut Bundle,
    encaps: &[EncapSa],
    input: R,
    output: W,
    mut report: impl FnMut(usize, &PacketError),
) -> Result<Summary, RunError> {
    let apply = |buf: &mut PacketBuf, _: Duration| match dir {
        Direction::Seal => {
            bundle.seal(buf)?;
            match encaps.first() {
                Some(e) => udp_encap::encapsulate(buf, e.encap.sport, e.encap.dport).map_err(Into::into),
                None => Ok(()),
            }
        }
        Direction::Open if encaps.is_empty() => open_packet(bundle, buf),
        Direction::Open => open_encap(bundle, encaps, buf),
    };
    let (mut keepalives, mut non_esp) = (0, 0);
    let count = |i: usize, e: &PacketError| match e {
        PacketError::Encap(EncapError::Keepalive) => keepalives += 1,
        PacketError::Encap(EncapError::NonEsp) => non_esp += 1,
        e => report(i, e),
    };
    let mut summary = run_with(apply, input, output, count)?;
    summary.rejected -= keepalives + non_esp;
    summary.keepalives = keepalives;
    summary.non_esp = non_esp;
    Ok(summary)
}

/// `ipsec open` of one packet with ESP-in-UDP SAs: RFC 3948 3.1.2 / 3.2.2 (the UDP header off,
/// then ESP as usual; in transport mode the TCP/UDP checksum moved from the SA's original
/// address to the packet's source).
fn open_encap(bundle: &mut Bundle, encaps: &[EncapSa], buf: &mut PacketBuf) -> Result<(), PacketError> {
    let arrived = udp_encap::decapsulate(buf, |p| encaps.iter().any(|e| e.encap.dport == p.dport))?;
    let outer = outer_ipsec(buf.packet())?;
    let Some(ports) = arrived else {
        if let Ok((proto::ESP, spi)) = outer {
            if encaps.iter().any(|e| e.spi == spi) {
                return Err(EncapError::NotEncapsulated(spi).into());
            }
        }
        return open_packet(bundle, buf);
    };
    let spi = match outer {
        Ok((proto::ESP, spi)) => spi,
        _ => return Err(ipsec_core::Error::MalformedIp.into()),
    };
    let sa = encaps
        .iter()
        .find(|e| e.spi == spi && e.encap.dport == ports.dport)
        .ok_or(EncapError::UnexpectedEncap(spi))?;
    open_packet(bundle, buf)?;
    if let (true, Some(oa)) = (sa.transport, sa.encap.oa) {
        udp_encap::fix_transport_checksum(buf.packet_mut(), oa);
    }
    Ok(())
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
    let consumed = Rc::new(Cell::new(0u64));
    let input = Counting {
        inner: input,
        count: Rc::clone(&consumed),
    };
    let mut reader = PcapReader::new(input).map_err(|e| pcap_read_error(e, None, consumed.get()))?;
    let header = reader.header();
    let link = Link::from_datalink(header.datalink).map_err(RunError::Input)?;
    let out_header = PcapHeader {
        snaplen: 262_144,
        ..header
    };
    let mut writer = PcapWriter::with_header(output, out_header)
        .map_err(|e| pcap_write_error(e, "writing the pcap header".into()))?;
    let mut scratch = vec![0u8; HEADROOM + MAX_FRAME + TAILROOM];
    let mut summary = Summary::default();
    // Where the next record starts in the input, for messages about a broken one.
    let mut offset = PCAP_HEADER_LEN;
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.map_err(|e| pcap_read_error(e, Some((summary.read + 1, offset)), consumed.get()))?;
        offset += PCAP_RECORD_HEADER_LEN + pkt.data.len() as u64;
        summary.read += 1;
        let ts = pkt.timestamp;
        match process(link, &mut |buf: &mut PacketBuf| apply(buf, ts), &mut scratch, &pkt.data) {
            Ok((s, l)) => {
                let data = &scratch[s..s + l];
                writer
                    .write_packet(&PcapPacket::new(pkt.timestamp, l as u32, data))
                    .map_err(|e| pcap_write_error(e, format!("writing packet {}", summary.read)))?;
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
        .map_err(|e| io_write_error(e, "flushing the output".into()))?;
    Ok(summary)
}

/// Checks, before any work, that a file can be written at `path`: not a directory, in a
/// directory that exists, with permission to create or write it. A file created to find out
/// is removed again. The message names the path and the cause.
pub fn check_writable(path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.is_dir() {
        return Err(format!("{shown}: is a directory"));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(format!("{shown}: directory {} does not exist", parent.display()));
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("{shown}: cannot write: {}", io_reason(&e)))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// How messages name an input: its path, or `standard input`.
pub fn input_name(path: Option<&Path>) -> String {
    path.map_or_else(|| "standard input".into(), |p| p.display().to_string())
}

/// How messages name an output: its path, or `standard output`.
pub fn output_name(path: Option<&Path>) -> String {
    path.map_or_else(|| "standard output".into(), |p| p.display().to_string())
}

/// The capture to read: the file, or standard input. A directory is refused here, naming
/// it, rather than failing at the first read.
pub fn open_input(path: Option<&Path>) -> Result<Box<dyn Read>, String> {
    Ok(match path {
        Some(p) if p.is_dir() => return Err(format!("{}: is a directory, not a pcap file", p.display())),
        Some(p) => Box::new(BufReader::new(
            File::open(p).map_err(|e| format!("{}: {}", p.display(), io_reason(&e)))?,
        )),
        None => Box::new(BufReader::new(io::stdin().lock())),
    })
}

/// Where to write a capture: the file, or standard output unless it is a terminal.
pub fn open_output(path: Option<&Path>) -> Result<Box<dyn Write>, String> {
    Ok(match path {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).map_err(|e| format!("{}: {}", p.display(), io_reason(&e)))?,
        )),
        None if io::stdout().is_terminal() => {
            return Err("refusing to write a pcap to a terminal: use --out F.pcap or a pipe".into())
        }
        None => Box::new(BufWriter::new(io::stdout().lock())),
    })
}
