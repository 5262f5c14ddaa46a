"""ESP interop against scapy 2.6.1 (an independent implementation on python `cryptography`).

For every (suite, mode) in interop_lib.scapy_matrix():
  a. `ipsec seal --seq --iv` is byte-for-byte what scapy's SecurityAssociation.encrypt makes;
  b. `ipsec seal` with its own IVs: scapy decrypts every packet back to the original bytes,
     and re-encrypting with the IV found in the packet gives our exact bytes again;
  c. `ipsec open` recovers the original bytes from scapy-made packets (scapy's random IVs).
Plus ESN, link types (Ethernet, 228/229), stdin/stdout, rejection and exit-code checks.
"""

from __future__ import annotations

import re
import struct

import pytest

import interop_lib as lib
from interop_lib import MODES, SUITES, Mode, Suite

MATRIX = lib.scapy_matrix()
MATRIX_IDS = [f"{s.id}-{m.id}" for s, m in MATRIX]


def spi_for(suite: Suite) -> int:
    # large SPIs (top bit set) so 32-bit handling is exercised
    return 0x80000000 | (list(SUITES).index(suite.id) << 8) | 0x42


def assert_packets(got, exp, what):
    assert len(got) == len(exp), f"{what}: {len(got)} packets, expected {len(exp)}"
    for i, (g, e) in enumerate(zip(got, exp)):
        lib.assert_same_bytes(g, e, f"{what}, packet index {i}")


# ------------------------------------------------------------------------------------------
# 0. Self-checks of the reference side (no binary needed). If these fail, the oracle is wrong,
#    not the Rust code.
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite,mode", MATRIX, ids=MATRIX_IDS)
def test_reference_roundtrip(suite: Suite, mode: Mode):
    spi = spi_for(suite)
    for i, inner in enumerate(mode.packets()):
        wire = lib.scapy_seal(suite, mode, inner, seq=7 + i, spi=spi, iv=suite.fixed_iv)
        esp = lib.esp_layer(wire)
        assert esp.spi == spi and esp.seq == 7 + i
        # payload + padding + 2 trailer bytes is 4-byte aligned (RFC 4303 2.4)
        assert (len(bytes(esp)) - 8 - suite.icv_len) % 4 == 0
        lib.assert_same_bytes(lib.scapy_open(suite, mode, wire, spi), inner, f"scapy round trip {i}")


def test_reference_gcm_trunc_matches_stock_gcm():
    """Our truncated-ICV GCM CryptAlgo equals scapy's stock AES-GCM when the ICV is 16 bytes."""
    from scapy.layers.ipsec import SecurityAssociation, ESP

    key = lib.keybytes("gcm-check", 20)
    inner = lib.packets_v4_basic()[1]
    outs = []
    for algo in ("AES-GCM", lib.GCM_TRUNC):
        sa = SecurityAssociation(ESP, spi=0x99, crypt_algo=algo, crypt_key=key, crypt_icv_size=16)
        outs.append(bytes(sa.encrypt(lib.parse_ip(inner), seq_num=3, iv=b"\x01" * 8)))
    lib.assert_same_bytes(outs[1], outs[0], "GCM via modes.GCM vs scapy AES-GCM")


# ------------------------------------------------------------------------------------------
# a. byte-for-byte
# ------------------------------------------------------------------------------------------
SEQ_A = 0x1FFFE  # outer IPv4 ID = low 16 bits of seq: fffe, ffff, 0000, 0001


@pytest.mark.parametrize("suite,mode", MATRIX, ids=MATRIX_IDS)
def test_seal_matches_scapy_bytes(ipsec, suite: Suite, mode: Mode):
    spi = spi_for(suite)
    pkts = mode.packets()
    _, got, _ = ipsec.seal([mode.spec(suite, spi)], pkts, seq=SEQ_A, iv=suite.fixed_iv)
    exp = [lib.scapy_seal(suite, mode, p, SEQ_A + i, spi, iv=suite.fixed_iv) for i, p in enumerate(pkts)]
    assert_packets(got, exp, f"seal {suite.id} {mode.id} vs scapy")


