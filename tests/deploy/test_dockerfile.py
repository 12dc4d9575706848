"""deploy/docker/Dockerfile keeps its invariants (no docker engine is needed to check them):
its base an ARG (PYTHON_IMAGE) defaulting to a pinned slim Python within requires-python, stubs
generated in the build stage, install from the lock, non-root numeric USER, exec-form
entrypoints, EXPOSE = the settings' default ports, no download at build or run time, and a
build context limited by .dockerignore."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from orchestrator_service.settings import OrchestratorSettings
from retrieval_service.settings import RetrievalSettings
from tests.deploy.dockerfile import Stage, chain, effective, exec_form, global_args, stages

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

# target → (module run by the entrypoint, its default port)
TARGETS = {
    "retrieval": ("retrieval_service", RetrievalSettings.model_fields["retrieval_port"].default),
    "orchestrator": (
        "orchestrator_service",
        OrchestratorSettings.model_fields["orchestrator_port"].default,
    ),
}
PINNED_BASE = re.compile(r"^python:(?P<version>3\.\d+\.\d+)-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?$")


@pytest.fixture(scope="module")
def all_stages() -> dict[str, Stage]:
    return stages(DOCKERFILE)


def external_bases(all_stages: dict[str, Stage]) -> list[str]:
    return [s.base for s in all_stages.values() if s.base not in all_stages]


def test_every_target_exists(all_stages: dict[str, Stage]) -> None:
    assert set(TARGETS) <= set(all_stages), f"stages: {sorted(all_stages)}"


def test_base_image_is_a_pinned_slim_python_within_requires_python(
    all_stages: dict[str, Stage],
) -> None:
    bases = external_bases(all_stages)
    assert bases, "no FROM of an external image"
    assert len(set(bases)) == 1, f"build and runtime must share one base: {bases}"
    match = PINNED_BASE.match(bases[0])
    assert match, f"{bases[0]!r} is not python:X.Y.Z-slim[-suite] (a patch version pinned)"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    requires = pyproject["project"]["requires-python"]
    assert match["version"] in SpecifierSet(requires), f"{match['version']} vs {requires}"


def test_the_base_is_an_argument_defaulting_to_the_published_base(
    all_stages: dict[str, Stage],
) -> None:
    # A registry-less machine builds the same file on a local base (deploy/docker/make-base.sh).
    assert global_args(DOCKERFILE).get("PYTHON_IMAGE"), "no ARG PYTHON_IMAGE=<default> before FROM"
    text = DOCKERFILE.read_text(encoding="utf-8")
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    external = [f for f in froms if f not in all_stages]
    assert external and set(external) == {"${PYTHON_IMAGE}"}, external


def test_multi_stage_with_runtime_built_from_the_build_stage_output(
    all_stages: dict[str, Stage],
) -> None:
    for target in TARGETS:
        names = [s.name for s in chain(all_stages, target)]
        build_copies = [
            c.args for s in chain(all_stages, target) for c in s.of("COPY") if "--from=" in c.args
        ]
        assert "/opt/venv" in " ".join(build_copies), f"{target}: venv not copied from a stage"
        assert "build" not in names, f"{target} must not ship the build stage: {names}"


def test_stubs_are_generated_in_the_build_stage(all_stages: dict[str, Stage]) -> None:
    runs = " ".join(r.args for r in all_stages["build"].of("RUN"))
    for part in ("grpc_tools.protoc", "-Iprotos", "--python_out=", "--grpc_python_out="):
        assert part in runs
    assert "protos/supermew/v1/*.proto" in runs
    assert ".pth" in runs, "the stubs must import as supermew.v1 through a .pth file"
    for stage in all_stages.values():
        for copy in stage.of("COPY"):
            sources = [w for w in copy.args.split()[:-1] if not w.startswith("--")]
            assert not any(w.rstrip("/") in ("gen", ".venv") for w in sources), copy.args


def test_dependencies_install_from_the_lock(all_stages: dict[str, Stage]) -> None:
    runs = [r.args for r in all_stages["build"].of("RUN")]
    assert any(re.search(r"pip install -c requirements\.lock \.(\s|$)", r) for r in runs), runs
    for run in runs:
        if "pip install" in run:
            assert "-c requirements.lock" in run, f"an unconstrained install: {run}"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_target_runs_as_a_numeric_non_root_user(all_stages: dict[str, Stage], target: str) -> None:
    user = str(effective(all_stages, target)["user"])
    uid = user.split(":")[0]
    assert uid.isdigit(), f"{target}: USER {user!r} must be numeric for runAsNonRoot"
    assert int(uid) != 0, f"{target} runs as root"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_target_entrypoint_is_exec_form(all_stages: dict[str, Stage], target: str) -> None:
    module, _ = TARGETS[target]
    eff = effective(all_stages, target)
    assert eff["entrypoint"] is not None, f"{target}: no ENTRYPOINT"
    assert exec_form(str(eff["entrypoint"])) == ["python", "-m", module]
    assert eff["cmd"] is None or exec_form(str(eff["cmd"])) is not None


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_target_environment(all_stages: dict[str, Stage], target: str) -> None:
    env = effective(all_stages, target)["env"]
    assert isinstance(env, dict)
    assert env.get("PYTHONUNBUFFERED") == "1"
    assert env.get("BIND_HOST") == "0.0.0.0"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_expose_is_the_settings_default_port(all_stages: dict[str, Stage], target: str) -> None:
    _, port = TARGETS[target]
    assert effective(all_stages, target)["expose"] == {str(port)}


def test_nothing_is_downloaded(all_stages: dict[str, Stage]) -> None:
    forbidden = re.compile(
        r"\b(curl|wget|huggingface|hf_hub_download|snapshot_download|git clone)\b", re.I
    )
    for stage in all_stages.values():
        for ins in stage.instructions:
            assert not forbidden.search(ins.args), f"{stage.name}: {ins.keyword} {ins.args}"
            if ins.keyword == "ADD":
                assert "://" not in ins.args, f"{stage.name}: ADD of a URL"


def test_build_context_is_an_allow_list_covering_every_copy(all_stages: dict[str, Stage]) -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "the .dockerignore must start by excluding everything"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    for secret in (".venv", "gen", "data", ".git", "tests", "bench"):
        assert secret not in allowed
    for stage in all_stages.values():
        for copy in stage.of("COPY"):
            if "--from=" in copy.args:
                continue
            for source in [w for w in copy.args.split()[:-1] if not w.startswith("--")]:
                top = source.rstrip("/").split("/")[0]
                assert top in allowed, f"COPY {source}: not in the .dockerignore allow-list"
                assert (ROOT / source).exists(), f"COPY {source}: no such path in the repo"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_service_env_in_the_image_is_settings(all_stages: dict[str, Stage], target: str) -> None:
    settings = RetrievalSettings if target == "retrieval" else OrchestratorSettings
    names = {field.upper() for field in settings.model_fields}
    env = effective(all_stages, target)["env"]
    assert isinstance(env, dict)
    for key in env:
        if key == "PATH" or key.startswith(("PYTHON", "PIP_")):
            continue
        assert key in names, f"{target}: ENV {key} is not a setting"


def test_the_installed_package_carries_every_runtime_file() -> None:
    # The image installs the package non-editable (a wheel): a data file next to the code
    # reaches the image only when pyproject declares it as package data.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = pyproject.get("tool", {}).get("setuptools", {}).get("package-data", {})
    patterns = [p for values in declared.values() for p in values]
    for package in ("shared", "retrieval_service", "orchestrator_service"):
        for path in (ROOT / package).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix in (".py", ".md"):
                continue
            assert any(path.match(p) for p in patterns), (
                f"{path.relative_to(ROOT)} would be missing from the image: declare it in "
                "[tool.setuptools.package-data]"
            )


#: The control-plane database's packages (pyproject: SQLAlchemy's async core, Alembic and the
#: two drivers) and what only they pull in.
DATABASE_PACKAGES = {
    "sqlalchemy",
    "alembic",
    "mako",
    "markupsafe",
    "greenlet",
    "aiosqlite",
    "asyncpg",
}


def _uninstalled(stage: Stage) -> set[str]:
    names: set[str] = set()
    for run in stage.of("RUN"):
        for command in run.args.split("&&"):
            words = command.split()
            if words[:2] == ["pip", "uninstall"]:
                names |= {w.lower() for w in words[2:] if not w.startswith("-")}
    return names


def test_the_retrieval_image_keeps_the_database_drivers_and_migrations(
    all_stages: dict[str, Stage],
) -> None:
    # `python -m retrieval_service db upgrade` (the prod migration Job) runs the Alembic scripts
    # of the installed package; the build checks them from outside /src, whose source tree
    # would otherwise shadow the venv.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    dependencies = pyproject["project"]["dependencies"]
    pinned = {re.split(r"[=<>!~\[ ]", d, maxsplit=1)[0].lower() for d in dependencies}
    assert {"sqlalchemy", "alembic", "aiosqlite", "asyncpg"} <= pinned
    stage = all_stages["retrieval-venv"]
    assert not _uninstalled(stage) & DATABASE_PACKAGES
    runs = " ".join(r.args for r in stage.of("RUN"))
    check = re.search(r"cd / && python -c \"(?P<code>[^\"]+)\"", runs)
    assert check, "no import check of the installed package from outside /src"
    for needed in ("aiosqlite", "asyncpg", "retrieval_service.adapters.sql.migrate", "head()"):
        assert needed in check["code"], needed


def test_the_orchestrator_image_keeps_the_database_drivers(all_stages: dict[str, Stage]) -> None:
    # Its own database (evaluation sets and runs, run history): SQLAlchemy, Alembic, both
    # drivers and the migration scripts, checked in the installed package from outside /src.
    stage = all_stages["orchestrator-venv"]
    assert not _uninstalled(stage) & DATABASE_PACKAGES
    runs = " ".join(r.args for r in stage.of("RUN"))
    check = re.search(r"cd / && python -c \"(?P<code>[^\"]+)\"", runs)
    assert check, "no import check of the installed package from outside /src"
    for needed in ("aiosqlite", "asyncpg", "orchestrator_service.database.migrate", "head()"):
        assert needed in check["code"], needed
