"""A service that cannot start says why in one line naming the variable or
resource, exits non-zero, and shows no traceback (those are logged at DEBUG only). Each case
runs the real entry point (`python -m …`) in a subprocess with the bad environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.retrieval_harness import running_service

ROOT = Path(__file__).resolve().parents[2]
# Variables of both services that the test environment must not leak into the subprocess.
_SETTINGS_PREFIXES = (
    "RETRIEVAL_",
    "ORCHESTRATOR_",
    "MILVUS_",
    "LLM_",
    "LOG_",
    "RERANK_",
    "DATABASE_",
    "MIGRATE_",
)


def _start(module: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(_SETTINGS_PREFIXES)}
    clean.update(
        {
            "MILVUS_URI": str(tmp_path / "kb.db"),
            "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'control.sqlite3'}",
            "PYTHONUNBUFFERED": "1",
            "SAMPLES_DIR": "",
        }
    )
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _assert_one_line_naming(result: subprocess.CompletedProcess[str], variable: str) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    failures = [line for line in result.stderr.splitlines() if ": cannot start: " in line]
    assert len(failures) == 1, result.stderr
    assert variable in failures[0], failures[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("module", "env", "variable"),
    [
        ("retrieval_service", {"RETRIEVAL_TOP_K": "abc"}, "RETRIEVAL_TOP_K"),
        ("retrieval_service", {"LOG_LEVEL": "verbose"}, "LOG_LEVEL"),
        ("orchestrator_service", {"LOG_LEVEL": "verbose"}, "LOG_LEVEL"),
        ("orchestrator_service", {"RETRIEVAL_TIMEOUT_SECONDS": "-1"}, "RETRIEVAL_TIMEOUT_SECONDS"),
        (
            "orchestrator_service",
            {"LLM_BASE_URL": "api.example.com/v1", "MODEL": "m"},
            "LLM_BASE_URL",
        ),
        ("retrieval_service", {"MILVUS_URI": "http://127.0.0.1:1"}, "MILVUS_URI"),
    ],
    ids=["top_k", "log_level_r", "log_level_o", "timeout", "llm_url_scheme", "milvus_down"],
)
def test_a_bad_setting_is_one_line_naming_it(tmp_path, module, env, variable) -> None:
    _assert_one_line_naming(_start(module, tmp_path, **env), variable)


@pytest.mark.parametrize(
    ("module", "variable"),
    [("retrieval_service", "RETRIEVAL_PORT"), ("orchestrator_service", "ORCHESTRATOR_PORT")],
)
def test_a_port_in_use_is_one_line_naming_it(tmp_path, busy_port, module, variable) -> None:
    result = _start(module, tmp_path, **{variable: str(busy_port)})
    _assert_one_line_naming(result, variable)
    assert f"127.0.0.1:{busy_port}" in result.stderr


@pytest.mark.parametrize(
    ("module", "variable"),
    [
        ("retrieval_service", "RETRIEVAL_PORT"),
        ("retrieval_service", "METRICS_PORT"),
        ("retrieval_service", "RETRIEVAL_METRICS_PORT"),
        ("retrieval_service", "HEALTH_PORT"),
        ("orchestrator_service", "ORCHESTRATOR_PORT"),
        ("orchestrator_service", "ORCHESTRATOR_METRICS_PORT"),
    ],
)
def test_a_busy_port_fails_at_once_before_the_store_opens(
    tmp_path, busy_port, module, variable
) -> None:
    # It used to open the store first (7 s) and print gRPC core's "Failed to add port" line.
    data = tmp_path / "never"
    started = time.monotonic()
    result = _start(
        module,
        tmp_path,
        MILVUS_URI=str(data / "kb.db"),
        **{"RETRIEVAL_PORT": "0", "ORCHESTRATOR_PORT": "0", variable: str(busy_port)},
    )
    elapsed = time.monotonic() - started
    _assert_one_line_naming(result, variable)
    assert f"127.0.0.1:{busy_port}" in result.stderr
    assert not data.exists()  # the store was never opened
    assert result.stderr.count("\n") == 1, result.stderr  # no gRPC core line either
    # ≈ 0.5 s on an idle machine, the interpreter and the settings' import (0.9–1.7 s on two
    # loaded cores); the store's open alone took 7 s. The margin is for loaded CI.
    assert elapsed < 3.0, elapsed


async def test_a_data_directory_locked_by_another_process_is_one_line(tmp_path) -> None:
    db = tmp_path / "held.db"
    async with running_service(db):  # this process holds the Milvus Lite lock
        result = _start("retrieval_service", tmp_path, MILVUS_URI=str(db))
    _assert_one_line_naming(result, "MILVUS_URI")
    assert "another process" in result.stderr


def test_the_traceback_is_there_at_debug(tmp_path) -> None:
    result = _start(
        "retrieval_service", tmp_path, MILVUS_URI="http://127.0.0.1:1", LOG_LEVEL="DEBUG"
    )
    assert result.returncode != 0
    assert "Traceback" in result.stderr and ": cannot start: MILVUS_URI" in result.stderr
