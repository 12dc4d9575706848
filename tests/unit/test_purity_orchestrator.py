"""The orchestrator's pure modules stay pure: imported in a fresh interpreter, the decision
tables (routing, synthesis, fast path, resume), the state, the grounded-answer rules, the
workflow core and the shared language test load no transport, store, HTTP client, Chinese
segmenter, numeric library, model code or LangGraph (the core receives its graphs built)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PURE_MODULES = (
    "orchestrator_service.routing",
    "orchestrator_service.synthesis",
    "orchestrator_service.state",
    "orchestrator_service.fast_path",
    "orchestrator_service.resume",
    "orchestrator_service.answer",
    "orchestrator_service.runtime",
    "orchestrator_service.steps",
    "orchestrator_service.orchestrator",
    "shared.lang",
)
FORBIDDEN = (
    "grpc",
    "pymilvus",
    "aiohttp",
    "httpx",
    "jieba",
    "numpy",
    "langgraph",
    "orchestrator_service.models.local",
)
ROOT = Path(__file__).resolve().parents[2]


def _loaded_after_import(modules: tuple[str, ...]) -> list[str]:
    code = f"import {', '.join(modules)}; import sys; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.split()


@pytest.mark.slow
def test_pure_modules_load_no_adapter_or_model_code() -> None:
    loaded = _loaded_after_import(PURE_MODULES)
    assert set(PURE_MODULES) <= set(loaded)  # the probe did import them
    offending = sorted(
        name
        for name in loaded
        if any(name == package or name.startswith(package + ".") for package in FORBIDDEN)
    )
    assert offending == []
