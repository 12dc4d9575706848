"""Typed settings read once from the environment (names of docs/api.md#settings). Each
service's composition root builds one settings object and passes it down; nothing else reads
the environment."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerSettings(BaseSettings):
    """What every gRPC server of the project shares."""

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    bind_host: str = Field("127.0.0.1", description="Listen address (0.0.0.0 in containers).")
    auth_token: str | None = Field(
        None,
        description="When set, every RPC but health and reflection needs `authorization: "
        "Bearer <token>`; the token is one admin key on every knowledge base.",
    )
    auth_keys_file: str | None = Field(
        None,
        description="YAML or JSON file of scoped API keys (docs/api.md#api-keys), re-read when "
        "it changes; set = every RPC but health and reflection needs a key.",
    )
    grpc_max_message_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="Max gRPC message size, both directions."
    )
    shutdown_grace_seconds: float = Field(
        10.0, ge=0, description="How long in-flight calls may finish after SIGTERM."
    )
    log_format: Literal["text", "json"] = Field("text", description="`json` for JSON lines.")
    log_level: str = Field("INFO", description="Python logging level name.")
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="HTTP port of Prometheus `/metrics` (0 = any free one); unset = off.",
    )
    max_question_chars: int = Field(
        4000, gt=0, description="Longer questions, queries and user answers are INVALID_ARGUMENT."
    )
    max_concurrent_rpcs: int = Field(
        256,
        gt=0,
        description="Calls served at once; beyond it RESOURCE_EXHAUSTED (health is exempt).",
    )

    tls_cert_file: str | None = Field(
        None, description="PEM certificate chain; with TLS_KEY_FILE the server speaks TLS only."
    )
    tls_key_file: str | None = Field(None, description="PEM private key of TLS_CERT_FILE.")
    tls_client_ca_file: str | None = Field(
        None,
        description="PEM CA bundle; set = mTLS (clients must present a certificate it signed).",
    )
    otel_record_questions: bool = Field(
        False,
        description="Put questions and queries on trace spans (`supermew.question`); off = "
        "spans carry routes, statuses, modes and counts only.",
    )
    health_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="A second, plaintext port serving only grpc.health.v1 (kubelet gRPC probes "
        "cannot speak TLS); unset = none.",
    )
    audit_log: str | None = Field(
        None,
        description="`stdout` or a file path: one JSON line per RPC (docs/api.md#audit-log); "
        "unset = no audit log.",
    )
    audit_log_queries: bool = Field(
        False, description="Put the question or query text on audit lines (`question`)."
    )

    @property
    def auth_on(self) -> bool:
        return bool(self.auth_token or self.auth_keys_file)

    def listen_ports(self) -> dict[str, int]:
        """The fixed ports this process will listen on, by the variable that sets each:
        checked free at start-up before anything slow opens (shared.startup). A service adds
        its own gRPC port."""
        ports = {"HEALTH_PORT": self.health_port, self.metrics_port_setting: self.metrics_port}
        return {name: port for name, port in ports.items() if port}

    @property
    def metrics_port_setting(self) -> str:
        """The variable that set `metrics_port`: a service's own (RETRIEVAL_METRICS_PORT,
        ORCHESTRATOR_METRICS_PORT) overrides METRICS_PORT, so two services on one host (`make
        run`) each have one."""
        return self._metrics_port_setting

    _metrics_port_setting: str = PrivateAttr("METRICS_PORT")

    def _own_metrics_port(self, variable: str, port: int | None) -> None:
        if port is not None:
            self.metrics_port = port
            self._metrics_port_setting = variable

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        # Checked here so a typo fails at start-up naming LOG_LEVEL, not deep in logging.
        names = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
        if value.upper() not in names:
            raise ValueError(f"must be one of {', '.join(names)}")
        return value.upper()

    @model_validator(mode="after")
    def _tls_files_come_together(self) -> ServerSettings:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("TLS_CERT_FILE and TLS_KEY_FILE are set together or not at all")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("TLS_CLIENT_CA_FILE needs TLS_CERT_FILE and TLS_KEY_FILE")
        return self
