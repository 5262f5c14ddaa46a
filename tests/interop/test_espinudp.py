"""ESP in UDP (RFC 3948) as an SA property, `encap espinudp SPORT DPORT OADDR` (issue #11),
against two independent implementations, offline on pcap files:

* tshark 4.0 decodes the sealed capture's `udp.port == 4500` datagrams as ESP (its UDPENCAP
  dissector), decrypts them with the SA as an `esp_sa` UAT entry and reports every ICV good
  (and a flipped ciphertext byte bad); with `udp.check_checksum` on it also checks our UDP
  checksums: absent (0) over IPv4, as RFC 3948 2.1 says it SHOULD be, and good over IPv6.
* scapy 2.6.1 `SecurityAssociation(..., nat_t_header=UDP(...))`: over IPv4 our
  `seal --seq --iv` output is byte-for-byte scapy's; scapy decrypts what we seal with our own
  IVs; we open what scapy seals. scapy writes a zero UDP checksum over IPv6 too, which
  RFC 8200 8.1 forbids: we refuse such a packet (with that reason) and open it once its
  checksum is filled in; our IPv6 checksums are the ones scapy computes.
* NAT-keepalives and non-ESP markers that scapy builds (its NAT_KEEPALIVE and NON_ESP
  layers) are dropped and counted by `ipsec open`, not reported as rejected packets.
"""

from __future__ import annotations

from typing import List, Optional

import pytest
from scapy.all import UDP, IP, IPv6, Raw
from scapy.layers.ipsec import NAT_KEEPALIVE, NON_ESP

import interop_lib as lib
from interop_lib import MODES, SUITES, Mode, Suite
from test_tshark_esp import check_frames, run_tshark, uat_for

SPI = 0x80000451
SPORT, DPORT = 4500, 4500

SUITE_IDS = ["aes128cbc-sha1", "gcm128-icv16", "3des-md5", "chacha20poly1305"]
MODE_IDS = ["transport-v4", "transport-v6", "tunnel-4in4", "tunnel-6in6", "tunnel-6in4", "tunnel-4in6"]
MATRIX = [(SUITES[s], MODES[m]) for s in SUITE_IDS for m in MODE_IDS]
IDS = [f"{s.id}-{m.id}" for s, m in MATRIX]
TSHARK_MATRIX = [(s, m) for s, m in MATRIX if s.tshark_supported]
TSHARK_IDS = [f"{s.id}-{m.id}" for s, m in TSHARK_MATRIX]


def spec(suite: Suite, mode: Mode, sport: int = SPORT, dport: int = DPORT, oa: str = "0.0.0.0") -> str:
    return f"{mode.spec(suite, SPI)} encap espinudp {sport} {dport} {oa}"


def scapy_sa(suite: Suite, mode: Mode, seq: int, inner: Optional[bytes] = None, sport: int = SPORT,
             dport: int = DPORT):
    """scapy's SA for this suite and mode, with ESP in UDP (`nat_t_header`)."""
    if mode.tunnel:
        th = lib.expected_tunnel_header(mode, inner, seq) if inner is not None else (
            IP() if mode.outer == 4 else IPv6())
    else:
        th = None
    sa = suite.scapy_sa(SPI, tunnel_header=th, seq_num=seq)
    sa.nat_t_header = UDP(sport=sport, dport=dport)
    return sa


def scapy_seal(suite: Suite, mode: Mode, inner: bytes, seq: int, iv: Optional[bytes] = None) -> bytes:
    sa = scapy_sa(suite, mode, seq, inner)
    if iv is None and suite.iv_len == 0:
        iv = b""
    return bytes(lib.parse_ip(bytes(sa.encrypt(lib.parse_ip(inner), iv=iv))))


def scapy_open(suite: Suite, mode: Mode, wire: bytes) -> bytes:
    return bytes(scapy_sa(suite, mode, 1).decrypt(lib.parse_ip(wire)))


