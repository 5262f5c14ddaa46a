#!/usr/bin/env python3
"""ESP in UDP (RFC 3948) against scapy (an independent implementation), for netns-test.sh.

  decrypt PCAP CONFIG --frames N   every UDP/4500 ESP frame of PCAP (a capture on the veth)
                                   is decrypted by scapy with the keys of the tunneld TOML
                                   CONFIG and holds an ICMP/ICMPv6 echo; exactly N frames
  inject CONFIG --sa NAME --src A --dst B --count N --seq-from S
                                   scapy seals N ICMP echo requests (10.100.0.1 -> .2) with
                                   SA NAME as IP()/UDP(sport=4500, dport=4500)/ESP and sends
                                   them (raw socket; run in A's namespace); prints N

Only AES-GCM with a 16-byte ICV and AES-CBC + HMAC SHA-1/SHA-256 SAs are handled.
"""

from __future__ import annotations

import argparse
import sys
import tomllib

from scapy.all import ICMP, IP, UDP, IPv6, ICMPv6EchoReply, ICMPv6EchoRequest, Raw, rdpcap, send  # noqa: F401
from scapy.layers.ipsec import ESP, SecurityAssociation


def key(s: str) -> bytes:
    return bytes.fromhex(s[2:] if s.startswith("0x") else s)


def sas(config: str) -> dict:
    with open(config, "rb") as f:
        cfg = tomllib.load(f)
    out = {}
    for sa in cfg.get("sa", []):
        if sa.get("proto") != "esp":
            continue
        kw = dict(spi=sa["spi"], tunnel_header=IP(src=sa["src"], dst=sa["dst"]),
                  nat_t_header=UDP(sport=4500, dport=4500))
        if "aead" in sa:
            if sa["aead"]["alg"] != "rfc4106(gcm(aes))" or sa["aead"].get("icv", 128) != 128:
                raise SystemExit(f"{sa['name']}: only AES-GCM with a 16-byte ICV is handled")
            kw.update(crypt_algo="AES-GCM", crypt_key=key(sa["aead"]["key"]), auth_algo="NULL")
        else:
            auth = {"hmac(sha1)": "HMAC-SHA1-96", "hmac(sha256)": "SHA2-256-128"}[sa["auth"]["alg"]]
            kw.update(crypt_algo="AES-CBC", crypt_key=key(sa["enc"]["key"]), auth_algo=auth,
                      auth_key=key(sa["auth"]["key"]))
        out[sa["spi"]] = (sa["name"], SecurityAssociation(ESP, **kw))
    return out


def decrypt(a: argparse.Namespace) -> None:
    table = sas(a.config)
    n, bad, seen = 0, [], {}
    for i, p in enumerate(rdpcap(a.pcap), 1):
        if IP not in p or UDP not in p or 4500 not in (p[UDP].sport, p[UDP].dport):
            continue
        payload = bytes(p[UDP].payload)
        if len(payload) <= 1 or payload[:4] == b"\0\0\0\0":
            continue  # a NAT-keepalive or non-ESP
        ip = IP(bytes(p[IP]))
        spi = int.from_bytes(payload[:4], "big")
        if spi not in table:
            bad.append(f"frame {i}: SPI {spi:#x} not in {a.config}")
            continue
        name, sa = table[spi]
        try:
            inner = sa.decrypt(ip)
        except Exception as e:  # noqa: BLE001 (report any failure of the oracle)
            bad.append(f"frame {i}: scapy could not decrypt it: {type(e).__name__}: {e}")
            continue
        echo = (IP in inner and ICMP in inner and inner[ICMP].type in (0, 8)) or \
            (IPv6 in inner and (ICMPv6EchoRequest in inner or ICMPv6EchoReply in inner))
        if not echo:
            bad.append(f"frame {i}: decrypted, but not an echo request/reply: {inner.summary()}")
        n += 1
        seen[name] = seen.get(name, 0) + 1
    if n != a.frames:
        bad.append(f"{n} ESP-in-UDP frames, expected {a.frames}")
    if bad:
        print("FAILED (scapy ESP-in-UDP check):\n  " + "\n  ".join(bad[:20]), file=sys.stderr)
        sys.exit(1)
    print(f"scapy: {n} ESP-in-UDP frames decrypted ({', '.join(f'{k}: {v}' for k, v in sorted(seen.items()))})")


def inject(a: argparse.Namespace) -> None:
    table = {name: sa for name, sa in sas(a.config).values()}
    sa = table[a.sa]
    pkts = []
    for i in range(a.count):
        inner = IP(src="10.100.0.1", dst="10.100.0.2") / ICMP(type=8, id=0x5ca9, seq=i) / Raw(b"scapy" * 8)
        wire = sa.encrypt(inner, seq_num=a.seq_from + i)
        wire[IP].src, wire[IP].dst = a.src, a.dst  # the underlay addresses (NAT test: rewritten)
        pkts.append(IP(bytes(wire)))
    send(pkts, verbose=False)
    print(a.count)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("decrypt")
    p.add_argument("pcap")
    p.add_argument("config")
    p.add_argument("--frames", type=int, required=True)
    p.set_defaults(fn=decrypt)
    p = sub.add_parser("inject")
    p.add_argument("config")
    p.add_argument("--sa", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--seq-from", type=int, default=1000)
    p.set_defaults(fn=inject)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
