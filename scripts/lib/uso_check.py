#!/usr/bin/env python3
"""UDP super-packets through tunneld (USO on the TUN device), for scripts/ci/netns-test.sh.

  uso_check.py recv PORT COUNT SIZE   # in B: prints how many datagrams of SIZE bytes with the
                                      # expected content arrived (waits at most 5 s)
  uso_check.py send DST PORT COUNT SIZE
                                      # in A: one sendmsg(2) with UDP_SEGMENT = SIZE carrying
                                      # COUNT datagrams: the kernel hands the TUN device one
                                      # GSO_UDP_L4 super-packet, which tunneld must cut

Datagram i is SIZE bytes of (i * 31 + j) % 251, so a wrong cut or a reordering shows.
"""
import socket
import sys
import time

SOL_UDP = 17
UDP_SEGMENT = 103


def body(i, size):
    return bytes((i * 31 + j) % 251 for j in range(size))


def main():
    mode = sys.argv[1]
    if mode == "send":
        dst, port, count, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(SOL_UDP, UDP_SEGMENT, size)
        s.sendto(b"".join(body(i, size) for i in range(count)), (dst, port))
        print(count)
        return 0
    if mode == "recv":
        port, count, size = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", port))
        s.settimeout(0.5)
        good, deadline = 0, time.time() + 5
        while good < count and time.time() < deadline:
            try:
                d = s.recv(65535)
            except socket.timeout:
                continue
            if d == body(good, size):
                good += 1
        print(good)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
