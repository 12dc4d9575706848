"""The orchestrator's own database (docs/api.md#orchestrator-database): evaluation sets, runs,
results and their operations, on ORCHESTRATOR_DATABASE_URL."""
