#!/usr/bin/env python3
"""Keys out of strongSwan charon logs (filelog with ike = 4, chd = 4), for tests only.

Debian's strongSwan 5.9.8 has no save-keys plugin, but at log level 4 charon prints every
secret it derives as a hex dump. This reads one or more charon logs (both ends of a
connection, or one) and writes what they hold:

  charon_keys.py json  LOG... [-o FILE]            every IKE_SA and CHILD_SA with its keys
  charon_keys.py wireshark LOG... --ikev2 FILE --esp FILE [--esp-any-address]
                                                   Wireshark's ikev2_decryption_table and
                                                   esp_sa UAT files
  charon_keys.py check JSON                        recompute SKEYSEED, SK_*, the CHILD_SA
                                                   keys and both AUTH values of a `json`
                                                   output from the logged DH secret,
                                                   nonces and PSK (RFC 7296 2.13-2.15, 2.17)
  charon_keys.py vector INIT_LOG RESP_LOG -o DIR --name N --psk P --initiator-id I
                 --responder-id R --ike-proposal P --esp-proposal P
                                                   one recorded exchange (exactly one IKE_SA
                                                   from IKE_SA_INIT and one CHILD_SA from
                                                   IKE_AUTH) as DIR/vector.json and the same
                                                   flattened as DIR/keys.txt (`a.b = value`)
  charon_keys.py esp-check PCAP VECTOR_JSON [--frames N]
                                                   opens every ESP-in-UDP frame of PCAP with
                                                   the vector's CHILD_SA keys in Python
                                                   (cryptography: AES-GCM, ChaCha20-Poly1305,
                                                   AES-CBC + HMAC-SHA-256-128; no ESN): ICV
                                                   good, padding sane, an inner IP packet
  charon_keys.py verify PCAP --ikev2 FILE --esp FILE [--ike-frames N] [--esp-frames N]
                                                   tshark with those tables: every IKE frame
                                                   after IKE_SA_INIT decrypts with its
                                                   checksum/ICV correct, every ESP frame's
                                                   ICV is good and it holds an inner packet,
                                                   nothing else on UDP 500/4500 but NAT-T
                                                   keepalives; at least N of each

The log lines parsed (strongSwan 5.9.8, filelog with `time_format = %s`, `ike_name = yes`;
any time format works as long as the `NN[GRP]` thread/group tag is the first such token):

  TIME THR[GRP] <NAME|ID> LABEL => N bytes @ 0xADDR           a hex dump follows, one line
  TIME THR[GRP] <NAME|ID>    OFF: XX XX ... (16 per line)  ASCII    per 16 bytes, same thread
  [IKE] shared Diffie Hellman secret / SKEYSEED / Sk_d secret / Sk_ai secret / Sk_ar secret /
        Sk_ei secret / Sk_er secret / Sk_pi secret / Sk_pr secret      (keymat_v2.c, DBG4)
        (Sk_ai/Sk_ar only for non-AEAD proposals; Sk_ei/Sk_er include the AEAD salt)
  [IKE] IDx' / SK_p / octets = message + nonce + prf(Sk_px, IDx') / secret /
        prf(secret, keypad) / AUTH = prf(prf(secret, keypad), octets)   (PSK AUTH, DBG3/4)
  [CHD] DH secret (PFS only) / seed (= [g^ir] | Ni | Nr) / encryption initiator key /
        encryption responder key / integrity initiator key / integrity responder key
  [CHD] adding inbound ESP SA  +  next line `  SPI 0x1234abcd, src A dst B`   (DBG2)
  [IKE] CHILD_SA NAME{N} established with SPIs 1234abcd_i 5678ef01_o and TS L === R
  [CFG] selected proposal: IKE:AES_GCM_16_128/PRF_HMAC_SHA2_256/CURVE_25519   (or ESP:...)
  [ENC] generating|parsed EXCHANGE request|response MSGID [ ... ]             (DBG1)

Roles: a key block derived right after `parsed ... response` is the exchange initiator's,
after `parsed ... request` the responder's. The IKE SPIs, nonces and KE public values come
from the `octets` dumps (message + nonce of the PSK AUTH computation: the initiator signs
its IKE_SA_INIT request + Nr, the responder its IKE_SA_INIT response + Ni), so they are
known for IKE_SAs made by IKE_SA_INIT with PSK auth; an IKE_SA made by a CREATE_CHILD_SA
rekey is listed with its keys but without SPIs (and left out of the Wireshark table).

Wireshark names: Wireshark 4.0's strings (the ones strongSwan's save-keys plugin writes).
It has no ChaCha20-Poly1305 for ESP and no ESN, so such SAs are left out of esp_sa (said on
stderr); ESP SAs with ESN are written but their ICVs will not check in tshark 4.0.
"""

import argparse
import hashlib
import hmac
import json
import re
import sys

LINE = re.compile(r"(?P<thr>\d+)\[(?P<grp>[A-Z]{3})\] (?:<(?P<ctx>[^>]*)> )?(?P<msg>.*)$")
DUMP_HEAD = re.compile(r"^(?P<label>.*?) ?=> (?P<n>\d+) bytes @ 0x[0-9a-fA-F]+$")
DUMP_LINE = re.compile(r"^\s*(?P<off>\d+): (?P<rest>.*)$")
EXCHANGE = re.compile(r"^(?P<dir>generating|parsed) (?P<ex>[A-Z_]+) (?P<rr>request|response) (?P<mid>\d+)")
SA_SPI = re.compile(r"^\s*SPI 0x(?P<spi>[0-9a-f]+), src (?P<src>\S+) dst (?P<dst>\S+)")
CHILD_UP = re.compile(r"^CHILD_SA (?P<name>\S+)\{(?P<id>\d+)\} established with SPIs (?P<i>[0-9a-f]+)_i "
                      r"(?:\([^)]*\) )?(?P<o>[0-9a-f]+)_o (?:\([^)]*\) )?and TS (?P<lts>.*) === (?P<rts>.*)$")
