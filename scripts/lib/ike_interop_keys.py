#!/usr/bin/env python3
"""Checks of scripts/ci/ike-interop.sh on Wireshark key tables (test use only: they hold keys).

  ike_interop_keys.py agree CHARON_JSON --ikev2 TABLE --esp TABLE
      The keys tunneld wrote with --keylog (Wireshark's ikev2_decryption_table and esp_sa UAT
      files) are exactly those in charon's level-4 log (`charon_keys.py json` output): the same
      IKE SAs (by SPIi/SPIr) with the same SK_ei/SK_er/SK_ai/SK_ar, the same ESP SAs (by SPI)
      with the same encryption and integrity keys, nothing on one side missing on the other.

  ike_interop_keys.py esp PCAP --esp TABLE [--frames N]
      Opens every ESP-in-UDP datagram (port 4500, not a non-ESP marker or keepalive) of PCAP
      in Python (cryptography) with the keys of an esp_sa table: AES-GCM-16, ChaCha20-Poly1305
      (RFC 7634; what tshark 4.0 cannot), AES-CBC with HMAC-SHA2-256/384/512 or HMAC-SHA1-96; no ESN. Every
      ICV must verify, the padding be RFC 4303's, the next header 4 or 41 and the inner packet
      of that IP version; at least N datagrams.

  ike_interop_keys.py ike-table CHARON_JSON --spi-i SPI --spi-r SPI
      An ikev2_decryption_table line for the one IKE SA of a `charon_keys.py json` output,
      with the SPIs given (from the capture's IKE_SA_INIT): charon_keys.py learns the SPIs
      from the PSK AUTH computation's octets, which a responder whose AUTH check failed does
      not always log, so for the failure cases the SPIs come from the wire instead.

  ike_interop_keys.py any-address TABLE
      The esp_sa table with every address replaced by "*" (a NAT between where a table's
      addresses were seen and the capture), on stdout.
"""

import argparse
import csv
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from charon_keys import open_esp_in_udp, ws_ike_names  # noqa: E402  (same directory)


def rows(path):
    with open(path) as f:
        text = "".join(line for line in f if line.strip() and not line.startswith("#"))
    return list(csv.reader(io.StringIO(text)))


def ikev2_table(path):
    out = {}
    for r in rows(path):
        if len(r) != 8:
            sys.exit(f"ike_interop_keys: {path}: a line without 8 fields: {len(r)}")
        spi_i, spi_r, ei, er, enc, ai, ar, integ = (x.strip().lower() for x in r)
        out[(spi_i, spi_r)] = {"sk_ei": ei, "sk_er": er, "sk_ai": ai, "sk_ar": ar, "enc": enc, "integ": integ}
    return out


def esp_table(path):
    out = {}
    for r in rows(path):
        if len(r) != 8:
            sys.exit(f"ike_interop_keys: {path}: a line without 8 fields: {len(r)}")
        fam, src, dst, spi, enc, ek, integ, ik = (x.strip() for x in r)
        spi = int(spi, 16)
        out[spi] = {"fam": fam, "src": src, "dst": dst, "enc": enc, "ek": ek.lower().removeprefix("0x"),
                    "integ": integ, "ik": ik.lower().removeprefix("0x")}
    return out


