#!/usr/bin/env python3
"""Generates crates/ah/tests/vectors/scapy.txt: AH known answers made by scapy.

    python3 crates/ah/tests/vectors/gen_scapy.py > crates/ah/tests/vectors/scapy.txt

Tested with scapy 2.6.1 and cryptography 48. Deterministic (no random input).

Each block is one case, `key value` per line:
  name, alg, key, spi, mode (transport|tunnel), tsrc/tdst (tunnel endpoints), seq (full 64-bit
  sequence number), esn (0|1), input (the IP packet given to seal),
  sealed (scapy's `SecurityAssociation(AH, ...).encrypt(input, seq_num=..)`),
  rfc (only where scapy departs from RFC 4302: the RFC answer, whose ICV is computed by the
      independent RFC 4302 implementation below; our seal must give this one),
  received (the packet as the receiver gets it after routers changed what they may change;
      our open must accept it, and so must scapy's decrypt where it follows the RFC).

Besides scapy, this file holds an independent, direct implementation of RFC 4302 3.3.3.1
(`rfc_icv`). For every case where scapy and the RFC agree it checks that scapy's ICV equals
the one `rfc_icv` computes, so both sources back each vector.
"""
import hashlib
import hmac
import struct

from scapy.all import IP, TCP, UDP, Raw, bind_layers, raw, split_layers
from scapy.layers.inet import (IPOption_LSRR, IPOption_Router_Alert, IPOption_RR,
                               IPOption_Security, IPOption_Timestamp)
from scapy.layers.inet6 import (HBHOptUnknown, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop,
                                IPv6ExtHdrRouting, RouterAlert)
from scapy.layers.ipsec import AH, ESP, IPSecIntegrityError, SecurityAssociation

ALGS = {
    "md5": ("HMAC-MD5-96", hashlib.md5, 12, 16),
    "sha1": ("HMAC-SHA1-96", hashlib.sha1, 12, 20),
    "sha256": ("SHA2-256-128", hashlib.sha256, 16, 32),
    "sha384": ("SHA2-384-192", hashlib.sha384, 24, 48),
    "sha512": ("SHA2-512-256", hashlib.sha512, 32, 64),
}


def key_for(alg):
    n = ALGS[alg][3]
    return bytes((0x11 * (i + 1) + 7) & 0xff for i in range(n))


# ---------------------------------------------------------------------------------------
# Independent RFC 4302 ICV input (section 3.3.3.1, Appendix A)
IMMUTABLE_V4 = {0x00, 0x01, 0x82, 0x85, 0x86, 0x94, 0x95}  # whole type octets, Appendix A.1
EXT_HDRS = {0, 43, 60}


def rfc_zero_v4(h):
    h = bytearray(h)
    h[1] = 0
    h[6:8] = b"\0\0"
    h[8] = 0
    h[10:12] = b"\0\0"
    i, opts = 20, (h[0] & 15) * 4
    while i < opts:
        t = h[i]
        if t == 0:
            break
        if t == 1:
            i += 1
            continue
        ln = h[i + 1]
        if t not in IMMUTABLE_V4:
            if t in (0x83, 0x89) and h[i + 2] <= ln:  # source route not used up
                h[16:20] = h[i + ln - 4:i + ln]  # final destination
            h[i:i + ln] = bytes(ln)
        i += ln
    return bytes(h)


