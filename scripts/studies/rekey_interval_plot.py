#!/usr/bin/env python3
"""Plots scripts/studies/rekey-interval-study.sh's summary CSV as an SVG, with the figures of Shaikh &
Al-Khayatt, "A Performance Study of IPSec Protocol", Table 6 (throughput against the key
update interval) beside them. No plotting library needed (this machine has neither gnuplot nor
matplotlib): the SVG is written by hand.

    python3 scripts/studies/rekey_interval_plot.py summary.csv paper.csv out.svg

summary.csv: peer,interval_mb,runs,median_mbps,median_seconds,median_rekeys,median_retransmits,...
(interval_mb "never" for no rekey). paper.csv: key_update_interval_kb,throughput_kbps.

Left panel: the median throughput (Mbit/s) of each peer pair against the interval (log axis,
"never" at the right end). Right panel: each series relative to its own value at the longest
interval (ours: "never"; the paper's: 200,000 KB, its longest), so the paper's 3 Mbit/s link and
ours fit one axis.
"""
import csv
import math
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def load(summary, paper):
    series = {}
    for r in csv.DictReader(open(summary)):
        x = r["interval_mb"]
        series.setdefault(r["peer"], []).append((None if x == "never" else float(x), float(r["median_mbps"])))
    ref = []
    for r in csv.DictReader(open(paper)):
        ref.append((float(r["key_update_interval_kb"]) / 1000.0, float(r["throughput_kbps"]) / 1000.0))
    return series, ref


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: rekey_interval_plot.py SUMMARY.csv PAPER.csv OUT.svg")
    series, ref = load(sys.argv[1], sys.argv[2])
    xs = [x for s in series.values() for x, _ in s if x] + [x for x, _ in ref]
    if not xs:
        xs = [10, 200]
    lo, hi = math.log10(min(xs) / 1.5), math.log10(max(xs) * 1.5)
    never_x = hi + (hi - lo) * 0.15  # where "never" sits
    W, H, M = 460, 340, 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>']

    def panel(ox, title, ylabel, data, ymax):
        pw, ph = W - M - 20, H - 2 * M
        X = lambda v: ox + M + (((never_x if v is None else math.log10(v)) - lo) / (never_x + (hi - lo) * 0.05 - lo)) * pw
        Y = lambda v: M + ph - (v / ymax) * ph
        out.append(f'<text x="{ox + W / 2}" y="20" text-anchor="middle" font-size="13">{title}</text>')
        out.append(f'<rect x="{ox + M}" y="{M}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
        for i in range(6):
            v = ymax * i / 5
            out.append(f'<line x1="{ox + M - 4}" y1="{Y(v):.1f}" x2="{ox + M}" y2="{Y(v):.1f}" stroke="black"/>')
            out.append(f'<text x="{ox + M - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
        for v in (10, 20, 50, 100, 200, 500, 1000):
            if lo <= math.log10(v) <= hi:
                out.append(f'<line x1="{X(v):.1f}" y1="{M + ph}" x2="{X(v):.1f}" y2="{M + ph + 4}" stroke="black"/>')
                out.append(f'<text x="{X(v):.1f}" y="{M + ph + 16}" text-anchor="middle">{v}</text>')
        out.append(f'<text x="{X(None):.1f}" y="{M + ph + 16}" text-anchor="middle">never</text>')
        out.append(f'<text x="{ox + M + pw / 2}" y="{H - 18}" text-anchor="middle">child SA rekeyed every ... MB</text>')
        out.append(f'<text transform="translate({ox + 14},{M + ph / 2}) rotate(-90)" text-anchor="middle">{ylabel}</text>')
        for i, (name, pts, dash) in enumerate(data):
            c = COLOURS[i % len(COLOURS)]
            pts = sorted(pts, key=lambda p: float("inf") if p[0] is None else p[0])
            path = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
            for x, y in pts:
                out.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="{c}"/>')
            out.append(f'<text x="{ox + M + 8}" y="{M + 14 + 14 * i}" fill="{c}">{name}</text>')

    ours = [(f"{p} (median)", pts, "") for p, pts in sorted(series.items())]
    ymax = max([y for _, pts, _ in ours for _, y in pts] + [1]) * 1.15
    panel(0, "throughput (this machine)", "Mbit/s", ours, ymax)
    rel = []
    for name, pts, dash in ours:
        base = next((y for x, y in pts if x is None), max(pts, key=lambda p: p[0] or 0)[1])
        rel.append((name, [(x, 100 * y / base) for x, y in pts], dash))
    if ref:
        base = max(ref)[1]
        rel.append(("Shaikh & Al-Khayatt Table 6", [(x, 100 * y / base) for x, y in ref], ' stroke-dasharray="5,3"'))
    ymax = max([y for _, pts, _ in rel for _, y in pts] + [100]) * 1.1
    panel(W, "relative to the longest interval", "% of never (paper: of 200 MB)", rel, ymax)
    out.append("</svg>")
    open(sys.argv[3], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
