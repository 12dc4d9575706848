"""`python -m orchestrator_service`: the composition root (serves the OrchestratorService).
`python -m orchestrator_service ask|resume …` is the CLI calling it (orchestrator_service.cli)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from supermew.v1 import orchestrator_pb2  # noqa: F401  (descriptors for reflection)

from orchestrator_service.settings import OrchestratorSettings
from shared.serve import serve
from shared.startup import run_service


async def _serve(settings: OrchestratorSettings, on_started: Callable[[], None]) -> None:
    from orchestrator_service.app import build_app

    app = build_app(settings)
    await serve(app.server, on_stop=app.aclose, on_started=on_started)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:  # ask / resume, or --help and mistakes: the CLI's parser answers, never the server
        from orchestrator_service.cli import main as cli_main

        return cli_main(argv)
    return run_service("orchestrator_service", OrchestratorSettings, _serve)


if __name__ == "__main__":
    sys.exit(main())