# ------------------------------------------------------------------------------------------
# b. our random IVs -> scapy decrypts
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite,mode", MATRIX, ids=MATRIX_IDS)
def test_scapy_opens_our_packets(ipsec, suite: Suite, mode: Mode):
    spi = spi_for(suite)
    pkts = mode.packets()
    _, got, _ = ipsec.seal([mode.spec(suite, spi)], pkts)  # default --seq 1, tool-chosen IVs
    ivs = []
    for i, (inner, wire) in enumerate(zip(pkts, got)):
        seq = 1 + i
        esp = lib.esp_layer(wire)
        assert (esp.spi, esp.seq) == (spi, seq), f"packet {i}: spi/seq {esp.spi:#x}/{esp.seq}"
        iv = bytes(esp.data[:suite.iv_len])
        ivs.append(iv)
        if suite.is_aead:
            assert iv == struct.pack(">Q", seq), f"packet {i}: AEAD IV {iv.hex()} != 64-bit seq"
        lib.assert_same_bytes(lib.scapy_open(suite, mode, wire, spi), inner,
                              f"scapy decrypt of our packet {i}")
        # same IV + seq in the reference implementation -> exactly our bytes
        lib.assert_same_bytes(wire, lib.scapy_seal(suite, mode, inner, seq, spi, iv=iv or None),
                              f"our packet {i} vs scapy re-encryption with its IV")
    if suite.scapy_crypt in ("AES-CBC", "DES", "3DES"):
        assert len(set(ivs)) == len(ivs), f"CBC IVs repeat across packets: {[v.hex() for v in ivs]}"


# ------------------------------------------------------------------------------------------
# c. scapy seals (random IVs) -> we open
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite,mode", MATRIX, ids=MATRIX_IDS)
def test_open_scapy_packets(ipsec, suite: Suite, mode: Mode):
    spi = spi_for(suite)
    pkts = mode.packets()
    wire = [lib.scapy_seal(suite, mode, p, 1 + i, spi) for i, p in enumerate(pkts)]
    _, got, _ = ipsec.open([mode.spec(suite, spi)], wire)
    assert_packets(got, pkts, f"open {suite.id} {mode.id} of scapy packets")


# ------------------------------------------------------------------------------------------
# d. ESN
# ------------------------------------------------------------------------------------------
ESN_SUITES = ["aes128cbc-sha1", "aes192cbc-sha256", "3des-md5", "gcm128-icv16", "gcm128-icv8",
              "chacha20poly1305"]
ESN_MODES = ["transport-v4", "tunnel-6in6", "tunnel-4in6"]
ESN_MATRIX = [(SUITES[s], MODES[m]) for s in ESN_SUITES for m in ESN_MODES]
ESN_IDS = [f"{s.id}-{m.id}" for s, m in ESN_MATRIX]


@pytest.mark.parametrize("start", [0x1_0000_0005, 0xFFFF_FFFE], ids=["seq0x100000005", "wrap0xfffffffe"])
@pytest.mark.parametrize("suite,mode", ESN_MATRIX, ids=ESN_IDS)
def test_esn_seal_matches_scapy_bytes(ipsec, suite: Suite, mode: Mode, start: int):
    spi = spi_for(suite)
    pkts = mode.packets()
    _, got, _ = ipsec.seal([mode.spec(suite, spi, esn=True)], pkts, seq=start, iv=suite.fixed_iv)
    exp = [lib.scapy_seal(suite, mode, p, start + i, spi, iv=suite.fixed_iv, esn=True)
           for i, p in enumerate(pkts)]
    for i, w in enumerate(got):
        assert lib.esp_layer(w).seq == (start + i) & 0xFFFFFFFF, f"packet {i}: on-wire seq"
    assert_packets(got, exp, f"ESN seal {suite.id} {mode.id} from {start:#x} vs scapy esn_en")


@pytest.mark.parametrize("suite,mode", ESN_MATRIX, ids=ESN_IDS)
def test_esn_scapy_opens_our_packets(ipsec, suite: Suite, mode: Mode):
    spi = spi_for(suite)
    start = 0x1_0000_0005
    pkts = mode.packets()
    _, got, _ = ipsec.seal([mode.spec(suite, spi, esn=True)], pkts, seq=start)
    for i, (inner, wire) in enumerate(zip(pkts, got)):
        seq = start + i
        iv = bytes(lib.esp_layer(wire).data[:suite.iv_len])
        if suite.is_aead:
            assert iv == struct.pack(">Q", seq), f"packet {i}: AEAD IV {iv.hex()} != 64-bit seq"
        lib.assert_same_bytes(lib.scapy_open(suite, mode, wire, spi, esn=True, esn_high=seq >> 32),
                              inner, f"scapy (esn_en) decrypt of our packet {i}")