def rfc_zero_v6(h, ah_off):
    h = bytearray(h)
    h[0] &= 0xf0
    h[1:4] = b"\0\0\0"
    h[7] = 0
    nh, off = h[6], 40
    while off < ah_off:
        ln = (h[off + 1] + 1) * 8
        if nh in (0, 60):
            i = off + 2
            while i < off + ln:
                if h[i] == 0:
                    i += 1
                    continue
                ol = h[i + 1]
                if h[i] & 0x20:
                    h[i + 2:i + 2 + ol] = bytes(ol)
                i += 2 + ol
        elif nh == 43 and h[off + 2] in (0, 2) and h[off + 3] > 0:
            n, s = h[off + 1] // 2, h[off + 3]
            addrs = [bytes(h[off + 8 + 16 * k:off + 24 + 16 * k]) for k in range(n)]
            dst = bytes(h[24:40])
            for _ in range(s):  # what each remaining hop does (RFC 2460 section 4.4)
                k = n - s
                dst, addrs[k] = addrs[k], dst
                s -= 1
            h[24:40] = dst
            for k in range(n):
                h[off + 8 + 16 * k:off + 24 + 16 * k] = addrs[k]
            h[off + 3] = 0
        nh = h[off]
        off += ln
    return bytes(h)


def find_ah(p):
    if p[0] >> 4 == 4:
        assert p[9] == 51
        return (p[0] & 15) * 4
    nh, off = p[6], 40
    while nh != 51:
        assert nh in EXT_HDRS
        nh, off = p[off], off + (p[off + 1] + 1) * 8
    return off


def rfc_icv(alg, key, pkt, esn_hi=None):
    """The RFC 4302 ICV of the AH packet `pkt` (whose ICV field is ignored)."""
    _, h, icv_len, _ = ALGS[alg]
    off = find_ah(pkt)
    ah_len = (pkt[off + 1] + 2) * 4
    hdr = rfc_zero_v4(pkt[:off]) if pkt[0] >> 4 == 4 else rfc_zero_v6(pkt[:off], off)
    data = hdr + pkt[off:off + 12] + bytes(icv_len) + pkt[off + 12 + icv_len:off + ah_len] + pkt[off + ah_len:]
    if esn_hi is not None:
        data += struct.pack("!I", esn_hi)
    return hmac.new(key, data, h).digest()[:icv_len]


def with_icv(pkt, icv):
    off = find_ah(pkt)
    return pkt[:off + 12] + icv + pkt[off + 12 + len(icv):]


