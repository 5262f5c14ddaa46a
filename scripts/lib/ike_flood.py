#!/usr/bin/env python3
"""The flood and the measurements of scripts/ci/ike-flood.sh (docs/ike-dos.md).

  ike_flood.py send --dst IP --count N --rate R [--src-net 10.94.0.0/16] [--exclude 10.94.240.0/20]
      N well-formed IKE_SA_INIT requests (aes128gcm16-prfsha256-x25519: SA, KE, Ni), each with
      its own random SPIi, from a random source address of --src-net outside --exclude (raw
      socket, IP_HDRINCL: the source is spoofed), at R a second at most; prints one JSON line
      {"sent", "errors", "seconds"}.
  ike_flood.py sample --pid PID --control SOCK --ipsec BIN --stats FILE --until FILE --out FILE
      every 0.5 s until FILE exists: tunneld's VmRSS, `ipsec ike list --json` (answered or
      not, how long it took, the half-open SAs it lists) and the stats file's IKE counters;
      one JSON line a sample.
  ike_flood.py report --samples FILE --flood FILE --connect SECONDS --retransmits N ...
      the figures table; exits 1 (with the reasons) when a check fails.
"""
import argparse
import ipaddress
import json
import os
import socket
import struct
import subprocess
import sys
import time


def ike_sa_init(spi: bytes, ke: bytes, ni: bytes) -> bytes:
    """HDR, SA(aes128gcm16-prfsha256-x25519), KE(31), Ni: RFC 7296 3.1-3.9."""
    # transforms: ENCR_AES_GCM_16 (20) with key length 128, PRF_HMAC_SHA2_256 (5), DH 31
    t_encr = struct.pack("!BBHBBH", 3, 0, 12, 1, 0, 20) + struct.pack("!HH", 0x800E, 128)
    t_prf = struct.pack("!BBHBBH", 3, 0, 8, 2, 0, 5)
    t_dh = struct.pack("!BBHBBH", 0, 0, 8, 4, 0, 31)
    transforms = t_encr + t_prf + t_dh
    proposal = struct.pack("!BBHBBBB", 0, 0, 8 + len(transforms), 1, 1, 0, 3) + transforms
    sa = struct.pack("!BBH", 34, 0, 4 + len(proposal)) + proposal  # next: KE
    kep = struct.pack("!BBHHH", 40, 0, 8 + len(ke), 31, 0) + ke  # next: Nonce
    nonce = struct.pack("!BBH", 0, 0, 4 + len(ni)) + ni
    body = sa + kep + nonce
    hdr = spi + bytes(8) + struct.pack("!BBBBII", 33, 0x20, 34, 0x08, 0, 28 + len(body))
    return hdr + body