@pytest.mark.parametrize("suite,mode", ESN_MATRIX, ids=ESN_IDS)
def test_esn_open_scapy_packets(ipsec, suite: Suite, mode: Mode):
    """scapy packets with ESN (high bits 0, so still in the receiver's initial window)."""
    spi = spi_for(suite)
    pkts = mode.packets()
    wire = [lib.scapy_seal(suite, mode, p, 1 + i, spi, esn=True) for i, p in enumerate(pkts)]
    _, got, _ = ipsec.open([mode.spec(suite, spi, esn=True)], wire)
    assert_packets(got, pkts, f"open (flag esn) {suite.id} {mode.id} of scapy esn_en packets")
    # control: without `flag esn` the ICV input differs, so every packet must be rejected
    _, got2, proc = ipsec.open([mode.spec(suite, spi)], wire, expect_rc=1)
    assert got2 == [], f"packets with an ESN ICV accepted by a non-ESN SA: {len(got2)} written"


@pytest.mark.parametrize("start", [0x1_0000_0005, 0xFFFF_FFFE], ids=["seq0x100000005", "wrap0xfffffffe"])
@pytest.mark.parametrize("suite,mode", ESN_MATRIX, ids=ESN_IDS)
def test_esn_open_scapy_packets_high_bits(ipsec, suite: Suite, mode: Mode, start: int):
    """scapy packets with ESN high bits != 0: `open --seq` starts the window there and the
    receiver must infer the high 32 bits (RFC 4303 A2.2), including across 2^32."""
    spi = spi_for(suite)
    pkts = mode.packets()
    wire = [lib.scapy_seal(suite, mode, p, start + i, spi, esn=True) for i, p in enumerate(pkts)]
    _, got, _ = ipsec.open([mode.spec(suite, spi, esn=True)], wire, seq=start)
    assert_packets(got, pkts, f"open --seq {start:#x} (flag esn) of scapy esn_en packets")


@pytest.mark.parametrize("suite_id", ["aes128cbc-sha1", "aes192cbc-sha256", "aes256cbc-sha512", "3des-md5"])
def test_auth_without_trunc_uses_rfc_icv_length(ipsec, suite_id):
    """`auth NAME KEY` (no explicit length) = the RFC truncation (96/96/128/192/256 bits)."""
    suite, mode = SUITES[suite_id], MODES["transport-v4"]
    spi = spi_for(suite)
    spec = mode.spec(suite, spi).replace(f"auth-trunc '{suite.auth}'", f"auth '{suite.auth}'")
    spec = spec[: spec.rindex(" ")]  # drop the ICV length word
    assert "auth-trunc" not in spec and spec.endswith(suite.auth_key.hex())
    pkts = mode.packets()
    _, got, _ = ipsec.seal([spec], pkts, seq=3, iv=suite.fixed_iv)
    exp = [lib.scapy_seal(suite, mode, p, 3 + i, spi, iv=suite.fixed_iv) for i, p in enumerate(pkts)]
    assert_packets(got, exp, f"seal with `auth '{suite.auth}' KEY`")


# ------------------------------------------------------------------------------------------
# Link types and stdin/stdout
# ------------------------------------------------------------------------------------------
MAC_DST, MAC_SRC = "02:00:00:00:00:02", "02:00:00:00:00:01"


def ether(frame_ip: bytes) -> bytes:
    from scapy.all import Ether

    et = 0x0800 if frame_ip[0] >> 4 == 4 else 0x86DD
    return bytes(Ether(dst=MAC_DST, src=MAC_SRC, type=et)) + frame_ip


@pytest.mark.parametrize("suite_id", ["aes128cbc-sha1", "gcm128-icv16"])
@pytest.mark.parametrize("mode_id", ["transport-v4", "transport-v6", "tunnel-4in4", "tunnel-6in4", "tunnel-4in6"])
def test_ethernet_linktype(ipsec, suite_id, mode_id):
    suite, mode = SUITES[suite_id], MODES[mode_id]
    spi = spi_for(suite)
    pkts = mode.packets()
    frames = [ether(p) for p in pkts]
    lt, got, _ = ipsec.seal([mode.spec(suite, spi)], frames, linktype=lib.LINKTYPE_ETHERNET,
                            seq=SEQ_A, iv=suite.fixed_iv)
    exp = [ether(lib.scapy_seal(suite, mode, p, SEQ_A + i, spi, iv=suite.fixed_iv))
           for i, p in enumerate(pkts)]
    assert_packets(got, exp, f"Ethernet seal {suite_id} {mode_id} (MACs kept, EtherType of outer IP)")
    lt, opened, _ = ipsec.open([mode.spec(suite, spi)], got, linktype=lib.LINKTYPE_ETHERNET)
    assert_packets(opened, frames, f"Ethernet open {suite_id} {mode_id}")