# ---------------------------------------------------------------------------------------
# Transit: what routers may do to a packet on its way
def v4_checksum(h):
    h = bytearray(h)
    h[10:12] = b"\0\0"
    s = sum(struct.unpack("!%dH" % (len(h) // 2), bytes(h)))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    h[10:12] = struct.pack("!H", ~s & 0xffff)
    return bytes(h)


def transit_v4(p, hops=2):
    p = bytearray(p)
    hl = (p[0] & 15) * 4
    p[1] = (p[1] & 0xfc) | 3  # ECN CE
    p[1] ^= 0x20  # DSCP rewritten
    p[6] |= 0x40  # DF set by a router
    p[8] -= hops
    i = 20
    while i < hl:  # record route / timestamp / source route processing
        t = p[i]
        if t == 0:
            break
        if t == 1:
            i += 1
            continue
        ln, ptr = p[i + 1], p[i + 2]
        if t == 0x07 and ptr + 3 <= ln:
            p[i + ptr - 1:i + ptr + 3] = bytes([192, 0, 2, 99])
            p[i + 2] += 4
        elif t == 0x44 and ptr + 3 <= ln:
            p[i + ptr - 1:i + ptr + 3] = struct.pack("!I", 0x01020304)
            p[i + 2] += 4
        elif t in (0x83, 0x89):
            while p[i + 2] + 3 <= ln:  # each listed hop: swap in the next address, record ours
                ptr = p[i + 2]
                nxt = bytes(p[i + ptr - 1:i + ptr + 3])
                p[i + ptr - 1:i + ptr + 3] = bytes([198, 51, 100, ptr])
                p[16:20] = nxt
                p[i + 2] += 4
        i += ln
    return v4_checksum(p[:hl]) + bytes(p[hl:])


def transit_v6(p):
    p = bytearray(p)
    p[0] = (p[0] & 0xf0) | 0x0b  # traffic class
    p[1] = 0x81
    p[2:4] = b"\x23\x45"  # flow label
    p[7] -= 3
    nh, off = p[6], 40
    while nh in EXT_HDRS:
        ln = (p[off + 1] + 1) * 8
        if nh in (0, 60):
            i = off + 2
            while i < off + ln:
                if p[i] == 0:
                    i += 1
                    continue
                ol = p[i + 1]
                if p[i] & 0x20:
                    p[i + 2:i + 2 + ol] = bytes((0xc0 + k) & 0xff for k in range(ol))
                i += 2 + ol
        elif nh == 43 and p[off + 3] > 0:
            n = p[off + 1] // 2
            while p[off + 3] > 0:
                k = n - p[off + 3]
                a = off + 8 + 16 * k
                p[24:40], p[a:a + 16] = p[a:a + 16], p[24:40]
                p[off + 3] -= 1
        nh, off = p[off], off + ln
    return bytes(p)


# ---------------------------------------------------------------------------------------
OUT = []


def emit(**kv):
    OUT.append("\n".join("%s %s" % (k, v) for k, v in kv.items()))


def outer_tos(tos):
    return (tos & 0xfc) | 2 if tos & 3 == 3 else tos


def case(name, alg, pkt, mode="transport", seq=1, esn_hi=None, tunnel=None, scapy_is_rfc=True,
         transit=None, spi=0x1000):
    auth_algo, _, icv_len, _ = ALGS[alg]
    key = key_for(alg)
    inner = raw(pkt)
    th = None
    if mode == "tunnel":
        src, dst = tunnel
        inner_v4 = inner[0] >> 4 == 4
        tos = inner[1] if inner_v4 else ((inner[0] & 15) << 4) | (inner[1] >> 4)
        if ":" in src:
            th = IPv6(src=src, dst=dst, tc=outer_tos(tos), fl=0, hlim=64)
        else:
            df = "DF" if inner_v4 and inner[6] & 0x40 else 0
            th = IP(src=src, dst=dst, tos=outer_tos(tos), id=seq & 0xffff, flags=df, ttl=64)
    sa = SecurityAssociation(AH, spi=spi, auth_algo=auth_algo, auth_key=key, tunnel_header=th)
    kw = {}
    if esn_hi is not None:
        kw = dict(esn_en=True, esn=esn_hi)
    sealed = raw(sa.encrypt(IP(inner) if inner[0] >> 4 == 4 else IPv6(inner), seq_num=seq & 0xffffffff, **kw))
    want = rfc_icv(alg, key, sealed, esn_hi)
    rfc = with_icv(sealed, want)
    if scapy_is_rfc:
        assert rfc == sealed, name + ": scapy and the independent RFC 4302 ICV disagree"
    else:
        assert rfc != sealed, name + ": expected scapy to depart from the RFC here"
    fields = dict(name=name, alg=alg, key=key.hex(), spi="%08x" % spi, mode=mode)
    if tunnel:
        fields.update(tsrc=tunnel[0], tdst=tunnel[1])
    fields.update(seq=((esn_hi or 0) << 32) | seq, esn=int(esn_hi is not None), input=inner.hex(), sealed=sealed.hex())
    if not scapy_is_rfc:
        fields["rfc"] = rfc.hex()
    def scapy_verifies(p):
        rsa = SecurityAssociation(AH, spi=spi, auth_algo=auth_algo, auth_key=key, tunnel_header=th)
        try:
            rsa.decrypt(IP(p) if p[0] >> 4 == 4 else IPv6(p), **kw)
            return True
        except IPSecIntegrityError:
            return False

    if transit:
        received = transit(rfc)
        # The RFC answer still verifies after transit (independent implementation)...
        assert rfc_icv(alg, key, received, esn_hi) == want, name + ": transit broke the RFC ICV"
        fields["received"] = received.hex()
        # ...and scapy's decrypt (whose receive side follows the RFC) accepts it too.
        assert scapy_verifies(received), name + ": scapy rejects the RFC packet after transit"
        if not scapy_is_rfc:
            # scapy's own packet does not survive the trip: the RFC is right.
            assert not scapy_verifies(transit(sealed)), name + ": scapy's own packet verified"
    emit(**fields)


def udp4(**ip):
    return IP(src="192.0.2.1", dst="192.0.2.2", id=0x1234, **ip) / UDP(sport=1234, dport=5678) / Raw(b"AH known answer")


def udp6(*ext):
    p = IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=64)
    for e in ext:
        p = p / e
    return p / UDP(sport=1234, dport=5678) / Raw(b"AH known answer v6")


# IPv4 transport, every algorithm.
for alg in ALGS:
    case("v4-transport-" + alg, alg, udp4(tos=0xb8, flags="DF", ttl=61), seq=7, transit=transit_v4)

# IPv4 options.
case("v4-router-alert", "sha1", udp4(options=[IPOption_Router_Alert()]), seq=2, transit=transit_v4)
case("v4-record-route", "sha256", udp4(options=[IPOption_RR(pointer=4, routers=["0.0.0.0", "0.0.0.0"])]),
     seq=3, transit=transit_v4)
case("v4-timestamp", "md5", udp4(options=[IPOption_Timestamp(pointer=5, flg=0, timestamp=0)]), seq=4,
     transit=transit_v4)
case("v4-security-rr-ts", "sha1",
     udp4(options=[IPOption_Security(security=0x789a, compartment=1, handling_restrictions=2,
                                     transmission_control_code=b"abc"),
                   IPOption_RR(pointer=4, routers=["0.0.0.0"]),
                   IPOption_Timestamp(pointer=5, flg=0, timestamp=0)]),
     seq=5, transit=transit_v4)
# Loose source route: scapy keeps the first hop as destination in the ICV; RFC 4302
# 3.3.3.1.1.1 wants the final destination. scapy's own packet then fails at the receiver.
case("v4-lsrr", "sha1", IP(src="192.0.2.1", dst="198.51.100.1", id=9,
                           options=[IPOption_LSRR(pointer=4, routers=["198.51.100.2", "203.0.113.7"])])
     / UDP(sport=1, dport=2) / Raw(b"source routed"),
     seq=6, scapy_is_rfc=False, transit=transit_v4)

# IPv6 transport, every algorithm (IPv6 pads the ICV to 64 bits: SHA-256, 384, 512).
for alg in ALGS:
    case("v6-transport-" + alg, alg, udp6(), seq=9, transit=transit_v6)

# IPv6 with Hop-by-Hop, Destination Options (before the Routing header: outside AH), a type 0
# Routing header with all segments left, and Destination Options after it (inside AH).
EXT = [
    IPv6ExtHdrHopByHop(options=[RouterAlert(), HBHOptUnknown(otype=0x3e, optdata=b"ab")]),
    IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x1e, optdata=b"im"), HBHOptUnknown(otype=0x3d, optdata=b"mut")]),
    IPv6ExtHdrRouting(addresses=["2001:db8::10", "2001:db8::11", "2001:db8::12"]),
    IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x3f, optdata=b"cd")]),
]
case("v6-ext-chain-rh0", "sha1", udp6(*EXT), seq=10, transit=transit_v6)
case("v6-ext-chain-rh0-sha384", "sha384", udp6(*EXT), seq=11, transit=transit_v6)
# Type 2 routing header (Mobile IPv6), one address.
case("v6-rh2", "sha256", udp6(IPv6ExtHdrRouting(type=2, addresses=["2001:db8::99"])), seq=12, transit=transit_v6)
# Routing header with one of three segments already done: scapy rotates the whole list
# (departs from RFC 4302 A.2; its own packet then fails at the receiver).
case("v6-rh0-partial", "sha1",
     udp6(IPv6ExtHdrRouting(segleft=2, addresses=["2001:db8::10", "2001:db8::11", "2001:db8::12"])),
     seq=13, scapy_is_rfc=False, transit=transit_v6)

