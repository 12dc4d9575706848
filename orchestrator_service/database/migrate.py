"""The orchestrator schema's migrations (`migrations/versions/`, run by
`shared/sql/migrate.py`): at start-up (MIGRATE_ON_START, default on) or by
`python -m orchestrator_service db upgrade`."""

from __future__ import annotations

from pathlib import Path

from shared.sql.migrate import Migrations

SCRIPTS = Path(__file__).with_name("migrations")
MIGRATIONS = Migrations(
    SCRIPTS, lock_key=0x5350_4D45_5701, command="python -m orchestrator_service db upgrade"
)
