"""`make run` as an operator first meets it (`python -m shared.launch`, what the target runs):
one METRICS_PORT for two services, a RETRIEVAL_PORT away from the default, the start-up lines
and the "ready" block; and an orchestrator whose retrieval cannot be reached."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc

from shared.launch import environments
from tests.integration.retrieval_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
_SETTINGS_PREFIXES = (
    "RETRIEVAL_", "ORCHESTRATOR_", "MILVUS_", "LLM_", "LOG_", "RERANK_", "EMBEDDING_",
    "METRICS_", "TLS_", "AUTH_", "HEALTH_", "SAMPLES_",
)  # fmt: skip


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SETTINGS_PREFIXES)}
    env.update(PYTHONUNBUFFERED="1", BIND_HOST="127.0.0.1", SHUTDOWN_GRACE_SECONDS="1")
    env.update(extra)
    return env


def _two_free_ports() -> int:
    """A port p with p + 1 free too (the orchestrator's metrics port under `make run`)."""
    while True:
        port = free_port()
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue


class Output:
    """A process's stderr, read line by line in a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr
        self._thread = threading.Thread(
            target=lambda: self.lines.extend(iter(stream.readline, "")), daemon=True
        )
        self._thread.start()

    def wait_for(self, text: str, proc: subprocess.Popen[str], timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            assert proc.poll() is None, "".join(self.lines)
            time.sleep(0.2)
        raise TimeoutError("".join(self.lines))


@pytest.fixture(scope="module")
def make_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, int], Output]]:
    tmp_path = tmp_path_factory.mktemp("make-run")
    ports = {"retrieval": free_port(), "orchestrator": free_port(), "metrics": _two_free_ports()}
    env = _clean_env(
        RETRIEVAL_PORT=str(ports["retrieval"]),
        ORCHESTRATOR_PORT=str(ports["orchestrator"]),
        METRICS_PORT=str(ports["metrics"]),
        MILVUS_URI=str(tmp_path / "kb.db"),
        SAMPLES_DIR="",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "shared.launch"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = Output(proc)
    try:
        output.wait_for("try:", proc)
        time.sleep(0.5)  # the block's last lines
        yield ports, output
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=30) == 0, "".join(output.lines)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_make_run_with_one_metrics_port_gives_each_service_its_own(make_run) -> None:
    # METRICS_PORT=9464 make run crashed: both services took the same port.
    ports, output = make_run
    text = "".join(output.lines)
    metrics = {"retrieval": ports["metrics"], "orchestrator": ports["metrics"] + 1}
    for service, name in (("retrieval", "Retrieval"), ("orchestrator", "Orchestrator")):
        started = [line for line in output.lines if f"serving supermew.v1.{name}Service" in line]
        assert len(started) == 1, text
        assert f"127.0.0.1:{ports[service]}" in started[0], started[0]
        assert f"metrics http://127.0.0.1:{metrics[service]}/metrics" in started[0], started[0]
        reply = httpx.get(f"http://127.0.0.1:{metrics[service]}/metrics", timeout=10)
        assert reply.status_code == 200
        assert "grpc_server_handling_seconds" in reply.text
    assert "Traceback" not in text and "CRITICAL" not in text, text


def test_make_run_ends_its_start_with_a_ready_block(make_run) -> None:
    ports, output = make_run
    text = "".join(output.lines)
    block = text[text.index("ready:") :].splitlines()
    retrieval = next(line for line in block if line.strip().startswith("retrieval "))
    orchestrator = next(line for line in block if line.strip().startswith("orchestrator "))
    assert f"localhost:{ports['retrieval']}" in retrieval
    assert f"localhost:{ports['orchestrator']}" in orchestrator
    for line in (retrieval, orchestrator):
        assert "TLS off" in line and "auth off" in line and "metrics http://" in line
    tries = block[block.index("try:") + 1 :]
    assert any("orchestrator_service ask" in line for line in tries), block
    assert any(f"grpcurl -plaintext localhost:{ports['orchestrator']} list" in t for t in tries)


def test_make_run_points_the_orchestrator_at_retrieval_port(make_run) -> None:
    # RETRIEVAL_PORT=50071 make run: the orchestrator still called localhost:50051.
    ports, _ = make_run
    with grpc.insecure_channel(f"127.0.0.1:{ports['orchestrator']}") as channel:
        stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
        result = stub.Run(
            orchestrator_pb2.RunRequest(question="What is an event loop?"), timeout=60
        )
    assert result.question == "What is an event loop?"


def test_one_request_id_in_both_services_access_logs(make_run) -> None:
    # A Run sent with x-request-id: my-req-123 was logged by retrieval under another id.
    ports, output = make_run
    with grpc.insecure_channel(f"127.0.0.1:{ports['orchestrator']}") as channel:
        stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
        request = orchestrator_pb2.RunRequest(question="What is a coroutine?")
        stub.Run(request, timeout=60, metadata=(("x-request-id", "my-req-123"),))
    time.sleep(0.5)
    tagged = [line for line in output.lines if "request_id=my-req-123" in line]
    methods = {line.split("method=", 1)[1].split()[0] for line in tagged if "method=" in line}
    assert {
        "/supermew.v1.OrchestratorService/Run",
        "/supermew.v1.RetrievalService/Retrieve",
    } <= methods, tagged


def test_make_run_derives_retrieval_addr_and_tls() -> None:
    envs = environments(
        {
            "RETRIEVAL_PORT": "50071",
            "TLS_CERT_FILE": "data/certs/server.pem",
            "TLS_KEY_FILE": "data/certs/server.key",
            "TLS_CLIENT_CA_FILE": "data/certs/ca.pem",
        }
    )
    orchestrator = envs["orchestrator_service"]
    assert orchestrator["RETRIEVAL_ADDR"] == "localhost:50071"
    assert orchestrator["RETRIEVAL_TLS_CA_FILE"] == "data/certs/ca.pem"
    assert orchestrator["RETRIEVAL_TLS_CERT_FILE"] == "data/certs/server.pem"
    assert "RETRIEVAL_ADDR" not in envs["retrieval_service"]
    # An explicit RETRIEVAL_ADDR is kept.
    kept = environments({"RETRIEVAL_ADDR": "dns:///retrieval:50051"})
    assert kept["orchestrator_service"]["RETRIEVAL_ADDR"] == "dns:///retrieval:50051"


def test_unreachable_retrieval_is_named_and_health_stays_serving(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    port = free_port()
    env = _clean_env(
        ORCHESTRATOR_PORT=str(port), RETRIEVAL_ADDR=dead, RETRIEVAL_TIMEOUT_SECONDS="5"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator_service"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = Output(proc)
    try:
        output.wait_for("google.longrunning.Operations on", proc)
        assert any("serving supermew.v1.OrchestratorService," in line for line in output.lines)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
            with pytest.raises(grpc.RpcError) as raised:
                stub.Run(orchestrator_pb2.RunRequest(question="What is an event loop?"), timeout=30)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            assert dead in (raised.value.details() or "")
            # One retrieval outage does not take every orchestrator out of its balancer.
            health = health_pb2_grpc.HealthStub(channel)
            reply = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        time.sleep(0.5)
        assert any(dead in line and "Retrieve to" in line for line in output.lines), output.lines
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()


def readme_tls_calls() -> list[str]:
    """The command lines of the README's TLS block (after `make certs` and `make run`)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("`make certs` writes a local CA", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    return [
        line
        for line in block.splitlines()
        if line.startswith(("grpcurl ", "buf curl ", ".venv/bin/python -m orchestrator_service"))
    ]


