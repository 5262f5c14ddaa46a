"""DEFLATE interop of the IPComp crate with Python's zlib, both directions.

Drives `crates/ipcomp/examples/deflate_tool.rs` (`compress|decompress`, stdin -> stdout):
* our raw-deflate output must inflate with zlib.decompressobj(-11) (Linux's 2 KB IPComp
  window) and zlib.decompressobj(-15);
* we must inflate raw deflate made by zlib at levels 1, 6, 9 with wbits -11 and -15.

The tool: $IPCOMP_DEFLATE_TOOL if set, else built with
`cargo build --release -p ipsec-ipcomp --example deflate_tool` (target dir: $CARGO_TARGET_DIR
or <repo>/target). Without cargo the tests are skipped locally and fail under CI.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from conftest import REPO, TIMEOUT, missing

CORPUS = Path(os.environ.get("IPSEC_CORPUS") or REPO.parent / "shared" / "corpus")


@pytest.fixture(scope="session")
def deflate_tool() -> Path:
    env = os.environ.get("IPCOMP_DEFLATE_TOOL")
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            missing(f"IPCOMP_DEFLATE_TOOL={env} is not an executable file")
        return path
    cargo = shutil.which("cargo")
    if not cargo:
        missing("cargo not found: cannot build the deflate_tool example (or set IPCOMP_DEFLATE_TOOL)")
    proc = subprocess.run(
        [cargo, "build", "--release", "-q", "-p", "ipsec-ipcomp", "--example", "deflate_tool"],
        cwd=REPO, capture_output=True, timeout=1200)
    if proc.returncode != 0:
        pytest.fail("building deflate_tool failed:\n" + proc.stderr.decode(errors="replace")[-4000:])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    if not target.is_absolute():
        target = REPO / target
    path = target / "release" / "examples" / "deflate_tool"
    assert path.is_file(), f"built deflate_tool not found at {path}"
    return path


def run(tool: Path, verb: str, data: bytes, *args: str) -> bytes:
    proc = subprocess.run([str(tool), verb, *args], input=data, capture_output=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"deflate_tool {verb} failed: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def inflate(data: bytes, wbits: int) -> bytes:
    d = zlib.decompressobj(wbits)
    out = d.decompress(data) + d.flush()
    assert d.eof, "stream did not end with a final block"
    return out


def inflate_window_strict(data: bytes, wbits: int) -> bytes:
    """Inflates one output byte per call. zlib lets a match reach back over the window plus
    whatever the current call has already produced, so with Python's large output chunks a
    too-far distance can go unnoticed; one byte per call leaves only the window itself (as a
    kernel inflating page by page would)."""
    d = zlib.decompressobj(wbits)
    out = bytearray()
    buf = data
    while not d.eof:
        chunk = d.decompress(buf, 1)
        buf = d.unconsumed_tail
        out += chunk
        if not chunk and not buf:
            out += d.flush()
            break
    assert d.eof, "stream did not end with a final block"
    return bytes(out)


def samples() -> list[tuple[str, bytes]]:
    rng = random.Random(1234)
    words = [b"the ", b"packet ", b"ipcomp ", b"deflate ", b"window ", b"linux ", b"\n", b"zlib "]
    text = b"".join(rng.choice(words) for _ in range(20000))[:60000]
    # A 1 KB random block repeated at distance 3000 (> 2048): a 32 KB-window compressor would
    # reach back for it; a 2 KB-window stream must not.
    block = bytes(rng.getrandbits(8) for _ in range(1024))
    far = block + bytes(rng.getrandbits(8) for _ in range(1976)) + block
    out = [
        ("empty", b""),
        ("one byte", b"x"),
        ("zeros 63k", bytes(63 * 1024)),
        ("text 60k", text),
        ("far repeat", far * 5),
        ("random 4k", bytes(rng.getrandbits(8) for _ in range(4096))),
    ]
    for name in ("paper2", "obj2", "pic", "progl"):
        p = CORPUS / name
        if p.is_file():
            out.append((name, p.read_bytes()[: 63 * 1024]))
    if len(out) == 6:
        print(f"NOTE: corpus not found at {CORPUS}: generated data only")
    return out


SAMPLES = samples()


@pytest.mark.parametrize("name,data", SAMPLES, ids=[n for n, _ in SAMPLES])
def test_our_output_inflates_with_zlib(deflate_tool, name, data):
    comp = run(deflate_tool, "compress", data)
    assert inflate_window_strict(comp, -11) == data, "2 KB-window (Linux) inflate"
    assert inflate(comp, -11) == data
    assert inflate(comp, -15) == data
    if name == "far repeat":
        # zlib with its 32 KB window uses the far match; a 2 KB window would reject that stream,
        # which shows the -11 check above is a real check.
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        far = c.compress(data) + c.flush()
        with pytest.raises(zlib.error, match="too far"):
            inflate_window_strict(far, -11)
        # Our own encoder with its window opened to 32 KB is rejected the same way.
        wide = run(deflate_tool, "compress", data, "--window", "32768")
        assert inflate(wide, -15) == data
        with pytest.raises(zlib.error, match="too far"):
            inflate_window_strict(wide, -11)


@pytest.mark.parametrize("level", [1, 6, 9])
@pytest.mark.parametrize("wbits", [-11, -15])
def test_we_inflate_zlib_output(deflate_tool, level, wbits):
    for name, data in SAMPLES:
        c = zlib.compressobj(level, zlib.DEFLATED, wbits)
        comp = c.compress(data) + c.flush()
        assert run(deflate_tool, "decompress", comp) == data, f"{name} level {level} wbits {wbits}"


def test_decompress_bound_and_garbage(deflate_tool):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    comp = c.compress(bytes(100000)) + c.flush()
    proc = subprocess.run([str(deflate_tool), "decompress", "--max", "65535"], input=comp,
                          capture_output=True, timeout=TIMEOUT)
    assert proc.returncode != 0 and b"exceed" in proc.stderr
    proc = subprocess.run([str(deflate_tool), "decompress"], input=b"\xff\xff\xff\xff",
                          capture_output=True, timeout=TIMEOUT)
    assert proc.returncode != 0
