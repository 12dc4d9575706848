"""supermew.v1.EvaluationService as an adapter: proto in → `Evaluations` → proto out. The
caller's permissions come from its key (shared.access), checked by the core per knowledge base
of the set."""

from __future__ import annotations

import grpc
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2
from supermew.v1 import evaluation_pb2, evaluation_pb2_grpc

from orchestrator_service.evaluation.messages import (
    comparison_to_proto,
    config_from_proto,
    feedback_input,
    feedback_to_proto,
    history_to_proto,
    item_from_feedback,
    item_from_proto,
    item_to_proto,
    result_to_proto,
    run_metadata,
    run_to_proto,
    set_to_proto,
)
from orchestrator_service.evaluation.names import parse_run
from orchestrator_service.evaluation.service import Evaluations, ImportRequest
from orchestrator_service.history.service import RunHistory
from shared.access import current_principal
from shared.errors import InvalidArgument
from shared.operations import principal_access, principal_visible

_FORMATS = {
    evaluation_pb2.ImportEvaluationItemsRequest.BEIR: "BEIR",
    evaluation_pb2.ImportEvaluationItemsRequest.JSONL: "JSONL",
}
_SET_FIELDS = ("display_name", "knowledge_bases", "filter")

Context = grpc.aio.ServicerContext


