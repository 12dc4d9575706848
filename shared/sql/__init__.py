"""The SQL database layer both services use (docs/api.md#database)."""