PROPOSAL = re.compile(r"^selected proposal: (?P<p>(IKE|ESP|AH):\S+)")

IKE_LABELS = {
    "shared Diffie Hellman secret": "shared_secret", "SKEYSEED": "skeyseed", "Sk_d secret": "sk_d",
    "Sk_ai secret": "sk_ai", "Sk_ar secret": "sk_ar", "Sk_ei secret": "sk_ei", "Sk_er secret": "sk_er",
    "Sk_pi secret": "sk_pi", "Sk_pr secret": "sk_pr",
}
AUTH_LABELS = {
    "IDx'": "idx_prime", "SK_p": "sk_p", "octets = message + nonce + prf(Sk_px, IDx')": "octets",
    "secret": "psk", "prf(secret, keypad)": "prf_psk_keypad", "AUTH = prf(prf(secret, keypad), octets)": "auth",
}
CHILD_LABELS = {
    "DH secret": "pfs_shared_secret", "seed": "seed", "encryption initiator key": "encr_i",
    "encryption responder key": "encr_r", "integrity initiator key": "integ_i",
    "integrity responder key": "integ_r",
}


class LogError(Exception):
    pass


def ctx_id(ctx):
    """`sw|3` and `3` are the same IKE_SA (the name appears once a config is chosen)."""
    if ctx is None:
        return None
    return ctx.rsplit("|", 1)[-1]


def read_log(path):
    """The log as a list of events: ("dump", grp, ctx, label, bytes) / ("msg", grp, ctx, text)."""
    events, pending = [], {}  # pending: thread -> [event index, expected length, bytearray]
    with open(path, encoding="utf-8", errors="replace") as f:
        for no, raw in enumerate(f, 1):
            m = LINE.search(raw.rstrip("\n"))
            if not m:
                continue
            thr, grp, ctx, msg = m["thr"], m["grp"], ctx_id(m["ctx"]), m["msg"]
            if thr in pending:
                d = DUMP_LINE.match(msg)
                if d:
                    idx, want, buf = pending[thr]
                    hexpart = d["rest"][:48].split()
                    try:
                        buf.extend(bytes.fromhex("".join(hexpart)))
                    except ValueError as e:
                        raise LogError(f"{path}:{no}: bad hex dump line: {raw.strip()}") from e
                    if len(buf) >= want:
                        if len(buf) != want:
                            raise LogError(f"{path}:{no}: dump has {len(buf)} bytes, header said {want}")
                        ev = events[idx]
                        events[idx] = (ev[0], ev[1], ev[2], ev[3], bytes(buf), ev[5])
                        del pending[thr]
                    continue
                idx, want, buf = pending.pop(thr)
                raise LogError(f"{path}:{no}: dump `{events[idx][3]}` cut short ({len(buf)} of {want} bytes)")
            h = DUMP_HEAD.match(msg)
            if h:
                n = int(h["n"])
                events.append(("dump", grp, ctx, h["label"].strip(), b"" if n == 0 else None, no))
                if n:
                    pending[thr] = [len(events) - 1, n, bytearray()]
                continue
            events.append(("msg", grp, ctx, msg, None, no))
    if pending:
        raise LogError(f"{path}: dumps cut short at the end of the log: "
                       + ", ".join(events[i][3] for i, _, _ in pending.values()))
    return events


# ---- IKE messages (RFC 7296 3.1-3.2): just enough to find SPIs, nonces and KE data ----------

def parse_ike(msg):
    if len(msg) < 28:
        raise LogError("IKE message shorter than its header")
    length = int.from_bytes(msg[24:28], "big")
    if length < 28 or length > len(msg):
        raise LogError(f"IKE header length {length} does not fit {len(msg)} bytes")
    out = {"spi_i": msg[0:8].hex(), "spi_r": msg[8:16].hex(), "exchange": msg[18],
           "flags": msg[19], "message_id": int.from_bytes(msg[20:24], "big"), "length": length}
    nxt, off = msg[16], 28
    while nxt != 0:
        if off + 4 > length:
            raise LogError("IKE payload header past the message")
        plen = int.from_bytes(msg[off + 2:off + 4], "big")
        if plen < 4 or off + plen > length:
            raise LogError("IKE payload length out of range")
        body = msg[off + 4:off + plen]
        if nxt == 34:  # KE
            out["ke_group"] = int.from_bytes(body[0:2], "big")
            out["ke_data"] = body[4:].hex()
        elif nxt == 40:  # Nonce
            out["nonce"] = body.hex()
        elif nxt == 46:  # SK: nothing readable follows
            break
        nxt, off = msg[off], off + plen
    return out


# ---- one log: key blocks in order -----------------------------------------------------------

def role_from(last):
    """The exchange role of this charon for keys derived after `last` (an EXCHANGE match)."""
    if last is None:
        return None
    d, rr = last
    if d == "parsed":
        return "initiator" if rr == "response" else "responder"
    return "responder" if rr == "response" else "initiator"


