"""deploy/k8s renders (kubectl kustomize) and every object validates offline against the
Kubernetes schemas that kubernetes-validate ships; the manifests cannot drift from the code:
ConfigMap keys are settings env names and parse as those settings, ports are the settings'
defaults, probe service names are the SERVICE_NAME constants, the grace period outlasts the
server's drain, secrets come from Secret refs only, and the orchestrator reaches retrieval
through the headless Service of its own namespace. Also: probes on the plaintext
HEALTH_PORT, the METRICS_PORT scraped by a ServiceMonitor (prod), NetworkPolicies, OTEL
variables, and in prod TLS files from mounted Secrets (mTLS between the services)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic_settings import BaseSettings

from orchestrator_service import settings as orchestrator_settings
from retrieval_service import __main__ as retrieval_main
from retrieval_service import settings as retrieval_settings
from shared.draining import STOP_MARGIN_SECONDS
from shared.settings import ServerSettings
from shared.sql import db_command as shared_db_command
from shared.sql.database import Database
from tests.deploy.kustomize import (
    K8S,
    OVERLAYS,
    ROOT,
    TREES,
    Rendered,
    container,
    pod_spec,
    selects,
)

SCHEMA_VERSION = kubernetes_validate.latest_version()
SECRET_NAME = "supermew-secrets"
# Settings that are credentials: only ever from the Secret, never in a ConfigMap.
CREDENTIALS = {
    "AUTH_TOKEN",
    "MILVUS_TOKEN",
    "RERANK_API_KEY",
    "EMBEDDING_API_KEY",
    "LLM_API_KEY",
    "DATABASE_URL",  # it holds the database's password
}
# Required in prod (a pod without them must not start); optional elsewhere.
REQUIRED_IN_PROD = {"AUTH_TOKEN", "MILVUS_TOKEN", "DATABASE_URL"}
#: Credentials an overlay takes from a Secret of its own, by tree: dev's PostgreSQL comes with
#: its (dev-only) credentials, so the retrieval service needs DATABASE_URL from that Secret.
OWN_SECRETS = {("dev", "DATABASE_URL"): "supermew-postgres"}
# Container env that is not a setting: process environment for the runtime.
RUNTIME_ENV = {"HOME", "OMP_NUM_THREADS"}
CLUSTER_SCOPED = {"Namespace"}
# Standard OpenTelemetry SDK variables: read by the SDK, not settings, yet allowed in the config.
OTEL_ENV = {
    "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_RESOURCE_ATTRIBUTES",
}
# Custom resources: no schema ships with kubernetes-validate; checked by their own tests.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
TLS_DIR = "/etc/supermew/tls"


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    settings: type[BaseSettings]
    service_name: str
    port_field: str
    config: str

    @property
    def env_names(self) -> set[str]:
        return {field.upper() for field in self.settings.model_fields}

    @property
    def port(self) -> int:
        return int(self.settings.model_fields[self.port_field].default)


SERVICES = {
    "retrieval": ServiceSpec(
        "retrieval",
        retrieval_settings.RetrievalSettings,
        retrieval_settings.SERVICE_NAME,
        "retrieval_port",
        "retrieval-config",
    ),
    "orchestrator": ServiceSpec(
        "orchestrator",
        orchestrator_settings.OrchestratorSettings,
        orchestrator_settings.SERVICE_NAME,
        "orchestrator_port",
        "orchestrator-config",
    ),
}
DRAIN_GRACE_DEFAULT = float(ServerSettings.model_fields["shutdown_grace_seconds"].default)

trees = pytest.mark.parametrize("tree", sorted(TREES))
services = pytest.mark.parametrize("service", sorted(SERVICES))


@pytest.fixture(scope="module", params=sorted(TREES))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return Rendered(request.param)


def config_of(r: Rendered, spec: ServiceSpec) -> dict[str, str]:
    """The data of the ConfigMap the service's container loads with envFrom."""
    c = container(r.get("Deployment", spec.name), spec.name)
    refs = [e["configMapRef"]["name"] for e in c.get("envFrom", []) if "configMapRef" in e]
    assert len(refs) == 1, f"{r.tree}/{spec.name}: expected one envFrom ConfigMap, got {refs}"
    assert refs[0].startswith(spec.config + "-"), f"not the generated {spec.config}: {refs[0]}"
    return r.get("ConfigMap", refs[0]).get("data", {})


