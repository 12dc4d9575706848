"""`python -m orchestrator_service`: settings → logging → serve the OrchestratorService that
`orchestrator_service.bootstrap` wires. `python -m orchestrator_service ask|resume …` is the
CLI calling it (orchestrator_service.cli)."""

from __future__ import annotations

import sys

from supermew.v1 import orchestrator_pb2  # noqa: F401  (descriptors for reflection)

from orchestrator_service.settings import OrchestratorSettings
from shared.startup import run_service


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["db"]:
        from orchestrator_service.db_command import main as db_main

        return db_main(argv[1:])
    if argv:  # ask / resume, or --help and mistakes: the CLI's parser answers, never the server
        from orchestrator_service.cli import main as cli_main

        return cli_main(argv)
    import uvloop

    # uvloop: less CPU per Run (docs/benchmarks.md#orchestrator_throughput); workers: one process
    # per core at most. The composition root is imported by name once the settings are read
    # and the ports checked free: a busy port fails before its slow imports.
    return run_service(
        "orchestrator_service",
        OrchestratorSettings,
        "orchestrator_service.bootstrap:serve_app",
        workers=lambda settings: settings.worker_count,
        loop_factory=uvloop.new_event_loop,
    )


if __name__ == "__main__":
    sys.exit(main())
