"""The pure parts of index generations (docs/api.md#indexes): names, the config checks with
their defaults, the generation a config puts an index in, the packed texts, and the access
check reading an index's knowledge base from its name."""

from __future__ import annotations

import pytest
from supermew.v1 import retrieval_pb2

from retrieval_service.core.chunking import Page
from retrieval_service.core.indexes.model import (
    IndexConfig,
    checked_config,
    generation_collection,
    parse_index_name,
)
from retrieval_service.core.indexes.texts import pack_pages, unpack_pages
from retrieval_service.policy import RETRIEVAL_POLICIES
from shared.access import kb_id_named
from shared.errors import InvalidArgument
from shared.policy import knowledge_bases_named

DIMENSIONS = {"builtin": 384, "big": 1024}


def check(**fields: object) -> IndexConfig:
    return checked_config(
        IndexConfig(**fields),  # type: ignore[arg-type]
        DIMENSIONS,
        default_size=800,
        default_overlap=100,
        default_header=True,
    )


def test_index_names_parse_into_knowledge_base_and_id() -> None:
    assert parse_index_name("knowledge_bases/hr/indexes/big", "index") == (
        "knowledge_bases/hr",
        "big",
    )
    for bad in (
        "",
        "hr/indexes/big",
        "knowledge_bases/hr/indexes/",
        "knowledge_bases/HR/indexes/x",
        "knowledge_bases/hr/indexes/Big",
        "knowledge_bases/hr/indexes/a/b",
    ):
        with pytest.raises(InvalidArgument) as raised:
            parse_index_name(bad, "index")
        assert raised.value.field == "index"


def test_zero_fields_take_the_service_defaults() -> None:
    assert check(
        embedder="", dimension=0, chunk_size=0, chunk_overlap=0, analyzer=""
    ) == IndexConfig("builtin", 384, 800, 100, True, "standard")
    # A chunk size alone changes the chunk size alone: the leaf header stays the service's.
    assert check(chunk_size=1600, chunk_overlap=100).leaf_context_header
    assert check(embedder="big", chunk_size=1200, chunk_overlap=0).dimension == 1024
    assert check(embedder="big", chunk_size=1200, chunk_overlap=0).chunk_overlap == 0


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"embedder": "nope"}, "index.config.embedder"),
        ({"embedder": "big", "dimension": 384}, "index.config.dimension"),
        ({"chunk_size": 10}, "index.config.chunk_size"),
        ({"chunk_size": 9000}, "index.config.chunk_size"),
        ({"chunk_size": 500, "chunk_overlap": 500}, "index.config.chunk_overlap"),
        ({"analyzer": "chinese"}, "index.config.analyzer"),
    ],
)
def test_a_bad_config_names_its_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        check(**fields)
    assert raised.value.field == field


def test_one_generation_per_distinct_config() -> None:
    a, b = IndexConfig(chunk_size=800), IndexConfig(chunk_size=1200)
    assert generation_collection("chunks", a) == generation_collection("chunks", IndexConfig())
    assert generation_collection("chunks", a) != generation_collection("chunks", b)
    assert generation_collection("chunks", a).startswith("chunks_g")


def test_pages_pack_and_unpack_whole() -> None:
    pages = [Page(1, "第一页：睡眠 7–9 小时。"), Page(2, "x" * 10_000)]
    packed = pack_pages(pages)
    assert len(packed) < 10_000 // 5
    assert unpack_pages(packed) == pages


def test_an_index_name_is_checked_against_its_knowledge_base() -> None:
    assert kb_id_named("knowledge_bases/hr/indexes/big") == "hr"
    retrieve = RETRIEVAL_POLICIES["/supermew.v1.RetrievalService/Retrieve"]
    request = retrieval_pb2.RetrieveRequest(query="q", index="knowledge_bases/hr/indexes/big")
    assert knowledge_bases_named(retrieve, request) == ["hr"]
    request.knowledge_bases.append("hr")
    assert knowledge_bases_named(retrieve, request) == ["hr"]
    get = RETRIEVAL_POLICIES["/supermew.v1.RetrievalService/GetIndex"]
    named = retrieval_pb2.GetIndexRequest(name="knowledge_bases/ops/indexes/initial")
    assert knowledge_bases_named(get, named) == ["ops"]
