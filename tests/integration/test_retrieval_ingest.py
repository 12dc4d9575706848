"""Ingestion through the real RPCs on real Milvus Lite: round trips per file type, ids and
links, replace/delete without orphans, a failing ingest keeping the old version, restart
persistence, and INVALID_ARGUMENT for every bad input with nothing stored changed."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3

import grpc
import numpy as np
import pytest
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.milvus.connection import StoreConfig
from retrieval_service.adapters.milvus.schema import UNANALYSED
from retrieval_service.adapters.sql.database import SQLITE_SUFFIX
from retrieval_service.bootstrap import create_app
from retrieval_service.core.chunking import Page, chunk_document
from retrieval_service.core.documents import LEVELS
from retrieval_service.core.ports import StoredChunk
from retrieval_service.settings import RetrievalSettings
from shared.errors import ConfigurationError
from tests.fakes.retrieval_doubles import FailingEmbedder
from tests.integration.retrieval_harness import (
    ASYNCIO_EN,
    DOCX_PARAGRAPHS,
    SMALL,
    copy_corpus,
    make_docx,
    make_pdf,
    model,
    raw_client,
    running_service,
)

ID = re.compile(r"^(?P<file>.+)::p(?P<page>\d+)::l(?P<level>[123])::(?P<n>\d+)$")


@pytest.mark.parametrize(
    ("filename", "query", "expected"),
    [
        ("sleep.md", "成年人每晚需要睡多少小时", "七到九小时"),
        ("tea.txt", "《茶经》的作者是谁", "陆羽"),
        ("asyncio.md", "how do I add a timeout to an awaitable", "wait_for"),
        ("solar.html", "which planet is the hottest", "Venus"),
        ("report.pdf", "how many engineers will be hired", "forty engineers"),
        ("policy.docx", "home office equipment reimbursement", "300 euros"),
    ],
)
async def test_round_trip_per_file_type(tmp_path, filename, query, expected) -> None:
    async with running_service(copy_corpus(tmp_path), auto_merge_enabled=False) as svc:
        docs, meta = await svc.retrieve(query, top_k=3)
    assert meta["retrieval_mode"] == "hybrid"
    top = docs[0]
    assert top["filename"] == filename
    assert expected in top["text"]
    assert top["chunk_level"] == 3 and top["rrf_rank"] >= 1
    assert ID.match(top["chunk_id"])["file"] == filename


async def test_ids_links_levels_and_listing(tmp_path) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        listing = await svc.listing()
        entry = await svc.app.registry.get("report.pdf")
        assert entry is not None and entry.pages == 2
        rows = {lvl: await svc.app.chunks.get_chunks(lvl, entry.ids(lvl)) for lvl in LEVELS}
    assert set(listing) == {
        "sleep.md",
        "tea.txt",
        "asyncio.md",
        "solar.html",
        "report.pdf",
        "policy.docx",
    }
    assert listing["report.pdf"] == tuple(len(rows[lvl]) for lvl in LEVELS)
    all_rows = [r for lvl in LEVELS for r in rows[lvl].values()]
    assert sorted(r["chunk_idx"] for r in all_rows) == list(range(len(all_rows)))
    for r in all_rows:
        m = ID.match(r["chunk_id"])
        assert m["file"] == "report.pdf" and int(m["level"]) == r["chunk_level"]
        assert m["page"] == r["page_number"]  # pypdf pages are 0-based
        if r["chunk_level"] == 1:
            assert r["parent_chunk_id"] == "" and r["root_chunk_id"] == r["chunk_id"]
        else:
            parent = rows[r["chunk_level"] - 1][r["parent_chunk_id"]]
            assert r["text"] in parent["text"] or r["text"][:20] in parent["text"]
            assert r["root_chunk_id"] == (parent["root_chunk_id"])
    assert {r["page_number"] for r in all_rows} == {"0", "1"}


async def test_replace_and_delete_leave_no_orphans(tmp_path) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        before = await svc.counts()
        old = (await svc.listing())["asyncio.md"]
        reply = await svc.ingest(("asyncio.md", b"asyncio is short now."))
        assert reply.documents[0].replaced is True
        assert (reply.documents[0].l1_chunks, reply.documents[0].l3_chunks) == (1, 1)
        after = await svc.counts()
        assert after == tuple(b - o + 1 for b, o in zip(before, old, strict=True))
        docs, _ = await svc.retrieve("asyncio short", top_k=20)
        assert not any("wait_for" in d["text"] for d in docs)

        # Ingest again, identical: idempotent, no duplicates.
        await svc.ingest(("asyncio.md", b"asyncio is short now."))
        assert await svc.counts() == after

        deleted = await svc.stub.DeleteDocuments(
            retrieval_pb2.DeleteDocumentsRequest(filenames=["asyncio.md", "never-there.txt"])
        )
        assert deleted.deleted_chunks == 3
        assert "asyncio.md" not in await svc.listing()
        assert await svc.counts() == tuple(b - o for b, o in zip(before, old, strict=True))
        for lvl in LEVELS:
            leftovers = await svc.app.chunks.get_chunks(lvl, [f"asyncio.md::p0::l{lvl}::0"])
            assert leftovers == {}


async def test_failing_ingest_keeps_the_previous_version(tmp_path) -> None:
    db = copy_corpus(tmp_path)
    failing = FailingEmbedder(model(), fail_on_batch=2)
    # Several embedding windows for this document.
    async with running_service(db, embedder=failing, window=2) as svc:
        before = await svc.counts()
        new_text = ("Replacement text about trains and railways. " * 12).encode()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await svc.ingest(("asyncio.md", new_text))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert failing.passage_batches == 2
        assert await svc.counts() == before
        docs, meta = await svc.retrieve("how do I add a timeout to an awaitable", top_k=3)
        assert meta["retrieval_mode"] == "hybrid"
        assert docs[0]["filename"] == "asyncio.md" and "wait_for" in docs[0]["text"]
        assert not any("railways" in d["text"] for d in docs)


async def test_data_survives_a_restart(tmp_path) -> None:
    db = copy_corpus(tmp_path)
    async with running_service(db) as svc:
        await svc.ingest(("extra.md", b"Restart-proof: the lighthouse keeper counts gulls."))
        listing = await svc.listing()
    async with running_service(db) as svc:
        assert await svc.listing() == listing
        docs, _ = await svc.retrieve("lighthouse keeper gulls", top_k=1)
        assert docs[0]["filename"] == "extra.md"


BAD_INGESTS = [
    ([], "documents"),
    ([("", b"x")], "documents[0].filename"),
    ([("../etc.txt", b"x")], "documents[0].filename"),
    ([("a/b.txt", b"x")], "documents[0].filename"),
    ([("a\\b.txt", b"x")], "documents[0].filename"),
    ([("bad\x07name.txt", b"x")], "documents[0].filename"),
    ([("notes.xlsx", b"x")], "documents[0].filename"),
    ([("noext", b"x")], "documents[0].filename"),
    ([("ok.txt", b"")], "documents[0].content"),
    ([("ok.txt", b"   \n ")], "documents[0].content"),
    ([("ok.txt", b"\xff\xfe\x00bad utf8")], "documents[0].content"),
    ([("ok.pdf", b"not a pdf")], "documents[0].content"),
    ([("ok.txt", b"fine"), ("ok.txt", b"twice")], "documents[1].filename"),
    ([("good.txt", b"fine"), ("big.txt", b"x" * 5000)], "documents[1].content"),
]


@pytest.mark.parametrize(("documents", "field"), BAD_INGESTS)
async def test_bad_ingest_is_invalid_argument_and_changes_nothing(
    tmp_path, documents, field
) -> None:
    async with running_service(copy_corpus(tmp_path), max_document_bytes=4096) as svc:
        before = (await svc.counts(), await svc.listing())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await svc.ingest(*documents)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(field)
        assert (await svc.counts(), await svc.listing()) == before


async def test_bad_file_type_delete_and_retrieve_inputs(tmp_path) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        before = await svc.counts()
        bad_type = retrieval_pb2.IngestDocumentsRequest(
            documents=[
                retrieval_pb2.SourceDocument(filename="x.txt", content=b"x", file_type="exe")
            ]
        )
        calls = [
            (svc.stub.IngestDocuments(bad_type), "documents[0].file_type"),
            (svc.stub.DeleteDocuments(retrieval_pb2.DeleteDocumentsRequest()), "filenames"),
            (
                svc.stub.DeleteDocuments(retrieval_pb2.DeleteDocumentsRequest(filenames=[" "])),
                "filenames[0]",
            ),
            (svc.stub.Retrieve(retrieval_pb2.RetrieveRequest(query="  ")), "query"),
            (svc.stub.Retrieve(retrieval_pb2.RetrieveRequest(query="x" * 4001)), "query"),
            (svc.stub.Retrieve(retrieval_pb2.RetrieveRequest(query="q", top_k=0)), "top_k"),
            (svc.stub.Retrieve(retrieval_pb2.RetrieveRequest(query="q", top_k=101)), "top_k"),
        ]
        for call, field in calls:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
            assert err.value.details().startswith(field)
        assert await svc.counts() == before


async def test_declared_file_type_overrides_extension(tmp_path) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        reply = await svc.stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(
                documents=[
                    retrieval_pb2.SourceDocument(
                        filename="memo.txt", content=make_docx(DOCX_PARAGRAPHS), file_type="docx"
                    ),
                    retrieval_pb2.SourceDocument(
                        filename="two.pdf", content=make_pdf(["a b", "c d"])
                    ),
                ]
            )
        )
    assert [(d.file_type, d.pages) for d in reply.documents] == [("Word", 1), ("PDF", 2)]


async def test_mismatching_collection_fails_start_up(tmp_path) -> None:
    db = copy_corpus(tmp_path)
    wrong = StoreConfig(uri=str(db), token=None, collection="supermew_chunks", dim=16)

    class Tiny(FailingEmbedder):
        pass

    small = Tiny(model())
    small.dim = 16
    with pytest.raises(ConfigurationError, match=r"dimension 384.*16.*Remedy"):
        await create_app(RetrievalSettings(milvus_uri=str(db)), embedder=small, store=wrong)


async def test_english_long_document_uses_default_sizes(tmp_path) -> None:
    text = (ASYNCIO_EN + "\n\n") * 40  # ~10k characters
    async with running_service(tmp_path / "sizes.db", chunking=None) as svc:
        reply = await svc.ingest(("long.md", text.encode()))
        entry = await svc.app.registry.get("long.md")
        rows = {lvl: await svc.app.chunks.get_chunks(lvl, entry.ids(lvl)) for lvl in LEVELS}
    d = reply.documents[0]
    assert d.l1_chunks < d.l2_chunks < d.l3_chunks
    assert max(len(r["text"]) for r in rows[1].values()) <= 2400
    assert max(len(r["text"]) for r in rows[2].values()) <= 1600
    assert max(len(r["text"]) for r in rows[3].values()) <= 800
    assert SMALL.l3.size == 80


async def test_index_build_parameters_reach_milvus_lite(tmp_path) -> None:
    """The configured BM25 k1/b and the HNSW parameters are what the store is built with
    (sent flat, Milvus Lite dropped them and scored with k1 = 1.5); a store built otherwise
    keeps working."""
    db = tmp_path / "params.db"
    async with running_service(db) as svc:
        with raw_client(svc) as client:
            leaf = svc.app.store.level_collection(3)
            sparse = client.describe_index(leaf, "sparse")["params"]
            assert {k: float(sparse[k]) for k in ("bm25_k1", "bm25_b")} == {
                "bm25_k1": 1.2,
                "bm25_b": 0.75,
            }
            dense = client.describe_index(leaf, "dense")["params"]
            assert (int(dense["M"]), int(dense["efConstruction"])) == (16, 256)
    other = StoreConfig(uri=str(db), token=None, collection="supermew_chunks", dim=384, bm25_k1=2.0)
    app = await create_app(RetrievalSettings(milvus_uri=str(db)), embedder=model(), store=other)
    await app.aclose()


def _lite_segments(db, collection: str) -> list[str]:
    """Data files Milvus Lite 3.2's manifest lists for a collection (its on-disk layout)."""
    manifest = json.loads((db / "collections" / collection / "manifest.json").read_text())
    return [f for part in manifest["partitions"].values() for f in part["data_files"]]