def send(a):
    net = ipaddress.ip_network(a.src_net)
    excl = ipaddress.ip_network(a.exclude) if a.exclude else None
    base, size = int(net.network_address), net.num_addresses
    dst = socket.inet_aton(a.dst)
    ike = bytearray(ike_sa_init(bytes(8), os.urandom(32), os.urandom(32)))
    udp_len = 8 + len(ike)
    # IPv4 header: the kernel fills in the checksum and the ID (IP_HDRINCL); UDP checksum 0
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0, 64, 17, 0, bytes(4), dst))
    udp = bytearray(struct.pack("!HHHH", a.sport, 500, udp_len, 0))
    pkt = ip + udp + ike
    spi_at = 28
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    rnd = os.urandom(12 * 4096)
    ri = 0
    sent = errors = 0
    t0 = time.monotonic()
    deadline = t0 + a.count / a.rate + 30
    while sent + errors < a.count:
        now = time.monotonic()
        if now > deadline:
            break
        due = min(a.count, int((now - t0) * a.rate) + 1) - sent - errors
        if due <= 0:
            time.sleep(0.0005)
            continue
        for _ in range(min(due, 256)):
            if ri + 12 > len(rnd):
                rnd = os.urandom(12 * 4096)
                ri = 0
            r = rnd[ri : ri + 12]
            ri += 12
            while True:
                src = base + (int.from_bytes(r[:4], "big") % size)
                if excl is None or ipaddress.ip_address(src) not in excl:
                    break
                r = os.urandom(12)
            struct.pack_into("!I", pkt, 12, src)
            pkt[spi_at : spi_at + 8] = r[4:12]
            try:
                s.sendto(pkt, (a.dst, 0))
                sent += 1
            except OSError:
                errors += 1
    secs = time.monotonic() - t0
    print(json.dumps({"sent": sent, "errors": errors, "seconds": round(secs, 3)}), flush=True)


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def sample(a):
    with open(a.out, "a") as out:
        while not os.path.exists(a.until):
            t = time.time()
            rec = {"t": round(t, 3), "rss_kb": rss_kb(a.pid), "cpu_ticks": cpu_ticks(a.pid)}
            t1 = time.monotonic()
            try:
                p = subprocess.run(
                    [a.ipsec, "ike", "list", "--json", "--control", a.control],
                    capture_output=True,
                    text=True,
                    timeout=5,
                )
                rec["list_ok"] = p.returncode == 0
                if p.returncode == 0:
                    j = json.loads(p.stdout)
                    sas = j.get("ike_sas", [])
                    rec["ike_sas"] = len(sas)
                    rec["half_open_listed"] = sum(1 for x in sas if x.get("state") == "half-open")
                else:
                    rec["list_error"] = (p.stderr or p.stdout).strip()[-200:]
            except (subprocess.TimeoutExpired, ValueError) as e:
                rec["list_ok"] = False
                rec["list_error"] = type(e).__name__
            rec["list_ms"] = round((time.monotonic() - t1) * 1000, 1)
            try:
                with open(a.stats) as f:
                    ike = json.load(f).get("ike") or {}
                for k in ("half_open", "cookies_sent", "half_open_refused", "too_large", "ike_sas", "datagrams_dropped"):
                    if k in ike:
                        rec[k] = ike[k]
            except (OSError, ValueError):
                pass
            out.write(json.dumps(rec) + "\n")
            out.flush()
            time.sleep(max(0.0, 0.5 - (time.time() - t)))


