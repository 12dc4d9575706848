"""Settings of the retrieval service (docs/api.md#settings)."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from retrieval_service.core.identity import KB_ID
from shared.settings import ServerSettings

SERVICE_NAME = "supermew.v1.RetrievalService"


class EmbedderEndpoint(BaseModel):
    """One named embedder of EMBEDDERS: an OpenAI-compatible `/v1/embeddings` endpoint."""

    base_url: str
    model: str
    dimension: int = Field(gt=0)
    api_key: str | None = None


class RetrievalSettings(ServerSettings):
    retrieval_port: int = Field(50051, ge=0, le=65535)
    retrieval_metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="This service's `/metrics` port; overrides METRICS_PORT (`make run` "
        "gives each service its own).",
    )

    milvus_uri: str = Field(
        "./data/supermew.db",
        description="A file path ending in .db = embedded Milvus Lite; http(s)://… = a server.",
    )
    milvus_token: str | None = None
    milvus_collection: str = "supermew_chunks"
    # The control plane (docs/api.md#database): knowledge bases, documents, versions, leases.
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL of the control-plane database: sqlite+aiosqlite:///path "
        "(unset: a file beside the Milvus Lite file) or "
        "postgresql+asyncpg://user:password@host:port/db (required for several replicas).",
    )
    database_pool_size: int = Field(10, ge=1, le=1000)
    database_timeout_seconds: float = Field(
        10.0, gt=0, description="Connect, pool checkout and statement timeout, in seconds."
    )
    migrate_on_start: bool = Field(
        True,
        description="Migrate the database schema at start-up; false: a schema older than the "
        "code refuses start-up (run `python -m retrieval_service db upgrade`).",
    )
    ingest_lease_seconds: float = Field(
        30.0,
        ge=1,
        description="The lease an ingest, replace or delete holds on its unfinished registry "
        "records, renewed every third of it while it runs; reconciliation (at start-up and "
        "every lease period) removes an uncommitted version once its lease expired.",
    )
    # Replaced by INGEST_LEASE_SECONDS: still accepted (any value), ignored, and named in one
    # start-up warning (bootstrap.serve_app), so an old deployment keeps starting.
    reconcile_grace_seconds: str | None = Field(
        None, description="Ignored (replaced by INGEST_LEASE_SECONDS); set, it is warned about."
    )

    retrieval_top_k: int = Field(8, ge=1, le=100)
    retrieval_candidate_multiplier: int = Field(3, ge=1)
    # Kept raw: an unparsable value is reported in the retrieval meta
    # (`candidate_k_config_error`), not a start-up failure (docs/api.md#candidate-pool).
    retrieval_candidate_k: str | None = None
    leaf_retrieve_level: int = Field(3, ge=1, le=3)
    # Off by default: on Milvus Lite the BM25 analysis of the parents was two thirds of an
    # ingest's store cost (README "Ingestion"); a store ingested without it refuses to start
    # at another LEAF_RETRIEVE_LEVEL, naming the remedy.
    bm25_all_levels: bool = Field(
        False,
        description="Write the BM25 text on the rows of all three levels, not only "
        "LEAF_RETRIEVE_LEVEL's, so that the store can later be recalled at any level "
        "without re-ingesting (≈ ×2 the store's insert cost on Milvus Lite).",
    )
    auto_merge_enabled: bool = True
    auto_merge_threshold: int = 2

    rerank_host: str | None = None
    rerank_model: str | None = None
    rerank_api_key: str | None = None
    rerank_timeout_seconds: float = 5.0
    rerank_min_score: float = 0.0

    embedding_base_url: str | None = None
    embedding_model: str | None = None
    embedding_api_key: str | None = None
    embedding_dim: int | None = Field(None, gt=0)
    embedding_concurrency: int = Field(
        4, ge=1, description="Passage batches in flight at once to EMBEDDING_BASE_URL."
    )

    embedders: dict[str, EmbedderEndpoint] | None = Field(
        None,
        description="Named embedders indexes may use besides `builtin` (the built-in model), "
        'as JSON: {"name": {"base_url": …, "model": …, "dimension": …, "api_key": …}} '
        "(docs/api.md#indexes).",
    )
    # L3 size; L1/L2 sizes derive from it (docs/api.md#documents-and-chunks).
    chunk_size: int = Field(800, gt=0)
    chunk_overlap: int = Field(100, ge=0)
    # On by default: on the full SciFact corpus (809 train claims) it lifted BM25 nDCG@10
    # 0.655 → 0.671 and the hybrid 0.719 → 0.725 (bench.retrieval_scifact); documents ingested
    # before keep their plain leaves until re-ingested, which mixes harmlessly.
    leaf_context_header: bool = Field(
        True,
        description="Embed and BM25-index each leaf with its document title and section path "
        "in front; the stored and returned text stays the leaf.",
    )
    max_document_bytes: int = Field(20 * 1024 * 1024, gt=0)
    # Imports (docs/api.md#imports).
    import_roots: str | None = Field(
        None,
        description="Comma-separated folders ImportDocuments may read file:// uris under "
        "(unset: file imports are refused).",
    )
    import_url_prefixes: str | None = Field(
        None,
        description="Comma-separated URL prefixes ImportDocuments may read http(s):// and "
        "s3:// uris under, redirects included (unset: URL and S3 imports are refused).",
    )
    s3_endpoint_url: str | None = Field(
        None,
        description="The S3-compatible endpoint s3:// imports read from (unset: AWS); "
        "credentials and region from the standard AWS variables.",
    )
    import_workers: int = Field(2, ge=1, le=64, description="Imports one replica runs at once.")
    import_url_timeout_seconds: float = Field(
        30.0, gt=0, description="The time limit of reading one URL of an import, in seconds."
    )
    samples_dir: str | None = Field(
        None, description="Folder ingested at start-up when the store is empty (`make run`)."
    )

    @model_validator(mode="after")
    def _embedder_names(self) -> RetrievalSettings:
        for name in self.embedders or {}:
            if name in ("builtin", "default") or not KB_ID.fullmatch(name):
                raise ValueError(
                    f"EMBEDDERS: {name!r} must match [a-z][a-z0-9-]{{0,62}} and not be "
                    "builtin or default"
                )
        return self

    @model_validator(mode="after")
    def _service_metrics_port(self) -> RetrievalSettings:
        self._own_metrics_port("RETRIEVAL_METRICS_PORT", self.retrieval_metrics_port)
        return self

    def listen_ports(self) -> dict[str, int]:
        return {**super().listen_ports(), "RETRIEVAL_PORT": self.retrieval_port}