# Tunnel mode, all four inner/outer combinations, every algorithm somewhere.
T4 = ("203.0.113.1", "203.0.113.2")
T6 = ("2001:db8:1::1", "2001:db8:2::2")
case("tunnel-4in4", "sha1", udp4(tos=0x2b, flags="DF"), mode="tunnel", tunnel=T4, seq=0x10203, transit=transit_v4)
case("tunnel-4in4-ce", "sha512", udp4(tos=0xbb), mode="tunnel", tunnel=T4, seq=20, transit=transit_v4)
case("tunnel-6in4", "sha256", udp6(), mode="tunnel", tunnel=T4, seq=21, transit=transit_v4)
case("tunnel-4in6", "sha384", udp4(tos=0x03), mode="tunnel", tunnel=T6, seq=22, transit=transit_v6)
case("tunnel-6in6", "md5", udp6(*EXT), mode="tunnel", tunnel=T6, seq=23, transit=transit_v6)
case("tunnel-6in6-sha256", "sha256", udp6(), mode="tunnel", tunnel=T6, seq=24, transit=transit_v6)

# ESN: the high 32 bits are appended to the ICV input.
case("v4-esn", "sha256", udp4(), seq=5, esn_hi=3, transit=transit_v4)
case("v6-tunnel-esn", "sha512", udp6(), mode="tunnel", tunnel=T6, seq=0xfffffff0, esn_hi=1, transit=transit_v6)

