"""Contextual leaf headers through the real service: the embedder and the
BM25 field read `title › section` before each leaf, Retrieve returns the leaf alone, and
it is off unless LEAF_CONTEXT_HEADER=true."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest

from retrieval_service.adapters.embedders import OpenAIEmbedder
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.retrieval_harness import SMALL, Service, running_service

TITLE = "Zebrafish fin regeneration"
BODY = " ".join(f"Sentence {i} describes the blastema and its growth." for i in range(10))
DOC = f"# {TITLE}\n\n## Methods\n\n{BODY}\n".encode()
LONG_DOC = (f"# {TITLE}\n\n## Methods\n\n" + "\n\n".join([BODY] * 20) + "\n").encode()


@pytest.fixture(scope="module")
def embeddings() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer(64).start()
    yield server
    server.stop()


@asynccontextmanager
async def serving(db: str, server: EmbeddingsServer, **settings: Any) -> AsyncIterator[Service]:
    model = OpenAIEmbedder(server.base_url, "fake", 64)
    try:
        async with running_service(db, embedder=model, **settings) as svc:
            yield svc
    finally:
        await model.aclose()


async def test_header_reaches_the_model_and_bm25_not_the_caller(tmp_path, embeddings) -> None:
    embeddings.requests.clear()
    headed_small = replace(SMALL, context_header=True)
    async with serving(str(tmp_path / "kb.db"), embeddings, chunking=headed_small) as svc:
        await svc.ingest(("fins.md", DOC), ("other.txt", b"Ferns like a peaty compost."))
        passages = [t for r in embeddings.requests for t in r["input"]]
        headed = [p for p in passages if p.startswith(f"{TITLE} › Methods\n\n")]
        assert len(headed) >= 2  # every leaf after the one holding both headings

        # "zebrafish" is only in the title, so BM25 finds the later leaves through the header.
        hits = await svc.app.chunks.bm25_search(3, "zebrafish", 20)
        assert len(hits) >= 1 + len(headed)
        assert not any(h["text"].startswith(f"{TITLE} ›") for h in hits)
        docs, _ = await svc.retrieve("zebrafish", top_k=20)
        fins = [d for d in docs if d["filename"] == "fins.md"]
        assert fins and not any(d["text"].startswith(f"{TITLE} ›") for d in fins)


async def test_turned_off_it_embeds_the_leaf_alone(tmp_path, embeddings) -> None:
    embeddings.requests.clear()
    async with serving(
        str(tmp_path / "kb.db"), embeddings, chunking=None, leaf_context_header=False
    ) as svc:
        # The title once, then a long body: the chunker keeps a heading line with the text
        # around it, so DOC * 20 would put a title in every leaf.
        await svc.ingest(("fins.md", LONG_DOC))
        passages = [t for r in embeddings.requests for t in r["input"]]
        assert passages and not any(p.startswith(TITLE) for p in passages)
        hits = await svc.app.chunks.bm25_search(3, "zebrafish", 50)
        assert hits and all(TITLE in h["text"] for h in hits)  # the leaves holding the title
        assert len(hits) < len(passages)  # …and only those


async def test_it_is_on_by_default_through_the_composition_root(tmp_path, embeddings) -> None:
    embeddings.requests.clear()
    async with serving(str(tmp_path / "kb.db"), embeddings, chunking=None) as svc:
        await svc.ingest(("fins.md", DOC * 20))
        passages = [t for r in embeddings.requests for t in r["input"]]
        assert any(p.startswith(TITLE) for p in passages)  # unheaded leaves open with "#"
