#!/usr/bin/env python3
"""The table and the plot of scripts/studies/ipsec-vs-ssl.sh: medians of its transfers beside the figures
of Alshamsi and Saito, "A Technical Comparison of IPSec and SSL" (Tables 13-18).

    python3 scripts/studies/ipsec_vs_ssl_report.py RUNS.csv PAPER.csv OUT.md OUT.svg "WHEN" ["GENERATED"]

RUNS.csv: link,variant,data,rep,bytes,seconds,goodput_mbps,cpu_s,cpu_s_per_gb,... (a row per
transfer). PAPER.csv: ../shared/studies/ipsec-vs-ssl.csv. WHEN: the run's date, commit and
settings, printed above the table. GENERATED: the data sets that generated stand-ins replaced
(said loudly in both outputs).

Per link and data set, a row per tunnel: without compression, with it (the ratio of the two is
what the paper reports on), and for tunneld the adaptive model beside the better fixed mode;
then the paper's rows for the same link (FreeS/WAN ESP AES-128 with HMAC-SHA1 and HMAC-MD5,
IPComp DEFLATE; Stunnel 3.26 with RC4-128 and 3DES, which had no compression; the plain link).
The SVG (drawn by hand: this machine has no matplotlib) has a panel per link, the first data
set: bars without compression, with it, and adaptive.
"""
import csv
import statistics
import sys

# Our tunnels: (label, without compression, with compression, adaptive)
TUNNELS = [
    ("tunneld: ESP AES-128-GCM, IPComp DEFLATE", "tunneld-off", "tunneld-always", "tunneld-model"),
    ("OpenVPN: UDP, AES-128-GCM, LZ4", "openvpn", "openvpn-lz4", None),
    ("stunnel: TLS 1.3, AES-128-GCM (no compression in TLS 1.3)", "stunnel", None, None),
]
# The paper's rows: (label, protocol, integrity, cipher)
PAPER = [
    ("paper: FreeS/WAN ESP AES-128, HMAC-SHA1, IPComp DEFLATE", "ipsec", "sha1", "aes128"),
    ("paper: FreeS/WAN ESP AES-128, HMAC-MD5, IPComp DEFLATE", "ipsec", "md5", "aes128"),
    ("paper: FreeS/WAN ESP 3DES, HMAC-SHA1, IPComp DEFLATE", "ipsec", "sha1", "3des"),
    ("paper: Stunnel 3.26 RC4-128, SHA1 (no compression)", "ssl", "sha1", "rc4-128"),
    ("paper: Stunnel 3.26 3DES, SHA1 (no compression)", "ssl", "sha1", "3des-ede-cbc"),
    ("paper: the plain link, no tunnel", "ipsec", "sha1", "none"),
]


def rate_mbps(link):
    unit = {"k": 1e-3, "M": 1.0, "G": 1e3}[link[-1]]
    return float(link[:-1]) * unit


def medians(rows):
    cells = {}
    for r in rows:
        cells.setdefault((r["link"], r["data"], r["variant"]), []).append(r)
    out = {}
    for k, rs in cells.items():
        gp = statistics.median(float(r["goodput_mbps"]) for r in rs)
        cpu = statistics.median(float(r["cpu_s_per_gb"]) for r in rs)
        spread = (min(float(r["goodput_mbps"]) for r in rs), max(float(r["goodput_mbps"]) for r in rs))
        decisions = sorted({r.get("model_decision", "") for r in rs} - {""})
        drops = statistics.median(int(r.get("tbf_dropped") or 0) for r in rs)
        out[k] = {"gp": gp, "cpu": cpu, "n": len(rs), "spread": spread, "decisions": decisions, "drops": drops}
    return out


def paper_rows(paper, link):
    mbps = str(int(rate_mbps(link)))
    got = []
    for label, proto, integ, cipher in PAPER:
        for r in paper:
            if (r["protocol"], r["link_mbps"], r["cipher"]) == (proto, mbps, cipher) and (
                cipher == "none" or r["integrity"] == integ
            ):
                off = float(r["no_compression_mbps"])
                on = float(r["compression_mbps"]) if r["compression_mbps"] else None
                got.append((label, off, on))
                break
    return got