# FreeS/WAN style: ESP tunnel mode, then AH transport mode on the outer header (protocol 50).
# scapy's AuthAlgo.sign() tests `haslayer(ESP)` before `haslayer(AH)`, so on an IP/AH/ESP
# packet it signs the ESP layer instead (appending an ICV to the ESP data) and leaves the AH
# ICV zero: a scapy bug. Unbinding ESP from IP/IPv6 makes scapy treat the ESP packet as opaque
# payload, which is what AH transport mode does.
esp_sa = SecurityAssociation(ESP, spi=0x2000, crypt_algo="AES-CBC", crypt_key=bytes(range(16)),
                             auth_algo="HMAC-SHA1-96", auth_key=bytes(range(20)),
                             tunnel_header=IP(src="203.0.113.1", dst="203.0.113.2", id=1))
esp_pkt = raw(esp_sa.encrypt(udp4(), iv=bytes(range(16, 32)), seq_num=1))
esp6_sa = SecurityAssociation(ESP, spi=0x2001, crypt_algo="AES-CBC", crypt_key=bytes(range(16)),
                              auth_algo="HMAC-SHA1-96", auth_key=bytes(range(20)),
                              tunnel_header=IPv6(src=T6[0], dst=T6[1]))
esp6_pkt = raw(esp6_sa.encrypt(udp6(), iv=bytes(range(16, 32)), seq_num=1))
split_layers(IP, ESP, proto=50)
split_layers(IPv6, ESP, nh=50)
case("esp-then-ah-transport", "sha1", IP(esp_pkt), seq=1, transit=transit_v4)
case("esp-then-ah-transport-v6", "sha256", IPv6(esp6_pkt), seq=1, transit=transit_v6)
bind_layers(IP, ESP, proto=50)
bind_layers(IPv6, ESP, nh=50)

# TCP payload, larger packet.
case("v4-tcp", "sha1", IP(src="192.0.2.1", dst="192.0.2.2", id=77) / TCP(sport=80, dport=4000, flags="PA")
     / Raw(bytes(range(256)) * 4), seq=1000, transit=transit_v4)

print("# Generated by gen_scapy.py (scapy 2.6.1); do not edit.\n")
print("\n\n".join(OUT))
