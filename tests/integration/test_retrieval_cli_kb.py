"""The CLI's knowledge-base commands (`python -m retrieval_service kb …`, `--kb`, `--metadata`
and sidecars, `search`, `sync`) as a subprocess against the real service on real Milvus Lite,
with a counting embedder: what each command changes is checked through the service's own
RPCs, and that an unchanged file is never embedded through the embedder's count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from supermew.v1 import retrieval_pb2

from tests.fakes.hashing_embedder import HashingEmbedder
from tests.integration.retrieval_harness import Service, running_service
from tests.integration.test_retrieval_cli import _cli

pytestmark = pytest.mark.integration

LEAVE = "Employees get twenty-five days of paid leave a year; carry-over ends in March."
PAY = "Salaries are paid on the last working day of each month by bank transfer."
QUOTA = "The sales quota for the northern region rose by ten percent in the first quarter."


async def _documents(svc: Service, kb: str) -> dict[str, retrieval_pb2.DocumentInfo]:
    reply = await svc.stub.ListDocuments(
        retrieval_pb2.ListDocumentsRequest(knowledge_base=kb, page_size=1000)
    )
    return {d.document_id: d for d in reply.documents}


def _meta(d: retrieval_pb2.DocumentInfo) -> dict:
    return json_format.MessageToDict(d.metadata) if d.HasField("metadata") else {}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


async def test_kb_create_get_list_update_delete(tmp_path: Path) -> None:
    doc = _write(tmp_path / "leave.md", LEAVE)
    async with running_service(tmp_path / "kb.db", embedder=HashingEmbedder()) as svc:
        port = svc.port
        rc_create, out_create, err_create = await _cli(
            port, "kb", "create", "hr", "--display-name", "HR", "--description", "Policies",
            "--json",
        )  # fmt: skip
        rc_again, _, err_again = await _cli(port, "kb", "create", "hr")
        rc_bad, _, err_bad = await _cli(port, "kb", "create", "Bad_Id")
        rc_get, out_get, _ = await _cli(port, "kb", "get", "knowledge_bases/hr", "--json")
        rc_list, out_list, _ = await _cli(port, "kb", "list", "--json")
        rc_text, out_text, _ = await _cli(port, "kb", "list")
        rc_upd, out_upd, _ = await _cli(
            port, "kb", "update", "hr", "--description", "All", "--json"
        )
        rc_noop, _, err_noop = await _cli(port, "kb", "update", "hr")
        rc_ing, _, err_ing = await _cli(port, "ingest", str(doc), "--kb", "hr")
        rc_get2, out_get2, _ = await _cli(port, "kb", "get", "hr", "--json")
        rc_busy, _, err_busy = await _cli(port, "kb", "delete", "hr")
        rc_default, _, err_default = await _cli(port, "kb", "delete", "default", "--force")
        rc_del, out_del, _ = await _cli(port, "kb", "delete", "hr", "--force")
        rc_gone, _, err_gone = await _cli(port, "kb", "get", "hr")
        default_docs = await _documents(svc, "")

    assert rc_create == 0, err_create
    created = json.loads(out_create)
    assert (created["name"], created["display_name"], created["description"]) == (
        "knowledge_bases/hr", "HR", "Policies",
    )  # fmt: skip
    assert created["document_count"] == 0 and created["create_time"]
    assert rc_again == 1 and "kb create failed: ALREADY_EXISTS: knowledge_base_id" in err_again
    assert rc_bad == 1 and "kb create failed: INVALID_ARGUMENT: knowledge_base_id" in err_bad
    assert rc_get == 0 and json.loads(out_get)["name"] == "knowledge_bases/hr"
    assert rc_list == 0
    names = [kb["name"] for kb in json.loads(out_list)]
    assert names == sorted(names) and {"knowledge_bases/default", "knowledge_bases/hr"} <= set(
        names
    )
    assert rc_text == 0 and "knowledge_bases/hr\tHR\tdocuments=0" in out_text
    # The mask names only what was given: the display name stays.
    assert rc_upd == 0
    assert (json.loads(out_upd)["display_name"], json.loads(out_upd)["description"]) == (
        "HR", "All",
    )  # fmt: skip
    assert rc_noop == 2 and "--display-name" in err_noop
    assert rc_ing == 0, err_ing
    assert rc_get2 == 0
    counts = json.loads(out_get2)
    assert counts["document_count"] == 1 and counts["chunk_count"] >= 3
    assert rc_busy == 1 and "kb delete failed: FAILED_PRECONDITION: name" in err_busy
    assert rc_default == 1 and "FAILED_PRECONDITION" in err_default
    assert rc_del == 0 and out_del.strip() == "deleted knowledge_bases/hr"
    assert rc_gone == 1 and "kb get failed: NOT_FOUND" in err_gone
    assert default_docs == {}  # the document went into hr only
    assert "Traceback" not in err_busy + err_gone + err_again


async def test_ingest_into_a_kb_with_metadata_and_sidecars_then_search_with_a_filter(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    _write(docs / "hr" / "leave.md", LEAVE)
    _write(docs / "hr" / "leave.md.meta.json", '{"department": "hr", "year": 2023}')
    _write(docs / "sales" / "quota.md", QUOTA)
    _write(docs / "sales" / "quota.md.meta.json", '{"department": "sales", "year": 2022}')
    other = _write(tmp_path / "elsewhere" / "leave.md", PAY)  # the same file name
    async with running_service(tmp_path / "kb.db", embedder=HashingEmbedder()) as svc:
        port = svc.port
        await _cli(port, "kb", "create", "corp")
        rc_ing, out_ing, err_ing = await _cli(
            port, "ingest", str(docs), "--kb", "corp", "--metadata", "source=wiki",
            "--metadata", "year=2024", "--metadata", 'tags=["policy","2024"]', "--json",
        )  # fmt: skip
        rc_one, _, err_one = await _cli(
            port, "ingest", str(other), "--kb", "corp", "--document-id", "elsewhere/leave.md"
        )
        rc_two, _, err_two = await _cli(port, "ingest", str(docs), str(other), "--document-id", "x")
        rc_default, _, _ = await _cli(port, "ingest", str(other))
        corp = await _documents(svc, "corp")
        rc_list, out_list, _ = await _cli(port, "list", "--kb", "corp", "--json")
        rc_hr, out_hr, err_hr = await _cli(
            port, "search", "paid leave days", "--kb", "corp", "--filter",
            'metadata.department = "hr"', "--json",
        )  # fmt: skip
        rc_text, out_text, _ = await _cli(
            port, "search", "sales quota region", "--kb", "corp", "--filter",
            'metadata.department = "sales" AND metadata.year >= 2024', "--top-k", "2",
        )  # fmt: skip
        rc_both, out_both, _ = await _cli(
            port, "search", "salaries paid leave", "--kb", "corp", "--kb", "default", "--json"
        )
        rc_bad, _, err_bad = await _cli(port, "search", "x", "--kb", "corp", "--filter", "year =")
        rc_nokb, _, err_nokb = await _cli(port, "search", "x", "--kb", "nowhere")
        rc_del, out_del, _ = await _cli(
            port, "delete", "--kb", "corp", "--document-id", "elsewhere/leave.md", "--json"
        )
        rc_none, _, err_none = await _cli(port, "delete")
        after = await _documents(svc, "corp")
        default_docs = await _documents(svc, "")

    assert rc_ing == 0, err_ing
    ingested = json.loads(out_ing)
    assert {d["knowledge_base"] for d in ingested["ingested"]} == {"knowledge_bases/corp"}
    assert rc_one == 0, err_one
    assert rc_two == 2 and "--document-id names one file" in err_two
    assert rc_default == 0
    assert set(corp) == {"leave.md", "quota.md", "elsewhere/leave.md"}
    # The flags over the sidecar, key by key; JSON values typed.
    assert _meta(corp["leave.md"]) == {
        "department": "hr",
        "year": 2024,
        "source": "wiki",
        "tags": ["policy", "2024"],
    }
    assert not corp["elsewhere/leave.md"].HasField("metadata")
    assert corp["leave.md"].content_sha256 and corp["leave.md"].size_bytes == len(LEAVE)
    assert rc_list == 0
    listed = {d["document_id"]: d for d in json.loads(out_list)}
    assert listed["quota.md"]["metadata"]["department"] == "sales"
    assert listed["elsewhere/leave.md"]["filename"] == "leave.md"

    assert rc_hr == 0, err_hr
    hits = json.loads(out_hr)["docs"]
    assert hits and {h["metadata"]["department"] for h in hits} == {"hr"}
    assert {h["document_id"] for h in hits} == {"leave.md"}
    assert rc_text == 0
    assert (
        "quota.md  (knowledge_bases/corp, page" in out_text and '"department": "sales"' in out_text
    )
    assert "chunk(s), retrieval_mode=" in out_text
    assert rc_both == 0
    both = {(h["knowledge_base"], h["document_id"]) for h in json.loads(out_both)["docs"]}
    assert ("knowledge_bases/default", "leave.md") in both
    assert rc_bad == 1 and "search failed: INVALID_ARGUMENT: filter" in err_bad
    assert rc_nokb == 1 and "search failed: NOT_FOUND: knowledge_bases[0]" in err_nokb

    assert rc_del == 0 and json.loads(out_del)["deleted_chunks"] > 0
    assert rc_none == 2 and "name at least one file name or --document-id" in err_none
    assert set(after) == {"leave.md", "quota.md"}
    assert set(default_docs) == {"leave.md"}  # the same name in default is untouched


async def test_sync_adds_skips_unchanged_without_embedding_updates_and_deletes(
    tmp_path: Path,
) -> None:
    root = tmp_path / "folder"
    _write(root / "leave.md", LEAVE)
    _write(root / "pay" / "pay.txt", PAY)
    _write(root / "pay" / "pay.txt.meta.json", '{"department": "finance"}')
    _write(root / "quota.md", QUOTA)
    _write(root / ".cache" / "skip.md", "hidden folders are not synced")
    embedder = HashingEmbedder()
    async with running_service(tmp_path / "kb.db", embedder=embedder) as svc:
        port = svc.port
        rc_nokb, _, err_nokb = await _cli(port, "sync", str(root), "--kb", "team")
        await _cli(port, "kb", "create", "team")
        rc1, out1, err1 = await _cli(port, "sync", str(root), "--kb", "team")
        first = await _documents(svc, "team")
        embedded = embedder.passages

        rc2, out2, _ = await _cli(port, "sync", str(root), "--kb", "team", "--json")
        second = await _documents(svc, "team")
        embedded_second = embedder.passages

        _write(root / "leave.md", LEAVE + " Unused days lapse.")
        (root / "quota.md").unlink()
        _write(root / "new" / "notes.md", "Gulls nest on the cliffs in spring.")
        _write(root / "pay" / "pay.txt.meta.json", '{"department": "payroll"}')
        rc_dry, out_dry, _ = await _cli(port, "sync", str(root), "--kb", "team", "--dry-run")
        dry = await _documents(svc, "team")
        embedded_dry = embedder.passages

        rc3, out3, err3 = await _cli(port, "sync", str(root), "--kb", "team", "--json")
        third = await _documents(svc, "team")

    assert rc_nokb == 1 and "sync failed: NOT_FOUND: knowledge_base" in err_nokb
    assert rc1 == 0, err1
    assert set(first) == {"leave.md", "pay/pay.txt", "quota.md"}
    assert _meta(first["pay/pay.txt"]) == {"department": "finance"}
    assert first["pay/pay.txt"].filename == "pay.txt"
    for line in ("added leave.md: ", "added pay/pay.txt: ", "added quota.md: "):
        assert line in out1
    assert out1.strip().splitlines()[-1] == (
        "sync knowledge_bases/team: 3 added, 0 changed, 0 unchanged, 0 deleted, 0 failed"
    )

    # Second run: nothing sent, nothing embedded, nothing rewritten.
    assert rc2 == 0
    report = json.loads(out2)
    assert report["summary"] == {
        "added": 0, "changed": 0, "unchanged": 3, "deleted": 0, "failed": 0,
    }  # fmt: skip
    assert embedded_second == embedded
    assert {k: d.ingest_time for k, d in second.items()} == {
        k: d.ingest_time for k, d in first.items()
    }

    # --dry-run says what would change and changes nothing.
    assert rc_dry == 0
    assert "changed leave.md" in out_dry and "changed pay/pay.txt" in out_dry
    assert "added new/notes.md" in out_dry and "deleted quota.md" in out_dry
    assert out_dry.strip().splitlines()[-1] == (
        "sync knowledge_bases/team: 1 added, 2 changed, 0 unchanged, 1 deleted, 0 failed "
        "(dry run: nothing was changed)"
    )
    assert embedded_dry == embedded
    assert {k: (d.content_sha256, d.ingest_time) for k, d in dry.items()} == {
        k: (d.content_sha256, d.ingest_time) for k, d in first.items()
    }

    # The real run: the changed file and metadata re-ingested, the new one added, the gone one
    # deleted.
    assert rc3 == 0, err3
    actions = {f["document_id"]: f["action"] for f in json.loads(out3)["files"]}
    assert actions == {
        "leave.md": "changed",
        "pay/pay.txt": "changed",
        "new/notes.md": "added",
        "quota.md": "deleted",
    }
    assert set(third) == {"leave.md", "pay/pay.txt", "new/notes.md"}
    assert third["leave.md"].content_sha256 != first["leave.md"].content_sha256
    assert _meta(third["pay/pay.txt"]) == {"department": "payroll"}


async def test_sync_reports_a_bad_file_and_keeps_its_stored_document(tmp_path: Path) -> None:
    root = tmp_path / "folder"
    _write(root / "ok.md", LEAVE)
    _write(root / "bad name.md", PAY)  # a space: not a document_id
    _write(root / "broken.md", QUOTA)
    async with running_service(tmp_path / "kb.db", embedder=HashingEmbedder()) as svc:
        await _cli(svc.port, "kb", "create", "team")
        await _cli(svc.port, "sync", str(root), "--kb", "team")
        _write(root / "broken.md.meta.json", "[not an object]")
        rc, out, _ = await _cli(svc.port, "sync", str(root), "--kb", "team")
        stored = await _documents(svc, "team")
    assert rc == 1
    assert "failed bad name.md: its relative path is not a document_id" in out
    assert "failed broken.md: broken.md.meta.json: not a" in out
    assert "deleted broken.md" not in out  # a file that failed is still there
    assert set(stored) == {"ok.md", "broken.md"}
    assert out.strip().splitlines()[-1].endswith("0 deleted, 2 failed")


async def test_sync_refuses_to_empty_a_knowledge_base_and_names_skipped_files(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "docs"
    for i, text in enumerate((LEAVE, PAY, QUOTA)):
        _write(folder / f"n{i}.md", text)
    async with running_service(tmp_path / "kb.db", embedder=HashingEmbedder()) as svc:
        port = svc.port
        assert (await _cli(port, "kb", "create", "hr"))[0] == 0
        assert (await _cli(port, "sync", str(folder), "--kb", "hr"))[0] == 0
        # The folder emptied of what sync reads (only an unsupported file left).
        for i in range(3):
            (folder / f"n{i}.md").unlink()
        (folder / "scan.xyz").write_bytes(b"\x00")
        for extra in ((), ("--dry-run",)):
            rc, out, err = await _cli(port, "sync", str(folder), "--kb", "hr", *extra)
            assert rc == 1, (out, err)
            assert "would delete 3 of the 3 documents" in err and "--allow-deletions" in err
            assert "skipped scan.xyz: unsupported file type .xyz" in out
            assert set(await _documents(svc, "knowledge_bases/hr")) == {"n0.md", "n1.md", "n2.md"}
        # One of three gone: within the default 50 %.
        _write(folder / "n0.md", LEAVE)
        _write(folder / "n1.md", PAY)
        rc, out, _ = await _cli(port, "sync", str(folder), "--kb", "hr")
        assert rc == 0 and "deleted n2.md" in out
        (folder / "n0.md").unlink()
        (folder / "n1.md").unlink()
        rc, _, err = await _cli(
            port, "sync", str(folder), "--kb", "hr", "--max-deletion-percent", "99"
        )
        assert rc == 1 and "more than 99%" in err
        rc, out, _ = await _cli(port, "sync", str(folder), "--kb", "hr", "--allow-deletions")
        assert rc == 0 and "deleted n0.md" in out and "deleted n1.md" in out
        assert await _documents(svc, "knowledge_bases/hr") == {}
        rc, _, err = await _cli(
            port, "sync", str(folder), "--kb", "hr", "--max-deletion-percent", "101"
        )
        assert rc == 2 and "--max-deletion-percent" in err
