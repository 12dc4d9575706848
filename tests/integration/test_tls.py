"""TLS and mTLS on both real services (retrieval on Milvus Lite, the orchestrator wired by
`build_app` with the built-in model), with certificates generated for the test: the real
grpcurl binary and both CLIs reach them, the orchestrator reaches retrieval over mTLS, a client
without a certificate is refused, and a renewed certificate is served without a restart."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from supermew.v1 import orchestrator_pb2, orchestrator_pb2_grpc

from orchestrator_service.bootstrap import App, build_app
from orchestrator_service.settings import OrchestratorSettings
from shared.serve import GrpcServer
from shared.settings import ServerSettings
from shared.tls import channel_credentials
from tests.integration.retrieval_harness import Service, copy_corpus, running_service
from tests.tls_certs import Issued, TestCa, common_name

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
GRPCURL = str(Path(sys.executable).parent / "grpcurl")
QUESTION = "What does asyncio.gather do?"


@dataclass
class Mtls:
    """Both services requiring client certificates, and the certificates to call them with."""

    ca: TestCa
    operator: Issued  # a client certificate for grpcurl and the CLIs
    retrieval: Service
    orchestrator: App

    @property
    def retrieval_port(self) -> int:
        return self.retrieval.port

    @property
    def orchestrator_port(self) -> int:
        return self.orchestrator.server.port


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mtls(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mtls]:
    folder = tmp_path_factory.mktemp("pki")
    ca = TestCa(folder)
    retrieval_cert = ca.issue("retrieval")
    orchestrator_cert = ca.issue("orchestrator")
    orchestrator_client = ca.issue("orchestrator-client", server=False)
    operator = ca.issue("operator", server=False)
    db = copy_corpus(tmp_path_factory.mktemp("kb"))
    async with running_service(
        db,
        tls_cert_file=str(retrieval_cert.cert),
        tls_key_file=str(retrieval_cert.key),
        tls_client_ca_file=str(ca.ca),
    ) as retrieval:
        settings = OrchestratorSettings(
            _env_file=None,
            orchestrator_port=0,
            bind_host="127.0.0.1",
            retrieval_addr=f"127.0.0.1:{retrieval.port}",
            llm_base_url=None,
            tls_cert_file=str(orchestrator_cert.cert),
            tls_key_file=str(orchestrator_cert.key),
            tls_client_ca_file=str(ca.ca),
            retrieval_tls_ca_file=str(ca.ca),
            retrieval_tls_cert_file=str(orchestrator_client.cert),
            retrieval_tls_key_file=str(orchestrator_client.key),
        )
        app = build_app(settings)
        await app.server.start()
        try:
            yield Mtls(ca, operator, retrieval, app)
        finally:
            await app.server.stop(0)
            await app.aclose()


async def _exec(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    # A subprocess awaited on the loop: the servers under test run on this same loop.
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    return proc.returncode or 0, out.decode(), err.decode()


def _tls_flags(ca: TestCa, client: Issued | None) -> list[str]:
    flags = ["-cacert", str(ca.ca)]
    if client is not None:
        flags += ["-cert", str(client.cert), "-key", str(client.key)]
    return flags


async def _health(port: int, credentials: grpc.ChannelCredentials | None) -> int:
    target = f"127.0.0.1:{port}"
    channel = (
        grpc.aio.secure_channel(target, credentials)
        if credentials is not None
        else grpc.aio.insecure_channel(target)
    )
    async with channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    return reply.status


def _presented_common_name(port: int, ca: Path) -> str:
    """One fresh TLS handshake with the server: the CN of the certificate it presents."""
    context = ssl.create_default_context(cafile=str(ca))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        context.wrap_socket(sock, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return common_name(der)


# ---- mTLS: grpcurl, the CLIs and orchestrator → retrieval ---------------------------------------


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        ("retrieval", "supermew.v1.RetrievalService"),
        ("orchestrator", "supermew.v1.OrchestratorService"),
    ],
)
async def test_grpcurl_lists_each_service_over_mtls(
    mtls: Mtls, service: str, expected: str
) -> None:
    port = getattr(mtls, f"{service}_port")
    rc, out, err = await _exec(
        GRPCURL, *_tls_flags(mtls.ca, mtls.operator), f"127.0.0.1:{port}", "list"
    )
    assert rc == 0, err
    assert expected in out.splitlines() and "grpc.health.v1.Health" in out.splitlines()


async def test_grpcurl_calls_the_rpcs_over_mtls(mtls: Mtls) -> None:
    flags = _tls_flags(mtls.ca, mtls.operator)
    rc, out, err = await _exec(
        GRPCURL, *flags, f"127.0.0.1:{mtls.retrieval_port}",
        "supermew.v1.RetrievalService/ListDocuments",
    )  # fmt: skip
    assert rc == 0, err
    assert "asyncio.md" in {d["filename"] for d in json.loads(out)["documents"]}

    # A Run goes through the orchestrator's own mTLS channel to retrieval: an unreachable
    # retrieval would end it UNAVAILABLE, not answer it.
    rc, out, err = await _exec(
        GRPCURL, *flags, "-d", json.dumps({"question": QUESTION}),
        f"127.0.0.1:{mtls.orchestrator_port}", "supermew.v1.OrchestratorService/Run",
    )  # fmt: skip
    assert rc == 0, err
    result = json.loads(out)
    assert result["question"] == QUESTION, sorted(result)


@pytest.mark.parametrize("service", ["retrieval", "orchestrator"])
async def test_a_client_without_a_certificate_is_refused(mtls: Mtls, service: str) -> None:
    port = getattr(mtls, f"{service}_port")
    rc, _, err = await _exec(GRPCURL, *_tls_flags(mtls.ca, None), f"127.0.0.1:{port}", "list")
    assert rc != 0 and "Failed to dial target host" in err, err  # refused in the handshake
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _health(port, channel_credentials(str(mtls.ca.ca)))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(grpc.aio.AioRpcError) as plaintext:
        await _health(port, None)
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
    # The same call with a certificate the CA signed is served.
    operator = channel_credentials(str(mtls.ca.ca), str(mtls.operator.cert), str(mtls.operator.key))
    assert await _health(port, operator) == health_pb2.HealthCheckResponse.SERVING


async def test_a_client_certificate_from_another_ca_is_refused(mtls: Mtls, tmp_path: Path) -> None:
    stranger = TestCa(tmp_path, name="another CA").issue("stranger", server=False)
    credentials = channel_credentials(str(mtls.ca.ca), str(stranger.cert), str(stranger.key))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _health(mtls.retrieval_port, credentials)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def _cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AUTH_", "RETRIEVAL_", "TLS_", "ORCHESTRATOR_"))
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "gen"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


async def test_the_retrieval_cli_uses_the_retrieval_tls_settings(mtls: Mtls) -> None:
    env = _cli_env(
        RETRIEVAL_ADDR=f"127.0.0.1:{mtls.retrieval_port}",
        RETRIEVAL_TLS_CA_FILE=str(mtls.ca.ca),
        RETRIEVAL_TLS_CERT_FILE=str(mtls.operator.cert),
        RETRIEVAL_TLS_KEY_FILE=str(mtls.operator.key),
    )
    rc, out, err = await _exec(sys.executable, "-m", "retrieval_service", "list", env=env)
    assert rc == 0, err
    assert any(line.startswith("asyncio.md\t") for line in out.splitlines())

    # Flags override the environment; without a client certificate the call is refused.
    env.pop("RETRIEVAL_TLS_CERT_FILE")
    env.pop("RETRIEVAL_TLS_KEY_FILE")
    rc, _, err = await _exec(sys.executable, "-m", "retrieval_service", "list", env=env)
    assert rc == 1 and "UNAVAILABLE" in err


async def test_the_orchestrator_cli_takes_tls_flags(mtls: Mtls) -> None:
    rc, out, err = await _exec(
        sys.executable, "-m", "orchestrator_service", "ask", QUESTION, "--json",
        "--addr", f"127.0.0.1:{mtls.orchestrator_port}",
        "--tls-ca", str(mtls.ca.ca),
        "--tls-cert", str(mtls.operator.cert), "--tls-key", str(mtls.operator.key),
        env=_cli_env(),
    )  # fmt: skip
    assert rc == 0, err
    assert json.loads(out)["question"] == QUESTION

    rc, _, err = await _exec(
        sys.executable, "-m", "orchestrator_service", "ask", QUESTION,
        "--addr", f"127.0.0.1:{mtls.orchestrator_port}", "--tls-cert", str(mtls.operator.cert),
        env=_cli_env(),
    )  # fmt: skip
    assert rc == 2 and "--tls-cert and --tls-key go together" in err


# ---- TLS only, and certificate reload ------------------------------------------------------------


async def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    ca = TestCa(tmp_path)
    first = ca.issue("retrieval-first", stem="server")
    async with running_service(
        copy_corpus(tmp_path), tls_cert_file=str(first.cert), tls_key_file=str(first.key)
    ) as retrieval:
        port = retrieval.port
        assert await asyncio.to_thread(_presented_common_name, port, ca.ca) == "retrieval-first"
        rc, out, err = await _exec(GRPCURL, "-cacert", str(ca.ca), f"127.0.0.1:{port}", "list")
        assert rc == 0 and "supermew.v1.RetrievalService" in out.splitlines(), err

        renewed = ca.issue("retrieval-renewed", stem="server")
        assert renewed == first  # the same paths, new contents
        assert await asyncio.to_thread(_presented_common_name, port, ca.ca) == "retrieval-renewed"
        rc, out, err = await _exec(
            GRPCURL, "-cacert", str(ca.ca), f"127.0.0.1:{port}",
            "supermew.v1.RetrievalService/ListDocuments",
        )  # fmt: skip
        assert rc == 0 and "asyncio.md" in out, err

        # A half-written renewal (the key no longer matches) keeps the certificate that works.
        first.key.write_bytes(b"-----BEGIN PRIVATE KEY-----\ntruncated\n")
        assert await asyncio.to_thread(_presented_common_name, port, ca.ca) == "retrieval-renewed"
        assert await _health(port, channel_credentials(str(ca.ca))) == (
            health_pb2.HealthCheckResponse.SERVING
        )


async def test_the_orchestrator_serves_tls_without_client_certificates(tmp_path: Path) -> None:
    """TLS only (no TLS_CLIENT_CA_FILE): a client with just the CA is served, plaintext is
    refused, and the health-only port stays plaintext for kubelet probes."""
    ca = TestCa(tmp_path)
    cert = ca.issue("orchestrator")
    settings = OrchestratorSettings(
        _env_file=None,
        orchestrator_port=0,
        health_port=0,
        bind_host="127.0.0.1",
        retrieval_addr="127.0.0.1:9",
        llm_base_url=None,
        tls_cert_file=str(cert.cert),
        tls_key_file=str(cert.key),
    )
    app = build_app(settings)
    port = await app.server.start()
    try:
        rc, out, err = await _exec(GRPCURL, "-cacert", str(ca.ca), f"127.0.0.1:{port}", "list")
        assert rc == 0 and "supermew.v1.OrchestratorService" in out.splitlines(), err
        channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", channel_credentials(str(ca.ca)))
        async with channel:
            stub = orchestrator_pb2_grpc.OrchestratorServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as invalid:
                await stub.Run(orchestrator_pb2.RunRequest(question="  "), timeout=10)
            assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # served, over TLS
        with pytest.raises(grpc.aio.AioRpcError) as plaintext:
            await _health(port, None)
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE

        health_port = app.server.health_port
        assert health_port is not None and health_port != port
        assert await _health(health_port, None) == health_pb2.HealthCheckResponse.SERVING
        rc, out, _ = await _exec(GRPCURL, "-plaintext", f"127.0.0.1:{health_port}", "list")
        assert "supermew.v1.OrchestratorService" not in out  # health only, no RPCs in clear
    finally:
        await app.server.stop(0)
        await app.aclose()


async def test_a_tls_mismatch_from_the_clis_says_which_setting_to_use(mtls: Mtls) -> None:
    # A plaintext call to a TLS port said "Socket closed", nothing more.
    env = _cli_env(RETRIEVAL_ADDR=f"127.0.0.1:{mtls.retrieval_port}")
    rc, _, err = await _exec(sys.executable, "-m", "retrieval_service", "list", env=env)
    assert rc == 1 and "TLS-only" in err and "RETRIEVAL_TLS_CA_FILE" in err, err
    rc, _, err = await _exec(
        sys.executable, "-m", "orchestrator_service", "ask", QUESTION,
        "--addr", f"127.0.0.1:{mtls.orchestrator_port}", env=_cli_env(),
    )  # fmt: skip
    assert rc == 1 and "TLS-only" in err and "--tls-ca" in err, err

    # The reverse: TLS flags against a plaintext port.
    plain = GrpcServer(
        ServerSettings(_env_file=None),
        port=0,
        service_names=["x.Plain"],
        add_servicers=print,
        policies={},
    )
    port = await plain.start()
    try:
        rc, _, err = await _exec(
            sys.executable, "-m", "orchestrator_service", "ask", QUESTION,
            "--addr", f"localhost:{port}", "--tls-ca", str(mtls.ca.ca), env=_cli_env(),
        )  # fmt: skip
        assert rc == 1 and "speaks plaintext" in err and "--tls-ca" in err, err
        env = _cli_env(RETRIEVAL_ADDR=f"localhost:{port}", RETRIEVAL_TLS_CA_FILE=str(mtls.ca.ca))
        rc, _, err = await _exec(sys.executable, "-m", "retrieval_service", "list", env=env)
        assert rc == 1 and "speaks plaintext" in err and "RETRIEVAL_TLS_CA_FILE" in err, err
    finally:
        await plain.stop(0)
