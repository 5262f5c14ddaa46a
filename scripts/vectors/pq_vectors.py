#!/usr/bin/env python3
"""Known-answer vectors for the post-quantum key derivation, from a strongSwan 6.1 charon log
written with ike=4 chd=4 (scripts/ci/ike-pq.sh rekey with PQ_SWAN_LOG="ike=4 chd=4 ..."): its
own dumps of the secrets, nonces, SKEYSEED and child keys, not anything tunneld computed.

    python3 scripts/vectors/pq_vectors.py charon.log > crates/ike/tests/vectors/strongswan61-pq.txt

Records (hex), one a line:
  intermediate SK_D_PREV SK(n) NI NR SKEYSEED      RFC 9370 2.2.2, after IKE_INTERMEDIATE n
  ikerekey SK_D_OLD SK(0) SK(1..n) NI NR SKEYSEED  2.2.4, an IKE rekey with IKE_FOLLOWUP_KE
  child SK_D SK(0) SK(1..n) NI NR ENCR_I ENCR_R    2.2.4, a child rekey with IKE_FOLLOWUP_KE
"""
import re
import sys

HEAD = re.compile(r"^\d+ \d+\[(IKE|CHD)\] <([^>]*)> (.+?) => (\d+) bytes")
ROW = re.compile(r"^\d+ \d+\[(?:IKE|CHD)\] <[^>]*> +\d+: ((?:[0-9A-F]{2} ?)+)")


def dumps(path):
    """(context, name, bytes) of every hex dump, in order."""
    out, cur = [], None
    for line in open(path, errors="replace"):
        m = HEAD.match(line)
        if m:
            cur = [m[2], m[3], int(m[4]), bytearray()]
            out.append(cur)
            continue
        m = ROW.match(line)
        if m and cur is not None:
            cur[3] += bytes.fromhex(m[1].replace(" ", ""))
    return [(c, n, bytes(b)) for c, n, ln, b in out if len(b) == ln]


def main():
    d = dumps(sys.argv[1])
    print("# strongSwan 6.1.0 (Debian sid) charon, ike=4 chd=4, scripts/ci/ike-pq.sh rekey:")
    print("# x25519 + ke1 ML-KEM-768 IKE SA (PRF_HMAC_SHA2_384), children")
    print("# aes256gcm16-x25519-ke1_mlkem768; made by scripts/vectors/pq_vectors.py from charon's dumps.")
    sk_d = None
    for i, (ctx, name, b) in enumerate(d):
        if name == "Sk_d secret":
            sk_d_new = b
        if name == "SKEYSEED" and i >= 3:
            ke, add, nonces = d[i - 3][2], d[i - 2][2], d[i - 1][2]
            assert d[i - 3][1] == "key exchange secret" and d[i - 1][1] == "nonces"
            ni, nr = nonces[: len(nonces) // 2], nonces[len(nonces) // 2 :]
            if sk_d is not None and not add:
                print("intermediate", sk_d.hex(), ke.hex(), ni.hex(), nr.hex(), b.hex())
            elif sk_d is not None and add:
                print("ikerekey", sk_d.hex(), ke.hex(), add.hex(), ni.hex(), nr.hex(), b.hex())
        if name == "seed" and ctx and d[i - 1][1] == "additional key exchange secret" and d[i - 1][2]:
            ke, add, seed = d[i - 2][2], d[i - 1][2], b
            mid = seed[len(ke) : len(seed) - len(add)]
            ni, nr = mid[: len(mid) // 2], mid[len(mid) // 2 :]
            ei, er = d[i + 1], d[i + 2]
            assert ei[1] == "encryption initiator key" and er[1] == "encryption responder key"
            print("child", sk_d.hex(), ke.hex(), add.hex(), ni.hex(), nr.hex(), ei[2].hex(), er[2].hex())
        if name == "Sk_pr secret":
            # the SA's keys are complete: its SK_d is the one later exchanges use
            sk_d = sk_d_new


main()
