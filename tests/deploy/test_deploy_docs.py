"""deploy/README.md stays true to the code: every grpcurl call names a real RPC with real
request fields, every deploy/ path it mentions exists, each overlay has its apply command,
and the TLS paragraph matches what the servers do."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2  # noqa: F401  (registers grpc.health.v1)
from supermew.v1 import orchestrator_pb2, retrieval_pb2  # noqa: F401  (register the services)

from tests.deploy.kustomize import OVERLAYS, ROOT

README = ROOT / "deploy" / "README.md"


def readme() -> str:
    return README.read_text(encoding="utf-8")


def grpcurl_calls() -> list[list[str]]:
    calls = []
    for line in readme().splitlines():
        line = line.strip()
        if line.startswith("grpcurl ") and not line.endswith(" list"):
            calls.append(shlex.split(line))
    return calls


def test_the_readme_makes_a_run_call() -> None:
    methods = [argv[-1] for argv in grpcurl_calls()]
    assert "supermew.v1.OrchestratorService/Run" in methods
    assert any(
        line.strip().startswith("grpcurl -plaintext localhost:50052 list")
        for line in readme().splitlines()
    )


@pytest.mark.parametrize("argv", grpcurl_calls(), ids=lambda argv: argv[-1])
def test_grpcurl_calls_match_the_protos(argv: list[str]) -> None:
    service_name, _, method_name = argv[-1].rpartition("/")
    service = descriptor_pool.Default().FindServiceByName(service_name)
    method = service.methods_by_name.get(method_name)
    assert method is not None, f"{service_name} has no method {method_name}"
    if "-d" in argv:
        payload = json.loads(argv[argv.index("-d") + 1])
        fields = set(method.input_type.fields_by_name)
        assert set(payload) <= fields, f"{argv[-1]}: {set(payload) - fields} not in request"


def test_mentioned_deploy_paths_exist() -> None:
    for path in set(re.findall(r"(?:deploy|shared|samples)/[\w./-]*[\w-]", readme())):
        assert (ROOT / path).exists() or (ROOT / "deploy" / path).exists(), path
    for path in set(re.findall(r"`((?:base|overlays)/[\w./-]*[\w-])`", readme())):
        assert (ROOT / "deploy" / "k8s" / path).exists(), path


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_each_overlay_has_its_apply_command(overlay: str) -> None:
    assert f"kubectl apply -k deploy/k8s/overlays/{overlay}" in readme()


def test_tls_paragraph_matches_the_server() -> None:
    # The servers serve TLS.
    serve = (ROOT / "shared" / "serve.py").read_text(encoding="utf-8")
    tls = (ROOT / "shared" / "tls.py").read_text(encoding="utf-8")
    assert "add_secure_port" in serve and "dynamic_ssl_server_credentials" in tls
    text = readme()
    assert "add_secure_port" in text and "dynamic_ssl_server_credentials" in text
    for setting in ("TLS_CERT_FILE", "TLS_KEY_FILE", "TLS_CLIENT_CA_FILE", "HEALTH_PORT"):
        assert setting in text
    assert "TLS therefore terminates" not in text


def _section(title: str) -> str:
    text = readme()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_database_section_names_the_settings_and_the_backup_order() -> None:
    section = _section("9. Database")
    for setting in ("DATABASE_URL", "DATABASE_POOL_SIZE", "DATABASE_TIMEOUT_SECONDS"):
        assert f"`{setting}`" in section, setting
    assert (
        "MIGRATE_ON_START=false" in section and "python -m retrieval_service db upgrade" in section
    )
    # The dump first: a Milvus backup taken after it may hold rows no record names (invisible),
    # while a dump newer than the Milvus backup names rows that do not exist.
    lines = section.splitlines()
    dump = next(i for i, line in enumerate(lines) if line.startswith("pg_dump "))
    milvus = next(i for i, line in enumerate(lines) if line.startswith("milvus-backup "))
    assert dump < milvus
    # The prod Secret that carries DATABASE_URL is created by the operator, with this command.
    assert re.search(
        r"kubectl -n supermew create secret generic supermew-secrets"
        r"[^`]*--from-literal=DATABASE_URL=",
        readme(),
    )
