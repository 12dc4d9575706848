"""The orchestrator's pure modules stay pure: the decision tables (routing, synthesis, fast
path, resume), the state, the grounded-answer rules, the workflow core and the shared language
test load no transport, store, HTTP client, Chinese segmenter, numeric library, model code or
LangGraph (the core receives its graphs built)."""

from __future__ import annotations

import pytest

from tests.purity import forbidden_among, imports_in_a_fresh_scope, modules_of_a_fresh_interpreter

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


def test_pure_modules_import_no_adapter_or_model_code() -> None:
    assert imports_in_a_fresh_scope(PURE_MODULES, FORBIDDEN) == []


@pytest.mark.slow
def test_a_fresh_interpreter_loads_none_of_them() -> None:
    loaded = modules_of_a_fresh_interpreter(PURE_MODULES)
    assert set(PURE_MODULES) <= set(loaded)  # the probe did import them
    assert forbidden_among(loaded, FORBIDDEN) == []
