#!/usr/bin/env python3
"""A time-bounded TCP transfer of a data set, goodput measured at the receiver, for the scripts
that compare tunnels on shaped links (scripts/demos/adaptive-demo.sh, scripts/studies/ipsec-vs-ssl.sh).

    xfer.py data CORPUS WORK NAME...        # WORK/NAME.bin, 20 MB each; says where each came
                                            # from on stderr; prints the names of the generated
                                            # stand-ins (nothing when there are none)
    xfer.py recv ADDR PORT DEADLINE         # accepts one connection, reads it to the end;
                                            # prints "BYTES SECONDS" (first byte to the end)
    xfer.py send ADDR PORT FILE SECONDS     # sends FILE over and over for SECONDS, then closes

Data sets: `random` (20 MB from a seeded generator, incompressible); any other NAME is the
corpus file CORPUS/NAME repeated to 20 MB, or, where that file is missing, a generated stand-in
(text-like words; long runs for `pic`), said LOUDLY on stderr and printed on stdout, for the
caller's outputs to say so too. Messages start with $XFER_TAG (default "xfer"). Every socket
wait has a deadline.
"""
import os
import random
import socket
import sys
import time
import zlib

SIZE = 20 * 1024 * 1024


def data(corpus, work, names):
    tag, generated = os.environ.get("XFER_TAG", "xfer"), []
    for name in names:
        path = os.path.join(corpus, name)
        if name == "random":
            blob, how = random.Random(12).randbytes(SIZE), "seeded random"
        elif os.path.isfile(path):
            blob, how = open(path, "rb").read(), "corpus " + path
        else:
            # Stand-ins, said loudly: text-like words for book1, long runs for pic.
            r = random.Random(7)
            if name == "pic":
                blob = b"".join(bytes([r.choice([0, 0, 0, 255])]) * r.randint(20, 400) for _ in range(20000))
            else:
                words = [bytes(r.choice(b"etaoinshrdlu") for _ in range(r.randint(2, 9))) for _ in range(3000)]
                blob = b" ".join(r.choice(words) for _ in range(200000))
            how = "GENERATED (corpus file missing)"
            generated.append(name)
        out = (blob * (SIZE // len(blob) + 1))[:SIZE]
        open(os.path.join(work, name + ".bin"), "wb").write(out)
        x = len(out[: 1 << 20]) / len(zlib.compress(out[: 1 << 20], 6))
        print(f"{tag}: data {name}: {how}, 20 MB, zlib ratio of the first MB {x:.2f}", file=sys.stderr)
    if generated:
        print(f"{tag}: WARNING: THE CORPUS WAS NOT FOUND AT {corpus}: GENERATED DATA STANDS IN FOR: {' '.join(generated)}",
              file=sys.stderr)
        print(" ".join(generated))


def recv(addr, port, deadline):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    s.settimeout(deadline)
    c, _ = s.accept()
    c.settimeout(deadline)
    buf = bytearray(1 << 20)
    n = c.recv_into(buf)
    t0, total = time.monotonic(), n
    while n:
        n = c.recv_into(buf)
        total += n
    t1 = time.monotonic()
    print(total, t1 - t0)


def send(addr, port, path, seconds):
    blob = open(path, "rb").read()
    c = socket.create_connection((addr, port), timeout=10)
    c.settimeout(60)
    end = time.monotonic() + seconds
    view, off, chunk = memoryview(blob + blob[: 256 * 1024]), 0, 256 * 1024
    while time.monotonic() < end:
        off = (off + c.send(view[off : off + chunk])) % len(blob)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    c.close()


def main():
    a = sys.argv[1:]
    if len(a) >= 3 and a[0] == "data":
        data(a[1], a[2], a[3:])
    elif len(a) == 4 and a[0] == "recv":
        recv(a[1], int(a[2]), float(a[3]))
    elif len(a) == 5 and a[0] == "send":
        send(a[1], int(a[2]), a[3], float(a[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
