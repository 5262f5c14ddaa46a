"""Shared helpers for the interop tests: pcap I/O, the ESP suite matrix, inner test packets,
and the independent reference implementation (scapy 2.6.1 + python `cryptography`).

Nothing in here talks to the network: scapy is only used to build, parse, encrypt and
decrypt packets in memory.
"""

from __future__ import annotations

import hashlib
import math
import struct
import warnings
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

# scapy prints a few warnings about routes/interfaces on import in containers; harmless.
from scapy.all import (  # noqa: E402
    IP,
    TCP,
    UDP,
    Ether,
    IPOption_NOP,
    IPOption_Router_Alert,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    PadN,
    Raw,
    RouterAlert,
)
from scapy.layers import ipsec as scapy_ipsec
from scapy.layers.ipsec import ESP, CryptAlgo, SecurityAssociation, split_for_transport

try:  # cryptography >= 43 moved TripleDES to "decrepit"; scapy handles both.
    from cryptography.utils import CryptographyDeprecationWarning
except ImportError:  # pragma: no cover
    CryptographyDeprecationWarning = DeprecationWarning  # type: ignore

from cryptography.hazmat.primitives.ciphers import algorithms, modes

warnings.filterwarnings("ignore", category=CryptographyDeprecationWarning)

# --------------------------------------------------------------------------------------
# AES-GCM with a truncated ICV.
#
# scapy 2.6.1's own 'AES-GCM' CryptAlgo uses cryptography's AESGCM AEAD class, which
# always emits/expects a 16-byte tag and silently ignores `crypt_icv_size`. RFC 4106 also
# defines 8- and 12-byte ICVs (Linux: rfc4106(gcm(aes)) 64/96). We register one extra
# scapy CryptAlgo built exactly like scapy's other algorithms but on cryptography's
# `modes.GCM` (whose `.tag` we truncate), so scapy's ESP framing, padding, AAD and
# SecurityAssociation code are reused unchanged. With a 16-byte ICV it produces the same
# bytes as scapy's stock 'AES-GCM' (checked by test_scapy_gcm_trunc_matches_stock_gcm).
# --------------------------------------------------------------------------------------
GCM_TRUNC = "AES-GCM-TRUNC-ICV"
if GCM_TRUNC not in scapy_ipsec.CRYPT_ALGOS:
    scapy_ipsec.CRYPT_ALGOS[GCM_TRUNC] = CryptAlgo(
        GCM_TRUNC,
        cipher=algorithms.AES,
        mode=modes.GCM,
        key_size=(16, 24, 32),
        salt_size=4,
        block_size=1,
        iv_size=8,
        icv_size=16,
        format_mode_iv=lambda sa, iv, **kw: sa.crypt_salt + iv,
    )

# --------------------------------------------------------------------------------------
# pcap I/O (classic libpcap format; written by hand so the link type is exactly what we
# ask for and so we can check the link type of what the tool writes back).
# --------------------------------------------------------------------------------------
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229


def write_pcap(path, frames: Sequence[bytes], linktype: int = LINKTYPE_RAW) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for i, fr in enumerate(frames):
            fr = bytes(fr)
            f.write(struct.pack("<IIII", 1_700_000_000 + i, i, len(fr), len(fr)))
            f.write(fr)


def read_pcap(path) -> Tuple[int, List[bytes]]:
    with open(path, "rb") as f:
        data = f.read()
    return parse_pcap(data)


