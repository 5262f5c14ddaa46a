"""ESP interop against Wireshark's dissector (tshark 4.0): `ipsec seal` writes a pcap, tshark
decrypts it with the SA given as an `esp_sa` UAT entry and must report the ICV good and show
exactly the plaintext we sealed (payload, padding 1,2,3..., pad length, next header).

The UAT syntax used (Wireshark 4.0, 8 quoted fields):
  -o 'uat:esp_sa:"IPv4","203.0.113.1","203.0.113.2","0x80000142","AES-CBC [RFC3602]","0x<key>","HMAC-SHA-1-96 [RFC2404]","0x<key>"'
  fields: protocol ("IPv4"/"IPv6" = outer IP version), src, dst ("*" = any), SPI, encryption
  algorithm, encryption key (for AES-GCM: key || 4-byte salt), authentication algorithm
  ("NULL" for AES-GCM), authentication key.
Wireshark 4.0 has no ChaCha20-Poly1305 and no ESN for ESP, so those are not covered here.
"""

from __future__ import annotations

import os
import subprocess
from typing import Dict, List, Sequence

import pytest

import interop_lib as lib
from interop_lib import MODES, SUITES, Mode, Suite

FIELDS = ["frame.number", "esp.spi", "esp.sequence", "esp.icv_good", "esp.icv_bad", "esp.iv",
          "esp.pad_len", "esp.protocol", "esp.decrypted_data", "esp.contained_data", "data.data"]

SPI = 0x80000142


def run_tshark(tshark_bin: str, pcap, uats: Sequence[str], workdir) -> List[Dict[str, str]]:
    cfg = workdir / "wireshark-config"  # empty profile: ignore any user esp_sa file
    cfg.mkdir(exist_ok=True)
    cmd = [tshark_bin, "-n", "-r", str(pcap),
           "-o", "esp.enable_encryption_decode:TRUE",
           "-o", "esp.enable_authentication_check:TRUE",
           # hand the inner payload to the plain "data" dissector (no heuristics guessing at it)
           "-d", f"udp.port=={lib.UDP_DPORT},data", "-d", f"tcp.port=={lib.TCP_DPORT},data"]
    for u in uats:
        cmd += ["-o", u]
    cmd += ["-T", "fields", "-E", "header=n", "-E", "separator=/t", "-E", "occurrence=a",
            "-E", "aggregator=|"]
    for f in FIELDS:
        cmd += ["-e", f]
    env = dict(os.environ, WIRESHARK_CONFIG_DIR=str(cfg))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"tshark failed ({proc.returncode}): {proc.stderr}\n{cmd}"
    rows = []
    for line in proc.stdout.splitlines():
        vals = line.split("\t")
        assert len(vals) == len(FIELDS), f"unexpected tshark line {line!r}"
        rows.append(dict(zip(FIELDS, vals)))
    return rows


def uat_for(suite: Suite, mode: Mode, spi: int = SPI) -> str:
    src, dst = mode.wire_addrs
    return suite.ws_uat(f"IPv{mode.wire_version}", src, dst, spi)


def check_frames(rows, suite: Suite, mode: Mode, inners: List[bytes], seqs: List[int], spi: int = SPI):
    assert len(rows) == len(inners), f"tshark saw {len(rows)} frames, expected {len(inners)}"
    for i, (row, inner, seq) in enumerate(zip(rows, inners, seqs)):
        where = f"frame {i + 1} ({suite.id} {mode.id})"
        assert int(row["esp.spi"], 0) == spi, f"{where}: SPI {row['esp.spi']}"
        assert int(row["esp.sequence"]) == seq, f"{where}: sequence {row['esp.sequence']}"
        plain, nh = lib.esp_plaintext(suite, mode, inner)
        pad = lib.esp_trailer_padding(suite, len(plain))
        assert row["esp.contained_data"] != "", (
            f"{where}: tshark did not decrypt (no esp.contained_data); row={row}")
        lib.assert_same_bytes(bytes.fromhex(row["esp.contained_data"]), plain,
                              f"{where}: tshark esp.contained_data vs sealed payload")
        lib.assert_same_bytes(bytes.fromhex(row["esp.decrypted_data"]),
                              plain + pad + bytes([len(pad), nh]),
                              f"{where}: tshark esp.decrypted_data vs payload||padding||padlen||nh")
        assert int(row["esp.pad_len"]) == len(pad), f"{where}: pad length {row['esp.pad_len']}"
        assert int(row["esp.protocol"], 0) == nh, f"{where}: next header {row['esp.protocol']}"
        got_data = row["data.data"].split("|")[-1] if row["data.data"] else ""
        assert got_data == lib.l4_payload_of(inner).hex(), f"{where}: inner L4 payload {got_data!r}"
        if suite.has_integrity:
            assert (row["esp.icv_good"], row["esp.icv_bad"]) == ("1", "0"), (
                f"{where}: ICV not reported good: icv_good={row['esp.icv_good']!r} "
                f"icv_bad={row['esp.icv_bad']!r}")


# ------------------------------------------------------------------------------------------
# Matrix
# ------------------------------------------------------------------------------------------
MAIN_SUITES = ["aes128cbc-sha1", "gcm128-icv16", "3des-md5"]
MAIN_MODES = ["transport-v4", "transport-v4opts", "transport-v6", "transport-v6ext",
              "tunnel-4in4", "tunnel-6in6", "tunnel-6in4", "tunnel-4in6"]
