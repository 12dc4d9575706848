"""`make bench` / `python -m bench [NAME [--option …]…]`: runs every `bench/*.py` module that has a
`main()` (or only the named ones), one after another, each printing its own table. Options after
a name go to that bench (`make bench BENCH="local_answers --set wrapped_docs"`); a bench whose
`main` takes an argument list gets its own, never the runner's command line."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import time

import bench


def available() -> list[str]:
    return sorted(
        info.name for info in pkgutil.iter_modules(bench.__path__) if not info.name.startswith("_")
    )


def planned(argv: list[str]) -> list[tuple[str, list[str]]]:
    """(bench, its options) in order: each word starting with "-", and the word after an option
    that is not a bench's name, belongs to the bench named before it."""
    plan: list[tuple[str, list[str]]] = []
    for word in argv:
        if plan and (word.startswith("-") or (plan[-1][1] and word not in available())):
            plan[-1][1].append(word)
        else:
            plan.append((word, []))
    return plan or [(name, []) for name in available()]


def main(argv: list[str]) -> int:
    plan = planned(argv)
    unknown = sorted({name for name, _ in plan} - set(available()))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}")
        return 2
    for name, options in plan:
        module = importlib.import_module(f"bench.{name}")
        if not hasattr(module, "main"):
            continue
        print(f"\n=== bench.{name} ===", flush=True)
        started = time.perf_counter()
        if inspect.signature(module.main).parameters:
            module.main(options)  # its argparse must not read the runner's command line
        else:
            module.main()
        print(f"--- bench.{name}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