@pytest.mark.parametrize("mode_id", ["transport-v6", "tunnel-6in4"])
def test_ethernet_vlan_linktype(ipsec, mode_id):
    """Ethernet with one 802.1Q tag: tag kept, inner EtherType follows the outer IP version."""
    from scapy.all import Dot1Q, Ether

    suite, mode = SUITES["gcm128-icv16"], MODES[mode_id]
    spi = spi_for(suite)
    pkts = mode.packets()

    def tagged(ip: bytes) -> bytes:
        et = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
        return bytes(Ether(dst=MAC_DST, src=MAC_SRC, type=0x8100) / Dot1Q(prio=5, vlan=42, type=et)) + ip

    frames = [tagged(p) for p in pkts]
    _, got, _ = ipsec.seal([mode.spec(suite, spi)], frames, linktype=lib.LINKTYPE_ETHERNET,
                           seq=SEQ_A, iv=suite.fixed_iv)
    exp = [tagged(lib.scapy_seal(suite, mode, p, SEQ_A + i, spi, iv=suite.fixed_iv)) for i, p in enumerate(pkts)]
    assert_packets(got, exp, f"802.1Q Ethernet seal {mode_id}")
    _, opened, _ = ipsec.open([mode.spec(suite, spi)], got, linktype=lib.LINKTYPE_ETHERNET)
    assert_packets(opened, frames, f"802.1Q Ethernet open {mode_id}")


@pytest.mark.parametrize("linktype,mode_id", [(lib.LINKTYPE_IPV4, "transport-v4"), (lib.LINKTYPE_IPV6, "transport-v6"),
                                              (lib.LINKTYPE_IPV4, "tunnel-4in4"), (lib.LINKTYPE_IPV6, "tunnel-6in6")],
                         ids=["228-transport-v4", "229-transport-v6", "228-tunnel-4in4", "229-tunnel-6in6"])
def test_raw_ip_linktypes(ipsec, linktype, mode_id):
    suite, mode = SUITES["aes128cbc-sha1"], MODES[mode_id]
    spi = spi_for(suite)
    pkts = mode.packets()
    _, got, _ = ipsec.seal([mode.spec(suite, spi)], pkts, linktype=linktype, seq=SEQ_A, iv=suite.fixed_iv)
    exp = [lib.scapy_seal(suite, mode, p, SEQ_A + i, spi, iv=suite.fixed_iv) for i, p in enumerate(pkts)]
    assert_packets(got, exp, f"link type {linktype} seal")
    _, opened, _ = ipsec.open([mode.spec(suite, spi)], got, linktype=linktype)
    assert_packets(opened, pkts, f"link type {linktype} open")


def test_stdin_stdout(ipsec, tmp_path):
    suite, mode = SUITES["gcm128-icv16"], MODES["tunnel-4in4"]
    spi = spi_for(suite)
    pkts = mode.packets()
    src = tmp_path / "stdin.pcap"
    lib.write_pcap(src, pkts)
    spec = mode.spec(suite, spi)
    proc = ipsec.run(["seal", "--sa", spec, "--seq", "9", "--iv", suite.fixed_iv.hex()], stdin=src.read_bytes())
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    lt, got = lib.parse_pcap(proc.stdout)
    assert lt == lib.LINKTYPE_RAW
    exp = [lib.scapy_seal(suite, mode, p, 9 + i, spi, iv=suite.fixed_iv) for i, p in enumerate(pkts)]
    assert_packets(got, exp, "seal via stdin/stdout")
    proc = ipsec.run(["open", "--sa", spec], stdin=proc.stdout)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert_packets(lib.parse_pcap(proc.stdout)[1], pkts, "open via stdin/stdout")


# ------------------------------------------------------------------------------------------
# Rejections and exit codes
# ------------------------------------------------------------------------------------------
REJECT_SUITES = ["null-sha1", "aes128cbc-sha1", "aes256cbc-sha512", "3des-md5", "gcm128-icv16",
                 "gcm128-icv8", "chacha20poly1305"]


def _reported_packets(stderr: bytes):
    return sorted(int(n) for n in re.findall(rb"packet (\d+):", stderr))


def _flip(wire: bytes, off: int) -> bytes:
    b = bytearray(wire)
    b[off] ^= 0x01
    return bytes(b)