async def test_ingest_seals_rows_into_indexed_segments_on_lite(tmp_path) -> None:
    """Unflushed rows stay in Lite's memtable, which every search walks row by row; an
    ingest therefore ends with a flush, and so does start-up for a store written without."""
    db = tmp_path / "seal.db"
    async with running_service(db) as svc:
        leaf = svc.app.store.level_collection(3)
        assert _lite_segments(db, leaf) == []
        await svc.ingest(("asyncio.md", ASYNCIO_EN.encode()))
        assert _lite_segments(db, leaf)
        with raw_client(svc) as raw:
            row = raw.query(leaf, filter="", limit=1, output_fields=["*"])[0]
            row.pop("sparse", None)  # written by the BM25 function, not by callers
            raw.upsert(leaf, [{**row, "chunk_id": "unsealed::p0::l3::0"}])
        before = len(_lite_segments(db, leaf))
    async with running_service(db) as svc:
        assert len(_lite_segments(db, leaf)) == before + 1


async def test_a_document_being_replaced_never_vanishes_from_searches(tmp_path) -> None:
    """Lite hides the rows it is flushing from searches; an ingest seals after it commits and
    has removed the older version, so without the store's seal gate a reader searching all
    along missed the document now and then (4 of 599 searches over 15 replacements). The
    gate itself is tested exactly in tests/unit/test_retrieval_seal_gate.py."""
    async with running_service(tmp_path / "replace.db", chunking=None) as svc:
        await svc.ingest(("tea.txt", "绿茶适合八十度的水冲泡0。".encode()))
        searches: list[set[str]] = []
        done = asyncio.Event()

        async def reader() -> None:
            while not done.is_set():
                hits = await svc.app.chunks.bm25_search(3, "冲泡", 10)
                searches.append({h["filename"] for h in hits})

        reading = asyncio.ensure_future(reader())
        for version in range(1, 21):
            await svc.ingest(("tea.txt", f"绿茶适合八十度的水冲泡{version}。".encode()))
        done.set()
        await reading
    assert len(searches) > 50
    assert all(found == {"tea.txt"} for found in searches)


