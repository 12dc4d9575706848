"""The README's manual calls, run for real: both entry points start as processes, and the
README's `grpcurl` / `buf curl` lines are executed against them (ports substituted)."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.retrieval_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEFAULT_PORTS = {"retrieval": 50051, "orchestrator": 50052}
# Calls that need no knowledge-base content: reflection, health and descriptions.
INTROSPECTION = re.compile(r"\b(list|describe|Health/Check|--list-methods)\b")


def readme_calls() -> list[str]:
    """The command lines of the README's "Try it by hand" block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Try it by hand", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith(("grpcurl ", "buf curl "))]


def _wait_serving(port: int, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"service on port {port} exited with {proc.returncode}")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                time.sleep(0.3)
    raise TimeoutError(f"service on port {port} not SERVING after {timeout}s")


Services = tuple[dict[int, int], str | None]


# Without auth, with AUTH_TOKEN and with AUTH_KEYS_FILE (a reader key): health and reflection
# (v1, which buf curl asks first, and v1alpha) stay open, and the README's calls pass with the
# header it says to add.
@pytest.fixture(
    scope="module", params=[None, "s3cret", "keys:reader-key"], ids=["open", "auth", "keys"]
)
def services(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Services]:
    param: str | None = request.param
    data = tmp_path_factory.mktemp("readme")
    ports = {name: free_port() for name in DEFAULT_PORTS}
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LLM_", "RERANK_", "EMBEDDING_", "SAMPLES_", "AUTH_"))
    }
    env.update(
        RETRIEVAL_PORT=str(ports["retrieval"]),
        ORCHESTRATOR_PORT=str(ports["orchestrator"]),
        RETRIEVAL_ADDR=f"127.0.0.1:{ports['retrieval']}",
        MILVUS_URI=str(data / "readme.db"),
        BIND_HOST="127.0.0.1",
        SHUTDOWN_GRACE_SECONDS="1",
        # The introspection calls never reach a model; a configured (unused) endpoint keeps
        # this test independent of which model the orchestrator would otherwise serve with.
        LLM_BASE_URL="http://127.0.0.1:9/v1",
        MODEL="unused",
    )
    token = param
    if param and param.startswith("keys:"):
        token = param.removeprefix("keys:")
        keys = data / "keys.yaml"
        digest = hashlib.sha256(token.encode()).hexdigest()
        keys.write_text(
            f"keys:\n  - {{id: readme, sha256: {digest}, role: reader, knowledge_bases: ['*']}}\n"
        )
        env["AUTH_KEYS_FILE"] = str(keys)
    elif param:
        env["AUTH_TOKEN"] = param
    procs = [
        subprocess.Popen([sys.executable, "-m", f"{name}_service"], cwd=ROOT, env=env)
        for name in DEFAULT_PORTS
    ]
    try:
        for name, proc in zip(DEFAULT_PORTS, procs, strict=True):
            _wait_serving(ports[name], proc)
        yield {DEFAULT_PORTS[name]: ports[name] for name in DEFAULT_PORTS}, token
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _run(line: str, services: Services) -> subprocess.CompletedProcess[str]:
    port_map, token = services
    for default, actual in port_map.items():
        line = line.replace(f"localhost:{default}", f"127.0.0.1:{actual}")
    argv = shlex.split(line)
    argv[0] = str(BIN / argv[0])  # the real binaries that `make setup` installs
    if token:  # the README: "add -H 'authorization: Bearer <token>'"
        at = 2 if argv[1] == "curl" else 1
        argv[at:at] = ["-H", f"authorization: Bearer {token}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_readme_has_grpcurl_and_buf_calls() -> None:
    calls = readme_calls()
    assert any(c.startswith("grpcurl ") for c in calls)
    assert any(c.startswith("buf curl ") for c in calls)


@pytest.mark.parametrize(
    "line", [c for c in readme_calls() if INTROSPECTION.search(c)], ids=lambda c: c[:70]
)
def test_readme_introspection_call(services: Services, line: str) -> None:
    result = _run(line, services)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    if line.endswith(" list"):
        port = int(line.rsplit(":", 1)[1].split()[0])
        expected = {50051: "supermew.v1.RetrievalService", 50052: "supermew.v1.OrchestratorService"}
        assert expected[port] in out.splitlines()
        assert "grpc.health.v1.Health" in out.splitlines()
    elif "Health/Check" in line:
        assert '"SERVING"' in out
    elif "--list-methods" in line:
        assert "supermew.v1.OrchestratorService/Run" in out
    elif "describe" in line:
        assert "rpc Retrieve" in out