@pytest.mark.parametrize("where", ["ciphertext", "icv", "seq"])
@pytest.mark.parametrize("suite_id", REJECT_SUITES)
def test_open_rejects_tampered_packet(ipsec, suite_id, where):
    suite, mode = SUITES[suite_id], MODES["transport-v4"]
    spi = spi_for(suite)
    pkts = mode.packets()[:3]
    wire = [lib.scapy_seal(suite, mode, p, 1 + i, spi) for i, p in enumerate(pkts)]
    off = lib.esp_offset(wire[1])
    pos = {"ciphertext": off + 8 + suite.iv_len + 1, "icv": len(wire[1]) - 1, "seq": off + 7}[where]
    wire[1] = _flip(wire[1], pos)
    _, got, proc = ipsec.open([mode.spec(suite, spi)], wire, expect_rc=1)
    assert_packets(got, [pkts[0], pkts[2]], f"open with tampered packet ({where}) in the middle")
    # "packet N: reason" on stderr for exactly the bad packet (1-based N, or 0-based)
    assert _reported_packets(proc.stderr) in ([2], [1]), proc.stderr.decode(errors="replace")


def test_open_rejects_unknown_spi(ipsec):
    suite, mode = SUITES["aes128cbc-sha1"], MODES["transport-v4"]
    pkts = mode.packets()[:2]
    wire = [lib.scapy_seal(suite, mode, pkts[0], 1, 0x1111), lib.scapy_seal(suite, mode, pkts[1], 2, 0x2222)]
    _, got, proc = ipsec.open([mode.spec(suite, 0x1111)], wire, expect_rc=1)
    assert_packets(got, [pkts[0]], "open with a packet for an unknown SPI")
    assert _reported_packets(proc.stderr) in ([2], [1]), proc.stderr.decode(errors="replace")


def test_open_rejects_wrong_key(ipsec):
    suite, mode = SUITES["gcm128-icv16"], MODES["tunnel-4in4"]
    other = Suite(**{**suite.__dict__, "id": "gcm128-icv16-otherkey"})
    pkts = mode.packets()
    wire = [lib.scapy_seal(other, mode, p, 1 + i, 0x77) for i, p in enumerate(pkts)]
    _, got, _ = ipsec.open([mode.spec(suite, 0x77)], wire, expect_rc=1)
    assert got == [], "packets made with another key were accepted"


@pytest.mark.parametrize("suite_id", ["aes128cbc-sha1", "gcm128-icv16"])
def test_open_replay_window_drops_duplicate(ipsec, suite_id):
    suite, mode = SUITES[suite_id], MODES["transport-v6"]
    spi = spi_for(suite)
    pkts = mode.packets()[:3]
    wire = [lib.scapy_seal(suite, mode, p, 1 + i, spi) for i, p in enumerate(pkts)]
    _, got, proc = ipsec.open([mode.spec(suite, spi, replay_window=32)], [wire[0], wire[1], wire[1], wire[2]],
                              expect_rc=1)
    assert_packets(got, pkts, "open with a replayed packet (replay-window 32)")
    assert _reported_packets(proc.stderr) in ([3], [2]), proc.stderr.decode(errors="replace")


def test_open_picks_sa_by_spi(ipsec):
    """Two --sa options; `open` finds the SA by SPI, so packets that carry only one of the two
    ESP SAs are each opened with the right one."""
    s1, m1 = SUITES["aes128cbc-sha1"], MODES["transport-v4"]
    s2, m2 = SUITES["chacha20poly1305"], MODES["transport-v6"]
    p1, p2 = m1.packets()[:2], m2.packets()[:2]
    wire = [lib.scapy_seal(s1, m1, p1[0], 1, 0x1001), lib.scapy_seal(s2, m2, p2[0], 1, 0x1002),
            lib.scapy_seal(s1, m1, p1[1], 2, 0x1001), lib.scapy_seal(s2, m2, p2[1], 2, 0x1002)]
    _, got, _ = ipsec.open([m1.spec(s1, 0x1001), m2.spec(s2, 0x1002)], wire)
    assert_packets(got, [p1[0], p2[0], p1[1], p2[1]], "open with two SAs")


def _bad(spec_tail: str) -> str:
    return "proto esp spi 0x1000 mode transport " + spec_tail