def all_containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def workloads(r: Rendered) -> list[dict[str, Any]]:
    return r.all("Deployment") + r.all("StatefulSet") + r.all("Job")


def quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a number (enough to compare requests with limits)."""
    text = str(value)
    suffixes = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6}
    suffixes["G"] = 1e9
    for suffix, factor in sorted(suffixes.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


# ---- rendering and schemas ----------------------------------------------------------------------


def test_every_overlay_is_tested() -> None:
    on_disk = {p.name for p in (K8S / "overlays").iterdir() if p.is_dir()}
    assert on_disk == set(OVERLAYS), f"overlays on disk {on_disk} vs tested {set(OVERLAYS)}"


def test_every_object_validates_against_the_kubernetes_schema(rendered: Rendered) -> None:
    assert rendered.objects, f"{rendered.tree} rendered nothing"
    for obj in rendered.objects:
        label = f"{rendered.tree}: {obj['kind']}/{obj['metadata']['name']}"
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            message = f"{label} invalid against {SCHEMA_VERSION} at {path}: {exc.message}"
            pytest.fail(message, pytrace=False)
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{label}: {exc.message}", pytrace=False)


def test_objects_are_unique_and_in_the_overlay_namespace(rendered: Rendered) -> None:
    keys = [(o["kind"], o["metadata"]["name"]) for o in rendered.objects]
    assert len(keys) == len(set(keys)), f"duplicates in {rendered.tree}"
    for obj in rendered.objects:
        if obj["kind"] in CLUSTER_SCOPED:
            continue
        assert obj["metadata"].get("namespace") == rendered.namespace, obj["metadata"]
    if rendered.tree in OVERLAYS:
        rendered.get("Namespace", rendered.namespace)


# ---- each service: ports, probes, grace, hardening, resources ----------------------------------


@services
def test_ports_match_the_settings_defaults(rendered: Rendered, service: str) -> None:
    spec = SERVICES[service]
    deployment = rendered.get("Deployment", spec.name)
    c = container(deployment, spec.name)
    config = config_of(rendered, spec)
    health, metrics = int(config["HEALTH_PORT"]), int(config["METRICS_PORT"])
    assert metrics == 9090 and len({spec.port, health, metrics}) == 3
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [
        ("grpc", spec.port),
        ("health", health),
        ("metrics", metrics),
    ]
    assert config[spec.port_field.upper()] == str(spec.port)
    svc = rendered.get("Service", spec.name)
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [
        ("grpc", spec.port),
        ("metrics", metrics),
    ]
    assert svc["spec"]["ports"][0]["targetPort"] in ("grpc", spec.port)
    assert svc["spec"]["ports"][1]["targetPort"] in ("metrics", metrics)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(svc["spec"]["selector"], pod_labels)
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels)


@services
def test_probes_are_native_grpc_health_checks(rendered: Rendered, service: str) -> None:
    # On the plaintext HEALTH_PORT: kubelet's gRPC probes cannot speak TLS, which prod serves
    # on the service port.
    spec = SERVICES[service]
    port = int(config_of(rendered, spec)["HEALTH_PORT"])
    c = container(rendered.get("Deployment", spec.name), spec.name)
    readiness, liveness = c["readinessProbe"]["grpc"], c["livenessProbe"]["grpc"]
    assert readiness == {"port": port, "service": spec.service_name}
    assert liveness["port"] == port and liveness.get("service", "") == ""
    if "startupProbe" in c:
        startup = c["startupProbe"]["grpc"]
        assert startup["port"] == port and startup.get("service", "") == ""


@services
def test_termination_grace_outlasts_the_drain(rendered: Rendered, service: str) -> None:
    spec = SERVICES[service]
    deployment = rendered.get("Deployment", spec.name)
    configured = config_of(rendered, spec).get("SHUTDOWN_GRACE_SECONDS")
    drain = float(configured) if configured is not None else DRAIN_GRACE_DEFAULT
    pre_stop = container(deployment, spec.name).get("lifecycle", {}).get("preStop", {})
    sleep = pre_stop.get("sleep", {}).get("seconds", 0)
    grace = pod_spec(deployment)["terminationGracePeriodSeconds"]
    assert grace > DRAIN_GRACE_DEFAULT
    # An ingest still running when the drain's grace ends gets STOP_MARGIN_SECONDS more to
    # stop between write batches and answer UNAVAILABLE (shared/draining.py).
    drain += STOP_MARGIN_SECONDS
    assert grace > sleep + drain, f"{grace}s ≤ preStop {sleep}s + drain {drain}s"


@services
def test_pod_is_hardened(rendered: Rendered, service: str) -> None:
    spec = SERVICES[service]
    deployment = rendered.get("Deployment", spec.name)
    pod = pod_spec(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    account = rendered.get("ServiceAccount", pod["serviceAccountName"])
    assert account.get("automountServiceAccountToken") is False
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for c in all_containers(deployment):
        ctx = c["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False, c["name"]
        assert ctx["readOnlyRootFilesystem"] is True, c["name"]
        assert ctx["capabilities"]["drop"] == ["ALL"], c["name"]
        assert "add" not in ctx["capabilities"], c["name"]
    main = container(deployment, spec.name)
    tmp = [m for m in main.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
    assert len(tmp) == 1 and "emptyDir" in volumes[tmp[0]["name"]], "/tmp must be an emptyDir"


def test_every_container_has_requests_and_limits(rendered: Rendered) -> None:
    for workload in workloads(rendered):
        for c in all_containers(workload):
            label = f"{rendered.tree}: {workload['metadata']['name']}/{c['name']}"
            resources = c.get("resources", {})
            for resource in ("cpu", "memory"):
                request = resources.get("requests", {}).get(resource)
                limit = resources.get("limits", {}).get(resource)
                assert request is not None and limit is not None, f"{label}: {resource}"
                assert quantity(request) <= quantity(limit), f"{label}: {resource} request > limit"


def test_every_image_is_pinned(rendered: Rendered) -> None:
    for workload in workloads(rendered):
        for c in all_containers(workload):
            image = c["image"]
            tag = image.rpartition("/")[2].partition(":")[2]
            assert "@sha256:" in image or (tag and tag != "latest"), f"unpinned image {image}"


# ---- configuration: ConfigMap ⊆ settings, credentials only from the Secret ---------------------


@services
def test_config_keys_are_settings_env_names(rendered: Rendered, service: str) -> None:
    spec = SERVICES[service]
    data = config_of(rendered, spec)
    unknown = set(data) - spec.env_names - OTEL_ENV
    assert not unknown, f"not settings: {sorted(unknown)}"
    assert not set(data) & CREDENTIALS, "credentials belong in the Secret"
    assert all(str(v).strip() for v in data.values()), "a blank value is not 'unset'"
    assert data["BIND_HOST"] == "0.0.0.0"


@services
def test_config_parses_as_the_service_settings(
    rendered: Rendered, service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SERVICES[service]
    for name in spec.env_names:
        monkeypatch.delenv(name, raising=False)
    data = config_of(rendered, spec)
    for key, value in data.items():
        monkeypatch.setenv(key, str(value))
    parsed = spec.settings()  # pydantic validates every value's type and bounds
    assert getattr(parsed, spec.port_field) == spec.port
    assert parsed.bind_host == "0.0.0.0"


@services
def test_env_is_settings_or_secret_refs(rendered: Rendered, service: str) -> None:
    spec = SERVICES[service]
    c = container(rendered.get("Deployment", spec.name), spec.name)
    secret_refs: dict[str, bool] = {}
    for env in c.get("env", []):
        name = env["name"]
        assert name in spec.env_names | RUNTIME_ENV, f"{name} is not a setting of {spec.name}"
        if name in CREDENTIALS:
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            assert ref is not None, f"{name} must come from a Secret"
            secret = OWN_SECRETS.get((rendered.tree, name), SECRET_NAME)
            assert ref["name"] == secret and ref["key"] == name, ref
            secret_refs[name] = ref.get("optional", False)
    expected = spec.env_names & CREDENTIALS
    assert set(secret_refs) == expected, f"Secret refs {set(secret_refs)} vs {expected}"
    for name, optional in secret_refs.items():
        required = (rendered.tree == "prod" and name in REQUIRED_IN_PROD) or (
            rendered.tree,
            name,
        ) in OWN_SECRETS
        assert optional is not required, f"{rendered.tree}: {name} optional={optional}"


def test_all_four_credentials_are_wired() -> None:
    r = Rendered("base")
    names = set()
    for spec in SERVICES.values():
        names |= {e["name"] for e in container(r.get("Deployment", spec.name), spec.name)["env"]}
    assert {"LLM_API_KEY", "RERANK_API_KEY", "MILVUS_TOKEN", "AUTH_TOKEN"} <= names


# ---- orchestrator: headless round-robin to retrieval, HPA, PDB ---------------------------------


def test_orchestrator_reaches_retrieval_through_the_headless_service(rendered: Rendered) -> None:
    addr = config_of(rendered, SERVICES["orchestrator"])["RETRIEVAL_ADDR"]
    match = re.fullmatch(r"dns:///(?P<host>[a-z0-9.-]+):(?P<port>\d+)", addr)
    assert match, f"RETRIEVAL_ADDR {addr!r} is not dns:///host:port (round-robin needs dns:)"
    service, _, rest = match["host"].partition(".")
    assert rest == f"{rendered.namespace}.svc.cluster.local", f"{addr}: wrong namespace"
    headless = rendered.get("Service", service)
    assert headless["spec"]["clusterIP"] == "None"
    retrieval = rendered.get("Deployment", "retrieval")["spec"]["template"]["metadata"]["labels"]
    assert selects(headless["spec"]["selector"], retrieval)
    port = SERVICES["retrieval"].port
    assert int(match["port"]) == port
    assert [(p["name"], p["port"]) for p in headless["spec"]["ports"]] == [("grpc", port)]


def test_orchestrator_autoscales_and_has_a_disruption_budget(rendered: Rendered) -> None:
    deployment = rendered.get("Deployment", "orchestrator")
    assert "replicas" not in deployment["spec"], "the HPA owns replicas"
    hpa = rendered.get("HorizontalPodAutoscaler", "orchestrator")["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "orchestrator",
    }
    assert 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    assert any(m["resource"]["name"] == "cpu" for m in hpa["metrics"] if m["type"] == "Resource")
    for name in ("orchestrator", "retrieval"):
        pdb = rendered.get("PodDisruptionBudget", name)["spec"]
        target = rendered.get("Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert selects(pdb["selector"]["matchLabels"], target)
        assert pdb.get("maxUnavailable") == 1, "minAvailable would block drains at 1 replica"


# ---- dev: Milvus standalone in the cluster ------------------------------------------------------


def milvus_tag(image: str) -> str:
    match = re.fullmatch(r"milvusdb/milvus:(v\d+\.\d+\.\d+)", image)
    assert match, f"Milvus image {image!r} is not milvusdb/milvus:vX.Y.Z"
    return match[1]


def test_dev_runs_a_milvus_standalone_with_its_volume() -> None:
    r = Rendered("dev")
    sts = r.get("StatefulSet", "milvus")
    assert sts["spec"]["replicas"] == 1
    c = container(sts, "milvus")
    milvus_tag(c["image"])
    assert c["args"] == ["milvus", "run", "standalone"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["ETCD_USE_EMBED"] == "true" and env["COMMON_STORAGETYPE"] == "local"
    claims = {t["metadata"]["name"]: t for t in sts["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/var/lib/milvus"] in claims, "the data dir must be on the claimed volume"
    assert env["ETCD_DATA_DIR"].startswith("/var/lib/milvus/")
    assert claims[mounts["/var/lib/milvus"]]["spec"]["resources"]["requests"]["storage"]

    uri = config_of(r, SERVICES["retrieval"])["MILVUS_URI"]
    assert uri == "http://milvus:19530"
    svc = r.get("Service", "milvus")
    assert 19530 in [p["port"] for p in svc["spec"]["ports"]]
    assert selects(svc["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])
    assert sts["spec"]["serviceName"] == "milvus"


def test_dev_runs_a_postgresql_with_its_volume_for_the_control_plane() -> None:
    r = Rendered("dev")
    sts = r.get("StatefulSet", "postgres")
    assert sts["spec"]["replicas"] == 1
    c = container(sts, "postgres")
    assert c["image"].startswith("postgres:15")
    claims = {t["metadata"]["name"]: t for t in sts["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/var/lib/postgresql/data"] in claims, "the data dir must be on the volume"
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    assert env["PGDATA"].startswith("/var/lib/postgresql/data/")
    svc = r.get("Service", "postgres")
    assert 5432 in [p["port"] for p in svc["spec"]["ports"]]
    assert selects(svc["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])
    secret = r.get("Secret", "supermew-postgres")
    url = secret["stringData"]["DATABASE_URL"]
    assert url.startswith("postgresql+asyncpg://") and "@postgres:5432/" in url
    retrieval = r.get("Deployment", "retrieval")
    for c in all_containers(retrieval):  # the wait and the service
        ref = {e["name"]: e for e in c.get("env", [])}["DATABASE_URL"]["valueFrom"]
        assert ref["secretKeyRef"]["name"] == "supermew-postgres"
    assert "MIGRATE_ON_START" not in config_of(r, SERVICES["retrieval"])  # default: true


def test_prod_reads_the_database_from_its_secret_and_migrates_in_a_job() -> None:
    r = Rendered("prod")
    assert not [s for s in r.all("StatefulSet") if s["metadata"]["name"] == "postgres"]
    assert not r.all("Secret"), "prod's credentials are created by the operator, not committed"
    retrieval = r.get("Deployment", "retrieval")
    env = {e["name"]: e for e in container(retrieval, "retrieval")["env"]}
    ref = env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"], ref.get("optional")) == (SECRET_NAME, "DATABASE_URL", False)
    assert config_of(r, SERVICES["retrieval"])["MIGRATE_ON_START"] == "false"
    job = r.get("Job", "retrieval-db-migrate")
    [migrate] = job["spec"]["template"]["spec"]["containers"]
    assert migrate["command"] == MIGRATE_COMMAND
    assert migrate["image"] == container(retrieval, "retrieval")["image"]
    job_env = {e["name"]: e for e in migrate["env"]}
    assert job_env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == ref
    config = [e["configMapRef"]["name"] for e in migrate["envFrom"]]
    assert config == [
        e["configMapRef"]["name"] for e in container(retrieval, "retrieval")["envFrom"]
    ]
    ctx = migrate["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False


MIGRATE_COMMAND = ["python", "-m", "retrieval_service", "db", "upgrade"]


def test_prod_migration_job_is_admitted_by_the_restricted_namespace() -> None:
    # The prod namespace enforces the `restricted` Pod Security level: a Job pod that breaks it
    # is never created, and the replicas wait for a schema that never comes.
    r = Rendered("prod")
    job = r.get("Job", "retrieval-db-migrate")
    pod = pod_spec(job)
    assert pod["restartPolicy"] in ("OnFailure", "Never")
    assert job["spec"]["backoffLimit"] >= 1
    assert "ttlSecondsAfterFinished" in job["spec"], "a finished Job would block the next apply"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    r.get("ServiceAccount", pod["serviceAccountName"])
    [migrate] = pod["containers"]
    assert migrate["securityContext"]["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    tmp = [m for m in migrate.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
    assert len(tmp) == 1 and "emptyDir" in volumes[tmp[0]["name"]], "/tmp must be an emptyDir"


def test_prod_migration_job_runs_the_services_db_upgrade_with_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The Job's command, dispatched by the service's own entry point with the Job's environment
    # (ConfigMap + the Secret's URL): it reaches `db upgrade` with settings that parse.
    r = Rendered("prod")
    [migrate] = pod_spec(r.get("Job", "retrieval-db-migrate"))["containers"]
    assert migrate["command"][:3] == ["python", "-m", "retrieval_service"]
    for name in SERVICES["retrieval"].env_names:
        monkeypatch.delenv(name, raising=False)
    [config] = [e["configMapRef"]["name"] for e in migrate["envFrom"]]
    for key, value in r.get("ConfigMap", config)["data"].items():
        monkeypatch.setenv(key, str(value))
    url = "postgresql+asyncpg://supermew:secret@db.example.internal:5432/supermew"
    monkeypatch.setenv("DATABASE_URL", url)
    calls: list[tuple[str, Database]] = []

    async def fake_run(command: str, db: Database, migrations: object) -> str:
        calls.append((command, db))
        await db.aclose()
        return "migrated"

    monkeypatch.setattr(shared_db_command, "_run", fake_run)
    assert retrieval_main.main(migrate["command"][3:]) == 0
    [(command, db)] = calls
    assert command == "upgrade"
    assert db.shown_url == url.replace(":secret@", ":***@")
    assert retrieval_settings.RetrievalSettings().migrate_on_start is False


def test_several_retrieval_replicas_share_a_postgresql(rendered: Rendered) -> None:
    # SQLite is a file inside one pod: replicas on it would each keep their own registry over
    # the one Milvus. Wherever more than one replica can run, DATABASE_URL is required and
    # comes from a Secret; the default replica count of a Deployment is 1.
    retrieval = rendered.get("Deployment", "retrieval")
    replicas = retrieval["spec"].get("replicas", 1)
    env = {e["name"]: e for e in container(retrieval, "retrieval")["env"]}
    ref = env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    if rendered.tree == "base":
        return  # environment-neutral: the overlays name the database
    assert ref.get("optional") is False, f"{rendered.tree}: DATABASE_URL must be required"
    if rendered.tree == "prod":
        assert replicas > 1
    secret = rendered.find("Secret", ref["name"])
    if secret is not None:  # committed (dev only): a PostgreSQL URL, never SQLite
        assert secret["stringData"][ref["key"]].startswith("postgresql+asyncpg://")


def test_dev_database_credentials_are_marked_dev_only() -> None:
    text = (K8S / "overlays" / "dev" / "postgres.yaml").read_text(encoding="utf-8")
    assert "DEV-ONLY CREDENTIALS" in text
    secret = Rendered("dev").get("Secret", "supermew-postgres")
    data = secret["stringData"]
    assert data["POSTGRES_PASSWORD"] in data["DATABASE_URL"]
    assert data["DATABASE_URL"].endswith(f"@postgres:5432/{data['POSTGRES_DB']}")
    assert data["DATABASE_URL"].startswith(f"postgresql+asyncpg://{data['POSTGRES_USER']}:")


# ---- prod: a Helm-installed Milvus cluster, auth on, TLS at the edge ----------------------------

PROD = K8S / "overlays" / "prod"


def test_prod_points_at_the_helm_milvus_cluster() -> None:
    r = Rendered("prod")
    assert not r.all("StatefulSet"), "prod must not run its own Milvus"
    uri = config_of(r, SERVICES["retrieval"])["MILVUS_URI"]
    readme = (ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
    install = re.search(
        r"helm upgrade --install (?P<release>\S+) (?P<chart>\S+)\s.*?--namespace (?P<ns>\S+)",
        readme,
        re.S,
    )
    assert install, "deploy/README.md has no `helm upgrade --install` of the Milvus chart"
    assert install["chart"] == "zilliztech/milvus"
    release = install["release"]
    fullname = release if "milvus" in release else f"{release}-milvus"
    assert uri == f"http://{fullname}.{install['ns']}.svc.cluster.local:19530"
    assert "-f deploy/k8s/overlays/prod/milvus-values.yaml" in readme


def test_prod_milvus_values() -> None:
    values = yaml.safe_load((PROD / "milvus-values.yaml").read_text(encoding="utf-8"))
    assert values["cluster"]["enabled"] is True
    dev_image = container(Rendered("dev").get("StatefulSet", "milvus"), "milvus")["image"]
    assert values["image"]["all"]["tag"] == milvus_tag(dev_image), "one Milvus version"
    user = yaml.safe_load(values["extraConfigFiles"]["user.yaml"])
    assert user["common"]["security"]["authorizationEnabled"] is True
    assert values["etcd"]["replicaCount"] >= 3


def test_prod_terminates_tls_at_the_ingress() -> None:
    r = Rendered("prod")
    ingress = r.get("Ingress", "orchestrator")
    annotations = ingress["metadata"]["annotations"]
    # GRPCS: the orchestrator serves TLS in prod, behind the Ingress too.
    assert annotations["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPCS"
    tls_hosts = {h for t in ingress["spec"]["tls"] for h in t["hosts"]}
    for rule in ingress["spec"]["rules"]:
        assert rule["host"] in tls_hosts
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            svc = r.get("Service", backend["name"])
            assert backend["port"]["name"] in [p["name"] for p in svc["spec"]["ports"]]
    labels = r.get("Namespace", r.namespace)["metadata"].get("labels", {})
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted"


# ---- metrics, NetworkPolicies, OTEL, TLS ---------------------------------------------------------


def _pods_selected(r: Rendered, selector: dict[str, str]) -> set[str]:
    return {
        d["metadata"]["name"]
        for d in r.all("Deployment")
        if selects(selector, d["spec"]["template"]["metadata"]["labels"])
    }


def test_prod_service_monitors_scrape_each_service_once() -> None:
    r = Rendered("prod")
    monitors = {m["metadata"]["name"]: m for m in r.all("ServiceMonitor")}
    assert set(monitors) == set(SERVICES)
    for name, monitor in monitors.items():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        selector = monitor["spec"]["selector"]["matchLabels"]
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        scraped = [
            s
            for s in r.all("Service")
            if selects(selector, s["metadata"].get("labels", {}))
            and endpoint["port"] in [p["name"] for p in s["spec"]["ports"]]
        ]
        # One Service with the port: two would scrape every pod twice.
        assert [s["metadata"]["name"] for s in scraped] == [name]
        assert _pods_selected(r, scraped[0]["spec"]["selector"]) == {name}
        metrics = int(config_of(r, SERVICES[name])["METRICS_PORT"])
        port = next(p for p in scraped[0]["spec"]["ports"] if p["name"] == endpoint["port"])
        assert port["port"] == metrics
    for tree in ("base", "dev"):
        assert not Rendered(tree).all("ServiceMonitor"), "the CRD is a prod prerequisite"


def _policy_rules(r: Rendered, name: str) -> dict[str, list[dict[str, Any]]]:
    """A NetworkPolicy's ingress rules by the port name they open."""
    policy = r.get("NetworkPolicy", name)["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    assert _pods_selected(r, policy["podSelector"]["matchLabels"]) == {name}
    rules: dict[str, list[dict[str, Any]]] = {}
    for rule in policy["ingress"]:
        for port in rule["ports"]:
            rules.setdefault(port["port"], []).extend(rule["from"])
    return rules


def test_only_the_orchestrator_reaches_retrieval(rendered: Rendered) -> None:
    rules = _policy_rules(rendered, "retrieval")
    assert set(rules) == {"grpc", "metrics"}
    [peer] = rules["grpc"]
    assert set(peer) == {"podSelector"}, "a namespaceSelector would admit other namespaces"
    assert _pods_selected(rendered, peer["podSelector"]["matchLabels"]) == {"orchestrator"}
    [scraper] = rules["metrics"]
    assert scraper == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }


