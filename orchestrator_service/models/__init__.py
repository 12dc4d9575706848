"""Model tasks of the workflow (docs/api.md#model-calls) behind one `ModelClient` interface, and
the factory the composition root uses to pick the implementation."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator_service.models.base import ModelClient
    from orchestrator_service.settings import OrchestratorSettings

log = logging.getLogger(__name__)


def build_model_client(settings: OrchestratorSettings) -> ModelClient:
    """LLM_BASE_URL set → the remote client for every task (never silently replaced by
    the local model when it fails); unset → the built-in local model."""
    if settings.llm_base_url:
        from orchestrator_service.models.remote import RemoteModelClient

        if not settings.model and not (settings.grade_model and settings.fast_model):
            from shared.errors import ConfigurationError

            raise ConfigurationError("MODEL (or GRADE_MODEL and FAST_MODEL) must be set")
        client: ModelClient = RemoteModelClient(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key,
            model=settings.model or settings.fast_model or "",
            grade_model=settings.grade_model,
            fast_model=settings.fast_model,
            answer_model=settings.answer_model,
            timeout=settings.llm_timeout_seconds,
        )
        log.info(
            "model tasks served by %s (fast=%s, grade=%s, answer=%s)",
            settings.llm_base_url,
            settings.fast_model or settings.model,
            settings.grade_model or settings.model,
            client.answer_model,
        )
        return client
    from orchestrator_service.models.local import LocalModel

    log.info("model tasks served by the built-in local model")
    return LocalModel()