async def test_a_failing_store_call_is_internal_and_says_nothing_of_the_cause(tmp_path) -> None:
    """A Milvus or database failure other than an unreachable server (here: the leaf
    collection and the database's `documents` table are gone) is INTERNAL; the caller learns
    neither the exception, the collection, the table nor the path."""
    db = tmp_path / "broken.db"
    async with running_service(db) as svc:
        await svc.ingest(("tea.txt", "绿茶适合八十度的水。".encode()))
        with raw_client(svc) as raw:
            raw.drop_collection(svc.app.store.level_collection(3))
        control = db.with_name("broken" + SQLITE_SUFFIX)
        with sqlite3.connect(control) as connection:
            connection.execute("DROP TABLE documents")
        with pytest.raises(grpc.aio.AioRpcError) as listing:
            await svc.listing()
        with pytest.raises(grpc.aio.AioRpcError) as ingest:
            await svc.ingest(("tea.txt", "红茶".encode()))
    for err in (listing.value, ingest.value):
        assert err.code() == grpc.StatusCode.INTERNAL
        details = err.details() or ""
        assert "supermew_chunks" not in details and str(tmp_path) not in details
        assert "Exception" not in details and "filename" not in details
        assert "documents" not in details and "table" not in details


async def test_a_store_ingested_for_another_recall_level_refuses_to_start(tmp_path) -> None:
    """Only the recalled level's rows carry their BM25 text (BM25_ALL_LEVELS off); starting
    the same store at another LEAF_RETRIEVE_LEVEL fails, naming the setting and the remedy,
    instead of recalling those rows by their vectors only."""
    db = tmp_path / "kb.db"
    async with running_service(db) as svc:
        await svc.ingest(("asyncio.md", ASYNCIO_EN.encode()))
        with raw_client(svc) as raw:
            texts = {
                lvl: {
                    r["bm25_text"]
                    for r in raw.query(
                        svc.app.store.level_collection(lvl),
                        filter="",
                        output_fields=["bm25_text"],
                        limit=1000,
                    )
                }
                for lvl in LEVELS
            }
    assert texts[1] == texts[2] == {UNANALYSED}
    assert texts[3] and UNANALYSED not in texts[3]
    for level in (1, 2):
        with pytest.raises(ConfigurationError) as err:
            async with running_service(db, leaf_retrieve_level=level):
                pass
        message = str(err.value)
        assert f"LEAF_RETRIEVE_LEVEL={level}" in message and "BM25_ALL_LEVELS=true" in message
        assert "asyncio.md" in message
    async with running_service(db) as svc:
        docs, meta = await svc.retrieve("how do I add a timeout to an awaitable", top_k=3)
    assert meta["retrieval_mode"] == "hybrid" and "wait_for" in docs[0]["text"]