def agree(a):
    with open(a.json) as f:
        j = json.load(f)
    bad = []
    ours = ikev2_table(a.ikev2)
    theirs = {}
    for x in j["ike_sas"]:
        if not x.get("spi_r"):
            continue
        theirs[(x["spi_i"].lower(), x["spi_r"].lower())] = x
    for k in sorted(set(ours) | set(theirs)):
        if k not in ours:
            bad.append(f"IKE SA {k[0]}/{k[1]}: in charon's log, not in tunneld's table")
        elif k not in theirs:
            bad.append(f"IKE SA {k[0]}/{k[1]}: in tunneld's table, not in charon's log")
        else:
            for n in ("sk_ei", "sk_er", "sk_ai", "sk_ar"):
                if ours[k][n] != (theirs[k].get(n) or "").lower():
                    bad.append(f"IKE SA {k[0]}/{k[1]}: {n} differs")
    esp = esp_table(a.esp)
    cesp = {}
    for c in j["child_sas"]:
        for d in ("initiator_to_responder", "responder_to_initiator"):
            sa = c[d]
            cesp[int(sa["spi"], 16)] = {"ek": sa["encr_key"].lower(), "ik": (sa.get("integ_key") or "").lower()}
    for spi in sorted(set(esp) | set(cesp)):
        if spi not in esp:
            bad.append(f"ESP SA {spi:08x}: in charon's log, not in tunneld's table")
        elif spi not in cesp:
            bad.append(f"ESP SA {spi:08x}: in tunneld's table, not in charon's log")
        else:
            for n, what in (("ek", "encryption key"), ("ik", "integrity key")):
                if esp[spi][n] != cesp[spi][n]:
                    bad.append(f"ESP SA {spi:08x}: {what} differs")
    if not ours:
        bad.append("no IKE SA in tunneld's table")
    if bad:
        print("ike_interop_keys: agree FAILED:\n  " + "\n  ".join(bad[:20]), file=sys.stderr)
        sys.exit(1)
    print(f"ike_interop_keys: tunneld's key tables equal charon's log: {len(ours)} IKE SA(s), "
          f"{len(esp)} ESP SA(s)")


def esp(a):
    sas = esp_table(a.esp)
    macs = {"HMAC-SHA-256-128 [RFC4868]": "sha256", "HMAC-SHA-384-192 [RFC4868]": "sha384",
            "HMAC-SHA-512-256 [RFC4868]": "sha512", "HMAC-SHA-1-96 [RFC2404]": "sha1"}

    def keys(spi):
        sa = sas.get(spi)
        if sa is None:
            return None
        if sa["enc"].startswith("AES-GCM with 16"):
            cipher = "gcm"
        elif sa["enc"].startswith("ChaCha20 with Poly1305"):
            cipher = "chacha"
        elif sa["enc"] == "AES-CBC [RFC3602]" and sa["integ"] in macs:
            cipher = "cbc"
        else:
            sys.exit(f"ike_interop_keys: esp: {sa['enc']} / {sa['integ']} not supported here")
        return cipher, bytes.fromhex(sa["ek"]), bytes.fromhex(sa["ik"]), macs.get(sa["integ"])
    n, spis = open_esp_in_udp(a.pcap, keys, a.frames, "ike_interop_keys: esp")
    print(f"ike_interop_keys: {n} ESP datagrams (SPIs {', '.join(sorted(spis))}) opened in Python: "
          "ICVs good, padding and inner packets right")


def ike_table(a):
    with open(a.json) as f:
        sas = json.load(f)["ike_sas"]
    if len(sas) != 1:
        sys.exit(f"ike_interop_keys: ike-table: {len(sas)} IKE SAs in {a.json}, expected one")
    x = sas[0]
    enc, integ = ws_ike_names(x["proposal"])
    print("# This file is automatically generated, DO NOT MODIFY.")
    print(f'{a.spi_i},{a.spi_r},{x["sk_ei"]},{x["sk_er"]},"{enc}",{x["sk_ai"] or ""},{x["sk_ar"] or ""},"{integ}"')


def any_address(a):
    with open(a.table) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                r = next(csv.reader([line.strip()]))
                r[1] = r[2] = "*"
                line = ",".join(f'"{x}"' for x in r) + "\n"
            sys.stdout.write(line)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("agree")
    s.add_argument("json")
    s.add_argument("--ikev2", required=True)
    s.add_argument("--esp", required=True)
    s.set_defaults(fn=agree)
    s = sub.add_parser("esp")
    s.add_argument("pcap")
    s.add_argument("--esp", required=True)
    s.add_argument("--frames", type=int, default=1)
    s.set_defaults(fn=esp)
    s = sub.add_parser("ike-table")
    s.add_argument("json")
    s.add_argument("--spi-i", required=True)
    s.add_argument("--spi-r", required=True)
    s.set_defaults(fn=ike_table)
    s = sub.add_parser("any-address")
    s.add_argument("table")
    s.set_defaults(fn=any_address)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
