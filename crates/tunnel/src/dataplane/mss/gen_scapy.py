#!/usr/bin/env python3
"""TCP SYNs made by scapy for the MSS clamping tests (crates/tunnel/src/dataplane/mss.rs).

Prints one line per case: `name limit-v4 limit-v6 input-hex expected-hex`, where
expected is the packet scapy builds with the MSS option's value lowered to the limit of its
IP version (when it is above it), the TCP checksum computed by scapy, or the input itself for
a packet clamping must leave alone. The limits are those of a TUN MTU of 1400:
1400 - 20 (IPv4) - 20 (TCP) and 1400 - 40 (IPv6) - 20.

Regenerate:  python3 crates/tunnel/src/dataplane/mss/gen_scapy.py > crates/tunnel/src/dataplane/mss/scapy.txt
(scripts/test.sh regenerates it and compares.)
"""
from scapy.all import IP, IPv6, IPv6ExtHdrHopByHop, TCP, UDP, IPOption_Router_Alert, raw

MTU = 1400
V4, V6 = MTU - 20 - 20, MTU - 40 - 20

TYPICAL = [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (12345, 0)), ("NOP", None), ("WScale", 7)]


def v4(opts, flags="S", **ip):
    return lambda o: IP(src="10.1.0.2", dst="10.2.0.9", id=7, **ip) / TCP(
        sport=40000, dport=443, seq=1000, ack=(2000 if "A" in flags else 0), flags=flags, options=o(opts)
    )


def v6(opts, flags="S", ext=False):
    def build(o):
        ip = IPv6(src="fd00:1::2", dst="fd00:2::9")
        if ext:
            ip = ip / IPv6ExtHdrHopByHop()
        return ip / TCP(sport=40000, dport=443, seq=1000, ack=(2000 if "A" in flags else 0), flags=flags, options=o(opts))
    return build


def clamp(limit):
    return lambda opts: [(k, min(v, limit)) if k == "MSS" else (k, v) for (k, v) in opts]


def same(opts):
    return opts


CASES = [
    # name, builder, limit that applies (None: left alone)
    ("v4-syn", v4(TYPICAL), V4),
    ("v4-synack", v4(TYPICAL, flags="SA"), V4),
    ("v6-syn", v6([("MSS", 1440), ("SAckOK", b""), ("WScale", 7)]), V6),
    ("v6-synack", v6([("MSS", 8940)], flags="SA"), V6),
    ("v4-syn-mss-below", v4([("MSS", 1200), ("NOP", None), ("WScale", 2)]), V4),
    ("v4-syn-mss-equal", v4([("MSS", V4)]), V4),
    # The MSS value at an odd offset of the TCP header (one NOP first): its bytes are summed swapped.
    ("v4-syn-odd-offset", v4([("NOP", None), ("MSS", 65495), ("NOP", None), ("NOP", None), ("NOP", None)]), V4),
    ("v6-syn-odd-offset", v6([("NOP", None), ("MSS", 1500), ("EOL", None), ("EOL", None), ("EOL", None)]), V6),
    ("v4-ip-options", v4(TYPICAL, options=[IPOption_Router_Alert()]), V4),
    ("v4-syn-mss-last", v4([("SAckOK", b""), ("Timestamp", (1, 2)), ("NOP", None), ("NOP", None), ("MSS", 9000)]), V4),
    ("v4-syn-no-mss", v4([("SAckOK", b""), ("WScale", 7)]), None),
    ("v4-ack-with-mss", v4([("MSS", 1460)], flags="A"), None),
    ("v6-hop-by-hop", v6([("MSS", 1440)], ext=True), None),
    ("v4-eol-before-mss", v4([("EOL", None), ("MSS", 1460), ("NOP", None), ("NOP", None), ("NOP", None)]), None),
]


def main():
    for name, build, limit in CASES:
        pkt = build(same)
        exp = build(clamp(limit)) if limit is not None else pkt
        print(name, V4, V6, raw(pkt).hex(), raw(exp).hex())
    # A first fragment (MF set): not a whole segment, left alone.
    frag = IP(src="10.1.0.2", dst="10.2.0.9", id=8, flags="MF") / TCP(sport=1, dport=2, flags="S", options=TYPICAL)
    print("v4-fragment", V4, V6, raw(frag).hex(), raw(frag).hex())
    # Malformed option lists (an option of length 0, one running past the header): left alone.
    for name, opts in [("v4-opt-len-0", b"\x08\x00\x02\x04\x05\xb4\x01\x01"), ("v4-opt-past-end", b"\x02\x04\x05\xb4\x08\x0a\x00\x00"), ("v4-mss-len-3", b"\x02\x03\x05\xb4\x01\x01\x01\x01")]:
        p = raw(IP(src="10.1.0.2", dst="10.2.0.9", id=9) / TCP(sport=1, dport=2, flags="S", dataofs=7, options=[]) / opts)
        print(name, V4, V6, p.hex(), p.hex())
    # Not TCP.
    u = raw(IP(src="10.1.0.2", dst="10.2.0.9", id=10) / UDP(sport=1, dport=2) / b"\x02\x04\x05\xb4")
    print("v4-udp", V4, V6, u.hex(), u.hex())


if __name__ == "__main__":
    main()
