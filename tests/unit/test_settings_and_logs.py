"""Typed settings carry the env names of docs/api.md#settings (as the README's configuration table
lists them), and JSON-line logging emits one parseable object per record."""

from __future__ import annotations

import importlib
import io
import json
import logging
import re
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator_service.settings import OrchestratorSettings
from retrieval_service.settings import RetrievalSettings
from shared.logs import JsonLineFormatter, MilvusLiteUnimplementedFilter
from shared.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[2]


def _env_names(*classes: type[ServerSettings]) -> set[str]:
    return {name.upper() for cls in classes for name in cls.model_fields}


def _readme_variables() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            first_cell = row.split("|")[1]
            names |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", first_cell))
    return names


def test_every_documented_variable_is_a_setting_and_back() -> None:
    settings = _env_names(RetrievalSettings, OrchestratorSettings)
    documented = _readme_variables()
    assert documented - settings == set(), "documented but not read by any service"
    assert settings - documented == set(), "read by a service but not documented"


def test_api_md_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _env_names(RetrievalSettings, OrchestratorSettings):
        monkeypatch.delenv(name, raising=False)
    retrieval, orchestrator = RetrievalSettings(), OrchestratorSettings()
    assert (retrieval.retrieval_port, orchestrator.orchestrator_port) == (50051, 50052)
    assert retrieval.bind_host == orchestrator.bind_host == "127.0.0.1"
    assert orchestrator.retrieval_addr == "localhost:50051"
    assert (retrieval.retrieval_top_k, retrieval.retrieval_candidate_multiplier) == (8, 3)
    assert retrieval.retrieval_candidate_k is None
    assert (retrieval.leaf_retrieve_level, retrieval.auto_merge_enabled) == (3, True)
    assert retrieval.auto_merge_threshold == 2
    assert (retrieval.rerank_timeout_seconds, retrieval.rerank_min_score) == (5.0, 0.0)
    assert retrieval.milvus_uri.endswith(".db") and retrieval.milvus_uri.startswith("./data/")
    assert orchestrator.llm_base_url is None and orchestrator.auth_token is None
    assert orchestrator.max_question_chars == 4000


def test_settings_read_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_PORT", "6000")
    monkeypatch.setenv("AUTH_TOKEN", "t")
    monkeypatch.setenv("LOG_FORMAT", "json")
    settings = OrchestratorSettings()
    assert (settings.orchestrator_port, settings.auth_token, settings.log_format) == (
        6000,
        "t",
        "json",
    )


def test_bad_setting_fails_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRIEVAL_PORT", "not-a-port")
    with pytest.raises(ValidationError, match="retrieval_port"):
        RetrievalSettings()


def test_json_line_formatter_emits_one_object_per_record() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLineFormatter())
    logger = logging.getLogger("test.jsonlines")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.warning("served %s", "問題", extra={"route": "answer"})
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "served 問題" and first["level"] == "WARNING"
    assert first["route"] == "answer" and first["logger"] == "test.jsonlines"
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exc_info"]


def _unimplemented_record(method: str) -> logging.LogRecord:
    def raise_unimplemented() -> None:
        raise NotImplementedError("Method not implemented!")

    raise_unimplemented.__code__ = raise_unimplemented.__code__.replace(co_name=method)
    try:
        raise_unimplemented()
    except NotImplementedError:
        return logging.LogRecord(
            "grpc._server", logging.ERROR, __file__, 1, "Exception calling application: %s",
            ("Method not implemented!",), sys.exc_info(),
        )  # fmt: skip
    raise AssertionError("unreachable")


def test_milvus_lite_alloc_timestamp_noise_is_dropped_and_nothing_else() -> None:
    noise = MilvusLiteUnimplementedFilter()
    assert not noise.filter(_unimplemented_record("AllocTimestamp"))
    assert noise.filter(_unimplemented_record("Search"))
    assert noise.filter(logging.LogRecord("x", logging.ERROR, __file__, 1, "plain", (), None))


@pytest.mark.parametrize(
    ("service", "folders"),
    [
        ("retrieval_service", ("retrieval_service/adapters/sql", "shared/sql")),
        (
            "orchestrator_service",
            (
                "orchestrator_service/evaluation",
                "orchestrator_service/history",
                "shared/sql",
            ),
        ),
    ],
)
def test_every_database_operation_is_a_metric_label(service: str, folders: tuple[str, ...]) -> None:
    # supermew_db_errors_total{operation} takes a fixed set; a store call outside it would be
    # counted as "other" and lose its name.
    labels = importlib.import_module(f"{service}.metrics").DB_OPERATIONS
    used: set[str] = set()
    for folder in folders:
        for path in (ROOT / folder).glob("*.py"):
            used |= set(re.findall(r'\.(?:read|write)\("([a-z_]+)"\)', path.read_text()))
    assert used and used <= set(labels)
