"""Under LOG_FORMAT=json every line a service writes to stderr is one JSON object, the lines of
libraries that install their own handler (pymilvus) included; reflection and health calls
(grpcurl and buf curl ask reflection before every call, probes call health every few seconds)
are logged at DEBUG, the service's own RPCs at INFO."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from shared.logs import configure_logging
from tests.integration.retrieval_harness import free_port
from tests.integration.test_make_run import Output

ROOT = Path(__file__).resolve().parents[2]
GRPCURL = str(Path(sys.executable).parent / "grpcurl")
_SETTINGS_PREFIXES = ("RETRIEVAL_", "MILVUS_", "LOG_", "RERANK_", "EMBEDDING_", "METRICS_")


def test_a_library_logger_with_its_own_handler_goes_through_the_json_handler(capsys) -> None:
    # What pymilvus does at import: its own handler, its own format, propagate off.
    own = logging.getLogger("pymilvus.test_json_logs")
    own.addHandler(logging.StreamHandler(sys.stderr))
    own.propagate = False
    configure_logging("INFO", "json")
    own.warning("failed to get mvccTs from milvus server, use client-side ts instead")
    line = capsys.readouterr().err.strip()
    entry = json.loads(line)
    assert entry["logger"] == "pymilvus.test_json_logs" and "mvccTs" in entry["message"]


def test_every_stderr_line_is_json_and_introspection_is_debug(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SETTINGS_PREFIXES)}
    env.update(
        PYTHONUNBUFFERED="1",
        LOG_FORMAT="json",
        RETRIEVAL_PORT=str(port),
        BIND_HOST="127.0.0.1",
        MILVUS_URI=str(tmp_path / "kb.db"),
        # Seeding lists the empty store first: pymilvus warns about mvccTs on Milvus Lite.
        SAMPLES_DIR=str(ROOT / "samples"),
        SHUTDOWN_GRACE_SECONDS="1",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "retrieval_service"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = Output(proc)
    try:
        output.wait_for(
            "serving supermew.v1.RetrievalService, google.longrunning.Operations on", proc
        )
        # The start-up line says which embedder serves (here the built-in model) and its engine.
        serving = next(line for line in output.lines if "serving supermew.v1" in line)
        assert "embedder built-in multilingual-e5-small, the " in serving, serving
        target = f"127.0.0.1:{port}"
        for argv in (
            [GRPCURL, "-plaintext", target, "list"],
            [GRPCURL, "-plaintext", target, "grpc.health.v1.Health/Check"],
            [GRPCURL, "-plaintext", target, "supermew.v1.RetrievalService/ListDocuments"],
        ):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    output._thread.join(timeout=10)
    entries = []
    for line in output.lines:
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"not JSON: {line!r}") from None
    access = [e for e in entries if e["logger"] == "supermew.access"]
    methods = {e["method"] for e in access}
    assert "/supermew.v1.RetrievalService/ListDocuments" in methods
    assert not any("Reflection" in m or "Health" in m for m in methods), methods