def test_make_certs_then_make_run_with_tls_then_the_readme_tls_calls(tmp_path: Path) -> None:
    # The README's TLS section end to end: `make certs`' files, mTLS on both services under
    # `make run` (the orchestrator reaching retrieval over mTLS), and every call it shows.
    certs = tmp_path / "certs"
    made = subprocess.run(
        [sys.executable, "-m", "shared.certs", str(certs)], cwd=ROOT, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    ports = {50051: free_port(), 50052: free_port()}
    env = _clean_env(
        RETRIEVAL_PORT=str(ports[50051]),
        ORCHESTRATOR_PORT=str(ports[50052]),
        MILVUS_URI=str(tmp_path / "kb.db"),
        TLS_CERT_FILE=str(certs / "server.pem"),
        TLS_KEY_FILE=str(certs / "server.key"),
        TLS_CLIENT_CA_FILE=str(certs / "ca.pem"),
    )  # SAMPLES_DIR unset: `make run` seeds the samples, which the README's Run asks about
    proc = subprocess.Popen(
        [sys.executable, "-m", "shared.launch"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = Output(proc)
    try:
        output.wait_for("try:", proc)
        text = "".join(output.lines)
        assert "TLS on (mTLS)" in text[text.index("ready:") :], text
        calls = readme_tls_calls()
        assert len(calls) >= 4, calls
        for line in calls:
            line = line.replace("data/certs/", f"{certs}/")
            for default, actual in ports.items():
                line = line.replace(f"localhost:{default}", f"localhost:{actual}")
            if "orchestrator_service ask" in line:
                line += f" --addr localhost:{ports[50052]}"
            argv = shlex.split(line)
            argv[0] = str(Path(sys.executable).parent / Path(argv[0]).name)
            result = subprocess.run(
                argv, cwd=ROOT, env=_clean_env(), capture_output=True, text=True, timeout=120
            )
            assert result.returncode == 0, (line, result.stdout, result.stderr)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()


def test_make_help_lists_the_benchmarks() -> None:
    shown = subprocess.run(["make", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    listed = {line.strip() for line in shown.stdout.splitlines()}
    benches = {p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_")}
    assert benches and benches <= listed, shown.stdout
    assert any(line.startswith("make certs") for line in listed), shown.stdout
