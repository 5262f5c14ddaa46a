"""pytest fixtures for the interop tests.

* `ipsec_bin`: path of the tool under test: $IPSEC_BIN, else <repo>/target/release/ipsec.
  When it is missing the tests that need it are skipped locally, but FAIL when the
  environment variable CI is set (so a CI run can never pass vacuously).
* `ipsec`: an `IpsecTool` bound to a per-test temporary directory, with `seal()` / `open()`
  helpers that write the input pcap, run the binary and parse its output pcap.
* `tshark_bin`: path of tshark (same missing-tool policy as the binary).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # make `import interop_lib` work with any --import-mode
    sys.path.insert(0, str(HERE))

import interop_lib as lib  # noqa: E402

REPO = HERE.parent.parent
DEFAULT_BIN = REPO / "target" / "release" / "ipsec"
TIMEOUT = 120


def in_ci() -> bool:
    v = os.environ.get("CI", "")
    return v != "" and v.lower() not in ("0", "false", "no")


def missing(msg: str):
    if in_ci():
        pytest.fail(f"{msg} (environment variable CI is set: a missing dependency is a failure)",
                    pytrace=False)
    pytest.skip(msg)


def ipsec_bin_path() -> Path:
    return Path(os.environ.get("IPSEC_BIN") or DEFAULT_BIN)


@pytest.fixture(scope="session")
def ipsec_bin() -> Path:
    path = ipsec_bin_path()
    if not path.is_file() or not os.access(path, os.X_OK):
        missing(f"ipsec binary not found at {path} (build it with `cargo build --release` "
                f"or point IPSEC_BIN at it)")
    return path


@pytest.fixture(scope="session")
def tshark_bin() -> str:
    path = os.environ.get("TSHARK") or shutil.which("tshark")
    if not path:
        missing("tshark not found (run scripts/install-test-deps.sh)")
    return path


class ToolError(AssertionError):
    pass


class IpsecTool:
    """Runs `ipsec seal` / `ipsec open` on pcap files in a temp dir."""

    def __init__(self, binary: Path, workdir: Path):
        self.binary = binary
        self.workdir = workdir
        self.n = 0

    def _paths(self, verb: str) -> Tuple[Path, Path]:
        self.n += 1
        return (self.workdir / f"{self.n:02d}-{verb}-in.pcap",
                self.workdir / f"{self.n:02d}-{verb}-out.pcap")

    def run(self, args: Sequence[str], stdin: Optional[bytes] = None) -> subprocess.CompletedProcess:
        cmd = [str(self.binary), *args]
        try:
            return subprocess.run(cmd, input=stdin, capture_output=True, timeout=TIMEOUT,
                                  stdin=None if stdin is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise ToolError(f"timeout after {TIMEOUT}s: {cmd}") from e

    @staticmethod
    def fmt(cmd, proc) -> str:
        return (f"command: {shlex.join(str(c) for c in cmd)}\n"
                f"exit code: {proc.returncode}\n"
                f"stderr: {proc.stderr.decode(errors='replace')[-4000:]}")

    def _verb(self, verb: str, sas: Sequence[str], frames: Sequence[bytes], linktype: int,
              extra: Sequence[str], expect_rc: Optional[int]) -> Tuple[int, List[bytes], subprocess.CompletedProcess]:
        inp, out = self._paths(verb)
        lib.write_pcap(inp, frames, linktype)
        args = [verb]
        for s in sas:
            args += ["--sa", s]
        args += [*extra, "--in", str(inp), "--out", str(out)]
        proc = self.run(args)
        cmd = [str(self.binary), *args]
        if expect_rc is not None and proc.returncode != expect_rc:
            raise ToolError(f"`ipsec {verb}` exit code {proc.returncode}, expected {expect_rc}\n"
                            + self.fmt(cmd, proc))
        if not out.exists():
            if proc.returncode == 0:
                raise ToolError(f"`ipsec {verb}` exited 0 but wrote no {out}\n" + self.fmt(cmd, proc))
            return linktype, [], proc
        lt, got = lib.read_pcap(out)
        return lt, got, proc

    def seal(self, sas: Sequence[str], frames: Sequence[bytes], linktype: int = lib.LINKTYPE_RAW,
             seq: Optional[int] = None, iv: Optional[bytes] = None, expect_rc: Optional[int] = 0):
        extra: List[str] = []
        if seq is not None:
            extra += ["--seq", str(seq)]
        if iv is not None:
            extra += ["--iv", iv.hex()]
        lt, got, proc = self._verb("seal", sas, frames, linktype, extra, expect_rc)
        if expect_rc == 0:
            assert lt == linktype, f"seal wrote link type {lt}, input was {linktype}"
            assert len(got) == len(frames), (
                f"seal wrote {len(got)} packets for {len(frames)} input packets\n"
                f"stderr: {proc.stderr.decode(errors='replace')}")
        return lt, got, proc

    def open(self, sas: Sequence[str], frames: Sequence[bytes], linktype: int = lib.LINKTYPE_RAW,
             seq: Optional[int] = None, expect_rc: Optional[int] = 0):
        extra = ["--seq", str(seq)] if seq is not None else []
        lt, got, proc = self._verb("open", sas, frames, linktype, extra, expect_rc)
        if expect_rc == 0:
            assert lt == linktype, f"open wrote link type {lt}, input was {linktype}"
            assert len(got) == len(frames), (
                f"open wrote {len(got)} packets for {len(frames)} input packets\n"
                f"stderr: {proc.stderr.decode(errors='replace')}")
        return lt, got, proc


@pytest.fixture
def ipsec(ipsec_bin, tmp_path) -> IpsecTool:
    return IpsecTool(ipsec_bin, tmp_path)
