"""ListDocuments paging (AIP-158) past the 16,384-row query window that used
to cut the listing short: 17,000 registry records (written through the registry, no chunks
needed), paged by the registry, by the RPC and by the CLI, with deleted and uncommitted
versions left out and bad page arguments INVALID_ARGUMENT."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import grpc
import pytest
from supermew.v1 import retrieval_pb2

from retrieval_service.adapters.embedders import OpenAIEmbedder
from retrieval_service.core.documents import (
    COMMITTED,
    PENDING,
    TOMBSTONE,
    DocumentEntry,
    encode_page_token,
)
from tests.fakes.embeddings_server import EmbeddingsServer
from tests.integration.retrieval_harness import Service, running_service

N = 17_000
# Spaces and a name that prefixes others: the listing is ordered by filename all the same.
NAMES = sorted([f"doc {i:05d}.txt" for i in range(N - 2)] + ["doc.txt", "doc.txt .txt"])
GONE, PENDING_ONLY = "doc 00007.txt", "zz-never-committed.txt"


def _entry(name: str, version: str, state: int = COMMITTED) -> DocumentEntry:
    return DocumentEntry(name, "Text", 1, {"0": [1, 1, 1]}, version, state)


@pytest.fixture(scope="module")
def embeddings() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer(64).start()
    yield server
    server.stop()


@asynccontextmanager
async def serving(db: str, server: EmbeddingsServer) -> AsyncIterator[Service]:
    model = OpenAIEmbedder(server.base_url, "fake", 64)
    try:
        async with running_service(db, embedder=model) as svc:
            yield svc
    finally:
        await model.aclose()


@pytest.fixture(scope="module")
def big_registry(tmp_path_factory, embeddings) -> str:
    db = tmp_path_factory.mktemp("paging") / "kb.db"

    async def build() -> None:
        async with serving(str(db), embeddings) as svc:
            await svc.app.registry.put(*(_entry(n, "00000000000000000001-a") for n in NAMES))
            # A deleted document and a never-committed one are not listed.
            await svc.app.registry.put(
                _entry(GONE, "00000000000000000002-a", TOMBSTONE),
                _entry(PENDING_ONLY, "00000000000000000002-a", PENDING),
                # An older, superseded version of a listed document is not listed twice.
                _entry(NAMES[5], "00000000000000000000-a"),
            )

    # Built on a worker thread with its own loop (a module fixture outlives the test's loop).
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: asyncio.run(build())).result()
    return str(db)


async def test_registry_pages_past_the_old_window(big_registry, embeddings) -> None:
    listed = [n for n in NAMES if n != GONE]
    async with serving(big_registry, embeddings) as svc:
        everything, token = [], ""
        while True:  # every page of the registry, as a benchmark lists a store
            page = await svc.app.registry.page(1000, token)
            everything += page.entries
            if not (token := page.next_page_token):
                break
        assert [e.filename for e in everything] == listed
        first = await svc.app.ingestor.list_page(1000, "")
        assert [e.filename for e in first.entries] == listed[:1000]
        assert first.next_page_token
        second = await svc.app.ingestor.list_page(1000, first.next_page_token)
        assert [e.filename for e in second.entries] == listed[1000:2000]
        # Continue past the 16,384th document: the tail comes back, then "" ends the listing.
        tail = await svc.app.ingestor.list_page(1000, encode_page_token(listed[16_499]))
        assert [e.filename for e in tail.entries] == listed[16_500:]
        assert tail.next_page_token == ""


async def test_rpc_paging_and_bad_arguments(big_registry, embeddings) -> None:
    listed = [n for n in NAMES if n != GONE]
    async with serving(big_registry, embeddings) as svc:
        default = await svc.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest())
        assert [d.filename for d in default.documents] == listed[:100]
        assert default.documents[0].l3_chunks == 1
        clamped = await svc.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest(page_size=5000))
        assert len(clamped.documents) == 1000
        names: list[str] = []
        token = ""
        for _ in range(3):
            page = await svc.stub.ListDocuments(
                retrieval_pb2.ListDocumentsRequest(page_size=3, page_token=token)
            )
            names += [d.filename for d in page.documents]
            token = page.next_page_token
        assert names == listed[:9]

        bad_tokens = ["%%%", base64.urlsafe_b64encode(b"\xff\xfe").decode(), "aGVsbG8="]
        for request, field in [
            *((retrieval_pb2.ListDocumentsRequest(page_token=t), "page_token") for t in bad_tokens),
            (retrieval_pb2.ListDocumentsRequest(page_size=-1), "page_size"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await svc.stub.ListDocuments(request)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith(field)


async def test_cli_lists_every_page(big_registry, embeddings) -> None:
    listed = [n for n in NAMES if n != GONE]
    async with serving(big_registry, embeddings) as svc:
        env = {**os.environ, "RETRIEVAL_ADDR": f"127.0.0.1:{svc.port}"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "retrieval_service", "list",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert [line.split("\t")[0] for line in lines] == listed
    assert lines[0].endswith("l1=1 l2=1 l3=1")
