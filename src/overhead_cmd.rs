//! `ipsec overhead --sa SPEC [--sa SPEC ...] --link-mtu N [--payload BYTES] [--json]`: what a
//! bundle adds to each packet, the largest inner packet that fits the link MTU, and what a
//! payload costs on the wire, from [`ipsec_engine::overhead`].

use crate::spec;
use ipsec_core::sa::{Mode, SaParams};
use ipsec_engine::overhead::{
    Breakdown, Calculator, Encap, Inner, IpVersion, OverheadError, SaShape, Upper, UDP_ENCAP_LEN,
};
use serde_json::json;
use std::fmt::Write as _;
use std::process::ExitCode;

/// The upper-layer protocol on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UpperArg {
    /// TCP, 20-byte header.
    Tcp,
    /// UDP, 8-byte header.
    Udp,
}

/// The arguments of `ipsec overhead`.
#[derive(Debug, clap::Args)]
pub struct OverheadArgs {
    #[arg(long = "sa", value_name = "SPEC", help = spec::SA_HELP, required_unless_present = "sa_file", conflicts_with = "sa_file")]
    pub sas: Vec<String>,
    #[arg(long = "sa-file", value_name = "FILE", help = spec::SA_FILE_HELP)]
    pub sa_file: Option<std::path::PathBuf>,
    /// The link MTU in bytes (IP packet size, no link-layer header).
    #[arg(long, value_name = "N")]
    pub link_mtu: usize,
    /// An upper-layer payload to send: prints packets and wire bytes with path-MTU-sized
    /// segments and with one packet fragmented after IPsec.
    #[arg(long, value_name = "BYTES")]
    pub payload: Option<usize>,
    /// The inner packets' IP version (default: that of the first SA's addresses if it is a
    /// transport-mode SA that has them, else 4).
    #[arg(long, value_name = "4|6", value_parser = clap::builder::PossibleValuesParser::new(["4", "6"]))]
    pub inner: Option<String>,
    /// Length of the inner IP header(s) transport mode keeps in front: IPv4 with options (24..60),
    /// IPv6 with Hop-by-Hop/Routing headers (40 + 8n). Default 20 or 40.
    #[arg(long, value_name = "N")]
    pub inner_header_len: Option<usize>,
    /// Report the overhead for an inner packet of this many bytes (default: the largest that
    /// fits the link MTU).
    #[arg(long, value_name = "N")]
    pub inner_len: Option<usize>,
    /// The upper-layer protocol of --payload.
    #[arg(long, value_enum, default_value = "tcp")]
    pub upper: UpperArg,
    /// Count RFC 3948 UDP encapsulation (8 bytes per ESP header); implied when an SA has
    /// `encap espinudp`.
    #[arg(long)]
    pub udp_encap: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command: prints the report, or the error on standard error with exit code 2.
pub fn run(args: &OverheadArgs) -> ExitCode {
    match report(args) {
        Ok(text) => crate::tool::print_stdout(&text, ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("ipsec overhead: {e}");
            ExitCode::from(2)
        }
    }
}

fn sa_label(p: &SaParams, comp: Option<ipsec_ipcomp::Algorithm>) -> String {
    let mut words = vec![format!("{} spi {:#x}", p.proto.name(), p.spi)];
    words.push(match (p.mode, p.tunnel) {
        (Mode::Tunnel, Some(t)) => format!("tunnel {} -> {}", t.src, t.dst),
        _ => "transport".into(),
    });
    if let Some(e) = &p.enc {
        let bits = if e.key.is_empty() {
            String::new()
        } else {
            format!("-{}", e.key.len() * 8)
        };
        words.push(format!("{}{bits}", e.alg.name()));
    }
    if let Some(a) = &p.aead {
        let bits = (a.key.len() - ipsec_core::AeadAlg::SALT_LEN) * 8;
        words.push(format!("{}-{bits} icv {}", a.alg.name(), a.icv_len));
    }
    if let Some(i) = &p.integ {
        words.push(format!("{}-{}", i.alg.name(), i.icv_len * 8));
    }
    if let Some(c) = comp {
        words.push(c.name().into());
    }
    words.join(" ")
}

/// The rows of the breakdown that apply to this bundle: (label, bytes).
fn rows(b: &Breakdown, shapes: &[SaShape], udp: bool) -> Vec<(&'static str, usize)> {
    let has = |f: fn(&SaShape) -> bool| shapes.iter().any(f);
    let mut v = Vec::new();
    if has(|s| matches!(s.encap(), Encap::Tunnel(_))) {
        v.push(("outer IP header", b.outer_ip));
    }
    if udp && has(|s| matches!(s, SaShape::Esp { .. })) {
        v.push(("UDP encapsulation (RFC 3948)", b.udp_encap));
    }
    if has(|s| matches!(s, SaShape::Comp { .. })) {
        v.push(("IPComp header (worst case: not compressed)", b.ipcomp));
    }
    if has(|s| matches!(s, SaShape::Ah { .. })) {
        v.push(("AH header with ICV", b.ah));
    }
    if has(|s| matches!(s, SaShape::Esp { .. })) {
        v.push(("ESP header", b.esp_header));
        v.push(("ESP IV", b.esp_iv));
        v.push(("ESP padding", b.esp_padding));
        v.push(("ESP trailer (pad length, next header)", b.esp_trailer));
        v.push(("ESP ICV", b.esp_icv));
    }
    v
}

fn err(e: OverheadError) -> String {
    e.to_string()
}

/// The report `ipsec overhead` prints (text or JSON), or the error message.
pub fn report(args: &OverheadArgs) -> Result<String, String> {
    let texts = spec::collect(&args.sas, args.sa_file.as_deref())?;
    let mut specs = Vec::new();
    for t in &texts {
        specs.push(spec::parse(&t.text).map_err(|e| format!("{}: {e}", t.label))?);
    }
    let mut shapes = Vec::new();
    for (t, s) in texts.iter().zip(&specs) {
        shapes.push(SaShape::from_params(&s.params).map_err(|e| format!("{}: {e}", t.label))?);
    }
    // ESP in UDP: asked for, or an SA has `encap espinudp`.
    let udp_encap = args.udp_encap || specs.iter().any(|s| s.encap.is_some());
    let calc = Calculator::new(shapes.clone()).map_err(err)?.udp_encap(udp_encap);

    let version = match args.inner.as_deref() {
        Some("6") => IpVersion::V6,
        Some(_) => IpVersion::V4,
        None => match specs.first().map(|s| (s.params.mode, s.params.tunnel)) {
            Some((Mode::Transport, Some(t))) => IpVersion::of(t.src),
            _ => IpVersion::V4,
        },
    };
    let inner = Inner::new(version, args.inner_header_len.unwrap_or(version.header_len()))
        .map_err(|e| format!("--inner-header-len: {e}"))?;
    let link_mtu = args.link_mtu;
    let max = calc.max_inner_mtu(inner, link_mtu).map_err(err)?;
    let inner_len = args.inner_len.unwrap_or(max);
    let o = calc
        .overhead(inner, inner_len)
        .map_err(|e| format!("--inner-len {inner_len}: {e}"))?;
    let upper = match args.upper {
        UpperArg::Tcp => Upper::Tcp,
        UpperArg::Udp => Upper::Udp,
    };
    let upper_name = match args.upper {
        UpperArg::Tcp => "tcp",
        UpperArg::Udp => "udp",
    };
    let payload = match args.payload {
        Some(p) => Some((
            p,
            calc.segmented(inner, upper, p, link_mtu)
                .map_err(|e| format!("--payload {p}: {e}"))?,
            // A payload too big for one IP packet still has segments.
            calc.fragmented(inner, upper, p, link_mtu).map_err(err),
        )),
        None => None,
    };

    if args.json {
        let sas: Vec<_> = specs
            .iter()
            .zip(&shapes)
            .zip(o.per_sa.iter().zip(&o.len_after))
            .map(|((s, shape), (b, len_after))| {
                json!({
                    "sa": sa_label(&s.params, s.comp),
                    "spi": s.params.spi,
                    "shape": shape,
                    "overhead_bytes": b.total(),
                    "len_after": len_after,
                    "breakdown": b,
                })
            })
            .collect();
        let mut v = json!({
            "link_mtu": link_mtu,
            "inner_version": version.number(),
            "inner_header_len": inner.header_len(),
            "udp_encap": udp_encap,
            "ipcomp_assumption": calc.comp(),
            "max_inner_mtu": max,
            "inner_len": inner_len,
            "overhead_bytes": o.bytes,
            "sealed_len": o.sealed_len,
            "fits_link_mtu": o.sealed_len <= link_mtu,
            "outer_version": o.outer_version.number(),
            "breakdown": o.breakdown,
            "sas": sas,
        });
        if let Some((p, seg, frag)) = &payload {
            v["payload"] = json!({
                "bytes": p,
                "upper": upper_name,
                "upper_header_len": upper.header_len(),
                "segmented": seg,
                "fragmented": frag.as_ref().ok(),
            });
            if let Err(e) = frag {
                v["payload"]["fragmented_error"] = json!(e);
            }
        }
        let mut s = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        s.push('\n');
        return Ok(s);
    }

    let mut t = String::new();
    let w = &mut t;
    let _ = writeln!(w, "bundle, in seal order:");
    for (i, s) in specs.iter().enumerate() {
        let _ = writeln!(w, "  {}. {}", i + 1, sa_label(&s.params, s.comp));
    }
    let _ = writeln!(
        w,
        "inner packets: {version} with a {}-byte header; link MTU {link_mtu}{}",
        inner.header_len(),
        if udp_encap {
            format!("; UDP encapsulation ({UDP_ENCAP_LEN} bytes per ESP header)")
        } else {
            String::new()
        }
    );
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "max inner MTU: {max} bytes (sealed: {} bytes)",
        calc.sealed_len(inner, max).map_err(err)?
    );
    let fits = if o.sealed_len <= link_mtu {
        "fits"
    } else {
        "does not fit"
    };
    let _ = writeln!(
        w,
        "overhead for a {inner_len}-byte inner packet: {} bytes (sealed: {} bytes, {} IPv{}, {fits})",
        o.bytes,
        o.sealed_len,
        if o.outer_version == version { "still" } else { "now" },
        o.outer_version.number()
    );
    for (label, n) in rows(&o.breakdown, &shapes, udp_encap) {
        let _ = writeln!(w, "  {label:<42} {n:>5}");
    }
    if shapes.len() > 1 {
        let per: Vec<String> = specs
            .iter()
            .zip(&o.per_sa)
            .map(|(s, b)| format!("{} {}", s.params.proto.name(), b.total()))
            .collect();
        let _ = writeln!(w, "  by SA: {}", per.join(", "));
    }
    if let Some((p, seg, frag)) = &payload {
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "payload of {p} bytes over {} ({}-byte header):",
            upper_name.to_uppercase(),
            upper.header_len()
        );
        let _ = writeln!(
            w,
            "  segments sized to the path MTU: {} packets, {} wire bytes ({} payload bytes per segment, {} in the last)",
            seg.packets, seg.wire_bytes, seg.segment_payload, seg.last_segment_payload
        );
        match frag {
            Ok(frag) => {
                let _ = writeln!(
                    w,
                    "  one packet, fragmented after IPsec: {} packets, {} wire bytes (sealed: {} bytes{})",
                    frag.packets,
                    frag.wire_bytes,
                    frag.sealed_len,
                    if frag.packets > 1 {
                        format!(", {} data bytes per fragment", frag.fragment_data)
                    } else {
                        String::new()
                    }
                );
            }
            Err(e) => {
                let _ = writeln!(w, "  one packet, fragmented after IPsec: impossible: {e}");
            }
        }
    }
    Ok(t)
}