def udp_of(wire: bytes):
    p = lib.parse_ip(wire)
    assert UDP in p, f"no UDP header: {p.summary()}"
    return p[UDP]


def with_udp_checksum(wire: bytes) -> bytes:
    """The packet with its UDP checksum computed by scapy."""
    p = lib.parse_ip(wire)
    del p[UDP].chksum
    return bytes(p.__class__(bytes(p)))


def check_udp(wire: bytes, what: str, sport: int = SPORT, dport: int = DPORT) -> None:
    u = udp_of(wire)
    assert (u.sport, u.dport) == (sport, dport), f"{what}: ports {u.sport} -> {u.dport}"
    assert u.len == len(bytes(u)), f"{what}: UDP length {u.len} for {len(bytes(u))} bytes"
    if wire[0] >> 4 == 4:
        assert lib.parse_ip(wire).proto == 17
        assert u.chksum == 0, f"{what}: IPv4 UDP checksum {u.chksum:#x}, RFC 3948 2.1 says 0"
    else:
        assert u.chksum != 0, f"{what}: zero UDP checksum over IPv6"
        assert udp_of(with_udp_checksum(wire)).chksum == u.chksum, f"{what}: IPv6 UDP checksum differs from scapy's"
    assert bytes(u.payload)[:4] == SPI.to_bytes(4, "big"), f"{what}: no ESP header (SPI) after the UDP header"


# ------------------------------------------------------------------------------------------
# Self-check of the reference side (no binary needed).
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite,mode", MATRIX, ids=IDS)
def test_reference_roundtrip(suite: Suite, mode: Mode):
    for i, inner in enumerate(mode.packets()):
        wire = scapy_seal(suite, mode, inner, 1 + i, iv=suite.fixed_iv)
        assert udp_of(wire).dport == DPORT
        lib.assert_same_bytes(scapy_open(suite, mode, wire), inner, f"scapy round trip {i}")


# ------------------------------------------------------------------------------------------
# ipsec seal -> scapy, and the exact bytes
# ------------------------------------------------------------------------------------------
SEQ = 0x1FFFE


@pytest.mark.parametrize("suite,mode", MATRIX, ids=IDS)
def test_seal_matches_scapy_and_scapy_decrypts(ipsec, suite: Suite, mode: Mode):
    pkts = mode.packets()
    _, fixed, _ = ipsec.seal([spec(suite, mode)], pkts, seq=SEQ, iv=suite.fixed_iv)
    for i, (inner, wire) in enumerate(zip(pkts, fixed)):
        check_udp(wire, f"packet {i}")
        exp = scapy_seal(suite, mode, inner, SEQ + i, iv=suite.fixed_iv)
        if mode.wire_version == 6:
            # scapy leaves the IPv6 UDP checksum 0; the rest must be identical.
            exp = with_udp_checksum(exp)
        lib.assert_same_bytes(wire, exp, f"seal {suite.id} {mode.id} packet {i} vs scapy nat_t_header")
    _, ours, _ = ipsec.seal([spec(suite, mode)], pkts)
    for i, (inner, wire) in enumerate(zip(pkts, ours)):
        check_udp(wire, f"packet {i} (own IVs)")
        lib.assert_same_bytes(scapy_open(suite, mode, wire), inner, f"scapy decrypt of our packet {i}")


# ------------------------------------------------------------------------------------------
# scapy seals -> ipsec open
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite,mode", MATRIX, ids=IDS)
def test_open_scapy_packets(ipsec, suite: Suite, mode: Mode):
    pkts = mode.packets()
    wire = [scapy_seal(suite, mode, p, 1 + i) for i, p in enumerate(pkts)]
    if mode.wire_version == 6:
        _, got, proc = ipsec.open([spec(suite, mode)], wire, expect_rc=1)
        assert got == []
        err = proc.stderr.decode()
        for i in range(len(wire)):
            assert f"packet {i + 1}: zero UDP checksum over IPv6 (RFC 8200 8.1)" in err, err
        wire = [with_udp_checksum(w) for w in wire]
    _, got, _ = ipsec.open([spec(suite, mode)], wire)
    for i, (g, e) in enumerate(zip(got, pkts)):
        lib.assert_same_bytes(g, e, f"open of scapy's packet {i}")