async def test_bm25_on_all_levels_lets_the_recall_level_change(tmp_path) -> None:
    db = tmp_path / "kb.db"
    async with running_service(db, bm25_all_levels=True) as svc:
        await svc.ingest(("asyncio.md", ASYNCIO_EN.encode()))
    async with running_service(db, leaf_retrieve_level=2) as svc:
        docs, meta = await svc.retrieve("how do I add a timeout to an awaitable", top_k=3)
    assert meta["leaf_retrieve_level"] == 2 and meta["retrieval_mode"] == "hybrid"
    assert docs and all(d["chunk_level"] <= 2 for d in docs)


async def test_a_retried_write_leaves_one_row_per_key_on_lite(tmp_path) -> None:
    """Milvus Lite gets plain inserts, not upserts (chunk_store): rows written again with the
    same keys, before and after a seal, are still one row each, and a search finds each once."""
    text = "Harbour pilots board the freighters at the outer buoy before dawn. " * 12
    leaves = [
        c for c in chunk_document("retry.txt", "Text", [Page(0, text)], SMALL) if c.chunk_level == 3
    ]
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((len(leaves), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = [StoredChunk(c, v, "v1") for c, v in zip(leaves, vectors, strict=True)]
    async with running_service(tmp_path / "kb.db") as svc:
        assert svc.app.store.config.embedded
        chunks = svc.app.chunks
        await chunks.write_chunks(3, rows)
        await chunks.write_chunks(3, rows)  # retried while the first copy is unsealed
        await svc.app.store.seal()
        await chunks.write_chunks(3, rows)  # and once it is sealed
        assert await chunks.count(3) == len(rows)
        found = await chunks.dense_search(3, vectors[0], 20)
    ids = [r["chunk_id"] for r in found]
    assert ids.count(leaves[0].chunk_id) == 1
    assert len(ids) == len(set(ids)) == len(rows)
