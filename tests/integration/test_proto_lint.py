"""`buf lint` (STANDARD rules, offline, the real binary) passes on the protocol, and the
generated stubs are current with the .proto files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from supermew.v1 import trace_pb2

ROOT = Path(__file__).resolve().parents[2]
BUF = Path(sys.executable).parent / "buf"


def test_buf_lint_is_clean() -> None:
    result = subprocess.run(
        [str(BUF), "lint"], cwd=ROOT / "protos", capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_stubs_match_the_protos() -> None:
    # gen/ is build output; a stale stub would hide a contract change from the tests.
    generated = Path(trace_pb2.__file__).resolve()
    for proto in (ROOT / "protos" / "supermew" / "v1").glob("*.proto"):
        stub = generated.with_name(f"{proto.stem}_pb2.py")
        assert stub.exists(), f"missing stub for {proto.name}: run `make proto`"
        assert stub.stat().st_mtime >= proto.stat().st_mtime, f"{stub.name} older than {proto.name}"