def report(a):
    samples = [json.loads(l) for l in open(a.samples) if l.strip()]
    flood = json.loads(open(a.flood).read().strip().splitlines()[-1])
    t0, t1 = a.flood_start, a.flood_end
    before = [s for s in samples if s["t"] < t0]
    during = [s for s in samples if t0 <= s["t"] <= t1]
    after = [s for s in samples if s["t"] > t1]
    rss = lambda ss: [s["rss_kb"] for s in ss if s.get("rss_kb")]
    rss_before = max(rss(before) or [0])
    rss_peak = max(rss(during) + rss(after) or [0])
    rss_after = (rss(after) or [0])[-1]
    last = samples[-1] if samples else {}
    first = before[-1] if before else {}
    cookies = last.get("cookies_sent", 0) - first.get("cookies_sent", 0)
    half_open_peak = max([s.get("half_open", 0) for s in samples] + [s.get("half_open_listed", 0) for s in samples])
    lists = [s for s in during]
    lists_ok = sum(1 for s in lists if s.get("list_ok"))
    list_ms = max([s["list_ms"] for s in lists if s.get("list_ok")] or [0])
    secs = max(flood["seconds"], 0.001)
    hz = os.sysconf("SC_CLK_TCK")
    span = [s for s in before[-1:] + during if s.get("cpu_ticks") is not None]
    cpu = "?"
    if len(span) >= 2 and span[-1]["t"] > span[0]["t"]:
        cpu = f"{100 * (span[-1]['cpu_ticks'] - span[0]['cpu_ticks']) / hz / (span[-1]['t'] - span[0]['t']):.0f} % of a core"
    fig = [
        ("requests sent", f"{flood['sent']} in {flood['seconds']:.1f} s ({flood['sent'] / secs:.0f}/s)"),
        ("send errors", flood["errors"]),
        ("answered with a COOKIE", f"{cookies} ({cookies / secs:.0f}/s, {100 * cookies / max(flood['sent'], 1):.1f} %)"),
        ("kernel drops (tunneld's UDP 500)", a.kernel_drops),
        ("half-open SAs, peak", f"{half_open_peak} (cookie_threshold {a.cookie_threshold})"),
        ("half-open refused", last.get("half_open_refused", 0)),
        ("tunneld CPU during the flood (all threads)", cpu),
        ("tunneld VmRSS before / peak / after", f"{rss_before / 1024:.1f} / {rss_peak / 1024:.1f} / {rss_after / 1024:.1f} MB"),
        ("ipsec ike list during the flood", f"{lists_ok} of {len(lists)} answered, slowest {list_ms:.0f} ms"),
        ("charon connects during the flood", f"{a.connect:.2f} s, {a.retransmits} retransmissions"),
        ("pings over the existing tunnel", f"{a.pings_sent} sent, {a.pings_lost} lost"),
    ]
    w = max(len(k) for k, _ in fig)
    print(f"{'figure':<{w}}  value")
    for k, v in fig:
        print(f"{k:<{w}}  {v}")
    why = []
    if a.connect < 0:
        why.append("charon did not connect during the flood")
    if cookies <= 0:
        why.append("no COOKIE sent")
    if half_open_peak > a.cookie_threshold + a.half_open_margin:
        why.append(f"half-open peak {half_open_peak} > cookie_threshold {a.cookie_threshold} + {a.half_open_margin}")
    if not lists or lists_ok != len(lists):
        why.append(f"ipsec ike list answered {lists_ok} of {len(lists)} times during the flood")
    if rss_peak - rss_before > a.rss_margin_mb * 1024:
        why.append(f"VmRSS grew {(rss_peak - rss_before) / 1024:.1f} MB (> {a.rss_margin_mb} MB)")
    if a.pings_lost != 0 or a.pings_sent == 0:
        why.append(f"{a.pings_lost} of {a.pings_sent} pings lost over the existing tunnel")
    if flood["sent"] < 0.95 * a.expected:
        why.append(f"the flooder sent {flood['sent']} of {a.expected}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({k: str(v) for k, v in fig}, f)
    if why:
        for w_ in why:
            print(f"FAIL: {w_}", file=sys.stderr)
        sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--rate", type=float, required=True)
    s.add_argument("--src-net", default="10.94.0.0/16")
    s.add_argument("--exclude", default="10.94.240.0/20")
    s.add_argument("--sport", type=int, default=500)
    m = sub.add_parser("sample")
    for k in ("--pid", "--control", "--ipsec", "--stats", "--until", "--out"):
        m.add_argument(k, required=True)
    r = sub.add_parser("report")
    r.add_argument("--samples", required=True)
    r.add_argument("--flood", required=True)
    r.add_argument("--flood-start", type=float, required=True)
    r.add_argument("--flood-end", type=float, required=True)
    r.add_argument("--expected", type=int, required=True)
    r.add_argument("--connect", type=float, required=True)
    r.add_argument("--retransmits", type=int, required=True)
    r.add_argument("--pings-sent", type=int, required=True)
    r.add_argument("--pings-lost", type=int, required=True)
    r.add_argument("--kernel-drops", default="?")
    r.add_argument("--cookie-threshold", type=int, default=30)
    r.add_argument("--half-open-margin", type=int, default=5)
    r.add_argument("--rss-margin-mb", type=float, default=8)
    r.add_argument("--json-out")
    a = p.parse_args()
    {"send": send, "sample": sample, "report": report}[a.cmd](a)


if __name__ == "__main__":
    main()