def scan(path):
    events = read_log(path)
    ikes, auths, children = [], [], []
    last_ex, last_prop, ike_cur, child_cur, auth_cur = {}, {}, {}, {}, {}
    pending_sa = {}  # ctx -> "inbound"/"outbound" awaiting its SPI line
    for kind, grp, ctx, text, data, no in events:
        if kind == "msg":
            m = EXCHANGE.match(text)
            if m and ctx is not None:
                last_ex[ctx] = ((m["dir"], m["rr"]), m["ex"])
                continue
            m = PROPOSAL.match(text)
            if m and ctx is not None:
                last_prop.setdefault(ctx, {})[m["p"].split(":")[0]] = m["p"]
                continue
            if grp == "CHD" and text in ("adding inbound ESP SA", "adding outbound ESP SA"):
                pending_sa[ctx] = text.split()[1]
                continue
            m = SA_SPI.match(text)
            if m and ctx in pending_sa:
                c = child_cur.get(ctx)
                if c is None:
                    raise LogError(f"{path}:{no}: ESP SA installed without derived keys")
                c[pending_sa.pop(ctx)] = {"spi": m["spi"], "src": m["src"], "dst": m["dst"]}
                continue
            m = CHILD_UP.match(text)
            if m and ctx in child_cur:
                c = child_cur.pop(ctx)
                c.update(name=m["name"], child_id=int(m["id"]), local_ts=m["lts"], remote_ts=m["rts"])
                if c.get("inbound", {}).get("spi") != m["i"] or c.get("outbound", {}).get("spi") != m["o"]:
                    raise LogError(f"{path}:{no}: SPIs {m['i']}_i {m['o']}_o do not match the SAs added")
                continue
            continue
        label = text
        if grp == "IKE" and label in IKE_LABELS:
            field = IKE_LABELS[label]
            if field == "shared_secret" or ctx not in ike_cur:
                ex = last_ex.get(ctx)
                ike_cur[ctx] = {"log": path, "line": no, "ike_sa": ctx,
                                "exchange": ex[1] if ex else None, "role": role_from(ex[0] if ex else None),
                                "proposal": last_prop.get(ctx, {}).get("IKE")}
                ikes.append(ike_cur[ctx])
            if field in ike_cur[ctx]:
                raise LogError(f"{path}:{no}: `{label}` twice in one IKE key block")
            ike_cur[ctx][field] = data.hex()
        elif grp == "IKE" and label in AUTH_LABELS:
            field = AUTH_LABELS[label]
            if field == "idx_prime" or ctx not in auth_cur:
                auth_cur[ctx] = {"log": path, "line": no, "ike_sa": ctx}
                auths.append(auth_cur[ctx])
            auth_cur[ctx][field] = data.hex()
        elif grp == "CHD" and label in CHILD_LABELS:
            field = CHILD_LABELS[label]
            c = child_cur.get(ctx)
            if c is None or field in c:
                ex = last_ex.get(ctx)
                c = child_cur[ctx] = {"log": path, "line": no, "ike_sa": ctx,
                                      "exchange": ex[1] if ex else None,
                                      "role": role_from(ex[0] if ex else None),
                                      "proposal": last_prop.get(ctx, {}).get("ESP")}
                children.append(c)
            c[field] = data.hex()
    return ikes, auths, children


# ---- several logs: one record per SA --------------------------------------------------------

IKE_FIELDS = ["shared_secret", "skeyseed", "sk_d", "sk_ai", "sk_ar", "sk_ei", "sk_er", "sk_pi", "sk_pr"]


def merge(paths):
    ike_sas, child_sas = [], []
    for path in paths:
        ikes, auths, children = scan(path)
        # AUTH computations belong to the IKE_SA whose SK_pi/SK_pr they used.
        for a in auths:
            if "sk_p" not in a or "octets" not in a or "auth" not in a:
                raise LogError(f"{a['log']}:{a['line']}: incomplete PSK AUTH computation")
            owner = next((k for k in ikes if a["sk_p"] in (k.get("sk_pi"), k.get("sk_pr"))), None)
            if owner is None:
                raise LogError(f"{a['log']}:{a['line']}: AUTH computed with an SK_p no IKE_SA derived")
            who = "initiator" if a["sk_p"] == owner["sk_pi"] else "responder"
            prflen = len(bytes.fromhex(owner["sk_pi"]))
            octets = bytes.fromhex(a["octets"])
            msg = parse_ike(octets)
            nonce = octets[msg["length"]:len(octets) - prflen]
            rec = {"idx_prime": a["idx_prime"], "octets": a["octets"],
                   "prf_psk_keypad": a.get("prf_psk_keypad"), "auth": a["auth"]}
            owner.setdefault("auth", {})[who] = rec
            if a.get("psk"):
                owner["psk"] = bytes.fromhex(a["psk"]).decode("utf-8", "replace")
            # initiator signs its IKE_SA_INIT request + Nr, the responder its response + Ni
            owner.setdefault("init", {})["request" if who == "initiator" else "response"] = msg
            owner["init"]["nonce_r" if who == "initiator" else "nonce_i"] = nonce.hex()
        for k in ikes:
            key = k.get("skeyseed")
            same = next((x for x in ike_sas if x["skeyseed"] == key), None)
            if same is None:
                x = {f: k.get(f) for f in IKE_FIELDS}
                x.update(proposal=k["proposal"], created_by=k["exchange"], logs={})
                ike_sas.append(x)
                same = x
            else:
                for f in IKE_FIELDS:
                    if same.get(f) != k.get(f):
                        raise LogError(f"{k['log']}:{k['line']}: {f} differs from the other log's")
                if same["proposal"] != k["proposal"]:
                    raise LogError(f"{k['log']}:{k['line']}: IKE proposal differs between the logs")
            same["logs"][k["role"] or "unknown"] = {"log": k["log"], "ike_sa": k["ike_sa"], "line": k["line"]}
            for who, rec in k.get("auth", {}).items():
                same.setdefault("auth", {})[who] = rec
            if "psk" in k:
                same["psk"] = k["psk"]
            for n, v in k.get("init", {}).items():
                same.setdefault("init", {})[n] = v
        for c in children:
            if c.get("role") is None:
                raise LogError(f"{c['log']}:{c['line']}: CHILD_SA keys without an exchange before them")
            keys = {f: c.get(f) for f in ("encr_i", "encr_r", "integ_i", "integ_r")}
            sa_in, sa_out = c.get("inbound"), c.get("outbound")
            if not sa_in or not sa_out:
                raise LogError(f"{c['log']}:{c['line']}: CHILD_SA keys but no inbound/outbound SA added")
            init_side = c["role"] == "initiator"
            i2r = dict(sa_out if init_side else sa_in)
            r2i = dict(sa_in if init_side else sa_out)
            i2r.update(encr_key=keys["encr_i"], integ_key=keys["integ_i"])
            r2i.update(encr_key=keys["encr_r"], integ_key=keys["integ_r"])
            rec = {"name": c.get("name"), "proposal": c["proposal"], "created_by": c["exchange"],
                   "seed": c.get("seed"), "pfs_shared_secret": c.get("pfs_shared_secret"),
                   "initiator_to_responder": i2r, "responder_to_initiator": r2i}
            same = next((x for x in child_sas if x["initiator_to_responder"]["spi"] == i2r["spi"]
                         and x["responder_to_initiator"]["spi"] == r2i["spi"]), None)
            if same is None:
                rec["logs"] = {}
                child_sas.append(rec)
                same = rec
            else:
                for f in ("proposal", "seed", "pfs_shared_secret"):
                    if same[f] != rec[f]:
                        raise LogError(f"{c['log']}:{c['line']}: CHILD_SA {f} differs between the logs")
                # src/dst may differ (a NAT between the two ends): the first log's are kept
                for d in ("initiator_to_responder", "responder_to_initiator"):
                    for f in ("spi", "encr_key", "integ_key"):
                        if same[d][f] != rec[d][f]:
                            raise LogError(f"{c['log']}:{c['line']}: CHILD_SA {d} {f} differs between the logs")
            same["logs"][c["role"]] = {"log": c["log"], "ike_sa": c["ike_sa"], "line": c["line"],
                                       "local_ts": c.get("local_ts"), "remote_ts": c.get("remote_ts")}
    for x in ike_sas:
        init = x.get("init", {})
        for who, part in (("request", "i"), ("response", "r")):
            m = init.get(who)
            if m:
                if who == "response":
                    x["spi_i"], x["spi_r"] = m["spi_i"], m["spi_r"]
                else:
                    x.setdefault("spi_i", m["spi_i"])
                x[f"nonce_{part}"] = m.get("nonce")
                x[f"ke_{part}"] = m.get("ke_data")
                x["dh_group"] = m.get("ke_group")
        for n in ("nonce_i", "nonce_r"):
            if init.get(n):
                if x.get(n) not in (None, init[n]):
                    raise LogError(f"{n} of the IKE_SA_INIT message and of the AUTH octets differ")
                x[n] = init[n]
        x.pop("init", None)
    return ike_sas, child_sas


