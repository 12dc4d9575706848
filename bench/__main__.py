"""`make bench` / `python -m bench [NAME…]`: runs every `bench/*.py` module that has a `main()`
(or only the named ones), one after another, each printing its own table."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench


def available() -> list[str]:
    return sorted(
        info.name for info in pkgutil.iter_modules(bench.__path__) if not info.name.startswith("_")
    )


def main(argv: list[str]) -> int:
    names = argv or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}")
        return 2
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        if not hasattr(module, "main"):
            continue
        print(f"\n=== bench.{name} ===", flush=True)
        started = time.perf_counter()
        module.main()
        print(f"--- bench.{name}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
