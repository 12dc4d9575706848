"""The retrieval CLI's index commands and `search --index` without a server: what the parsed
command line puts in each request (CreateIndex with its config, ListIndexes, the switch as an
UpdateKnowledgeBase masked to `active_index`, Retrieve with its index), which index names are
accepted, and how an index and a build operation are printed."""

from __future__ import annotations

import argparse

import pytest
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import field_mask_pb2
from google.rpc import status_pb2
from supermew.v1 import retrieval_pb2 as R

from retrieval_service.cli import build_parser, imports
from retrieval_service.cli import indexes as ix
from retrieval_service.cli.common import CliSettings
from retrieval_service.cli.kb import _kb_dict
from retrieval_service.cli.search import search_request

INDEX = "knowledge_bases/hr/indexes/e5-large"
BuildState = R.ImportDocumentsMetadata.State


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(CliSettings()).parse_args(list(argv))


def test_create_sends_the_config_flags_given() -> None:
    args = parse(
        "index", "create", "hr", "e5-large", "--embedder", "e5-large", "--dimension", "1024",
        "--chunk-size", "512", "--chunk-overlap", "64", "--leaf-context-header",
        "--analyzer", "standard", "--wait",
    )  # fmt: skip
    assert (args.command, args.index_command, args.handler, args.wait) == (
        "index", "create", ix.index_create, True,
    )  # fmt: skip
    assert ix.create_request(args) == R.CreateIndexRequest(
        parent="knowledge_bases/hr",
        index_id="e5-large",
        index=R.Index(
            config=R.IndexConfig(
                embedder="e5-large",
                dimension=1024,
                chunk_size=512,
                chunk_overlap=64,
                leaf_context_header=True,
                analyzer="standard",
            )
        ),
    )


def test_create_without_flags_leaves_every_config_field_to_the_service() -> None:
    args = parse("index", "create", "knowledge_bases/hr", "v2")
    assert args.wait is False and args.json is False
    assert ix.create_request(args) == R.CreateIndexRequest(
        parent="knowledge_bases/hr", index_id="v2", index=R.Index(config=R.IndexConfig())
    )


def test_list_get_delete_parse() -> None:
    args = parse("index", "list", "hr", "--json")
    assert (args.handler, args.json) == (ix.index_list, True)
    assert ix.list_request(args, "t1") == R.ListIndexesRequest(
        parent="knowledge_bases/hr", page_size=1000, page_token="t1"
    )
    assert parse("index", "get", INDEX).handler is ix.index_get
    assert parse("index", "delete", "hr/v2").handler is ix.index_delete
    with pytest.raises(SystemExit):
        parse("index", "create", "hr")  # the id is required
    with pytest.raises(SystemExit):
        parse("index", "create", "hr", "v2", "--dimension", "many")


def test_activate_is_an_update_of_the_knowledge_base_masked_to_active_index() -> None:
    expected = R.UpdateKnowledgeBaseRequest(
        knowledge_base=R.KnowledgeBase(name="knowledge_bases/hr", active_index=INDEX),
        update_mask=field_mask_pb2.FieldMask(paths=["active_index"]),
    )
    assert ix.activate_request(parse("index", "activate", INDEX)) == expected
    assert ix.activate_request(parse("index", "activate", "hr/e5-large")) == expected
    assert parse("index", "activate", INDEX).handler is ix.index_activate


@pytest.mark.parametrize("text", [INDEX, "hr/e5-large", "hr/indexes/e5-large"])
def test_an_index_is_named_in_full_or_as_kb_slash_id(text) -> None:
    assert ix.index_name(text) == INDEX


@pytest.mark.parametrize(
    "text",
    ["e5-large", "knowledge_bases/hr", "knowledge_bases/hr/indexes/E5", "hr/", "/v2", "a/b/c", ""],
)
def test_a_name_that_is_no_index_is_refused_before_any_call(text) -> None:
    with pytest.raises(ValueError, match=r"is not an index: name it knowledge_bases/KB/indexes/ID"):
        ix.index_name(text)
    with pytest.raises(ValueError):
        ix.activate_request(parse("index", "activate", text))