# ---- Wireshark UAT tables -------------------------------------------------------------------

def ws_ike_names(proposal):
    """(encryption, integrity) names of Wireshark's ikev2_decryption_table for a proposal."""
    parts = proposal.split(":", 1)[1].split("/")
    enc = integ = None
    for p in parts:
        m = re.fullmatch(r"AES_CBC_(\d+)", p)
        if m:
            enc = f"AES-CBC-{m[1]} [RFC3602]"
        m = re.fullmatch(r"AES_CTR_(\d+)", p)
        if m:
            enc = f"AES-CTR-{m[1]} [RFC5930]"
        m = re.fullmatch(r"AES_(GCM|CCM)_(8|12|16)_(\d+)", p)
        if m:
            enc = f"AES-{m[1]}-{m[3]} with {m[2]} octet ICV [RFC5282]"
            integ = "NONE [RFC4306]"
        if p == "3DES_CBC":
            enc = "3DES [RFC2451]"
        m = re.fullmatch(r"HMAC_SHA2_(256_128|384_192|512_256)", p)
        if m:
            integ = f"HMAC_SHA2_{m[1]} [RFC4868]"
        if p == "HMAC_SHA1_96":
            integ = "HMAC_SHA1_96 [RFC2404]"
        if p == "HMAC_MD5_96":
            integ = "HMAC_MD5_96 [RFC2403]"
    return enc, integ


def ws_esp_names(proposal):
    parts = proposal.split(":", 1)[1].split("/")
    enc = integ = None
    for p in parts:
        if re.fullmatch(r"AES_CBC_\d+", p):
            enc = "AES-CBC [RFC3602]"
        if re.fullmatch(r"AES_CTR_\d+", p):
            enc = "AES-CTR [RFC3686]"
        if p == "3DES_CBC":
            enc = "TripleDES-CBC [RFC2451]"
        m = re.fullmatch(r"AES_GCM_(8|12|16)_\d+", p)
        if m:
            enc, integ = f"AES-GCM with {m[1]} octet ICV [RFC4106]", "NULL"
        if p == "NULL":
            enc = "NULL"
        m = re.fullmatch(r"HMAC_SHA2_(256_128|384_192|512_256)", p)
        if m:
            integ = {"256_128": "HMAC-SHA-256-128 [RFC4868]", "384_192": "HMAC-SHA-384-192 [RFC4868]",
                     "512_256": "HMAC-SHA-512-256 [RFC4868]"}[m[1]]
        if p == "HMAC_SHA1_96":
            integ = "HMAC-SHA-1-96 [RFC2404]"
    return enc, integ


def wireshark(a):
    ike_sas, child_sas = merge(a.logs)
    ike_lines, esp_lines = [], []
    for x in ike_sas:
        if not x.get("spi_r"):
            print(f"charon_keys: IKE_SA with SKEYSEED {x['skeyseed'][:16]}... ({x['created_by']}): SPIs "
                  "unknown (not from IKE_SA_INIT with PSK), left out", file=sys.stderr)
            continue
        enc, integ = ws_ike_names(x["proposal"])
        if not enc or not integ:
            print(f"charon_keys: {x['proposal']}: no Wireshark name, IKE_SA {x['spi_i']} left out", file=sys.stderr)
            continue
        ike_lines.append(f'{x["spi_i"]},{x["spi_r"]},{x["sk_ei"]},{x["sk_er"]},"{enc}",'
                         f'{x["sk_ai"] or ""},{x["sk_ar"] or ""},"{integ}"')
    for c in child_sas:
        enc, integ = ws_esp_names(c["proposal"])
        if not enc or not integ:
            print(f"charon_keys: {c['proposal']}: Wireshark 4.0 cannot decrypt it, CHILD_SA "
                  f"{c['initiator_to_responder']['spi']}/{c['responder_to_initiator']['spi']} left out", file=sys.stderr)
            continue
        if "/EXT_SEQ" in c["proposal"]:
            print(f"charon_keys: {c['proposal']}: ESN, which Wireshark 4.0's esp_sa cannot express", file=sys.stderr)
        for d in ("initiator_to_responder", "responder_to_initiator"):
            sa = c[d]
            fam = "IPv6" if ":" in sa["src"] else "IPv4"
            src, dst = ("*", "*") if a.esp_any_address else (sa["src"], sa["dst"])
            ik = ("0x" + sa["integ_key"]) if sa["integ_key"] else ""
            esp_lines.append(f'"{fam}","{src}","{dst}","0x{sa["spi"]}","{enc}","0x{sa["encr_key"]}",'
                             f'"{integ}","{ik}"')
    with open(a.ikev2, "w") as f:
        f.write("# This file is automatically generated, DO NOT MODIFY.\n")
        f.writelines(line + "\n" for line in ike_lines)
    with open(a.esp, "w") as f:
        f.write("# This file is automatically generated, DO NOT MODIFY.\n")
        f.writelines(line + "\n" for line in esp_lines)
    print(f"charon_keys: {len(ike_lines)} IKE_SA(s) to {a.ikev2}, {len(esp_lines)} ESP SA(s) to {a.esp}")
    if not ike_lines:
        sys.exit("charon_keys: no IKE_SA with keys and SPIs in the logs")


