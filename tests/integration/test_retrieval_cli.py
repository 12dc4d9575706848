"""The CLI (`python -m retrieval_service ingest|list|delete`) as a subprocess against the real
service on real Milvus Lite: a folder with one bad file ingests the rest, names the bad file
and exits non-zero; a second run of the same bytes reports them unchanged, of changed bytes
replaced; `--json`, `--addr` and `--timeout` work for every command."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from tests.integration.retrieval_harness import ASYNCIO_EN, SLEEP_ZH, running_service

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def _cli(port: int, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "RETRIEVAL_ADDR"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "retrieval_service", *args, "--addr", f"127.0.0.1:{port}",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


def _folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "nested").mkdir(parents=True)
    (docs / "asyncio.md").write_text(ASYNCIO_EN, encoding="utf-8")
    (docs / "nested" / "sleep.txt").write_text(SLEEP_ZH, encoding="utf-8")
    (docs / "broken.pdf").write_bytes(b"this is not a PDF at all")
    (docs / "ignored.png").write_bytes(b"\x89PNG")  # unsupported in a folder: skipped
    return docs


async def test_a_bad_file_fails_alone_by_name_and_the_exit_is_non_zero(tmp_path) -> None:
    docs = _folder(tmp_path)
    async with running_service(tmp_path / "kb.db") as svc:
        rc, out, err = await _cli(svc.port, "ingest", str(docs))
        listing = await svc.listing()
        rc_again, out_again, _ = await _cli(svc.port, "ingest", str(docs), "--json")
        rc_list, out_list, _ = await _cli(svc.port, "list", "--json", "--timeout", "30")
        rc_del, out_del, _ = await _cli(svc.port, "delete", "asyncio.md", "--json")
        after_delete = await svc.listing()
    assert rc == 1, err
    assert set(listing) == {"asyncio.md", "sleep.txt"}
    assert f"FAILED {docs / 'broken.pdf'}: INVALID_ARGUMENT" in out
    assert "ingested 2 file(s) (2 new, 0 replaced" in out and "failed 1" in out
    assert f"  failed: {docs / 'broken.pdf'}: INVALID_ARGUMENT" in out
    assert "Traceback" not in err

    assert rc_again == 1
    again = json.loads(out_again)
    assert again["summary"] == {
        "ingested": 2, "new": 0, "replaced": 0, "unchanged": 2, "failed": 1,
    }  # fmt: skip
    assert all(d["unchanged"] and d["content_sha256"] for d in again["ingested"])
    assert [f["filename"] for f in again["failed"]] == ["broken.pdf"]
    assert again["failed"][0]["reason"].startswith("INVALID_ARGUMENT: ")
    assert {d["filename"]: d["l3_chunks"] for d in again["ingested"]} == {
        name: counts[2] for name, counts in listing.items()
    }

    assert rc_list == 0
    assert {d["filename"] for d in json.loads(out_list)} == {"asyncio.md", "sleep.txt"}
    assert rc_del == 0 and json.loads(out_del)["deleted_chunks"] == sum(listing["asyncio.md"])
    assert set(after_delete) == {"sleep.txt"}


async def test_all_good_exits_zero_and_duplicate_names_fail_by_name(tmp_path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "notes.md").write_text("Gulls nest on the cliffs in spring.", encoding="utf-8")
    (two / "notes.md").write_text("A different file with the same name.", encoding="utf-8")
    async with running_service(tmp_path / "kb.db") as svc:
        rc_ok, out_ok, _ = await _cli(svc.port, "ingest", str(one / "notes.md"))
        (one / "notes.md").write_text("Gulls nest on the cliffs in May.", encoding="utf-8")
        rc_dup, out_dup, _ = await _cli(svc.port, "ingest", str(one), str(two), "--json")
        rc_missing, _, err_missing = await _cli(svc.port, "ingest", str(tmp_path / "nowhere"))
        docs, _ = await svc.retrieve("where do gulls nest", top_k=1)
    assert rc_ok == 0 and "ingested 1 file(s) (1 new, 0 replaced" in out_ok
    dup = json.loads(out_dup)
    assert rc_dup == 1
    assert [f["path"] for f in dup["failed"]] == [str((two / "notes.md").resolve())]
    assert "same file name as" in dup["failed"][0]["reason"]
    assert dup["summary"]["replaced"] == 1
    assert rc_missing == 2 and "no such file or folder" in err_missing
    assert "cliffs" in docs[0]["text"]


async def test_delete_of_a_missing_document_says_so_and_exits_one(tmp_path) -> None:
    # It printed "deleted 0 chunks" and exited 0, so a typo looked like a delete.
    async with running_service(tmp_path / "kb.db") as svc:
        rc, out, err = await _cli(svc.port, "delete", "nowhere.md")
    assert rc == 1
    assert "no such document: nowhere.md; nothing deleted" in err
    assert "deleted 0 chunks" not in out


async def test_a_closed_pipe_is_silent(tmp_path) -> None:
    # `… list | head` printed a BrokenPipeError traceback.
    async with running_service(tmp_path / "kb.db") as svc:
        await svc.ingest(("notes.md", b"Gulls nest on the cliffs in spring."))
        for argv in (
            ["-m", "retrieval_service", "list", "--addr", f"127.0.0.1:{svc.port}"],
            ["-m", "retrieval_service", "--help"],
            ["-m", "orchestrator_service", "ask", "--help"],
        ):
            read, write = os.pipe()
            os.close(read)  # the reader is gone before the first line is written
            proc = await asyncio.create_subprocess_exec(
                sys.executable, *argv, cwd=ROOT, stdout=write, stderr=asyncio.subprocess.PIPE
            )
            os.close(write)
            _, err = await proc.communicate()
            assert proc.returncode == 0, (argv, err.decode())
            assert err.decode() == "", (argv, err.decode())