def fmt(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def table(med, paper, links, datasets, when, generated):
    out = [f"Run {when}; goodput in Mbit/s (TCP payload at the receiver), CPU in CPU-seconds per GB "
           "received (the tunnel processes of both ends)."]
    if generated:
        out.append(f"**GENERATED DATA stood in for: {generated} (corpus missing).**")
    out += ["", "| link | data | tunnel | without compression: Mbit/s | CPU-s/GB | with compression: Mbit/s | CPU-s/GB "
            "| with / without | adaptive (model): Mbit/s | CPU-s/GB | model / better fixed |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for link in links:
        for data in datasets:
            for label, off, on, model in TUNNELS:
                a = med.get((link, data, off))
                b = med.get((link, data, on)) if on else None
                m = med.get((link, data, model)) if model else None
                if not (a or b or m):
                    continue
                ratio = f"{b['gp'] / a['gp']:.2f}" if a and b else "–"
                best = max([x["gp"] for x in (a, b) if x] or [0])
                rel = f"{m['gp'] / best:.2f}" if m and best else "–"
                if m and m["decisions"]:
                    rel += f" ({'/'.join(m['decisions'])})"
                g = lambda x: fmt(x["gp"]) if x else "–"
                c = lambda x: fmt(x["cpu"], 1) if x else "–"
                out.append(f"| {link} | {data} | {label} | {g(a)} | {c(a)} | {g(b)} | {c(b)} | {ratio} | {g(m)} | {c(m)} | {rel} |")
        for label, off, on in paper_rows(paper, link):
            ratio = f"{on / off:.2f}" if on else "–"
            on_ = "–" if on is None else f"{on:g}"
            out.append(f"| {link} | iperf | {label} | {off:g} | – | {on_} | – | {ratio} | – | – | – |")
    spreads = []
    for (link, data, v), x in sorted(med.items()):
        if x["n"] > 1:
            spreads.append(f"{link}/{data}/{v} {x['spread'][0]:.0f}–{x['spread'][1]:.0f}")
    drops = [f"{link}/{data}/{v} {x['drops']:,.0f}" for (link, data, v), x in sorted(med.items())]
    out += ["", "Goodput range over the repetitions: " + "; ".join(spreads) + "." if spreads else "",
            "", "Packets the tbf dropped per transfer (median; sent, so encrypted and counted in the CPU, "
            "but never received): " + "; ".join(drops) + "."]
    return "\n".join(out).rstrip() + "\n"


def svg(med, paper, links, data, generated):
    # A panel per link; per group (ours, then the paper's), bars: without / with / adaptive.
    colours = [("without compression", "#4c72b0"), ("with compression", "#dd8452"), ("adaptive (model)", "#55a868")]
    W, H, left, top, bottom = 470, 360, 58, 52, 92
    pw, ph = W - left - 16, H - top - bottom
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(links)}" height="{H + 24}" '
         'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    for p, link in enumerate(links):
        groups = []
        for label, off, on, model in TUNNELS:
            vals = [med.get((link, data, v), {}).get("gp") if v else None for v in (off, on, model)]
            groups.append((label.split(":")[0], vals))
        pr = {lab: (o, c) for lab, o, c in paper_rows(paper, link)}
        for label, short in ((PAPER[0][0], "paper IPsec\nAES-128/SHA1"), (PAPER[3][0], "paper SSL\nRC4-128")):
            if label in pr:
                groups.append((short, [pr[label][0], pr[label][1], None]))
        peak = max([v for _, vals in groups for v in vals if v] + [rate_mbps(link)])
        ymax = peak * 1.15
        ox = p * W
        X0, Y0 = ox + left, top + ph
        y = lambda v: Y0 - v / ymax * ph
        s.append(f'<text x="{ox + W / 2}" y="20" text-anchor="middle" font-size="13">{link} link (tbf), data: {data}</text>')
        s.append(f'<line x1="{X0}" y1="{Y0}" x2="{X0 + pw}" y2="{Y0}" stroke="black"/>')
        s.append(f'<line x1="{X0}" y1="{top}" x2="{X0}" y2="{Y0}" stroke="black"/>')
        step = [v for v in (10, 20, 25, 50, 100, 200, 250, 500, 1000) if ymax / v <= 6][0]
        for i in range(int(ymax // step) + 1):
            s.append(f'<text x="{X0 - 5}" y="{y(i * step) + 4:.1f}" text-anchor="end">{i * step}</text>')
            s.append(f'<line x1="{X0}" y1="{y(i * step):.1f}" x2="{X0 + pw}" y2="{y(i * step):.1f}" stroke="#ddd"/>')
        s.append(f'<text transform="translate({ox + 16},{top + ph / 2}) rotate(-90)" text-anchor="middle">goodput, Mbit/s</text>')
        r = rate_mbps(link)
        s.append(f'<line x1="{X0}" y1="{y(r):.1f}" x2="{X0 + pw}" y2="{y(r):.1f}" stroke="black" stroke-dasharray="4,3"/>')
        s.append(f'<text x="{X0 + pw - 2}" y="{y(r) - 3:.1f}" text-anchor="end">link rate</text>')
        gw = pw / len(groups)
        bw = gw * 0.8 / 3
        for g, (name, vals) in enumerate(groups):
            gx = X0 + g * gw + gw * 0.1
            if g == 3:
                s.append(f'<line x1="{X0 + g * gw:.1f}" y1="{top}" x2="{X0 + g * gw:.1f}" y2="{Y0 + 40}" stroke="#999"/>')
            for b, v in enumerate(vals):
                if v is None:
                    continue
                s.append(f'<rect x="{gx + b * bw:.1f}" y="{y(v):.1f}" width="{bw - 1:.1f}" height="{Y0 - y(v):.1f}" fill="{colours[b][1]}"/>')
                s.append(f'<text x="{gx + (b + 0.5) * bw:.1f}" y="{y(v) - 3:.1f}" text-anchor="middle" font-size="9">{v:.0f}</text>')
            for li, line in enumerate(name.split("\n")):
                s.append(f'<text x="{gx + 1.5 * bw:.1f}" y="{Y0 + 15 + 13 * li}" text-anchor="middle">{line}</text>')
        for gx, what in ((X0 + 1.5 * gw, "ours, this machine (medians)"), (X0 + 4 * gw, "the paper (its iperf data)")):
            s.append(f'<text x="{gx:.1f}" y="{Y0 + 52}" text-anchor="middle" fill="#555">{what}</text>')
    for i, (name, c) in enumerate(colours):
        s.append(f'<rect x="{20 + 170 * i}" y="{H + 2}" width="12" height="12" fill="{c}"/>')
        s.append(f'<text x="{36 + 170 * i}" y="{H + 12}">{name}</text>')
    if generated:
        s.append(f'<text x="{20 + 170 * 3}" y="{H + 12}" fill="red">GENERATED DATA: {generated}</text>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


def main():
    if len(sys.argv) not in (6, 7):
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    paper = list(csv.DictReader(open(sys.argv[2])))
    generated = sys.argv[6].strip() if len(sys.argv) == 7 else ""
    if not rows:
        sys.exit("ipsec_vs_ssl_report: no transfers in " + sys.argv[1])
    links = list(dict.fromkeys(r["link"] for r in rows))
    datasets = list(dict.fromkeys(r["data"] for r in rows))
    med = medians(rows)
    md = table(med, paper, links, datasets, sys.argv[5], generated)
    open(sys.argv[3], "w").write(md)
    open(sys.argv[4], "w").write(svg(med, paper, links, datasets[0], generated))
    print(md)


if __name__ == "__main__":
    main()