def test_other_ports(ipsec):
    """Ports other than 4500 are those of the SA: scapy takes UDP with sport 4500 as ESP."""
    suite, mode = SUITES["gcm128-icv16"], MODES["tunnel-4in4"]
    pkts = mode.packets()
    _, wire, _ = ipsec.seal([spec(suite, mode, 4500, 31000)], pkts)
    for i, (inner, w) in enumerate(zip(pkts, wire)):
        check_udp(w, f"packet {i}", 4500, 31000)
        sa = scapy_sa(suite, mode, 1, sport=4500, dport=31000)
        lib.assert_same_bytes(bytes(sa.decrypt(lib.parse_ip(w))), inner, f"scapy decrypt {i}")
    _, got, _ = ipsec.open([spec(suite, mode, 4500, 31000)], wire)
    assert got == pkts
    _, got, proc = ipsec.open([spec(suite, mode, 4500, 4500)], wire, expect_rc=1)
    assert "UDP to port 31000: no SA with `encap espinudp` on it" in proc.stderr.decode()


def test_keepalives_and_non_esp_are_dropped_and_counted(ipsec):
    suite, mode = SUITES["aes128cbc-sha1"], MODES["tunnel-4in4"]
    src, dst = mode.endpoints
    ka = bytes(IP(src=src, dst=dst) / UDP(sport=4500, dport=4500) / NAT_KEEPALIVE())
    ike = bytes(IP(src=src, dst=dst) / UDP(sport=4500, dport=4500) / NON_ESP() / Raw(b"\x11" * 28))
    assert ka[-1:] == b"\xff" and len(udp_of(ka).payload) == 1
    assert bytes(udp_of(ike).payload)[:4] == b"\0\0\0\0"
    pkts = mode.packets()[:2]
    esp = [scapy_seal(suite, mode, p, 1 + i) for i, p in enumerate(pkts)]
    frames = [ka, esp[0], ike, ka, esp[1]]
    lt, got, proc = ipsec._verb("open", [spec(suite, mode)], frames, lib.LINKTYPE_RAW, [], 0)
    assert got == pkts
    err = proc.stderr.decode()
    assert "5 read, 2 written, 0 rejected; dropped 2 NAT-keepalives and 1 non-ESP (IKE) datagrams" in err, err
    assert "packet " not in err, f"keepalives are not reported as rejected packets: {err}"


def test_routing_header_is_refused_with_the_reason(ipsec):
    """IPv6 transport mode with a Routing header: the UDP checksum would need the final
    destination, which the tool does not work out; the packet is refused, the rest sealed."""
    suite, mode = SUITES["gcm128-icv16"], MODES["transport-v6ext"]
    pkts = mode.packets()
    _, got, proc = ipsec.seal([spec(suite, mode)], pkts, expect_rc=1)
    assert len(got) == 1
    check_udp(got[0], "packet without a Routing header")
    assert "packet 2: IPv6 Routing header" in proc.stderr.decode()


# ------------------------------------------------------------------------------------------
# tshark
# ------------------------------------------------------------------------------------------


