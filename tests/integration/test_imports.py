"""Imports as long-running operations (docs/api.md#imports), through the real service on
127.0.0.1 (Milvus Lite + its SQLite control plane): ImportDocuments answers an operation at once,
google.longrunning.Operations follows it; folders with sidecars, a broken and an unsupported
file, unchanged re-imports, delete_missing and its guard, request_id replay, refused sources,
URLs from a local HTTP server, cancel."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, ClassVar

import grpc
import httpx
import pytest
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import duration_pb2, struct_pb2
from prometheus_client.parser import text_string_to_metric_families
from supermew.v1 import retrieval_pb2

from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration.retrieval_harness import Service, running_service
from tests.integration.test_retrieval_cli import _cli

pytestmark = pytest.mark.integration

State = retrieval_pb2.ImportDocumentsMetadata.State
PARAGRAPH = (
    "Imported documents keep their folder path as document id. The import job reads each "
    "file, embeds its leaves and commits it whole. "
)


@asynccontextmanager
async def service(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[Service, Any]]:
    async with running_service(tmp_path / "kb.db", **settings) as svc:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{svc.port}")
        try:
            yield svc, operations_pb2_grpc.OperationsStub(channel)
        finally:
            await channel.close()


def write_folder(root: Path, files: dict[str, str | bytes]) -> Path:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


async def start(svc: Service, **fields: Any) -> operations_pb2.Operation:
    metadata = fields.pop("metadata", None)
    request = retrieval_pb2.ImportDocumentsRequest(**fields)
    if metadata:
        request.metadata.update(metadata)
    return await svc.stub.ImportDocuments(request)


async def wait(ops: Any, name: str, seconds: float = 120) -> operations_pb2.Operation:
    op = await ops.WaitOperation(
        operations_pb2.WaitOperationRequest(
            name=name, timeout=duration_pb2.Duration(seconds=int(seconds))
        ),
        timeout=seconds + 5,
    )
    assert op.done, op
    return op


def progress(op: operations_pb2.Operation) -> retrieval_pb2.ImportDocumentsMetadata:
    metadata = retrieval_pb2.ImportDocumentsMetadata()
    assert op.metadata.Unpack(metadata)
    return metadata


def response(op: operations_pb2.Operation) -> retrieval_pb2.ImportDocumentsResponse:
    assert op.WhichOneof("result") == "response", op.error
    out = retrieval_pb2.ImportDocumentsResponse()
    assert op.response.Unpack(out)
    return out


async def documents(svc: Service) -> dict[str, dict[str, Any]]:
    reply = await svc.stub.ListDocuments(retrieval_pb2.ListDocumentsRequest(page_size=1000))
    out = {}
    for d in reply.documents:
        meta = struct_pb2.Struct()
        meta.CopyFrom(d.metadata)
        out[d.document_id] = {"leaves": d.l3_chunks, "metadata": dict(meta.items())}
    return out


async def test_a_folder_with_sidecars_a_broken_and_an_unsupported_file(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path / "docs",
        {
            "guide.md": "# Guide\n\n" + PARAGRAPH * 3,
            "guide.md.meta.json": json.dumps({"team": "docs", "tier": 1}),
            "sub/notes.txt": PARAGRAPH * 2,
            "broken.pdf": b"%PDF-1.4 this is not a PDF at all",
            "picture.xyz": b"\x00\x01",
            "orphan.txt.meta.json": "{}",
            ".hidden/secret.txt": "never imported",
        },
    )
    async with service(tmp_path, import_roots=str(tmp_path)) as (svc, ops):
        op = await start(
            svc, uris=[root.as_uri()], metadata={"source": "handbook"}, request_id="first"
        )
        assert op.name.startswith("operations/") and not op.done
        assert progress(op).state in (State.QUEUED, State.RUNNING)
        done = await wait(ops, op.name)
        meta, result = progress(done), response(done)
        assert meta.state == State.SUCCEEDED and meta.progress_percent == 100
        assert (result.documents_total, result.documents_new, result.documents_failed) == (3, 2, 1)
        assert result.documents_skipped == 2  # picture.xyz, orphan.txt.meta.json
        assert result.leaves_written > 0
        assert [f.document_id for f in result.failures] == ["broken.pdf"]
        assert result.failures[0].uri == (root / "broken.pdf").as_uri()
        assert result.failures[0].status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        stored = await documents(svc)
        assert set(stored) == {"guide.md", "sub/notes.txt"}
        assert stored["guide.md"]["metadata"] == {"team": "docs", "tier": 1, "source": "handbook"}
        assert stored["sub/notes.txt"]["metadata"] == {"source": "handbook"}

        # The same again: nothing read, embedded or written.
        again = await wait(
            ops, (await start(svc, uris=[root.as_uri()], metadata={"source": "handbook"})).name
        )
        second = response(again)
        assert (second.documents_unchanged, second.documents_new, second.leaves_written) == (
            2,
            0,
            0,
        )
        assert second.documents_failed == 1

        # A sidecar edited: that document is replaced with its new metadata.
        (root / "guide.md.meta.json").write_text(json.dumps({"team": "support"}))
        third = response(await wait(ops, (await start(svc, uris=[root.as_uri()])).name))
        assert (third.documents_replaced, third.documents_unchanged) == (2, 0)
        assert (await documents(svc))["guide.md"]["metadata"] == {"team": "support"}


async def test_request_id_replays_the_same_operation_and_refuses_another_request(
    tmp_path: Path,
) -> None:
    root = write_folder(tmp_path / "docs", {"a.md": PARAGRAPH})
    async with service(tmp_path, import_roots=str(tmp_path)) as (svc, ops):
        first = await start(svc, uris=[root.as_uri()], request_id="nightly-1")
        replay = await start(svc, uris=[root.as_uri()], request_id="nightly-1")
        assert replay.name == first.name
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await start(svc, uris=[root.as_uri()], request_id="nightly-1", delete_missing=True)
        assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "request_id" in (refused.value.details() or "")
        await wait(ops, first.name)


async def test_delete_missing_and_its_guard(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path / "docs", {f"d{i}.md": f"Document number {i}. " + PARAGRAPH for i in range(4)}
    )
    async with service(tmp_path, import_roots=str(tmp_path)) as (svc, ops):
        await wait(ops, (await start(svc, uris=[root.as_uri()])).name)
        # Another document ingested directly, not from this source: never deleted by it.
        await svc.ingest(("direct.md", PARAGRAPH.encode()))
        for i in range(3):
            (root / f"d{i}.md").unlink()
        guarded = await wait(
            ops, (await start(svc, uris=[root.as_uri()], delete_missing=True)).name
        )
        assert progress(guarded).state == State.FAILED
        assert guarded.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        assert "max_deletion_percent" in guarded.error.message
        assert "3 of the 4" in guarded.error.message
        assert set(await documents(svc)) == {"d0.md", "d1.md", "d2.md", "d3.md", "direct.md"}

        allowed = await wait(
            ops,
            (
                await start(svc, uris=[root.as_uri()], delete_missing=True, max_deletion_percent=75)
            ).name,
        )
        assert response(allowed).documents_deleted == 3
        assert set(await documents(svc)) == {"d3.md", "direct.md"}


async def test_refused_sources_name_the_uri_and_the_setting(tmp_path: Path) -> None:
    inside = write_folder(tmp_path / "allowed", {"a.md": PARAGRAPH})
    outside = write_folder(tmp_path / "elsewhere", {"b.md": PARAGRAPH})
    (inside / "link.md").symlink_to(outside / "b.md")
    (inside / "escape").symlink_to(outside)
    cases = {
        outside.as_uri(): (grpc.StatusCode.PERMISSION_DENIED, "IMPORT_ROOTS"),
        (inside / "escape").as_uri(): (grpc.StatusCode.PERMISSION_DENIED, "IMPORT_ROOTS"),
        "http://127.0.0.1:9/x.md": (grpc.StatusCode.PERMISSION_DENIED, "IMPORT_URL_PREFIXES"),
        "s3://bucket/prefix": (grpc.StatusCode.PERMISSION_DENIED, "IMPORT_URL_PREFIXES"),
        "ftp://host/file.md": (grpc.StatusCode.INVALID_ARGUMENT, "uris[0]"),
        "file://host/a.md": (grpc.StatusCode.INVALID_ARGUMENT, "uris[0]"),
    }
    async with service(tmp_path, import_roots=str(inside)) as (svc, ops):
        for uri, (code, named) in cases.items():
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await start(svc, uris=[uri])
            assert refused.value.code() == code, uri
            assert named in (refused.value.details() or ""), (uri, refused.value.details())
        with pytest.raises(grpc.aio.AioRpcError) as empty:
            await start(svc, uris=[])
        assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # A symlinked file leaving the root inside an allowed folder: that document fails.
        result = response(await wait(ops, (await start(svc, uris=[inside.as_uri()])).name))
        assert result.documents_new == 1
        assert [(f.document_id, f.status.code) for f in result.failures] == [
            ("link.md", grpc.StatusCode.PERMISSION_DENIED.value[0])
        ]
        assert set(await documents(svc)) == {"a.md"}
    async with service(tmp_path / "off") as (svc, _):
        with pytest.raises(grpc.aio.AioRpcError) as off:
            await start(svc, uris=[inside.as_uri()])
        assert off.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "IMPORT_ROOTS is not set" in (off.value.details() or "")


class _Site(http.server.BaseHTTPRequestHandler):
    pages: ClassVar[dict[str, tuple[int, dict[str, str], bytes]]] = {}

    def do_GET(self) -> None:
        status, headers, body = self.pages.get(self.path, (404, {}, b"missing"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@contextmanager
def site(pages: dict[str, tuple[int, dict[str, str], bytes]]) -> Iterator[str]:
    handler = type("Site", (_Site,), {"pages": pages})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_urls_from_a_local_http_server(tmp_path: Path) -> None:
    pages: dict[str, tuple[int, dict[str, str], bytes]] = {
        "/docs/page.md": (200, {"Content-Type": "text/markdown"}, PARAGRAPH.encode()),
        "/docs/faq": (200, {"Content-Type": "text/html"}, f"<p>{PARAGRAPH}</p>".encode()),
        "/docs/moved.md": (302, {"Location": "/docs/page.md"}, b""),
        "/docs/away.md": (302, {"Location": "http://example.invalid/x.md"}, b""),
        "/docs/big.md": (200, {}, b"x" * 5000),
        "/docs/gone.md": (404, {}, b"no"),
    }
    with site(pages) as base:
        async with service(
            tmp_path, import_url_prefixes=f"{base}/docs/", max_document_bytes=4000
        ) as (svc, ops):
            uris = [
                f"{base}/docs/{p}"
                for p in ("page.md", "faq", "moved.md", "away.md", "big.md", "gone.md")
            ]
            result = response(await wait(ops, (await start(svc, uris=uris)).name))
            assert (result.documents_total, result.documents_new) == (6, 3)
            failed = {f.document_id.rsplit("/", 1)[1]: f.status for f in result.failures}
            assert failed["away.md"].code == grpc.StatusCode.PERMISSION_DENIED.value[0]
            assert "IMPORT_URL_PREFIXES" in failed["away.md"].message
            assert failed["big.md"].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
            assert "MAX_DOCUMENT_BYTES" in failed["big.md"].message
            assert failed["gone.md"].code == grpc.StatusCode.NOT_FOUND.value[0]
            assert set(await documents(svc)) == {
                f"{base}/docs/{p}" for p in ("page.md", "faq", "moved.md")
            }


async def test_cancel_stops_between_batches_and_keeps_what_committed(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path / "docs",
        {f"f{i:03}.md": f"File {i} talks about topic {i}. " + PARAGRAPH * 2 for i in range(600)},
    )
    # More documents than one job has in flight (IMPORT_BATCH_DOCUMENTS), embedded fast.
    async with service(tmp_path, import_roots=str(tmp_path), embedder=HashingEmbedder()) as (
        svc,
        ops,
    ):
        op = await start(svc, uris=[root.as_uri()])
        while (
            progress(
                await ops.GetOperation(operations_pb2.GetOperationRequest(name=op.name))
            ).documents_new
            == 0
        ):
            await asyncio.sleep(0.05)
        await ops.CancelOperation(operations_pb2.CancelOperationRequest(name=op.name))
        done = await wait(ops, op.name)
        meta = progress(done)
        assert meta.state == State.CANCELLED
        assert done.error.code == grpc.StatusCode.CANCELLED.value[0]
        stored = await documents(svc)
        assert 0 < len(stored) < 600
        assert meta.documents_new == len(stored)
        assert all(d["leaves"] > 0 for d in stored.values())
        # Listed among the done ones; deletable now that it is done.
        listed = await ops.ListOperations(
            operations_pb2.ListOperationsRequest(filter="done = true")
        )
        assert op.name in [o.name for o in listed.operations]
        await ops.DeleteOperation(operations_pb2.DeleteOperationRequest(name=op.name))
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await ops.GetOperation(operations_pb2.GetOperationRequest(name=op.name))
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND


async def test_the_operations_api_checks_its_input(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path / "docs", {f"f{i:02}.md": f"File {i}. " + PARAGRAPH * 3 for i in range(40)}
    )
    async with service(tmp_path, import_roots=str(tmp_path)) as (svc, ops):
        for bad in ("nope", "operations/", "operations/../x"):
            with pytest.raises(grpc.aio.AioRpcError) as invalid:
                await ops.GetOperation(operations_pb2.GetOperationRequest(name=bad))
            assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (invalid.value.details() or "").startswith("name:")
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await ops.GetOperation(
                operations_pb2.GetOperationRequest(name="operations/" + "0" * 20)
            )
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as bad_filter:
            await ops.ListOperations(operations_pb2.ListOperationsRequest(filter="color = red"))
        assert bad_filter.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (bad_filter.value.details() or "").startswith("filter:")

        op = await start(svc, uris=[root.as_uri()])
        # WaitOperation honours its own timeout: the import is not done after 0.2 s.
        early = await ops.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=op.name, timeout=duration_pb2.Duration(nanos=200_000_000)
            )
        )
        assert not early.done
        # … and the caller's deadline, shorter than its timeout: the operation as it is, OK.
        before_deadline = await ops.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=op.name, timeout=duration_pb2.Duration(seconds=60)
            ),
            timeout=0.5,
        )
        assert not before_deadline.done
        with pytest.raises(grpc.aio.AioRpcError) as running:
            await ops.DeleteOperation(operations_pb2.DeleteOperationRequest(name=op.name))
        assert running.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        listed = await ops.ListOperations(
            operations_pb2.ListOperationsRequest(
                filter='done = false AND knowledge_base = "default"'
            )
        )
        assert [o.name for o in listed.operations] == [op.name]
        await wait(ops, op.name)
        # Paged newest first.
        names = [op.name]
        for _ in range(2):
            names.append((await start(svc, uris=[root.as_uri()])).name)
        first = await ops.ListOperations(operations_pb2.ListOperationsRequest(page_size=2))
        assert [o.name for o in first.operations] == names[::-1][:2] and first.next_page_token
        rest = await ops.ListOperations(
            operations_pb2.ListOperationsRequest(page_size=2, page_token=first.next_page_token)
        )
        assert [o.name for o in rest.operations] == [names[0]] and not rest.next_page_token
        for name in names:
            await wait(ops, name)


async def test_the_cli_imports_waits_and_follows_operations(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path / "docs",
        {"a.md": PARAGRAPH, "b/c.txt": PARAGRAPH * 2, "broken.pdf": b"not a pdf"},
    )
    async with service(tmp_path, import_roots=str(tmp_path)) as (svc, _ops):
        await svc.stub.CreateKnowledgeBase(
            retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="hr")
        )
        rc, out, err = await _cli(
            svc.port, "import", str(root), "--kb", "hr", "--metadata", "team=hr", "--wait"
        )
        assert rc == 1, err  # broken.pdf failed
        assert "SUCCEEDED" in out and "new 2" in out and "failed 1" in out
        assert "failed broken.pdf" in out
        name = out.split()[0]
        assert name.startswith("operations/")

        rc_start, out_start, _ = await _cli(
            svc.port, "import", root.as_uri(), "--kb", "hr", "--metadata", "team=hr"
        )
        assert rc_start == 0 and out_start.startswith("started operations/")
        started = out_start.split()[1].rstrip(";")
        rc_wait, out_wait, _ = await _cli(svc.port, "operations", "wait", started, "--json")
        waited = json.loads(out_wait)
        assert waited["done"] is True
        assert waited["response"]["documents_unchanged"] == "2"  # int64 in JSON: a string
        assert rc_wait == 1  # the broken file again

        rc_list, out_list, _ = await _cli(svc.port, "operations", "list", "--kb", "hr")
        assert rc_list == 0 and name in out_list and started in out_list
        assert "2 operation(s)" in out_list
        rc_get, out_get, _ = await _cli(svc.port, "operations", "get", name)
        assert rc_get == 0 and out_get.startswith(name)
        rc_cancel, _out_cancel, _ = await _cli(svc.port, "operations", "cancel", name)
        assert rc_cancel == 0  # done already: nothing changes
        rc_bad, _, err_bad = await _cli(svc.port, "operations", "get", "nope")
        assert rc_bad == 1 and "INVALID_ARGUMENT" in err_bad
        rc_off, _, err_off = await _cli(svc.port, "import", "/etc", "--kb", "hr")
        assert rc_off == 1 and "PERMISSION_DENIED" in err_off and "IMPORT_ROOTS" in err_off


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An S3-compatible server on 127.0.0.1 (moto in server mode) with a bucket `corpus`, and a
    client of it; the service reads the standard AWS variables."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "test-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}")
    client.create_bucket(Bucket="corpus")
    client.endpoint = f"http://{host}:{port}"
    try:
        yield client
    finally:
        server.stop()


async def test_a_bucket_on_an_s3_compatible_server(tmp_path: Path, s3: Any) -> None:
    objects: dict[str, bytes] = {
        "docs/a.md": PARAGRAPH.encode(),
        "docs/a.md.meta.json": json.dumps({"team": "ops"}).encode(),
        "docs/sub/b.txt": (PARAGRAPH * 2).encode(),
        "docs/skip.xyz": b"\x00",
        "docs/big.md": b"y" * 5000,
        "other/c.md": PARAGRAPH.encode(),
    }
    for key, body in objects.items():
        s3.put_object(Bucket="corpus", Key=key, Body=body)
    async with service(
        tmp_path,
        import_url_prefixes="s3://corpus/docs",
        s3_endpoint_url=s3.endpoint,
        max_document_bytes=4000,
    ) as (svc, ops):
        first = response(await wait(ops, (await start(svc, uris=["s3://corpus/docs"])).name))
        assert (first.documents_total, first.documents_new, first.documents_failed) == (3, 2, 1)
        assert first.documents_skipped == 1
        assert first.failures[0].uri == "s3://corpus/docs/big.md"
        assert "MAX_DOCUMENT_BYTES" in first.failures[0].status.message
        stored = await documents(svc)
        assert set(stored) == {"a.md", "sub/b.txt"}
        assert stored["a.md"]["metadata"] == {"team": "ops"}

        # Unchanged objects (same ETags): not downloaded, not embedded.
        again = response(await wait(ops, (await start(svc, uris=["s3://corpus/docs"])).name))
        assert (again.documents_unchanged, again.leaves_written) == (2, 0)

        s3.delete_object(Bucket="corpus", Key="docs/sub/b.txt")
        pruned = await wait(
            ops, (await start(svc, uris=["s3://corpus/docs"], delete_missing=True)).name
        )
        assert response(pruned).documents_deleted == 1  # 1 of 2: within the default 50 %
        assert set(await documents(svc)) == {"a.md"}

        with pytest.raises(grpc.aio.AioRpcError) as outside:
            await start(svc, uris=["s3://corpus/other"])
        assert outside.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "IMPORT_URL_PREFIXES" in (outside.value.details() or "")
    async with service(
        tmp_path / "missing", import_url_prefixes="s3://", s3_endpoint_url=s3.endpoint
    ) as (svc, ops):
        missing = await wait(ops, (await start(svc, uris=["s3://no-such-bucket/x"])).name)
        assert missing.error.code == grpc.StatusCode.NOT_FOUND.value[0]
        assert "s3://no-such-bucket/x" in missing.error.message


def _key_entry(key_id: str, key: str, role: str, kbs: list[str]) -> dict[str, Any]:
    return {
        "id": key_id,
        "sha256": hashlib.sha256(key.encode()).hexdigest(),
        "role": role,
        "knowledge_bases": kbs,
    }


async def test_permissions_follow_the_operations_knowledge_base(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(
        json.dumps(
            {
                "keys": [
                    _key_entry("admin", "k-admin", "admin", ["*"]),
                    _key_entry("writer-hr", "k-writer-hr", "writer", ["hr"]),
                    _key_entry("reader-hr", "k-reader-hr", "reader", ["hr"]),
                    _key_entry("writer-ops", "k-writer-ops", "writer", ["ops"]),
                ]
            }
        )
    )
    root = write_folder(tmp_path / "docs", {"a.md": PARAGRAPH})

    def key(name: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {name}"),)

    async with service(tmp_path, import_roots=str(tmp_path), auth_keys_file=str(keys)) as (
        svc,
        ops,
    ):
        for kb in ("hr", "ops"):
            await svc.stub.CreateKnowledgeBase(
                retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id=kb),
                metadata=key("k-admin"),
            )
        request = retrieval_pb2.ImportDocumentsRequest(knowledge_base="hr", uris=[root.as_uri()])
        with pytest.raises(grpc.aio.AioRpcError) as reader:
            await svc.stub.ImportDocuments(request, metadata=key("k-reader-hr"))
        assert reader.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError) as elsewhere:
            await svc.stub.ImportDocuments(request, metadata=key("k-writer-ops"))
        assert elsewhere.value.code() == grpc.StatusCode.PERMISSION_DENIED
        op = await svc.stub.ImportDocuments(request, metadata=key("k-writer-hr"))
        get = operations_pb2.GetOperationRequest(name=op.name)
        assert (await ops.GetOperation(get, metadata=key("k-reader-hr"))).name == op.name
        for refused in (
            ops.GetOperation(get, metadata=key("k-writer-ops")),
            ops.CancelOperation(
                operations_pb2.CancelOperationRequest(name=op.name), metadata=key("k-reader-hr")
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await refused
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        listed = await ops.ListOperations(
            operations_pb2.ListOperationsRequest(), metadata=key("k-writer-ops")
        )
        assert list(listed.operations) == []
        listed = await ops.ListOperations(
            operations_pb2.ListOperationsRequest(), metadata=key("k-reader-hr")
        )
        assert [o.name for o in listed.operations] == [op.name]
        done = await ops.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=op.name, timeout=duration_pb2.Duration(seconds=60)
            ),
            metadata=key("k-reader-hr"),
        )
        assert response(done).documents_new == 1


async def test_metrics_count_import_results_and_operation_states(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "docs", {"a.md": PARAGRAPH, "bad.pdf": b"not a pdf"})
    async with service(tmp_path, import_roots=str(tmp_path), metrics_port=0) as (svc, ops):
        assert svc.metrics_port

        def sample(name: str, **labels: str) -> float:
            text = httpx.get(f"http://127.0.0.1:{svc.metrics_port}/metrics", timeout=10).text
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if s.name == name and s.labels == labels:
                        return float(s.value)
            return 0.0

        before = {r: sample("supermew_import_documents_total", result=r) for r in ("new", "failed")}
        await wait(ops, (await start(svc, uris=[root.as_uri()])).name)
        assert sample("supermew_import_documents_total", result="new") == before["new"] + 1
        assert sample("supermew_import_documents_total", result="failed") == before["failed"] + 1
        # The idle runner reports the states every second.
        deadline = asyncio.get_running_loop().time() + 10
        while sample("supermew_operations", state="SUCCEEDED") < 1:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.2)
        assert sample("supermew_operations", state="RUNNING") == 0


async def test_a_queued_import_cancelled_reads_nothing(tmp_path: Path) -> None:
    busy = write_folder(
        tmp_path / "busy", {f"f{i:03}.md": f"Busy {i}. " + PARAGRAPH * 2 for i in range(400)}
    )
    queued = write_folder(tmp_path / "queued", {"q.md": PARAGRAPH})
    async with service(
        tmp_path, import_roots=str(tmp_path), import_workers=1, embedder=HashingEmbedder()
    ) as (svc, ops):
        running = await start(svc, uris=[busy.as_uri()])
        waiting = await start(svc, uris=[queued.as_uri()])
        assert progress(waiting).state == State.QUEUED
        await ops.CancelOperation(operations_pb2.CancelOperationRequest(name=waiting.name))
        await ops.CancelOperation(operations_pb2.CancelOperationRequest(name=running.name))
        cancelled = await wait(ops, waiting.name)
        assert progress(cancelled).state == State.CANCELLED
        assert cancelled.error.code == grpc.StatusCode.CANCELLED.value[0]
        assert progress(cancelled).documents_total == 0
        assert "q.md" not in await documents(svc)
        assert progress(await wait(ops, running.name)).state == State.CANCELLED
