#!/usr/bin/env python3
"""Reads an Apple property list (a .mobileconfig) with Python's plistlib and prints it as
JSON, bytes as hex; with a second argument (a PEM certificate file), also its DER as hex under
"_pem_der". For tests/profile_cli.rs: the profile must be a plist that Python's own parser takes."""
import json
import plistlib
import ssl
import sys


def conv(v):
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {k: conv(x) for k, x in v.items()}
    if isinstance(v, list):
        return [conv(x) for x in v]
    if isinstance(v, bool):
        return {"bool": v}
    return v


with open(sys.argv[1], "rb") as f:
    pl = plistlib.load(f, fmt=plistlib.FMT_XML)
out = conv(pl)
if len(sys.argv) > 2:
    with open(sys.argv[2]) as f:
        out["_pem_der"] = ssl.PEM_cert_to_DER_cert(f.read()).hex()
print(json.dumps(out))