def test_search_sends_the_index() -> None:
    args = parse("search", "leave", "--kb", "hr", "--index", INDEX, "--top-k", "3")
    assert search_request(args) == R.RetrieveRequest(
        query="leave", knowledge_bases=["hr"], index=INDEX, top_k=3
    )
    plain = search_request(parse("search", "leave"))
    assert plain == R.RetrieveRequest(query="leave") and not plain.HasField("top_k")


def test_kb_output_shows_the_active_index() -> None:
    kb = R.KnowledgeBase(name="knowledge_bases/hr", active_index=INDEX)
    assert _kb_dict(kb)["active_index"] == INDEX


def _index(state: int = R.Index.READY) -> R.Index:
    return R.Index(
        name=INDEX,
        config=R.IndexConfig(embedder="e5-large", dimension=1024, leaf_context_header=True),
        state=state,
        documents_indexed=3,
        documents_total=4,
    )


def test_an_index_prints_on_one_line_its_zero_fields_as_the_services_setting() -> None:
    assert ix.index_line(_index(), active=True) == (
        f"{INDEX}\tREADY  (active)\tembedder=e5-large  dimension=1024  chunk_size=-  "
        "chunk_overlap=-  analyzer=-  leaf_context_header\tdocuments=3/4\tcreated="
    )
    assert ix.index_dict(_index(R.Index.BUILDING)) == {
        "name": INDEX,
        "state": "BUILDING",
        "config": {
            "embedder": "e5-large",
            "dimension": 1024,
            "chunk_size": 0,
            "chunk_overlap": 0,
            "leaf_context_header": True,
            "analyzer": "",
        },
        "documents_indexed": 3,
        "documents_total": 4,
        "create_time": "",
    }


def _operation(*, done: bool, error: str = "") -> operations_pb2.Operation:
    op = operations_pb2.Operation(name="operations/b1", done=done)
    op.metadata.Pack(
        R.CreateIndexMetadata(
            index=INDEX,
            state=R.ImportDocumentsMetadata.SUCCEEDED
            if done
            else R.ImportDocumentsMetadata.RUNNING,
            progress_percent=100 if done else 75,
            documents_total=4,
            documents_indexed=4 if done else 3,
            leaves_written=40,
        )
    )
    if error:
        op.error.CopyFrom(status_pb2.Status(code=9, message=error))
    elif done:
        op.response.Pack(_index())
    return op


def test_a_build_operation_prints_its_progress_and_its_index() -> None:
    assert ix.build_summary(_operation(done=False)) == (
        f"operations/b1  {INDEX}  RUNNING  75%  3/4 document(s), 40 leaves written"
    )
    running = ix.operation_dict(_operation(done=False))
    assert running["done"] is False and "response" not in running and "error" not in running
    assert running["metadata"]["documents_indexed"] == "3"  # int64 in JSON: a string
    done = ix.operation_dict(_operation(done=True))
    assert done["response"] == ix.index_dict(_index())
    failed = _operation(done=True, error="embedder e5-large is unreachable")
    assert ix.build_summary(failed).endswith("\n  error: embedder e5-large is unreachable")
    assert ix.operation_dict(failed)["error"] == {
        "code": 9,
        "message": "embedder e5-large is unreachable",
    }


def test_the_operations_commands_show_a_build_as_index_create_does() -> None:
    running, done = _operation(done=False), _operation(done=True)
    assert imports.is_build(running) and imports.is_build(done)
    assert imports.summary(running) == ix.build_summary(running)
    assert imports.position(running) == (4, 3, "RUNNING")
    assert imports.position(done) == (4, 4, "SUCCEEDED")
    assert imports._as_json(done) == ix.operation_dict(done)
    assert imports.failures(done) == []
    assert imports._exit_code(done) == 0 and imports._exit_code(running) == 3
    failed = _operation(done=True, error="embedder e5-large is unreachable")
    assert imports._exit_code(failed) == 1


def test_an_import_operation_is_no_build() -> None:
    op = operations_pb2.Operation(name="operations/i1", done=False)
    op.metadata.Pack(
        R.ImportDocumentsMetadata(
            state=BuildState.RUNNING, documents_total=10, documents_new=3, documents_failed=1
        )
    )
    assert not imports.is_build(op)
    assert imports.position(op) == (10, 4, "RUNNING")
