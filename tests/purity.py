"""What importing a set of modules loads, asked two ways.

- `imports_in_a_fresh_scope` (unit tier): in this process, with every first-party module and
  every forbidden package hidden from `sys.modules` for the duration, and an import hook that
  refuses and records each forbidden import. It sees every import the first-party code makes,
  but not what an already-loaded third-party package imported before (numpy, for one, cannot
  be imported twice in a process).
- `modules_of_a_fresh_interpreter` (slow tier): a new interpreter that imports them and prints
  its `sys.modules`; nothing is loaded before, so nothing can hide."""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("shared", "retrieval_service", "orchestrator_service", "supermew")


def _within(name: str, packages: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


class ForbiddenImport(ImportError):
    pass


class _Refuse(importlib.abc.MetaPathFinder):
    def __init__(self, forbidden: Sequence[str]) -> None:
        self.forbidden = forbidden
        self.refused: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if _within(name, self.forbidden):
            self.refused.append(name)
            raise ForbiddenImport(f"{name} is forbidden here")
        return None


def imports_in_a_fresh_scope(modules: Sequence[str], forbidden: Sequence[str]) -> list[str]:
    """The forbidden modules that importing `modules` tried to load (empty = pure). The
    process's own first-party modules are put back afterwards, whatever happened; third-party
    modules first loaded here stay loaded (an extension module cannot be loaded twice)."""
    saved = dict(sys.modules)
    for name in list(sys.modules):
        if _within(name, FIRST_PARTY) or _within(name, forbidden):
            del sys.modules[name]
    hook = _Refuse(forbidden)
    sys.meta_path.insert(0, hook)
    try:
        for module in modules:
            # A refusal is recorded by the hook; the other modules are still worth importing.
            with contextlib.suppress(ForbiddenImport):
                importlib.import_module(module)
        return sorted(set(hook.refused))
    finally:
        sys.meta_path.remove(hook)
        for name in list(sys.modules):
            if _within(name, FIRST_PARTY) and name not in saved:
                del sys.modules[name]
        sys.modules.update(saved)


def modules_of_a_fresh_interpreter(modules: Sequence[str]) -> list[str]:
    """`sys.modules` of a new interpreter after importing `modules`."""
    code = f"import {', '.join(modules)}; import sys; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.split()


def forbidden_among(loaded: Iterable[str], forbidden: Sequence[str]) -> list[str]:
    return sorted(name for name in loaded if _within(name, forbidden))