BAD_SPECS = {
    "aes-15-byte-key": _bad(f"enc 'cbc(aes)' 0x{'11' * 15} auth-trunc 'hmac(sha1)' 0x{'22' * 20} 96"),
    "des-7-byte-key": _bad(f"enc 'cbc(des)' 0x{'11' * 7} auth-trunc 'hmac(sha1)' 0x{'22' * 20} 96"),
    "3des-16-byte-key": _bad(f"enc 'cbc(des3_ede)' 0x{'11' * 16} auth-trunc 'hmac(md5)' 0x{'22' * 16} 96"),
    "gcm-no-salt": _bad(f"aead 'rfc4106(gcm(aes))' 0x{'11' * 16} 128"),
    "gcm-icv-100": _bad(f"aead 'rfc4106(gcm(aes))' 0x{'11' * 20} 100"),
    "chacha-no-salt": _bad(f"aead 'rfc7539esp(chacha20,poly1305)' 0x{'11' * 32} 128"),
    "unknown-cipher": _bad(f"enc 'cbc(foo)' 0x{'11' * 16} auth-trunc 'hmac(sha1)' 0x{'22' * 20} 96"),
    "bad-hex": _bad(f"enc 'cbc(aes)' 0x{'1g' * 16} auth-trunc 'hmac(sha1)' 0x{'22' * 20} 96"),
}


@pytest.mark.parametrize("verb", ["seal", "open"])
@pytest.mark.parametrize("name", list(BAD_SPECS))
def test_bad_spec_exit_code_2(ipsec, tmp_path, name, verb):
    src = tmp_path / "in.pcap"
    lib.write_pcap(src, lib.packets_v4_basic())
    proc = ipsec.run([verb, "--sa", BAD_SPECS[name], "--in", str(src), "--out", str(tmp_path / "out.pcap")])
    assert proc.returncode == 2, (f"{name}: exit code {proc.returncode}, expected 2\n"
                                  f"stderr: {proc.stderr.decode(errors='replace')}")


def test_open_rejects_left_of_window(ipsec):
    """`open --seq 2000`: as if 1999 was the last packet seen; with the default window (1,024
    packets since issue #39's reordering under load) sequence numbers 1..3 are left of the
    window and rejected, 2000 is accepted."""
    suite, mode = SUITES["aes128cbc-sha1"], MODES["transport-v4"]
    spi = spi_for(suite)
    pkts = mode.packets()
    wire = [lib.scapy_seal(suite, mode, p, 1 + i, spi) for i, p in enumerate(pkts[:3])]
    wire.append(lib.scapy_seal(suite, mode, pkts[3], 2000, spi))
    _, got, proc = ipsec.open([mode.spec(suite, spi)], wire, seq=2000, expect_rc=1)
    assert_packets(got, [pkts[3]], "open --seq 2000 of packets 1,2,3,2000")
    assert _reported_packets(proc.stderr) in ([1, 2, 3], [0, 1, 2]), proc.stderr.decode(errors="replace")


# ------------------------------------------------------------------------------------------
# Bundles: ESP tunnel, then ESP transport on the outer header (nested ESP)
# ------------------------------------------------------------------------------------------
BUNDLE_INNER, BUNDLE_OUTER = SUITES["3des-md5"], SUITES["gcm128-icv16"]  # both 8-byte IVs
SPI_IN, SPI_OUT = 0x3001, 0x3002


def _bundle_specs():
    return [MODES["tunnel-6in4"].spec(BUNDLE_INNER, SPI_IN), MODES["transport-v4"].spec(BUNDLE_OUTER, SPI_OUT)]


def _scapy_bundle(inner: bytes, seq: int, iv):
    t = lib.scapy_seal(BUNDLE_INNER, MODES["tunnel-6in4"], inner, seq, SPI_IN, iv=iv)
    return lib.scapy_seal(BUNDLE_OUTER, MODES["transport-v4"], t, seq, SPI_OUT, iv=iv)


def test_bundle_seal_matches_scapy_bytes(ipsec):
    pkts = MODES["tunnel-6in4"].packets()
    iv = BUNDLE_INNER.fixed_iv
    _, got, _ = ipsec.seal(_bundle_specs(), pkts, seq=SEQ_A, iv=iv)
    exp = [_scapy_bundle(p, SEQ_A + i, iv) for i, p in enumerate(pkts)]
    assert_packets(got, exp, "bundle (ESP tunnel then ESP transport) vs nested scapy SAs")


def test_bundle_open_scapy_packets(ipsec):
    pkts = MODES["tunnel-6in4"].packets()
    wire = [_scapy_bundle(p, 1 + i, None) for i, p in enumerate(pkts)]
    _, got, _ = ipsec.open(_bundle_specs(), wire)
    assert_packets(got, pkts, "open of nested scapy ESP packets")