class EvaluationServicer(evaluation_pb2_grpc.EvaluationServiceServicer):
    def __init__(self, evaluations: Evaluations, history: RunHistory) -> None:
        self._core = evaluations
        self._history = history

    async def CreateEvaluationSet(
        self, request: evaluation_pb2.CreateEvaluationSetRequest, context: Context
    ) -> evaluation_pb2.EvaluationSet:
        pb = request.evaluation_set
        record = await self._core.create_set(
            request.evaluation_set_id,
            pb.display_name,
            list(pb.knowledge_bases),
            pb.filter,
            principal_access,
        )
        return set_to_proto(record)

    async def GetEvaluationSet(
        self, request: evaluation_pb2.GetEvaluationSetRequest, context: Context
    ) -> evaluation_pb2.EvaluationSet:
        return set_to_proto(await self._core.get_set(request.name, principal_access))

    async def ListEvaluationSets(
        self, request: evaluation_pb2.ListEvaluationSetsRequest, context: Context
    ) -> evaluation_pb2.ListEvaluationSetsResponse:
        records, token = await self._core.list_sets(
            request.page_size, request.page_token, principal_visible()
        )
        return evaluation_pb2.ListEvaluationSetsResponse(
            evaluation_sets=[set_to_proto(r) for r in records], next_page_token=token
        )

    async def UpdateEvaluationSet(
        self, request: evaluation_pb2.UpdateEvaluationSetRequest, context: Context
    ) -> evaluation_pb2.EvaluationSet:
        paths = list(request.update_mask.paths) or list(_SET_FIELDS)
        for path in paths:
            if path not in _SET_FIELDS:
                raise InvalidArgument(
                    "update_mask", f"{path!r} cannot be updated ({', '.join(_SET_FIELDS)})"
                )
        pb = request.evaluation_set
        changes = {
            "display_name": pb.display_name,
            "knowledge_bases": list(pb.knowledge_bases),
            "filter": pb.filter,
        }
        record = await self._core.update_set(
            pb.name, {p: changes[p] for p in paths}, principal_access
        )
        return set_to_proto(record)

    async def DeleteEvaluationSet(
        self, request: evaluation_pb2.DeleteEvaluationSetRequest, context: Context
    ) -> empty_pb2.Empty:
        await self._core.delete_set(request.name, principal_access)
        return empty_pb2.Empty()

    async def CreateEvaluationItem(
        self, request: evaluation_pb2.CreateEvaluationItemRequest, context: Context
    ) -> evaluation_pb2.EvaluationItem:
        added = await self._core.add_items(
            request.parent,
            [(request.evaluation_item_id, item_from_proto(request.evaluation_item))],
            principal_access,
            field="",
        )
        return item_to_proto(added[0])

    async def BatchCreateEvaluationItems(
        self, request: evaluation_pb2.BatchCreateEvaluationItemsRequest, context: Context
    ) -> evaluation_pb2.BatchCreateEvaluationItemsResponse:
        if not request.requests:
            raise InvalidArgument("requests", "must hold 1..1000 items")
        if len(request.requests) > 1000:
            raise InvalidArgument("requests", "must hold 1..1000 items")
        for i, sub in enumerate(request.requests):
            if sub.parent and sub.parent != request.parent:
                raise InvalidArgument(f"requests[{i}].parent", "must be empty or the parent")
        added = await self._core.add_items(
            request.parent,
            [(r.evaluation_item_id, item_from_proto(r.evaluation_item)) for r in request.requests],
            principal_access,
        )
        return evaluation_pb2.BatchCreateEvaluationItemsResponse(
            evaluation_items=[item_to_proto(s) for s in added]
        )

    async def GetEvaluationItem(
        self, request: evaluation_pb2.GetEvaluationItemRequest, context: Context
    ) -> evaluation_pb2.EvaluationItem:
        return item_to_proto(await self._core.get_item(request.name, principal_access))

    async def ListEvaluationItems(
        self, request: evaluation_pb2.ListEvaluationItemsRequest, context: Context
    ) -> evaluation_pb2.ListEvaluationItemsResponse:
        items, token = await self._core.list_items(
            request.parent, request.page_size, request.page_token, principal_access
        )
        return evaluation_pb2.ListEvaluationItemsResponse(
            evaluation_items=[item_to_proto(s) for s in items], next_page_token=token
        )

    async def DeleteEvaluationItem(
        self, request: evaluation_pb2.DeleteEvaluationItemRequest, context: Context
    ) -> empty_pb2.Empty:
        await self._core.delete_item(request.name, principal_access)
        return empty_pb2.Empty()

    async def ImportEvaluationItems(
        self, request: evaluation_pb2.ImportEvaluationItemsRequest, context: Context
    ) -> evaluation_pb2.ImportEvaluationItemsResponse:
        added, skipped = await self._core.import_items(
            ImportRequest(
                set_name=request.evaluation_set,
                format=_FORMATS.get(request.format, ""),
                queries=request.queries,
                qrels=request.qrels,
                content=request.content,
                uri=request.uri,
                split=request.split,
            ),
            principal_access,
        )
        return evaluation_pb2.ImportEvaluationItemsResponse(
            items_imported=added, queries_skipped=skipped
        )

    async def RunEvaluation(
        self, request: evaluation_pb2.RunEvaluationRequest, context: Context
    ) -> operations_pb2.Operation:
        run_id, run = await self._core.start_run(
            request.evaluation_set,
            config_from_proto(request.config),
            request.SerializeToString(),
            principal_access,
        )
        operation = operations_pb2.Operation(name=f"operations/{run_id}", done=False)
        operation.metadata.Pack(run_metadata(run, run.create_time_ms))
        return operation

    async def GetEvaluationRun(
        self, request: evaluation_pb2.GetEvaluationRunRequest, context: Context
    ) -> evaluation_pb2.EvaluationRun:
        return run_to_proto(await self._core.get_run(request.name, principal_access))

    async def ListEvaluationRuns(
        self, request: evaluation_pb2.ListEvaluationRunsRequest, context: Context
    ) -> evaluation_pb2.ListEvaluationRunsResponse:
        runs, token = await self._core.list_runs(
            request.parent, request.page_size, request.page_token, principal_access
        )
        return evaluation_pb2.ListEvaluationRunsResponse(
            evaluation_runs=[run_to_proto(r) for r in runs], next_page_token=token
        )

    async def ListEvaluationResults(
        self, request: evaluation_pb2.ListEvaluationResultsRequest, context: Context
    ) -> evaluation_pb2.ListEvaluationResultsResponse:
        rows, token = await self._core.list_results(
            request.run, request.page_size, request.page_token, principal_access
        )
        set_id, _ = parse_run(request.run, "run")
        return evaluation_pb2.ListEvaluationResultsResponse(
            results=[result_to_proto(set_id, item_id, body) for item_id, body in rows],
            next_page_token=token,
        )

    async def CompareEvaluationRuns(
        self, request: evaluation_pb2.CompareEvaluationRunsRequest, context: Context
    ) -> evaluation_pb2.CompareEvaluationRunsResponse:
        comparison = await self._core.compare(request.a, request.b, principal_access)
        return evaluation_pb2.CompareEvaluationRunsResponse(
            metrics=[comparison_to_proto(row) for row in comparison.metrics],
            items_paired=comparison.items_paired,
        )

    async def GetRun(
        self, request: evaluation_pb2.GetRunRequest, context: Context
    ) -> evaluation_pb2.RunRecord:
        return history_to_proto(await self._history.get(request.name, principal_visible()))

    async def ListRuns(
        self, request: evaluation_pb2.ListRunsRequest, context: Context
    ) -> evaluation_pb2.ListRunsResponse:
        entries, token = await self._history.page(
            request.filter, request.page_size, request.page_token, principal_visible()
        )
        return evaluation_pb2.ListRunsResponse(
            runs=[history_to_proto(e) for e in entries], next_page_token=token
        )

    async def CreateFeedback(
        self, request: evaluation_pb2.CreateFeedbackRequest, context: Context
    ) -> evaluation_pb2.Feedback:
        record = await self._history.create_feedback(
            request.parent,
            feedback_input(request.feedback),
            current_principal().key_id,
            principal_visible(),
        )
        return feedback_to_proto(record)

    async def ListFeedback(
        self, request: evaluation_pb2.ListFeedbackRequest, context: Context
    ) -> evaluation_pb2.ListFeedbackResponse:
        records, token = await self._history.feedback_page(
            request.parent,
            request.filter,
            request.page_size,
            request.page_token,
            current_principal().key_id,
            principal_visible(),
        )
        return evaluation_pb2.ListFeedbackResponse(
            feedback=[feedback_to_proto(r) for r in records], next_page_token=token
        )

    async def AddFeedbackToEvaluationSet(
        self, request: evaluation_pb2.AddFeedbackToEvaluationSetRequest, context: Context
    ) -> evaluation_pb2.AddFeedbackToEvaluationSetResponse:
        if not 1 <= len(request.feedback) <= 1000:
            raise InvalidArgument("feedback", "must name 1..1000 feedback")
        found = await self._history.feedback_named(
            list(request.feedback), current_principal().key_id, principal_visible()
        )
        added = await self._core.add_items(
            request.evaluation_set,
            [("", item_from_feedback(record, entry)) for record, entry in found],
            principal_access,
            field="feedback",
        )
        return evaluation_pb2.AddFeedbackToEvaluationSetResponse(
            evaluation_items=[item_to_proto(s) for s in added]
        )
