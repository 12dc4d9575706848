"""The retrieval service as the nodes see it: a `grpc.aio` stub wrapper that propagates the
caller's deadline and turns transport failures into domain errors (API.md status codes)."""

from __future__ import annotations

import grpc
from supermew.v1 import retrieval_pb2, retrieval_pb2_grpc

from orchestrator_service.runtime import Retrieval
from shared.codec import chunk_from_proto, retrieval_meta_from_proto
from shared.errors import DeadlineExceeded, DependencyUnavailable


class RetrievalClient:
    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        default_timeout: float = 30.0,
        auth_token: str | None = None,
    ) -> None:
        self._channel = channel
        self._stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        self._default_timeout = default_timeout
        self._metadata = (("authorization", f"Bearer {auth_token}"),) if auth_token else None

    @classmethod
    def connect(
        cls, address: str, *, default_timeout: float = 30.0, auth_token: str | None = None
    ) -> RetrievalClient:
        """A channel to RETRIEVAL_ADDR. Calls are balanced round-robin over every address the
        target resolves to (`dns:///retrieval:50051` behind a headless Service,
        `ipv4:10.0.0.1:50051,10.0.0.2:50051`); gRPC's default, pick_first, would pin every
        call to one replica. A single address behaves as before."""
        options = [("grpc.lb_policy_name", "round_robin")]
        channel = grpc.aio.insecure_channel(address, options=options)
        return cls(channel, default_timeout=default_timeout, auth_token=auth_token)

    async def retrieve(
        self, query: str, *, top_k: int | None = None, timeout: float | None = None
    ) -> Retrieval:
        request = retrieval_pb2.RetrieveRequest(query=query)
        if top_k is not None:
            request.top_k = top_k
        try:
            response = await self._stub.Retrieve(
                request,
                timeout=self._default_timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise DependencyUnavailable("retrieval service", exc.details() or "") from exc
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise DeadlineExceeded("deadline exceeded while retrieving") from exc
            raise
        return Retrieval(
            docs=[chunk_from_proto(c) for c in response.docs],
            meta=retrieval_meta_from_proto(response.meta),
        )

    async def aclose(self) -> None:
        await self._channel.close()