EXTRA_MODES = ["transport-v4", "tunnel-6in6"]
TSHARK_MATRIX = [(SUITES[s], MODES[m]) for s in MAIN_SUITES for m in MAIN_MODES] + [
    (s, MODES[m]) for s in SUITES.values() if s.tshark_supported and s.id not in MAIN_SUITES
    for m in EXTRA_MODES]
TSHARK_IDS = [f"{s.id}-{m.id}" for s, m in TSHARK_MATRIX]


@pytest.mark.parametrize("suite,mode", TSHARK_MATRIX, ids=TSHARK_IDS)
def test_tshark_decrypts_reference_packets(tshark_bin, tmp_path, suite: Suite, mode: Mode):
    """Validates the UAT syntax and the checks themselves on scapy-made packets (no binary)."""
    pkts = mode.packets()
    wire = [lib.scapy_seal(suite, mode, p, 1 + i, SPI) for i, p in enumerate(pkts)]
    pcap = tmp_path / "ref.pcap"
    lib.write_pcap(pcap, wire)
    rows = run_tshark(tshark_bin, pcap, [uat_for(suite, mode)], tmp_path)
    check_frames(rows, suite, mode, pkts, [1 + i for i in range(len(pkts))])


@pytest.mark.parametrize("suite,mode", TSHARK_MATRIX, ids=TSHARK_IDS)
def test_tshark_decrypts_our_packets(ipsec, tshark_bin, tmp_path, suite: Suite, mode: Mode):
    pkts = mode.packets()
    _, wire, _ = ipsec.seal([mode.spec(suite, SPI)], pkts, seq=100)
    pcap = tmp_path / "ours.pcap"
    lib.write_pcap(pcap, wire)
    rows = run_tshark(tshark_bin, pcap, [uat_for(suite, mode)], tmp_path)
    check_frames(rows, suite, mode, pkts, [100 + i for i in range(len(pkts))])


NEG_MATRIX = [(SUITES[s], MODES[m]) for s in MAIN_SUITES for m in ["transport-v4", "tunnel-6in6", "tunnel-4in6"]]
NEG_IDS = [f"{s.id}-{m.id}" for s, m in NEG_MATRIX]


@pytest.mark.parametrize("source", ["scapy", "ours"])
@pytest.mark.parametrize("suite,mode", NEG_MATRIX, ids=NEG_IDS)
def test_tshark_flags_flipped_ciphertext(request, tshark_bin, tmp_path, suite: Suite, mode: Mode, source):
    """Frames 2 and 4 get one ciphertext byte flipped: tshark must report their ICV bad.

    The flipped byte sits in the middle of a 1000-byte UDP payload, so the garbled plaintext
    (one CBC block, or one byte for GCM) stays inside the payload and tshark's inner dissection
    still reaches the ICV check (a garbled inner IP header would stop it earlier).
    """
    big = mode.packets()[3]
    assert len(lib.l4_payload_of(big)) == 1000
    pkts = [mode.packets()[0], big, mode.packets()[1], big]
    if source == "ours":
        ipsec = request.getfixturevalue("ipsec")
        _, wire, _ = ipsec.seal([mode.spec(suite, SPI)], pkts)
    else:
        wire = [lib.scapy_seal(suite, mode, p, 1 + i, SPI) for i, p in enumerate(pkts)]
    for i in (1, 3):
        start = lib.esp_offset(wire[i]) + 8 + suite.iv_len
        ct_len = len(wire[i]) - start - suite.icv_len
        b = bytearray(wire[i])
        b[start + ct_len // 2] ^= 0x80
        wire[i] = bytes(b)
    pcap = tmp_path / "bad.pcap"
    lib.write_pcap(pcap, wire)
    rows = run_tshark(tshark_bin, pcap, [uat_for(suite, mode)], tmp_path)
    got = [(r["esp.icv_good"], r["esp.icv_bad"]) for r in rows]
    assert got == [("1", "0"), ("0", "1"), ("1", "0"), ("0", "1")], f"(icv_good, icv_bad) per frame: {got}"


def test_tshark_needs_the_right_key(ipsec, tshark_bin, tmp_path):
    """Control: with the right encryption key but a wrong authentication key in the UAT,
    tshark still decrypts but must report every ICV bad."""
    suite, mode = SUITES["aes128cbc-sha1"], MODES["transport-v4"]
    _, wire, _ = ipsec.seal([mode.spec(suite, SPI)], mode.packets(), seq=5, iv=suite.fixed_iv)
    pcap = tmp_path / "ours.pcap"
    lib.write_pcap(pcap, wire)
    uat = uat_for(suite, mode)
    wrong = bytes(b ^ 0x5A for b in suite.auth_key)
    assert suite.auth_key.hex() in uat
    rows = run_tshark(tshark_bin, pcap, [uat.replace(suite.auth_key.hex(), wrong.hex())], tmp_path)
    assert [r["esp.contained_data"] != "" for r in rows] == [True] * len(wire), "tshark did not decrypt"
    assert [(r["esp.icv_good"], r["esp.icv_bad"]) for r in rows] == [("0", "1")] * len(wire)
