#!/usr/bin/env python3
"""Helpers for scripts/ci/netns-test.sh (standard library only; run as root).

  inject   send bad packets to a host's underlay address: ESP with unknown SPIs, ESP with a
           real SPI and a wrong ICV, truncated ESP, and a replay of a captured ESP packet
  expect   check expressions over two (or, with --c, three) tunneld stats files (retrying
           while the daemons' once-a-second stats catch up), e.g.
           "A.sas.esp_ab.outbound.packets == 12"
  esp      decrypt a capture with tshark and check every ESP frame's ICV and inner packet
  rawdrops the drops the kernel counted on this namespace's raw sockets (/proc/net/raw, raw6)
  uat      an SA of a tunneld TOML config as a Wireshark esp_sa entry (for `esp --uat`)
  count    frames of a capture that match a tshark display filter
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Iterator, List, Tuple

# ---- captures ---------------------------------------------------------------------------


def pcap_ipv4(path: str) -> Iterator[bytes]:
    """The IPv4 packets of a classic pcap file with Ethernet (1) or raw IP (101) frames."""
    return pcap_ip(path, 4)


def pcap_ipv6(path: str) -> Iterator[bytes]:
    """The IPv6 packets of a classic pcap file with Ethernet (1) or raw IP (101) frames."""
    return pcap_ip(path, 6)


def pcap_ip(path: str, version: int) -> Iterator[bytes]:
    """The IP packets of one version of a classic pcap file (Ethernet or raw IP frames)."""
    ethertype = b"\x08\x00" if version == 4 else b"\x86\xdd"
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        raise SystemExit(f"{path}: not a classic pcap file (write captures with -F pcap)")
    linktype = struct.unpack(end + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if linktype == 1:
            if len(frame) < 14 or frame[12:14] != ethertype:
                continue
            frame = frame[14:]
        elif linktype != 101:
            raise SystemExit(f"{path}: link type {linktype} not handled")
        if frame and frame[0] >> 4 == version:
            yield frame


# ---- inject -----------------------------------------------------------------------------


def inject(a: argparse.Namespace) -> None:
    dst = a.dst
    rnd = os.urandom
    sent = {"unknown_spi": 0, "bad_icv": 0, "truncated": 0, "replayed": 0}
    esp = socket.socket(socket.AF_INET, socket.SOCK_RAW, 50)  # the kernel writes the IP header
    try:
        for i in range(a.unknown_spi):
            spi = 0xDEAD0000 + i  # installed SPIs in the examples are small
            esp.sendto(struct.pack(">II", spi, 1) + rnd(16 + 37 * i), (dst, 0))
            sent["unknown_spi"] += 1
        for i in range(a.bad_icv):
            # A real SPI, a sequence number far ahead of the window (so the replay check
            # passes), random "ciphertext": only the ICV can reject it.
            esp.sendto(struct.pack(">II", a.spi, 0x7FFF0000 + i) + rnd(96), (dst, 0))
            sent["bad_icv"] += 1
        for _ in range(a.truncated):
            esp.sendto(rnd(3), (dst, 0))
            sent["truncated"] += 1
    finally:
        esp.close()
    if a.replay:
        pkt = next((p for p in pcap_ipv4(a.replay)
                    if p[9] == 50 and socket.inet_ntoa(p[12:16]) == a.replay_src
                    and socket.inet_ntoa(p[16:20]) == dst
                    and struct.unpack(">I", p[(p[0] & 15) * 4:(p[0] & 15) * 4 + 4])[0] == a.spi), None)
        if pkt is None:
            raise SystemExit(f"inject: no ESP packet {a.replay_src} -> {dst} with SPI {a.spi:#x} in {a.replay}")
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)  # header as captured
        try:
            raw.sendto(pkt, (dst, 0))
        finally:
            raw.close()
        sent["replayed"] += 1
    print(json.dumps(sent))


# ---- expect -----------------------------------------------------------------------------


class View(dict):
    """A stats file as attributes: A.sas.esp_ab.outbound.packets ('-' in names become '_')."""

    def __getattr__(self, name: str):
        try:
            return wrap(self[name])
        except KeyError:
            raise AttributeError(f"no `{name}` (have: {', '.join(sorted(self))})") from None


def wrap(v):
    return View(v) if isinstance(v, dict) else v


def load(path: str) -> View:
    with open(path) as f:
        s = json.load(f)
    v = View(s)
    v["sas"] = {sa["name"].replace("-", "_"): sa for sa in s["engine"]["sas"]}
    return v


def expect(a: argparse.Namespace) -> None:
    deadline = time.monotonic() + a.wait
    while True:
        failed: List[Tuple[str, str]] = []
        try:
            env = {"A": load(a.a), "B": load(a.b)}
            if a.c:
                env["C"] = load(a.c)
            for e in a.exprs:
                try:
                    if not eval(e, {"__builtins__": {"sum": sum, "len": len, "all": all, "any": any}}, env):  # noqa: S307 (test expressions)
                        failed.append((e, "false"))
                except Exception as x:  # noqa: BLE001
                    failed.append((e, f"{type(x).__name__}: {x}"))
        except (OSError, ValueError) as x:
            failed = [("reading the stats files", str(x))]
        if not failed:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    print(f"FAILED ({a.what}):", file=sys.stderr)
    for e, why in failed:
        print(f"  {e}   [{why}]", file=sys.stderr)
    for name, path in (("A", a.a), ("B", a.b)) + ((("C", a.c),) if a.c else ()):
        try:
            s = load(path)
            sas = {k: {"in": v["inbound"]["packets"], "out": v["outbound"]["packets"],
                       "in_drops": {r: n for r, n in v["inbound"]["drops"].items() if n},
                       "out_drops": {r: n for r, n in v["outbound"]["drops"].items() if n}}
                   for k, v in s["sas"].items()}
            print(f"  {name}: daemon={dict((k, v) for k, v in s['daemon'].items() if v)} "
                  f"in_drops={s['engine']['inbound_drops']} sas={sas}", file=sys.stderr)
        except (OSError, ValueError) as x:
            print(f"  {name}: {x}", file=sys.stderr)
    sys.exit(1)


# ---- esp (tshark) -----------------------------------------------------------------------


def esp(a: argparse.Namespace) -> None:
    cfg = tempfile.mkdtemp(prefix="ws-config-")  # an empty profile: no user esp_sa file
    cmd = ["tshark", "-n", "-r", a.pcap, "-o", "esp.enable_encryption_decode:TRUE",
           "-o", "esp.enable_authentication_check:TRUE"]
    for u in a.uat:
        cmd += ["-o", "uat:esp_sa:" + u]
    cmd += ["-Y", "esp", "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"]
    fields = ["ip.src", "esp.spi", "esp.sequence", "esp.icv_good", "esp.icv_bad", "icmp.type",
              "icmpv6.type", "ipcomp.cpi"]
    for f in fields:
        cmd += ["-e", f]
    env = dict(os.environ, WIRESHARK_CONFIG_DIR=cfg)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    if p.returncode != 0:
        raise SystemExit(f"tshark failed ({p.returncode}): {p.stderr.strip()}")
    rows = [dict(zip(fields, line.split("\t"))) for line in p.stdout.splitlines() if line.strip()]
    bad = []
    for i, r in enumerate(rows, 1):
        if (r["esp.icv_good"], r["esp.icv_bad"]) != ("1", "0"):
            bad.append(f"frame {i}: ICV not reported good: {r}")
        inner = r["icmp.type"] in ("0", "8") or r["icmpv6.type"] in ("128", "129") or r["ipcomp.cpi"]
        if not inner:
            bad.append(f"frame {i}: decrypted payload is not an echo request/reply (or IPComp): {r}")
    if len(rows) != a.frames:
        bad.append(f"{len(rows)} ESP frames in the capture, expected {a.frames}")
    if bad:
        print("FAILED (tshark ESP check):\n  " + "\n  ".join(bad[:20]), file=sys.stderr)
        sys.exit(1)
    spis = sorted({r["esp.spi"] for r in rows})
    print(f"tshark: {len(rows)} ESP frames (SPIs {', '.join(spis)}) decrypted, every ICV good")


# ---- uat, count --------------------------------------------------------------------------

WS_ENC = {"cbc(aes)": "AES-CBC [RFC3602]", "cipher_null": "NULL"}
WS_AUTH = {("hmac(sha1)", 96): "HMAC-SHA-1-96 [RFC2404]", ("hmac(sha256)", 128): "HMAC-SHA-256-128 [RFC4868]",
           ("hmac(md5)", 96): "HMAC-MD5-96 [RFC2403]"}
WS_AEAD = {("rfc4106(gcm(aes))", 128): "AES-GCM with 16 octet ICV [RFC4106]",
           ("rfc4106(gcm(aes))", 96): "AES-GCM with 12 octet ICV [RFC4106]",
           ("rfc4106(gcm(aes))", 64): "AES-GCM with 8 octet ICV [RFC4106]"}
DEFAULT_TRUNC = {"hmac(sha1)": 96, "hmac(md5)": 96, "hmac(sha256)": 128}


def uat(a: argparse.Namespace) -> None:
    import tomllib
    with open(a.config, "rb") as f:
        cfg = tomllib.load(f)
    sa = next((s for s in cfg.get("sa", []) if s["name"] == a.sa), None)
    if sa is None or sa.get("proto") != "esp" or "xfrm" in sa:
        raise SystemExit(f"uat: no ESP SA `{a.sa}` given field by field in {a.config}")
    if "aead" in sa:
        enc = WS_AEAD[(sa["aead"]["alg"], sa["aead"].get("icv", 128))]
        ekey, auth, akey = sa["aead"]["key"], "NULL", ""
    else:
        enc, ekey = WS_ENC[sa["enc"]["alg"]], sa["enc"].get("key", "")
        alg = sa["auth"]["alg"]
        auth = WS_AUTH[(alg, sa["auth"].get("trunc", DEFAULT_TRUNC[alg]))]
        akey = sa["auth"]["key"]
    family = "IPv6" if ":" in sa["src"] else "IPv4"
    fields = [family, sa["src"], sa["dst"], f"0x{sa['spi']:08x}", enc, ekey, auth, akey]
    print(",".join(f'"{x}"' for x in fields))


def count(a: argparse.Namespace) -> None:
    p = subprocess.run(["tshark", "-n", "-r", a.pcap, "-Y", a.filter, "-T", "fields", "-e", "frame.number"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SystemExit(f"tshark failed ({p.returncode}): {p.stderr.strip()}")
    n = len([x for x in p.stdout.splitlines() if x.strip()])
    if n != a.frames:
        print(f"FAILED: {n} frames match `{a.filter}` in {a.pcap}, expected {a.frames}", file=sys.stderr)
        sys.exit(1)
    print(f"tshark: {n} frames match `{a.filter}`")


# ---- rawdrops ---------------------------------------------------------------------------


def rawdrops(_: argparse.Namespace) -> None:
    total = 0
    for path in ("/proc/net/raw", "/proc/net/raw6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    total += int(line.split()[-1])
        except FileNotFoundError:  # no IPv6 in this kernel
            pass
    print(total)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inject")
    p.add_argument("--dst", required=True)
    p.add_argument("--spi", type=lambda s: int(s, 0), required=True)
    p.add_argument("--unknown-spi", type=int, default=0)
    p.add_argument("--bad-icv", type=int, default=0)
    p.add_argument("--truncated", type=int, default=0)
    p.add_argument("--replay", metavar="PCAP")
    p.add_argument("--replay-src")
    p.set_defaults(fn=inject)
    p = sub.add_parser("expect")
    p.add_argument("--what", default="counters")
    p.add_argument("--wait", type=float, default=4.0)
    p.add_argument("--c", metavar="STATS", help="a third stats file, C in the expressions")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("exprs", nargs="+")
    p.set_defaults(fn=expect)
    p = sub.add_parser("esp")
    p.add_argument("pcap")
    p.add_argument("--uat", action="append", default=[])
    p.add_argument("--frames", type=int, required=True)
    p.set_defaults(fn=esp)
    p = sub.add_parser("rawdrops")
    p.set_defaults(fn=rawdrops)
    p = sub.add_parser("uat")
    p.add_argument("config")
    p.add_argument("sa")
    p.set_defaults(fn=uat)
    p = sub.add_parser("count")
    p.add_argument("pcap")
    p.add_argument("filter")
    p.add_argument("--frames", type=int, required=True)
    p.set_defaults(fn=count)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