def test_only_the_ingress_reaches_the_orchestrator_in_prod() -> None:
    r = Rendered("prod")
    rules = _policy_rules(r, "orchestrator")
    assert set(rules) == {"grpc", "metrics"}
    [peer] = rules["grpc"]
    assert peer["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}
    }
    assert peer["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}}
    assert r.get("Ingress", "orchestrator")["spec"]["ingressClassName"] == "nginx"


@services
def test_otel_variables_name_the_service_and_export_only_in_prod(
    rendered: Rendered, service: str
) -> None:
    data = config_of(rendered, SERVICES[service])
    assert data["OTEL_SERVICE_NAME"] == service
    assert data["OTEL_EXPORTER_OTLP_PROTOCOL"] in ("http/protobuf", "grpc")
    endpoint = data.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if rendered.tree == "prod":
        assert endpoint and re.fullmatch(r"https?://[a-z0-9.-]+:\d+", endpoint), endpoint
    else:
        assert endpoint is None, "export is off unless an overlay names a collector"


def _tls_mount(r: Rendered, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = r.get("Deployment", name)
    mounts = [m for m in container(deployment, name).get("volumeMounts", []) if m["name"] == "tls"]
    volumes = [v for v in pod_spec(deployment).get("volumes", []) if v["name"] == "tls"]
    assert len(mounts) == 1 and len(volumes) == 1, f"{r.tree}/{name}: no tls volume"
    return mounts[0], volumes[0]


def test_prod_serves_tls_from_mounted_secrets_and_mtls_between_the_services() -> None:
    r = Rendered("prod")
    files: dict[str, dict[str, str]] = {}
    for name, spec in SERVICES.items():
        mount, volume = _tls_mount(r, name)
        assert mount["mountPath"] == TLS_DIR and mount["readOnly"] is True
        # A subPath mount never sees a renewed Secret: the reload would not happen.
        assert "subPath" not in mount
        assert volume["secret"]["secretName"] == f"{name}-grpc-tls"
        data = config_of(r, spec)
        files[name] = {k: v for k, v in data.items() if "TLS_" in k}
        for key, path in files[name].items():
            assert path.startswith(TLS_DIR + "/"), f"{key}={path} is outside the mounted Secret"
        parsed = {k.lower(): v for k, v in data.items() if k in spec.env_names}
        spec.settings.model_validate(parsed)  # the TLS settings' pairing rules hold
    assert files["retrieval"] == {
        "TLS_CERT_FILE": f"{TLS_DIR}/tls.crt",
        "TLS_KEY_FILE": f"{TLS_DIR}/tls.key",
        "TLS_CLIENT_CA_FILE": f"{TLS_DIR}/ca.crt",  # mTLS: only a certificate of the CA
    }
    orchestrator = files["orchestrator"]
    assert orchestrator["TLS_CERT_FILE"] == orchestrator["RETRIEVAL_TLS_CERT_FILE"]
    assert orchestrator["TLS_KEY_FILE"] == orchestrator["RETRIEVAL_TLS_KEY_FILE"]
    assert orchestrator["RETRIEVAL_TLS_CA_FILE"] == f"{TLS_DIR}/ca.crt"
    assert "TLS_CLIENT_CA_FILE" not in orchestrator, "the Ingress presents no client certificate"


def test_dev_and_base_stay_plaintext() -> None:
    for tree in ("base", "dev"):
        r = Rendered(tree)
        for spec in SERVICES.values():
            assert not [k for k in config_of(r, spec) if "TLS_" in k], f"{tree}/{spec.name}"