def to_json(a):
    ike_sas, child_sas = merge(a.logs)
    out = json.dumps({"ike_sas": ike_sas, "child_sas": child_sas}, indent=2) + "\n"
    if a.output:
        with open(a.output, "w") as f:
            f.write(out)
    else:
        sys.stdout.write(out)


# ---- independent recomputation (RFC 7296 2.13-2.15, 2.17) -----------------------------------

PRFS = {"PRF_HMAC_SHA2_256": hashlib.sha256, "PRF_HMAC_SHA2_384": hashlib.sha384,
        "PRF_HMAC_SHA2_512": hashlib.sha512, "PRF_HMAC_SHA1": hashlib.sha1}


def prf_plus(h, key, seed, n):
    out, t, i = b"", b"", 1
    while len(out) < n:
        t = hmac.new(key, t + seed + bytes([i]), h).digest()
        out += t
        i += 1
    return out[:n]


def check(a):
    with open(a.json) as f:
        v = json.load(f)
    if "ike_sa" in v:  # a vector.json: the same checks on its one IKE_SA and CHILD_SA
        x = dict(v["ike_sa"], proposal=v["proposals"]["ike_selected"], created_by="IKE_SA_INIT", psk=v["psk"],
                 auth={"initiator": v["ike_sa"]["auth_i"], "responder": v["ike_sa"]["auth_r"]})
        c = dict(v["child_sa"], proposal=v["proposals"]["esp_selected"], created_by="IKE_AUTH")
        v = {"ike_sas": [x], "child_sas": [c]}
    bad, done = [], 0
    h = None
    for x in v["ike_sas"]:
        prf = next(p for p in x["proposal"].split("/") if p.startswith("PRF_"))
        h = PRFS[prf]
        b = lambda k: bytes.fromhex(x[k]) if x.get(k) else b""  # noqa: E731
        if x["created_by"] == "IKE_SA_INIT":
            ni, nr = b("nonce_i"), b("nonce_r")
            skeyseed = hmac.new(ni + nr, b("shared_secret"), h).digest()
            if skeyseed != b("skeyseed"):
                bad.append(f"IKE_SA {x.get('spi_i')}: SKEYSEED != prf(Ni | Nr, g^ir)")
            sizes = [len(b(k)) for k in ("sk_d", "sk_ai", "sk_ar", "sk_ei", "sk_er", "sk_pi", "sk_pr")]
            km = prf_plus(h, skeyseed, ni + nr + b("spi_i") + b("spi_r"), sum(sizes))
            off = 0
            for k, n in zip(("sk_d", "sk_ai", "sk_ar", "sk_ei", "sk_er", "sk_pi", "sk_pr"), sizes):
                if km[off:off + n] != b(k):
                    bad.append(f"IKE_SA {x['spi_i']}: {k} != its slice of prf+(SKEYSEED, Ni | Nr | SPIi | SPIr)")
                off += n
            psk = x.get("psk", "").encode()
            for who, skp, nonce in (("initiator", b("sk_pi"), nr), ("responder", b("sk_pr"), ni)):
                au = x.get("auth", {}).get(who)
                if not au:
                    bad.append(f"IKE_SA {x['spi_i']}: no {who} AUTH logged")
                    continue
                octets = bytes.fromhex(au["octets"])
                mac_id = hmac.new(skp, bytes.fromhex(au["idx_prime"]), h).digest()
                if not octets.endswith(nonce + mac_id):
                    bad.append(f"IKE_SA {x['spi_i']}: {who} octets != message | nonce | prf(SK_p, IDx')")
                key = hmac.new(psk, b"Key Pad for IKEv2", h).digest()
                if hmac.new(key, octets, h).digest() != bytes.fromhex(au["auth"]):
                    bad.append(f"IKE_SA {x['spi_i']}: {who} AUTH != prf(prf(PSK, \"Key Pad for IKEv2\"), octets)")
            done += 1
    for c in v["child_sas"]:
        parent = next((x for x in v["ike_sas"] if c["created_by"] == "IKE_AUTH" and x.get("created_by") == "IKE_SA_INIT"
                       and c["seed"] == (x.get("nonce_i", "") + x.get("nonce_r", ""))), None)
        if c["created_by"] == "IKE_AUTH" and parent is None:
            bad.append(f"CHILD_SA {c['initiator_to_responder']['spi']}: seed is not Ni | Nr of any IKE_SA")
            continue
        if parent is None:
            continue  # CREATE_CHILD_SA: nonces only in the encrypted exchange
        hp = PRFS[next(p for p in parent["proposal"].split("/") if p.startswith("PRF_"))]
        i2r, r2i = c["initiator_to_responder"], c["responder_to_initiator"]
        ks = [len(bytes.fromhex(i2r["encr_key"] or "")), len(bytes.fromhex(i2r["integ_key"] or ""))]
        km = prf_plus(hp, bytes.fromhex(parent["sk_d"]), bytes.fromhex(c["seed"]), 2 * sum(ks))
        want = [km[:ks[0]], km[ks[0]:sum(ks)], km[sum(ks):sum(ks) + ks[0]], km[sum(ks) + ks[0]:]]
        got = [bytes.fromhex(i2r["encr_key"] or ""), bytes.fromhex(i2r["integ_key"] or ""),
               bytes.fromhex(r2i["encr_key"] or ""), bytes.fromhex(r2i["integ_key"] or "")]
        if want != got:
            bad.append(f"CHILD_SA {i2r['spi']}: keys != prf+(SK_d, Ni | Nr) split as encr_i|integ_i|encr_r|integ_r")
        done += 1
    if bad:
        print("charon_keys: check FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
        sys.exit(1)
    print(f"charon_keys: check: {done} SAs' keys recomputed from the logged secrets, all match")


# ---- a test vector -------------------------------------------------------------------------

def flatten(prefix, v, out):
    if isinstance(v, dict):
        for k, x in v.items():
            flatten(f"{prefix}.{k}" if prefix else k, x, out)
    elif v is not None:
        out.append(f"{prefix} = {str(v).lower() if isinstance(v, bool) else v}")


def vector(a):
    import os
    ike_sas, child_sas = merge([a.initiator_log, a.responder_log])
    ikes = [x for x in ike_sas if x["created_by"] == "IKE_SA_INIT"]
    kids = [c for c in child_sas if c["created_by"] == "IKE_AUTH"]
    if len(ikes) != 1 or len(kids) != 1 or len(ike_sas) != 1 or len(child_sas) != 1:
        raise LogError(f"expected one IKE_SA (IKE_SA_INIT) and one CHILD_SA (IKE_AUTH), got "
                       f"{len(ike_sas)} and {len(child_sas)}")
    x, c = ikes[0], kids[0]
    if set(x["logs"]) != {"initiator", "responder"} or set(c["logs"]) != {"initiator", "responder"}:
        raise LogError("the SAs are not in both logs with both roles")
    if x["logs"]["initiator"]["log"] != a.initiator_log:
        raise LogError(f"{a.initiator_log} is the responder's log")
    if x.get("psk") != a.psk:
        raise LogError("the PSK in the log is not the one given")
    for n in ("spi_i", "spi_r", "nonce_i", "nonce_r", "ke_i", "ke_r", "shared_secret", "skeyseed"):
        if not x.get(n):
            raise LogError(f"no {n} for the IKE_SA")
    auth = x.get("auth", {})
    if set(auth) != {"initiator", "responder"}:
        raise LogError("not both AUTH computations logged")
    ts = {r: c["logs"][r] for r in ("initiator", "responder")}
    esn = "/EXT_SEQ" in c["proposal"]
    v = {
        "name": a.name,
        "strongswan": a.strongswan,
        "psk": a.psk,
        "initiator": {"id": a.initiator_id, "id_type": "FQDN", "address": c["initiator_to_responder"]["src"],
                      "ts": ts["initiator"]["local_ts"]},
        "responder": {"id": a.responder_id, "id_type": "FQDN", "address": c["initiator_to_responder"]["dst"],
                      "ts": ts["responder"]["local_ts"]},
        "proposals": {"ike_configured": a.ike_proposal, "ike_selected": x["proposal"],
                      "esp_configured": a.esp_proposal,
                      "esp_configured_responder": a.esp_proposal_responder or a.esp_proposal,
                      "esp_selected": c["proposal"]},
        "ike_sa": {
            "spi_i": x["spi_i"], "spi_r": x["spi_r"], "dh_group": x["dh_group"],
            "ke_i": x["ke_i"], "ke_r": x["ke_r"], "nonce_i": x["nonce_i"], "nonce_r": x["nonce_r"],
            "shared_secret": x["shared_secret"], "skeyseed": x["skeyseed"], "sk_d": x["sk_d"],
            "sk_ai": x["sk_ai"], "sk_ar": x["sk_ar"], "sk_ei": x["sk_ei"], "sk_er": x["sk_er"],
            "sk_pi": x["sk_pi"], "sk_pr": x["sk_pr"],
            "auth_i": {"idx_prime": auth["initiator"]["idx_prime"], "octets": auth["initiator"]["octets"],
                       "prf_psk_keypad": auth["initiator"]["prf_psk_keypad"], "auth": auth["initiator"]["auth"]},
            "auth_r": {"idx_prime": auth["responder"]["idx_prime"], "octets": auth["responder"]["octets"],
                       "prf_psk_keypad": auth["responder"]["prf_psk_keypad"], "auth": auth["responder"]["auth"]},
        },
        "child_sa": {
            "name": c["name"], "mode": "tunnel", "esn": esn, "seed": c["seed"],
            "initiator_to_responder": {k: c["initiator_to_responder"][k]
                                       for k in ("spi", "src", "dst", "encr_key", "integ_key")},
            "responder_to_initiator": {k: c["responder_to_initiator"][k]
                                       for k in ("spi", "src", "dst", "encr_key", "integ_key")},
        },
    }
    os.makedirs(a.output, exist_ok=True)
    with open(os.path.join(a.output, "vector.json"), "w") as f:
        f.write(json.dumps(v, indent=2) + "\n")
    flat = [f"# {a.name}: strongSwan {a.strongswan} charon <-> charon, keys from their level-4 logs",
            "# (tests/data/ike/README.md says what each name means; hex unless said otherwise)"]
    flatten("", v, flat)
    with open(os.path.join(a.output, "keys.txt"), "w") as f:
        f.write("\n".join(flat) + "\n")
    print(f"charon_keys: vector {a.name}: IKE_SA {x['spi_i']}/{x['spi_r']} {x['proposal']}, CHILD_SA "
          f"{c['initiator_to_responder']['spi']}/{c['responder_to_initiator']['spi']} {c['proposal']}")


# ---- ESP in Python (what tshark 4.0 cannot: ChaCha20-Poly1305) ------------------------------

def pcap_udp_payloads(path):
    """(src, dst, sport, dport, payload) of each UDP datagram in a classic pcap (Ethernet)."""
    import struct
    data = open(path, "rb").read()
    magic = data[:4]
    if magic == b"\xd4\xc3\xb2\xa1":
        end = "<"
    elif magic == b"\xa1\xb2\xc3\xd4":
        end = ">"
    else:
        raise LogError(f"{path}: not a classic pcap")
    if struct.unpack(end + "I", data[20:24])[0] != 1:
        raise LogError(f"{path}: link type is not Ethernet")
    off, out = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        et, p = int.from_bytes(frame[12:14], "big"), 14
        if et == 0x0800:
            ihl = (frame[p] & 15) * 4
            proto, src, dst = frame[p + 9], frame[p + 12:p + 16], frame[p + 16:p + 20]
            p += ihl
        elif et == 0x86DD:
            proto, src, dst = frame[p + 6], frame[p + 8:p + 24], frame[p + 24:p + 40]
            p += 40
        else:
            continue
        if proto != 17:
            continue
        sport, dport, ulen = struct.unpack(">HHH", frame[p:p + 6])
        out.append((src, dst, sport, dport, frame[p + 8:p + ulen]))
    return out


# ESP-in-UDP datagrams of a capture opened in Python: the one ESP decoder of the harness
# (charon_keys.py esp-check and ike_interop_keys.py esp).
ESP_MACS = {"sha256": (hashlib.sha256, 16), "sha384": (hashlib.sha384, 24), "sha512": (hashlib.sha512, 32),
            "sha1": (hashlib.sha1, 12)}


def open_esp_in_udp(pcap, keys, frames, who):
    """Opens every ESP-in-UDP datagram (port 4500, not a non-ESP marker or keepalive) of PCAP.

    keys(spi) gives (cipher, ek, ik, mac) or None for an SPI not known: cipher "gcm",
    "chacha" (ek with its 4-byte salt) or "cbc" (AES-CBC with mac, a key of ESP_MACS). Every
    ICV must verify, the padding be RFC 4303's, the next header 4 or 41 and the inner packet
    of that IP version, and there must be at least FRAMES datagrams; exits 1 naming what did
    not hold. Returns (datagrams opened, SPIs seen as hex strings).
    """
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
    bad, n, spis = [], 0, set()
    for i, (src, dst, sport, dport, pl) in enumerate(pcap_udp_payloads(pcap), 1):
        if 4500 not in (sport, dport) or len(pl) < 8 or pl[:4] == b"\0\0\0\0" or pl == b"\xff":
            continue
        spi = int.from_bytes(pl[:4], "big")
        k = keys(spi)
        if k is None:
            bad.append(f"datagram {i}: ESP SPI {spi:08x} is not a known SA")
            continue
        n += 1
        spis.add(f"{spi:08x}")
        cipher, ek, ik, mac = k
        try:
            if cipher in ("gcm", "chacha"):
                aead = AESGCM(ek[:-4]) if cipher == "gcm" else ChaCha20Poly1305(ek[:-4])
                plain = aead.decrypt(ek[-4:] + pl[8:16], pl[16:], pl[:8])
            else:
                h, t = ESP_MACS[mac]
                icv, signed = pl[-t:], pl[:-t]
                if not hmac.compare_digest(hmac.new(ik, signed, h).digest()[:t], icv):
                    raise ValueError("ICV")
                dec = Cipher(algorithms.AES(ek), modes.CBC(pl[8:24])).decryptor()
                plain = dec.update(pl[24:-t]) + dec.finalize()
        except Exception as e:  # InvalidTag or the ICV above
            bad.append(f"datagram {i}: SPI {spi:08x}: ICV does not verify ({type(e).__name__})")
            continue
        padlen, nh = plain[-2], plain[-1]
        inner = plain[:len(plain) - 2 - padlen]
        pad = plain[len(plain) - 2 - padlen:-2]
        if pad != bytes(range(1, padlen + 1)) or nh not in (4, 41) or not inner or inner[0] >> 4 != (4 if nh == 4 else 6):
            bad.append(f"datagram {i}: SPI {spi:08x}: opened but padding/next header/inner packet wrong")
    if n < frames:
        bad.append(f"{n} ESP datagrams, expected at least {frames}")
    if bad:
        print(f"{who} FAILED:\n  " + "\n  ".join(bad[:20]), file=sys.stderr)
        sys.exit(1)
    return n, spis


def esp_check(a):
    with open(a.vector) as f:
        v = json.load(f)
    prop = v["proposals"]["esp_selected"]
    if "/EXT_SEQ" in prop:
        sys.exit("charon_keys: esp-check: ESN SAs not supported here")
    if prop.startswith("ESP:AES_GCM_16"):
        cipher, mac = "gcm", None
    elif prop.startswith("ESP:CHACHA20_POLY1305"):
        cipher, mac = "chacha", None
    elif prop.startswith("ESP:AES_CBC") and "HMAC_SHA2_256_128" in prop:
        cipher, mac = "cbc", "sha256"
    else:
        sys.exit(f"charon_keys: esp-check: {prop} not supported here")
    sas = {int(v["child_sa"][d]["spi"], 16): v["child_sa"][d]
           for d in ("initiator_to_responder", "responder_to_initiator")}

    def keys(spi):
        sa = sas.get(spi)
        return sa and (cipher, bytes.fromhex(sa["encr_key"]), bytes.fromhex(sa["integ_key"] or ""), mac)
    n, spis = open_esp_in_udp(a.pcap, keys, a.frames, "charon_keys: esp-check")
    print(f"charon_keys: esp-check: {n} ESP datagrams (SPIs {', '.join(sorted(spis))}) opened in Python "
          f"with the vector's keys: ICVs good, padding and inner packets right")


# ---- tshark with the tables ----------------------------------------------------------------

def verify(a):
    import os
    import shutil
    import subprocess
    import tempfile
    conf = tempfile.mkdtemp(prefix="charon-keys-ws-")
    try:
        shutil.copy(a.ikev2, os.path.join(conf, "ikev2_decryption_table"))
        shutil.copy(a.esp, os.path.join(conf, "esp_sa"))
        env = dict(os.environ, WIRESHARK_CONFIG_DIR=conf)
        base = ["tshark", "-n", "-r", a.pcap, "-o", "esp.enable_encryption_decode:TRUE",
                "-o", "esp.enable_authentication_check:TRUE", "-o", "esp.enable_null_encryption_decode_heuristic:FALSE"]

        def fields(filt, names):
            cmd = base + ["-Y", filt, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a",
                          "-E", "aggregator=/s"] + [x for n in names for x in ("-e", n)]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
            if p.returncode != 0:
                sys.exit(f"charon_keys: tshark failed: {p.stderr.strip()}")
            return [dict(zip(names, line.split("\t"))) for line in p.stdout.splitlines() if line.strip()]
        bad = []
        ike = fields("isakmp", ["frame.number", "isakmp.exchangetype", "isakmp.enc.iv", "isakmp.enc.decrypted",
                                "isakmp.ikev2.integrity_checksum", "isakmp.nextpayload", "_ws.expert.severity",
                                "_ws.expert.message"])
        for r in ike:
            # garbage out of a wrong SK_e shows as "Malformed Packet" or "Pad length is too big"
            if any(int(x) >= 0x600000 for x in r["_ws.expert.severity"].split() if x.isdigit()):
                bad.append(f"frame {r['frame.number']}: tshark warns: {r['_ws.expert.message']}")
                continue
            if r["isakmp.exchangetype"] == "34":  # IKE_SA_INIT: in the clear
                continue
            if not r["isakmp.enc.iv"]:
                bad.append(f"frame {r['frame.number']}: IKE exchange {r['isakmp.exchangetype']} without an SK payload")
            elif r["isakmp.enc.decrypted"] != "1" or r["isakmp.ikev2.integrity_checksum"]:
                bad.append(f"frame {r['frame.number']}: IKE exchange {r['isakmp.exchangetype']} not decrypted "
                           "with a correct checksum")
        esp = fields("esp", ["frame.number", "esp.spi", "esp.sequence", "esp.icv_good", "esp.icv_bad",
                             "ip.version", "ip.proto", "ipv6.nxt"])
        for r in esp:
            inner = len(r["ip.version"].split()) >= 2
            if r["esp.icv_good"] != "1" or r["esp.icv_bad"] not in ("", "0") or not inner:
                bad.append(f"frame {r['frame.number']}: ESP SPI {r['esp.spi']} seq {r['esp.sequence']}: ICV good "
                           f"{r['esp.icv_good'] or '?'}, inner packet {'yes' if inner else 'no'}")
        other = fields("(udp.port == 500 || udp.port == 4500) && !isakmp && !esp && !udpencap.nat_keepalive",
                       ["frame.number", "udp.srcport", "udp.dstport"])
        for r in other:
            bad.append(f"frame {r['frame.number']}: UDP {r['udp.srcport']}->{r['udp.dstport']} is neither IKE nor ESP")
        n_enc = sum(1 for r in ike if r["isakmp.exchangetype"] != "34")
        if len(ike) < a.ike_frames:
            bad.append(f"{len(ike)} IKE frames, expected at least {a.ike_frames}")
        if len(esp) < a.esp_frames:
            bad.append(f"{len(esp)} ESP frames, expected at least {a.esp_frames}")
        spis = sorted({r["esp.spi"] for r in esp})
        if bad:
            print("charon_keys: verify FAILED:\n  " + "\n  ".join(bad[:20]), file=sys.stderr)
            sys.exit(1)
        esp_said = (f"{len(esp)} ESP frames (SPIs {', '.join(spis)}): every ICV good" if esp
                    else "no ESP frames")
        print(f"charon_keys: tshark: {len(ike)} IKE frames ({n_enc} encrypted: all decrypted, checksums correct), "
              f"{esp_said}")
    finally:
        shutil.rmtree(conf, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("json")
    s.add_argument("logs", nargs="+")
    s.add_argument("-o", "--output")
    s.set_defaults(fn=to_json)
    s = sub.add_parser("wireshark")
    s.add_argument("logs", nargs="+")
    s.add_argument("--ikev2", required=True)
    s.add_argument("--esp", required=True)
    s.add_argument("--esp-any-address", action="store_true",
                   help='"*" for the ESP SAs\' addresses (a NAT between the logs and the capture)')
    s.set_defaults(fn=wireshark)
    s = sub.add_parser("check")
    s.add_argument("json")
    s.set_defaults(fn=check)
    s = sub.add_parser("vector")
    s.add_argument("initiator_log")
    s.add_argument("responder_log")
    s.add_argument("-o", "--output", required=True)
    for n in ("name", "psk", "initiator-id", "responder-id", "ike-proposal", "esp-proposal", "strongswan"):
        s.add_argument("--" + n, required=True)
    s.add_argument("--esp-proposal-responder", help="the responder's, if not --esp-proposal")
    s.set_defaults(fn=vector)
    s = sub.add_parser("esp-check")
    s.add_argument("pcap")
    s.add_argument("vector")
    s.add_argument("--frames", type=int, default=1)
    s.set_defaults(fn=esp_check)
    s = sub.add_parser("verify")
    s.add_argument("pcap")
    s.add_argument("--ikev2", required=True)
    s.add_argument("--esp", required=True)
    s.add_argument("--ike-frames", type=int, default=1)
    s.add_argument("--esp-frames", type=int, default=0)
    s.set_defaults(fn=verify)
    a = p.parse_args()
    try:
        a.fn(a)
    except LogError as e:
        sys.exit(f"charon_keys: {e}")


if __name__ == "__main__":
    main()
