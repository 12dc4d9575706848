"""The README's knowledge-base walk-through, run for real and in its order: both services
start as processes (the built-in local model, an empty store), then every `grpcurl` line of
its "Knowledge bases" block (create, get, list, update, ingest with document_id and metadata,
ListDocuments, Retrieve and Run with knowledge_bases and filter, delete) and every CLI line of
the block after it (in a folder holding the file they name) must succeed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from tests.integration.retrieval_harness import free_port
from tests.integration.test_readme_calls import DEFAULT_PORTS, _wait_serving

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LEAVE = "Employees get 25 days of paid leave a year. Unused leave days carry over until March."


BIN = Path(sys.executable).parent


def _run(line: str, port_map: dict[int, int]) -> subprocess.CompletedProcess[str]:
    """One README command line with the real binaries `make setup` installs, ports
    substituted."""
    for default, actual in port_map.items():
        line = line.replace(f"localhost:{default}", f"127.0.0.1:{actual}")
    argv = shlex.split(line)
    argv[0] = str(BIN / argv[0])
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)


def kb_blocks() -> tuple[list[str], list[str]]:
    """(grpcurl lines, CLI lines) of the README's "Knowledge bases" part of "Try it by hand"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Try it by hand", 1)[1].split("\n## ", 1)[0]
    part = section.split("### Knowledge bases", 1)[1]
    calls, cli = re.findall(r"```sh\n(.*?)```", part, re.S)[:2]
    return (
        [line for line in calls.splitlines() if line.startswith("grpcurl ")],
        [line for line in cli.splitlines() if line.startswith(".venv/bin/python ")],
    )


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, int]]:
    data = tmp_path_factory.mktemp("readme-kb")
    ports = {name: free_port() for name in DEFAULT_PORTS}
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LLM_", "MODEL", "RERANK_", "EMBEDDING_", "SAMPLES_", "AUTH_"))
    }
    env.update(
        RETRIEVAL_PORT=str(ports["retrieval"]),
        ORCHESTRATOR_PORT=str(ports["orchestrator"]),
        RETRIEVAL_ADDR=f"127.0.0.1:{ports['retrieval']}",
        MILVUS_URI=str(data / "readme.db"),
        BIND_HOST="127.0.0.1",
        SHUTDOWN_GRACE_SECONDS="1",
    )
    procs = [
        subprocess.Popen([sys.executable, "-m", f"{name}_service"], cwd=ROOT, env=env)
        for name in DEFAULT_PORTS
    ]
    try:
        for name, proc in zip(DEFAULT_PORTS, procs, strict=True):
            _wait_serving(ports[name], proc)
        yield {DEFAULT_PORTS[name]: ports[name] for name in DEFAULT_PORTS}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _knowledge_bases(port: int) -> set[str]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        reply = stub.ListKnowledgeBases(retrieval_pb2.ListKnowledgeBasesRequest(), timeout=30)
        return {kb.name for kb in reply.knowledge_bases}


def test_the_readme_walks_every_knowledge_base_rpc() -> None:
    calls, cli = kb_blocks()
    methods = [line.rsplit("/", 1)[1] for line in calls]
    for rpc in (
        "CreateKnowledgeBase", "GetKnowledgeBase", "ListKnowledgeBases", "UpdateKnowledgeBase",
        "IngestDocuments", "Retrieve", "Run", "DeleteKnowledgeBase",
    ):  # fmt: skip
        assert rpc in methods
    assert methods.index("CreateKnowledgeBase") < methods.index("IngestDocuments")
    assert methods[-1] == "DeleteKnowledgeBase"
    for command in ("kb create", "kb delete", "sync", "search", "--metadata"):
        assert any(command in line for line in cli)


def test_readme_knowledge_base_calls_in_order(services: dict[int, int]) -> None:
    calls, _ = kb_blocks()
    out: dict[str, str] = {}
    for line in calls:
        result = _run(line, services)
        assert result.returncode == 0, f"{line}\n{result.stderr}"
        out[line.rsplit("/", 1)[1]] = result.stdout
    assert '"knowledge_bases/hr"' in out["CreateKnowledgeBase"]
    assert "HR policies, 2024" in out["UpdateKnowledgeBase"]
    assert "knowledge_bases/default" in out["ListKnowledgeBases"]
    for method in ("IngestDocuments", "ListDocuments", "Retrieve"):
        assert "policies/leave.md" in out[method], method
    assert "25 days of paid leave" in out["Retrieve"]
    assert '"route"' in out["Run"]
    assert "knowledge_bases/hr" not in _knowledge_bases(services[50051])


def _drop_hr(port: int) -> None:
    """A failed earlier test may have left the walk-through's knowledge base behind."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        try:
            stub.DeleteKnowledgeBase(
                retrieval_pb2.DeleteKnowledgeBaseRequest(name="knowledge_bases/hr", force=True),
                timeout=60,
            )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc


def test_readme_cli_lines_in_order(services: dict[int, int], tmp_path: Path) -> None:
    _, cli = kb_blocks()
    _drop_hr(services[50051])
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "leave.md").write_text(LEAVE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "RETRIEVAL_ADDR"))}
    env.update(
        RETRIEVAL_PORT=str(services[50051]),
        ORCHESTRATOR_PORT=str(services[50052]),
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")]),
    )
    outputs = []
    for line in cli:
        argv = shlex.split(line)
        argv[0] = sys.executable
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
        )
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        outputs.append(result.stdout)
    text = "\n".join(outputs)
    assert "unchanged leave.md" in text  # the sync after the ingest sends nothing
    assert "leave.md" in text and "knowledge_bases/hr" in text
    assert "knowledge_bases/hr" not in _knowledge_bases(services[50051])
