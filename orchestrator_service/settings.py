"""Settings of the orchestrator service (docs/api.md#settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from shared.cpus import available_cpus
from shared.settings import ServerSettings

SERVICE_NAME = "supermew.v1.OrchestratorService"
EVALUATION_SERVICE = "supermew.v1.EvaluationService"


class OrchestratorSettings(ServerSettings):
    orchestrator_port: int = Field(50052, ge=0, le=65535)
    orchestrator_metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="This service's `/metrics` port; overrides METRICS_PORT (`make run` "
        "gives each service its own).",
    )
    orchestrator_workers: int | Literal["auto"] = Field(
        1,
        description="Server processes sharing ORCHESTRATOR_PORT (SO_REUSEPORT), each with its "
        "own event loop and clients; `auto` = the cores the process may use.",
    )
    retrieval_addr: str = Field(
        "localhost:50051", description="`dns:///name:port` enables client-side balancing."
    )
    retrieval_timeout_seconds: float = Field(
        30.0, gt=0, description="Per-call deadline to retrieval when the caller set none."
    )
    retrieval_tls_ca_file: str | None = Field(
        None, description="Set = TLS to retrieval, verified against this PEM CA bundle."
    )
    retrieval_tls_cert_file: str | None = Field(
        None, description="Client certificate presented to retrieval (mTLS)."
    )
    retrieval_tls_key_file: str | None = Field(None, description="Its private key.")

    # The orchestrator's own database (docs/api.md#evaluation): evaluation sets, runs, results.
    orchestrator_database_url: str | None = Field(
        None,
        description="SQLAlchemy URL of the orchestrator's database: sqlite+aiosqlite:///path "
        "or postgresql+asyncpg://user:password@host/db (unset: ./data/orchestrator.sqlite3).",
    )
    migrate_on_start: bool = Field(
        True,
        description="Migrate the orchestrator's schema at start-up; false: a schema older "
        "than the code refuses start-up.",
    )
    import_roots: str | None = Field(
        None,
        description="Comma-separated folders ImportEvaluationItems may read file:// uris "
        "under (unset: file imports are refused).",
    )
    run_history: bool = Field(
        False,
        description="Record every Run and Resume with its trace (GetRun, ListRuns); `make run` "
        "turns it on.",
    )
    run_history_days: int = Field(
        30, ge=1, le=3650, description="Days a run stays in the history before it is deleted."
    )
    evaluation_lease_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a replica holds an evaluation run without renewing it before "
        "another replica takes it over.",
    )

    llm_base_url: str | None = Field(None, description="Unset = the built-in local model.")
    llm_api_key: str | None = None
    model: str | None = None
    grade_model: str | None = Field(None, description="Defaults to MODEL.")
    fast_model: str | None = Field(None, description="Defaults to MODEL.")
    answer_model: str | None = Field(None, description="Writes answers; defaults to MODEL.")
    llm_timeout_seconds: float = Field(60.0, gt=0)

    @field_validator("llm_base_url")
    @classmethod
    def _absolute_url(cls, value: str | None) -> str | None:
        # Without a scheme every call fails; say so once, at start-up.
        if value is not None and not value.strip():
            return None
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @field_validator("orchestrator_workers")
    @classmethod
    def _positive_workers(cls, value: int | str) -> int | str:
        if value != "auto" and isinstance(value, int) and value < 1:
            raise ValueError("must be a positive number of processes or `auto`")
        return value

    @property
    def import_root_paths(self) -> tuple[Path, ...]:
        """IMPORT_ROOTS as folders (empty: file imports refused)."""
        raw = self.import_roots or ""
        return tuple(Path(p.strip()) for p in raw.split(",") if p.strip())

    @property
    def worker_count(self) -> int:
        """ORCHESTRATOR_WORKERS resolved: `auto` is the cores this process may use (cgroup
        quota and CPU affinity), since one process is bound to one core by the GIL."""
        workers = self.orchestrator_workers
        return available_cpus() if workers == "auto" else int(workers)

    @model_validator(mode="after")
    def _workers_share_one_fixed_port(self) -> OrchestratorSettings:
        # Port 0 would give every worker its own ephemeral port: not one service.
        if self.orchestrator_workers != 1 and self.orchestrator_port == 0:
            raise ValueError("ORCHESTRATOR_WORKERS above 1 needs a fixed ORCHESTRATOR_PORT")
        return self

    @model_validator(mode="after")
    def _retrieval_tls_files_come_together(self) -> OrchestratorSettings:
        if bool(self.retrieval_tls_cert_file) != bool(self.retrieval_tls_key_file):
            raise ValueError(
                "RETRIEVAL_TLS_CERT_FILE and RETRIEVAL_TLS_KEY_FILE are set together or not at all"
            )
        if self.retrieval_tls_cert_file and not self.retrieval_tls_ca_file:
            raise ValueError("RETRIEVAL_TLS_CERT_FILE needs RETRIEVAL_TLS_CA_FILE")
        return self

    @model_validator(mode="after")
    def _service_metrics_port(self) -> OrchestratorSettings:
        self._own_metrics_port("ORCHESTRATOR_METRICS_PORT", self.orchestrator_metrics_port)
        return self

    def listen_ports(self) -> dict[str, int]:
        return {**super().listen_ports(), "ORCHESTRATOR_PORT": self.orchestrator_port}
