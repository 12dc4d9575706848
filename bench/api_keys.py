"""What scoped API keys cost a Retrieve (docs/api.md#api-keys; wanted ≤ 1.2): Retrieve p50
through a server with AUTH_KEYS_FILE, called with a reader key of 20 access groups (the key
looked up, its quota charged, its knowledge base checked, and the search expression carrying
the 20-group `acl` condition), ÷ the same Retrieve through a server with no auth. A third side,
AUTH_TOKEN on the keyed server (authenticated, but seeing every document: no `acl` condition),
separates the interceptor's cost from the condition's.

    python -m bench.api_keys [--documents 600] [--queries 300]

One retrieval app (its real ingest, on Milvus Lite, with the hashing embedder so that 600
documents ingest in seconds) is served by two gRPC servers in the process: one with no auth,
one with AUTH_KEYS_FILE and AUTH_TOKEN. A third of the documents has no `acl`, the rest an
`acl` of one of 40 groups, so the key sees about half the store (its 20 groups' documents and
the open ones). Queries are two topic words of random documents; the sides run interleaved
query by query, each first in turn, so machine noise falls on all alike."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from bench._hashing import HashingEmbedder
from bench._retrieval_rig import bench_settings, p50_p95, quiet, scratch_db, table
from retrieval_service.bootstrap import RetrievalApp, create_app, retrieval_server
from retrieval_service.core.ingest import SourceDocument

TARGET_RATIO = 1.2
GROUPS = 40
KEY_GROUPS = 20
KEY = "bench-reader-key"
TOPICS = [f"topic{i:03d}" for i in range(200)]
# Words every document shares, around its two topic words.
FILLER = [
    "the",
    "report",
    "covers",
    "schedules",
    "budgets",
    "suppliers",
    "staffing",
    "quarterly",
    "review",
    "site",
]


def documents(count: int, rng: random.Random) -> list[SourceDocument]:
    out = []
    for i in range(count):
        topic = rng.sample(TOPICS, 2)
        sentences = [
            " ".join([*topic, *rng.sample(FILLER, 8)]).capitalize() + "." for _ in range(6)
        ]
        acl = None if i % 3 == 0 else {"acl": [f"g{rng.randrange(GROUPS):02d}"]}
        out.append(
            SourceDocument(
                filename=f"doc-{i:04d}.md", content=" ".join(sentences).encode(), metadata=acl
            )
        )
    return out


def keys_file(folder: Path) -> Path:
    path = folder / "keys.json"
    entry = {
        "id": "bench-reader",
        "sha256": hashlib.sha256(KEY.encode()).hexdigest(),
        "role": "reader",
        "knowledge_bases": ["*"],
        "groups": [f"g{i:02d}" for i in range(0, GROUPS, GROUPS // KEY_GROUPS)],
    }
    path.write_text(json.dumps({"keys": [entry]}))
    return path


@asynccontextmanager
async def serving(
    app: RetrievalApp, db: str, **auth: str
) -> AsyncIterator[retrieval_pb2_grpc.RetrievalServiceStub]:
    settings = bench_settings(db).model_copy(update=auth)
    server = retrieval_server(app, settings, port=0)
    port = await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield retrieval_pb2_grpc.RetrievalServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(0)


async def timed(
    stub: retrieval_pb2_grpc.RetrievalServiceStub, query: str, md: Sequence[tuple[str, str]]
) -> tuple[float, int]:
    started = time.perf_counter()
    reply = await stub.Retrieve(retrieval_pb2.RetrieveRequest(query=query), metadata=md)
    return (time.perf_counter() - started) * 1000, len(reply.docs)


async def run(document_count: int, query_count: int) -> None:
    rng = random.Random(7)
    with scratch_db("bench-keys-") as db, tempfile.TemporaryDirectory() as folder:
        app = await create_app(bench_settings(db), embedder=HashingEmbedder())
        try:
            started = time.perf_counter()
            corpus = documents(document_count, rng)
            for i in range(0, len(corpus), 100):
                await app.ingestor.ingest(corpus[i : i + 100])
            print(f"ingested {document_count} documents in {time.perf_counter() - started:.1f} s")
            keys = str(keys_file(Path(folder)))
            legacy = "bench-admin-token"
            async with (
                serving(app, db) as open_stub,
                serving(app, db, auth_keys_file=keys, auth_token=legacy) as keyed,
            ):
                sides = {
                    "no auth": (open_stub, ()),
                    "AUTH_TOKEN (sees all)": (keyed, (("authorization", f"Bearer {legacy}"),)),
                    "20-group key": (keyed, (("authorization", f"Bearer {KEY}"),)),
                }
                queries = [" ".join(rng.sample(TOPICS, 2)) for _ in range(query_count)]
                for query in queries[:20]:  # warm every side
                    for stub, md in sides.values():
                        await timed(stub, query, md)
                samples: dict[str, list[float]] = {name: [] for name in sides}
                found: dict[str, int] = dict.fromkeys(sides, 0)
                names = list(sides)
                for i, query in enumerate(queries):  # each side first in turn
                    shift = i % len(names)
                    for name in names[shift:] + names[:shift]:
                        stub, md = sides[name]
                        ms, docs = await timed(stub, query, md)
                        samples[name].append(ms)
                        found[name] += docs
        finally:
            await app.aclose()
    rows = []
    for name in names:
        p50, p95 = p50_p95(samples[name])
        rows.append([name, p50, p95, found[name] / len(queries)])
    print(table(rows, ["side", "p50 ms", "p95 ms", "docs/query"]))
    base = p50_p95(samples["no auth"])[0]
    token = p50_p95(samples["AUTH_TOKEN (sees all)"])[0] / base
    print(f"Retrieve p50, AUTH_TOKEN ÷ no auth: {token:.3f} (the interceptor alone)")
    ratio = p50_p95(samples["20-group key"])[0] / base
    verdict = "ok" if ratio <= TARGET_RATIO else f"above {TARGET_RATIO}"
    print(f"Retrieve p50, 20-group key ÷ no auth: {ratio:.3f} ({verdict}; {query_count} per side)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=600)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    quiet()
    asyncio.run(run(args.documents, args.queries))


if __name__ == "__main__":
    main()