def tshark_udp(tshark_bin: str, pcap, workdir) -> List[List[str]]:
    """(udp.srcport, udp.dstport, udp.checksum.status, esp.spi) per frame, with tshark
    checking UDP checksums."""
    import os
    import subprocess

    cfg = workdir / "wireshark-config-udp"
    cfg.mkdir(exist_ok=True)
    cmd = [tshark_bin, "-n", "-r", str(pcap), "-o", "udp.check_checksum:TRUE", "-Y", "udp.port == 4500",
           "-T", "fields", "-E", "occurrence=f", "-e", "udp.srcport", "-e", "udp.dstport",
           "-e", "udp.checksum.status", "-e", "esp.spi"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, WIRESHARK_CONFIG_DIR=str(cfg)))
    assert proc.returncode == 0, proc.stderr
    return [line.split("\t") for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("suite,mode", TSHARK_MATRIX, ids=TSHARK_IDS)
def test_tshark_decodes_and_decrypts_our_packets(ipsec, tshark_bin, tmp_path, suite: Suite, mode: Mode):
    pkts = mode.packets()
    _, wire, _ = ipsec.seal([spec(suite, mode)], pkts, seq=100)
    pcap = tmp_path / "ours.pcap"
    lib.write_pcap(pcap, wire)
    rows = run_tshark(tshark_bin, pcap, [uat_for(suite, mode, SPI)], tmp_path)
    check_frames(rows, suite, mode, pkts, [100 + i for i in range(len(pkts))], SPI)
    udp = tshark_udp(tshark_bin, pcap, tmp_path)
    assert len(udp) == len(pkts), f"tshark: {len(udp)} frames match udp.port == 4500: {udp}"
    # checksum.status: 1 good, 0 bad, 2 unverified, 3 not present (a zero IPv4 checksum)
    want = "3" if mode.wire_version == 4 else "1"
    for i, (sport, dport, status, spi) in enumerate(udp):
        assert (sport, dport) == (str(SPORT), str(DPORT)), f"frame {i + 1}: ports {sport} -> {dport}"
        assert status == want, f"frame {i + 1}: tshark UDP checksum status {status}, expected {want}"
        assert int(spi, 0) == SPI, f"frame {i + 1}: tshark did not see ESP inside UDP ({spi!r})"


@pytest.mark.parametrize("suite,mode", TSHARK_MATRIX, ids=TSHARK_IDS)
def test_tshark_decrypts_reference_packets(tshark_bin, tmp_path, suite: Suite, mode: Mode):
    """The same checks on scapy's ESP-in-UDP packets (no binary): they check the checks."""
    pkts = mode.packets()
    wire = [scapy_seal(suite, mode, p, 1 + i) for i, p in enumerate(pkts)]
    pcap = tmp_path / "ref.pcap"
    lib.write_pcap(pcap, wire)
    rows = run_tshark(tshark_bin, pcap, [uat_for(suite, mode, SPI)], tmp_path)
    check_frames(rows, suite, mode, pkts, [1 + i for i in range(len(pkts))], SPI)


@pytest.mark.parametrize("mode_id", ["transport-v4", "tunnel-6in6"])
def test_tshark_flags_flipped_ciphertext_and_udp_checksum(ipsec, tshark_bin, tmp_path, mode_id):
    suite, mode = SUITES["aes128cbc-sha1"], MODES[mode_id]
    big = mode.packets()[3]
    pkts = [mode.packets()[0], big]
    _, wire, _ = ipsec.seal([spec(suite, mode)], pkts)
    b = bytearray(wire[1])
    start = lib.esp_offset(wire[1]) + 8 + suite.iv_len
    b[start + (len(b) - start - suite.icv_len) // 2] ^= 0x80
    pcap = tmp_path / "bad.pcap"
    lib.write_pcap(pcap, [wire[0], bytes(b)])
    rows = run_tshark(tshark_bin, pcap, [uat_for(suite, mode, SPI)], tmp_path)
    assert [(r["esp.icv_good"], r["esp.icv_bad"]) for r in rows] == [("1", "0"), ("0", "1")]
    if mode.wire_version == 6:
        # The flipped byte also breaks our UDP checksum, and tshark says so.
        assert [r[2] for r in tshark_udp(tshark_bin, pcap, tmp_path)] == ["1", "0"]
