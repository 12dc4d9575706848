"""The orchestrator's pure modules stay pure: the decision tables (routing, synthesis, fast
path, resume), the state, the grounded-answer rules, the workflow core and the shared language
test load no transport, store, HTTP client, Chinese segmenter, numeric library, model code or
LangGraph (the core receives its graphs built)."""

from __future__ import annotations

import pkgutil

import pytest

import orchestrator_service
from tests.purity import forbidden_among, imports_in_a_fresh_scope, modules_of_a_fresh_interpreter

#: What may touch the outside, by module name or package prefix: the composition root, the
#: servers, the CLI and the retrieval client (transport), the graph's wiring and its nodes
#: (LangGraph), and the models (HTTP, the built-in model). Everything else the walk finds is
#: held pure, so a new module is covered without being listed here. An entry names a module and
#: all that is under it (`cli` is not `client_pool`); one ending in "." only what is under it.
IMPURE = (
    "orchestrator_service.__main__",
    "orchestrator_service.bootstrap",
    "orchestrator_service.server",
    "orchestrator_service.cli",
    "orchestrator_service.cli_evaluation",
    "orchestrator_service.retrieval_client",
    "orchestrator_service.graph",
    "orchestrator_service.nodes.",
    "orchestrator_service.models.local",
    "orchestrator_service.models.remote",
    # The database and the evaluation/history adapters (SQL, protos, gRPC); their rules —
    # metrics, comparison, formats, names, filters, records — stay pure.
    "orchestrator_service.database",
    "orchestrator_service.evaluation.executors",
    "orchestrator_service.evaluation.messages",
    "orchestrator_service.evaluation.runner",
    "orchestrator_service.evaluation.service",
    "orchestrator_service.evaluation.servicer",
    "orchestrator_service.evaluation.store",
    "orchestrator_service.evaluation.results",
    "orchestrator_service.evaluation.report",  # renders the protos (their module loads grpc)
    "orchestrator_service.history.service",
    "orchestrator_service.history.store",
)


def _impure(name: str) -> bool:
    return any(name == p or name.startswith(p if p.endswith(".") else p + ".") for p in IMPURE)


PURE_MODULES = (
    *(
        m.name
        for m in pkgutil.walk_packages(orchestrator_service.__path__, "orchestrator_service.")
        if not _impure(m.name)
    ),
    "shared.lang",
    "shared.sentences",
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


def test_the_walk_finds_the_decision_tables_and_the_core() -> None:
    assert {
        "orchestrator_service.routing",
        "orchestrator_service.synthesis",
        "orchestrator_service.state",
        "orchestrator_service.fast_path",
        "orchestrator_service.resume",
        "orchestrator_service.answer",
        "orchestrator_service.runtime",
        "orchestrator_service.steps",
        "orchestrator_service.orchestrator",
        "orchestrator_service.conversation",
        "orchestrator_service.models.base",
    } <= set(PURE_MODULES)


def test_pure_modules_import_no_adapter_or_model_code() -> None:
    assert imports_in_a_fresh_scope(PURE_MODULES, FORBIDDEN) == []


@pytest.mark.slow
def test_a_fresh_interpreter_loads_none_of_them() -> None:
    loaded = modules_of_a_fresh_interpreter(PURE_MODULES)
    assert set(PURE_MODULES) <= set(loaded)  # the probe did import them
    assert forbidden_among(loaded, FORBIDDEN) == []