def parse_pcap(data: bytes) -> Tuple[int, List[bytes]]:
    if len(data) < 24:
        raise AssertionError(f"pcap output too short ({len(data)} bytes): {data[:64].hex()}")
    magic_le = struct.unpack("<I", data[:4])[0]
    if magic_le in (0xA1B2C3D4, 0xA1B23C4D):
        e = "<"
    elif struct.unpack(">I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D):
        e = ">"
    else:
        raise AssertionError(f"not a classic pcap file (magic {data[:4].hex()})")
    _, _, _, _, _, _, linktype = struct.unpack(e + "IHHiIII", data[:24])
    off = 24
    frames = []
    while off < len(data):
        if off + 16 > len(data):
            raise AssertionError(f"truncated pcap record header at offset {off}")
        _, _, incl, orig = struct.unpack(e + "IIII", data[off:off + 16])
        off += 16
        if off + incl > len(data):
            raise AssertionError(f"truncated pcap record at offset {off}")
        if incl != orig:
            raise AssertionError(f"pcap record truncated by snaplen ({incl} != {orig})")
        frames.append(data[off:off + incl])
        off += incl
    return linktype & 0x0FFFFFFF, frames


# --------------------------------------------------------------------------------------
# Suites
# --------------------------------------------------------------------------------------


def keybytes(label: str, n: int) -> bytes:
    """Deterministic, label-dependent key material."""
    out = b""
    ctr = 0
    while len(out) < n:
        out += hashlib.sha512(f"{label}/{ctr}".encode()).digest()
        ctr += 1
    return out[:n]


@dataclass(frozen=True)
class Suite:
    id: str
    # xfrm words
    enc: Optional[str] = None  # e.g. 'cbc(aes)', 'cipher_null'
    enc_key_len: int = 0
    auth: Optional[str] = None  # e.g. 'hmac(sha1)'; None -> digest_null
    auth_key_len: int = 0
    auth_bits: int = 0
    aead: Optional[str] = None  # e.g. 'rfc4106(gcm(aes))'
    aead_key_len: int = 0  # including the 4-byte salt
    icv_bits: int = 0
    # scapy names
    scapy_crypt: str = "NULL"
    scapy_auth: Optional[str] = None
    iv_len: int = 0
    # Wireshark 4.0 ESP SA UAT names (None: not supported by tshark 4.0)
    ws_enc: Optional[str] = None
    ws_auth: Optional[str] = None

    @property
    def is_aead(self) -> bool:
        return self.aead is not None

    @property
    def enc_key(self) -> bytes:
        return keybytes(self.id + "/enc", self.enc_key_len)

    @property
    def auth_key(self) -> bytes:
        return keybytes(self.id + "/auth", self.auth_key_len)

    @property
    def aead_key(self) -> bytes:
        return keybytes(self.id + "/aead", self.aead_key_len)

    @property
    def icv_len(self) -> int:
        return (self.icv_bits if self.is_aead else self.auth_bits) // 8

    @property
    def fixed_iv(self) -> Optional[bytes]:
        if self.iv_len == 0:
            return None
        return bytes((0xA0 + i) & 0xFF for i in range(self.iv_len))

    @property
    def has_integrity(self) -> bool:
        return self.is_aead or self.auth is not None

    # -- xfrm SPEC ------------------------------------------------------------------
    def spec(self, spi: int, mode: str, src: Optional[str] = None, dst: Optional[str] = None,
             esn: bool = False, replay_window: Optional[int] = None) -> str:
        words = [f"proto esp spi 0x{spi:x} mode {mode}"]
        if mode == "tunnel":
            words.append(f"src {src} dst {dst}")
        if self.is_aead:
            words.append(f"aead '{self.aead}' 0x{self.aead_key.hex()} {self.icv_bits}")
        else:
            if self.enc == "cipher_null":
                words.append('enc cipher_null ""')
            else:
                words.append(f"enc '{self.enc}' 0x{self.enc_key.hex()}")
            if self.auth is None:
                words.append('auth digest_null ""')
            else:
                words.append(f"auth-trunc '{self.auth}' 0x{self.auth_key.hex()} {self.auth_bits}")
        if esn:
            words.append("flag esn")
        if replay_window is not None:
            words.append(f"replay-window {replay_window}")
        return " ".join(words)

    # -- scapy SA -------------------------------------------------------------------
    def scapy_sa(self, spi: int, tunnel_header=None, esn_en: bool = False, esn: int = 0,
                 seq_num: int = 1) -> SecurityAssociation:
        if self.is_aead:
            crypt_key = self.aead_key
            crypt_algo = self.scapy_crypt
            icv_size = self.icv_len
            if crypt_algo == "AES-GCM" and icv_size != 16:
                crypt_algo = GCM_TRUNC
            auth_algo, auth_key = None, None
        else:
            crypt_key = self.enc_key if self.scapy_crypt != "NULL" else None
            crypt_algo = self.scapy_crypt
            icv_size = None
            auth_algo = self.scapy_auth
            auth_key = self.auth_key if self.scapy_auth else None
        return SecurityAssociation(
            ESP, spi=spi, seq_num=seq_num, crypt_algo=crypt_algo, crypt_key=crypt_key,
            crypt_icv_size=icv_size, auth_algo=auth_algo, auth_key=auth_key,
            tunnel_header=tunnel_header, esn_en=esn_en, esn=esn)

    # -- Wireshark UAT --------------------------------------------------------------
    @property
    def tshark_supported(self) -> bool:
        return self.ws_enc is not None

    def ws_uat(self, proto: str, src: str, dst: str, spi: int) -> str:
        """One `-o uat:esp_sa:...` value for Wireshark 4.0 (8 quoted fields)."""
        if self.is_aead:
            ekey = "0x" + self.aead_key.hex()  # key || 4-byte salt, as in Linux
            akey = ""
        else:
            ekey = ("0x" + self.enc_key.hex()) if self.enc_key_len else ""
            akey = ("0x" + self.auth_key.hex()) if self.auth_key_len else ""
        fields = [proto, src, dst, f"0x{spi:08x}", self.ws_enc, ekey, self.ws_auth or "NULL", akey]
        return "uat:esp_sa:" + ",".join(f'"{x}"' for x in fields)


def _cbc(id, enc, klen, scapy_crypt, iv_len, ws_enc, auth, alen, bits, scapy_auth, ws_auth):
    return Suite(id=id, enc=enc, enc_key_len=klen, auth=auth, auth_key_len=alen, auth_bits=bits,
                 scapy_crypt=scapy_crypt, scapy_auth=scapy_auth, iv_len=iv_len,
                 ws_enc=ws_enc, ws_auth=ws_auth)


WS_AES = "AES-CBC [RFC3602]"
WS_3DES = "TripleDES-CBC [RFC2451]"
WS_DES = "DES-CBC [RFC2405]"
WS_SHA1 = "HMAC-SHA-1-96 [RFC2404]"
WS_MD5 = "HMAC-MD5-96 [RFC2403]"
WS_SHA256 = "HMAC-SHA-256-128 [RFC4868]"
WS_SHA384 = "HMAC-SHA-384-192 [RFC4868]"
WS_SHA512 = "HMAC-SHA-512-256 [RFC4868]"

SUITES = {s.id: s for s in [
    _cbc("null-sha1", "cipher_null", 0, "NULL", 0, "NULL", "hmac(sha1)", 20, 96, "HMAC-SHA1-96", WS_SHA1),
    _cbc("aes128cbc-sha1", "cbc(aes)", 16, "AES-CBC", 16, WS_AES, "hmac(sha1)", 20, 96, "HMAC-SHA1-96", WS_SHA1),
    _cbc("aes128cbc-md5", "cbc(aes)", 16, "AES-CBC", 16, WS_AES, "hmac(md5)", 16, 96, "HMAC-MD5-96", WS_MD5),
    _cbc("aes192cbc-sha256", "cbc(aes)", 24, "AES-CBC", 16, WS_AES, "hmac(sha256)", 32, 128, "SHA2-256-128", WS_SHA256),
    _cbc("aes256cbc-sha384", "cbc(aes)", 32, "AES-CBC", 16, WS_AES, "hmac(sha384)", 48, 192, "SHA2-384-192", WS_SHA384),
    _cbc("aes256cbc-sha512", "cbc(aes)", 32, "AES-CBC", 16, WS_AES, "hmac(sha512)", 64, 256, "SHA2-512-256", WS_SHA512),
    _cbc("aes128cbc-noauth", "cbc(aes)", 16, "AES-CBC", 16, WS_AES, None, 0, 0, None, None),
    _cbc("des-sha1", "cbc(des)", 8, "DES", 8, WS_DES, "hmac(sha1)", 20, 96, "HMAC-SHA1-96", WS_SHA1),
    _cbc("3des-md5", "cbc(des3_ede)", 24, "3DES", 8, WS_3DES, "hmac(md5)", 16, 96, "HMAC-MD5-96", WS_MD5),
    _cbc("3des-sha256", "cbc(des3_ede)", 24, "3DES", 8, WS_3DES, "hmac(sha256)", 32, 128, "SHA2-256-128", WS_SHA256),
    Suite(id="gcm128-icv16", aead="rfc4106(gcm(aes))", aead_key_len=20, icv_bits=128,
          scapy_crypt="AES-GCM", iv_len=8, ws_enc="AES-GCM with 16 octet ICV [RFC4106]"),
    Suite(id="gcm128-icv12", aead="rfc4106(gcm(aes))", aead_key_len=20, icv_bits=96,
          scapy_crypt="AES-GCM", iv_len=8, ws_enc="AES-GCM with 12 octet ICV [RFC4106]"),
    Suite(id="gcm128-icv8", aead="rfc4106(gcm(aes))", aead_key_len=20, icv_bits=64,
          scapy_crypt="AES-GCM", iv_len=8, ws_enc="AES-GCM with 8 octet ICV [RFC4106]"),
    Suite(id="gcm192-icv16", aead="rfc4106(gcm(aes))", aead_key_len=28, icv_bits=128,
          scapy_crypt="AES-GCM", iv_len=8, ws_enc="AES-GCM with 16 octet ICV [RFC4106]"),
    Suite(id="gcm256-icv16", aead="rfc4106(gcm(aes))", aead_key_len=36, icv_bits=128,
          scapy_crypt="AES-GCM", iv_len=8, ws_enc="AES-GCM with 16 octet ICV [RFC4106]"),
    Suite(id="gcm256-icv12", aead="rfc4106(gcm(aes))", aead_key_len=36, icv_bits=96,
          scapy_crypt="AES-GCM", iv_len=8, ws_enc="AES-GCM with 12 octet ICV [RFC4106]"),
    # Wireshark 4.0's ESP dissector has no ChaCha20-Poly1305 (added in later versions).
    Suite(id="chacha20poly1305", aead="rfc7539esp(chacha20,poly1305)", aead_key_len=36,
          icv_bits=128, scapy_crypt="CHACHA20-POLY1305", iv_len=8, ws_enc=None),
]}

# --------------------------------------------------------------------------------------
# Modes (transport / tunnel, inner/outer IP version) and inner test packets
# --------------------------------------------------------------------------------------
INNER4 = ("192.0.2.10", "198.51.100.20")
INNER6 = ("2001:db8:1::10", "2001:db8:2::20")
OUTER4 = ("203.0.113.1", "203.0.113.2")
OUTER6 = ("2001:db8:ffff::1", "2001:db8:ffff::2")

UDP_SPORT, UDP_DPORT, TCP_SPORT, TCP_DPORT = 40000, 40001, 40002, 40003


def payload(n: int, salt: int = 0) -> bytes:
    return bytes(((i * 31 + salt * 7 + 11) & 0xFF) for i in range(n))


def _udp(n, salt=0):
    return UDP(sport=UDP_SPORT, dport=UDP_DPORT) / Raw(payload(n, salt)) if n else UDP(sport=UDP_SPORT, dport=UDP_DPORT)


def _tcp(n, salt=0):
    return TCP(sport=TCP_SPORT, dport=TCP_DPORT, seq=0x01020304, ack=0x0A0B0C0D, flags="PA",
               window=4096) / Raw(payload(n, salt))


def packets_v4_basic() -> List[bytes]:
    s, d = INNER4
    pkts = [
        IP(src=s, dst=d, id=0x1234, flags="DF", ttl=64) / _udp(0),
        IP(src=s, dst=d, id=0x0102, tos=0xB8, ttl=17) / _udp(13, 1),
        IP(src=s, dst=d, id=0xBEEF, tos=0x03, flags="DF", ttl=255) / _tcp(64, 2),
        IP(src=s, dst=d, id=0x0001, tos=0x01, ttl=3) / _udp(1000, 3),
    ]
    return [bytes(p) for p in pkts]


def packets_v4_options() -> List[bytes]:
    s, d = INNER4
    pkts = [
        IP(src=s, dst=d, id=0x2222, tos=0x20, ttl=9, options=[IPOption_Router_Alert()]) / _udp(21, 4),
        IP(src=s, dst=d, id=0x3333, flags="DF", ttl=1,
           options=[IPOption_NOP(), IPOption_NOP(), IPOption_Router_Alert()]) / _tcp(7, 5),
    ]
    return [bytes(p) for p in pkts]


def packets_v6_basic() -> List[bytes]:
    s, d = INNER6
    pkts = [
        IPv6(src=s, dst=d, fl=0x12345, hlim=64) / _udp(0),
        IPv6(src=s, dst=d, tc=0xB8, hlim=17) / _udp(13, 1),
        IPv6(src=s, dst=d, tc=0x03, hlim=255) / _tcp(64, 2),
        IPv6(src=s, dst=d, tc=0x01, fl=0xFFFFF, hlim=3) / _udp(1000, 3),
    ]
    return [bytes(p) for p in pkts]


def packets_v6_exthdr() -> List[bytes]:
    s, d = INNER6
    pkts = [
        # Hop-by-Hop + Destination Options: ESP goes after both (no Routing header follows).
        IPv6(src=s, dst=d, hlim=64) / IPv6ExtHdrHopByHop(options=[RouterAlert()])
        / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\x00" * 4)]) / _udp(20, 6),
        # HbH + DestOpt + Routing + DestOpt: ESP goes after the Routing header, before the
        # final Destination Options header (which belongs to the final destination).
        IPv6(src=s, dst=d, hlim=64) / IPv6ExtHdrHopByHop(options=[RouterAlert()])
        / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\x00" * 4)])
        / IPv6ExtHdrRouting(type=0, segleft=0, addresses=["2001:db8:3::30"])
        / IPv6ExtHdrDestOpt(options=[PadN(optdata=b"\x00" * 4)]) / _tcp(33, 7),
    ]
    return [bytes(p) for p in pkts]


PACKET_SETS = {
    "v4": packets_v4_basic,
    "v4opts": packets_v4_options,
    "v6": packets_v6_basic,
    "v6ext": packets_v6_exthdr,
}


@dataclass(frozen=True)
class Mode:
    id: str
    xfrm_mode: str  # "transport" | "tunnel"
    packet_set: str
    outer: Optional[int] = None  # 4 / 6 for tunnel

    @property
    def tunnel(self) -> bool:
        return self.xfrm_mode == "tunnel"

    @property
    def inner_version(self) -> int:
        return 6 if self.packet_set.startswith("v6") else 4

    @property
    def wire_version(self) -> int:
        return self.outer if self.tunnel else self.inner_version

    @property
    def endpoints(self) -> Tuple[Optional[str], Optional[str]]:
        if not self.tunnel:
            return None, None
        return OUTER4 if self.outer == 4 else OUTER6

    @property
    def wire_addrs(self) -> Tuple[str, str]:
        if self.tunnel:
            return self.endpoints  # type: ignore
        return INNER4 if self.inner_version == 4 else INNER6

    def packets(self) -> List[bytes]:
        return PACKET_SETS[self.packet_set]()

    def spec(self, suite: Suite, spi: int, **kw) -> str:
        src, dst = self.endpoints
        return suite.spec(spi, self.xfrm_mode, src, dst, **kw)


MODES = {m.id: m for m in [
    Mode("transport-v4", "transport", "v4"),
    Mode("transport-v4opts", "transport", "v4opts"),
    Mode("transport-v6", "transport", "v6"),
    Mode("transport-v6ext", "transport", "v6ext"),
    Mode("tunnel-4in4", "tunnel", "v4", 4),
    Mode("tunnel-6in6", "tunnel", "v6", 6),
    Mode("tunnel-6in4", "tunnel", "v6", 4),
    Mode("tunnel-4in6", "tunnel", "v4", 6),
    # a tunnel whose inner packets carry IPv4 options / IPv6 extension headers
    Mode("tunnel-4opts-in4", "tunnel", "v4opts", 4),
    Mode("tunnel-6ext-in6", "tunnel", "v6ext", 6),
]}

CORE_MODES = ["transport-v4", "transport-v6", "tunnel-4in4", "tunnel-6in6"]
ALL_MODES = list(MODES)
# suites that get every mode (all 4 tunnel inner/outer combinations, options, ext headers)
FULL_MODE_SUITES = ["aes128cbc-sha1", "3des-md5", "gcm128-icv16", "chacha20poly1305"]


def scapy_matrix() -> List[Tuple[Suite, Mode]]:
    out = []
    for sid, suite in SUITES.items():
        modes = ALL_MODES if sid in FULL_MODE_SUITES else CORE_MODES
        out += [(suite, MODES[m]) for m in modes]
    return out


def matrix_id(v) -> str:
    return v.id if isinstance(v, (Suite, Mode)) else str(v)


# --------------------------------------------------------------------------------------
# Reference (scapy) seal/open
# --------------------------------------------------------------------------------------


def parse_ip(b: bytes):
    v = b[0] >> 4
    if v == 4:
        return IP(b)
    if v == 6:
        return IPv6(b)
    raise AssertionError(f"not an IP packet (first byte {b[:1].hex()}): {b[:32].hex()}")


def inner_dscp_ecn(inner: bytes) -> int:
    if inner[0] >> 4 == 4:
        tos = inner[1]
    else:
        tos = ((inner[0] & 0x0F) << 4) | (inner[1] >> 4)
    if tos & 3 == 3:  # CE on the inner header -> ECT(0) on the outer one
        tos = (tos & 0xFC) | 2
    return tos


def expected_tunnel_header(mode: Mode, inner: bytes, seq: int):
    src, dst = mode.endpoints
    tos = inner_dscp_ecn(inner)
    if mode.outer == 4:
        df = inner[0] >> 4 == 4 and bool(inner[6] & 0x40)
        return IP(src=src, dst=dst, tos=tos, id=seq & 0xFFFF, flags="DF" if df else 0, frag=0, ttl=64)
    return IPv6(src=src, dst=dst, tc=tos, fl=0, hlim=64)


def scapy_seal(suite: Suite, mode: Mode, inner: bytes, seq: int, spi: int, iv: Optional[bytes] = None,
               esn: bool = False) -> bytes:
    """What an independent implementation produces for this packet (iv=None: random IV)."""
    low, high = seq & 0xFFFFFFFF, seq >> 32
    if high and not esn:
        raise ValueError("seq >= 2^32 needs ESN")
    th = expected_tunnel_header(mode, inner, seq) if mode.tunnel else None
    sa = suite.scapy_sa(spi, tunnel_header=th, esn_en=esn, esn=high, seq_num=low)
    if iv is None and suite.iv_len == 0:
        iv = b""
    out = sa.encrypt(parse_ip(inner), iv=iv)  # seq taken from sa.seq_num (works for low == 0)
    return bytes(parse_ip(bytes(out)))


def scapy_open(suite: Suite, mode: Mode, wire: bytes, spi: int, esn: bool = False, esn_high: int = 0) -> bytes:
    th = (IP() if mode.outer == 4 else IPv6()) if mode.tunnel else None
    sa = suite.scapy_sa(spi, tunnel_header=th, esn_en=esn, esn=esn_high)
    return bytes(sa.decrypt(parse_ip(wire)))


def l4_payload_of(inner: bytes) -> bytes:
    """The UDP/TCP payload of an (unencrypted) IP packet."""
    p = parse_ip(inner)
    return bytes(p[Raw].load) if Raw in p else b""


def esp_layer(wire: bytes):
    p = parse_ip(wire)
    if ESP not in p:
        raise AssertionError(f"no ESP header found in {p.summary()}: {wire[:48].hex()}")
    return p[ESP]


def esp_offset(wire: bytes) -> int:
    return len(wire) - len(bytes(esp_layer(wire)))


def transport_split(inner: bytes) -> Tuple[bytes, int, bytes]:
    """(header part kept in clear, ESP next header, protected payload) for transport mode."""
    hdr, nh, pl = split_for_transport(parse_ip(inner), 50)
    pl = bytes(pl)
    return inner[: len(inner) - len(pl)], nh, pl


def esp_plaintext(suite: Suite, mode: Mode, inner: bytes) -> Tuple[bytes, int]:
    """(protected payload, next header) that must be inside the ESP packet."""
    if mode.tunnel:
        return inner, (4 if inner[0] >> 4 == 4 else 41)
    _, nh, pl = transport_split(inner)
    return pl, nh


def esp_trailer_padding(suite: Suite, payload_len: int) -> bytes:
    block = {"AES-CBC": 16, "DES": 8, "3DES": 8}.get(suite.scapy_crypt, 1)
    align = block * 4 // math.gcd(block, 4)
    padlen = -(payload_len + 2) % align
    return bytes(range(1, padlen + 1))


# --------------------------------------------------------------------------------------
# Diff helpers for readable assertion messages
# --------------------------------------------------------------------------------------


def hexdump_lines(b: bytes, width: int = 16) -> List[str]:
    return [f"{i:04x}  {b[i:i + width].hex(' ')}" for i in range(0, len(b), width)]


def describe_diff(got: bytes, exp: bytes, context_lines: int = 3) -> str:
    if got == exp:
        return "identical"
    n = min(len(got), len(exp))
    first = next((i for i in range(n) if got[i] != exp[i]), n)
    g, e = hexdump_lines(got), hexdump_lines(exp)
    row = first // 16
    lo, hi = max(0, row - context_lines), row + context_lines + 1
    out = [f"lengths: got {len(got)}, expected {len(exp)}; first difference at byte {first} (0x{first:x})"]
    out.append("got:")
    out += [("> " if i == row else "  ") + g[i] for i in range(lo, min(hi, len(g)))]
    out.append("expected:")
    out += [("> " if i == row else "  ") + e[i] for i in range(lo, min(hi, len(e)))]
    try:
        out.append("got parsed:      " + parse_ip(got).summary())
        out.append("expected parsed: " + parse_ip(exp).summary())
    except Exception:  # noqa: BLE001 - best effort only
        pass
    return "\n".join(out)


def assert_same_bytes(got: bytes, exp: bytes, what: str) -> None:
    got, exp = bytes(got), bytes(exp)
    if got != exp:
        raise AssertionError(f"{what}: bytes differ\n{describe_diff(got, exp)}")
