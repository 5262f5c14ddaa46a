#!/usr/bin/env python3
"""Writes a small LINKTYPE_RAW capture of IPv4 and IPv6 UDP packets (standard library only),
or with --compare A B checks that two captures hold the same packets.

    make_pcap.py OUT [V4SRC V4DST V6SRC V6DST]   (default 10.0.0.1 10.0.0.2 2001:db8::1 2001:db8::2)
"""
import ipaddress
import struct
import sys

ADDRS = sys.argv[2:6] if len(sys.argv) >= 6 else ["10.0.0.1", "10.0.0.2", "2001:db8::1", "2001:db8::2"]
V4SRC, V4DST, V6SRC, V6DST = (ipaddress.ip_address(a).packed for a in ADDRS)


def csum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def v4(i: int) -> bytes:
    payload = (b"hello, ipsec %d " % i) * (i + 1)
    udp = struct.pack("!HHHH", 4000 + i, 5000, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i, 0x4000, 64, 17, 0,
                      V4SRC, V4DST)
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    return hdr + udp


def v6(i: int) -> bytes:
    payload = b"v6 payload %d" % i
    udp = struct.pack("!HHHH", 4000 + i, 5000, 8 + len(payload), 0) + payload
    return struct.pack("!IHBB", 6 << 28, len(udp), 17, 64) + V6SRC + V6DST + udp


def read(path):
    data = open(path, "rb").read()
    off, out = 24, []
    while off < len(data):
        _, _, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


if sys.argv[1] == "--compare":
    a, b = read(sys.argv[2]), read(sys.argv[3])
    ok = a == b
    print(f"{len(a)} packets in, {len(b)} out: round trip {'exact' if ok else 'DIFFERS'}")
    sys.exit(0 if ok else 1)

pkts = [v4(i) for i in range(4)] + [v6(i) for i in range(2)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
    for n, p in enumerate(pkts):
        f.write(struct.pack("<IIII", 1700000000 + n, 0, len(p), len(p)))
        f.write(p)
