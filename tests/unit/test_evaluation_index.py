"""RunConfig.index (docs/api.md#evaluation): checked when a run starts (INVALID_ARGUMENT naming
`config.index`), stored with the run's config and read back — a run stored before indexes
existed reads as one on the active indexes — and carried by the config's proto both ways."""

from __future__ import annotations

import pytest
from supermew.v1 import evaluation_pb2 as E

from orchestrator_service.evaluation.messages import config_from_proto, config_to_proto
from orchestrator_service.evaluation.model import RunConfig
from orchestrator_service.evaluation.service import check_config, check_index_of_set
from shared.errors import InvalidArgument

INDEX = "knowledge_bases/hr/indexes/v2"


def test_the_index_is_stored_with_the_config_and_read_back() -> None:
    config = RunConfig(mode="RUN", top_k=5, index=INDEX)
    stored = config.as_dict()
    assert stored == {
        "mode": "RUN",
        "top_k": 5,
        "generate_answer": False,
        "concurrency": None,
        "index": INDEX,
    }
    assert RunConfig.of(stored) == config
    before = {"mode": "RETRIEVAL", "top_k": 10, "generate_answer": False, "concurrency": 2}
    assert RunConfig.of(before).index == ""


def test_the_config_proto_carries_the_index_both_ways() -> None:
    pb = E.RunConfig(mode=E.RunConfig.RETRIEVAL, top_k=3, index=INDEX)
    config = config_from_proto(pb)
    assert config == RunConfig(mode="RETRIEVAL", top_k=3, index=INDEX)
    assert config_to_proto(config) == pb
    assert config_to_proto(RunConfig()).index == ""


@pytest.mark.parametrize("index", ["", INDEX, "knowledge_bases/default/indexes/initial"])
def test_a_well_formed_index_passes(index) -> None:
    assert check_config(RunConfig(index=index)).index == index


@pytest.mark.parametrize(
    "index", ["v2", "hr/indexes/v2", "knowledge_bases/hr", "knowledge_bases/hr/indexes/V2"]
)
def test_a_malformed_index_is_invalid_argument_naming_config_index(index) -> None:
    with pytest.raises(InvalidArgument, match=r"^config\.index: must be knowledge_bases/") as err:
        check_config(RunConfig(index=index))
    assert err.value.field == "config.index"


def test_the_index_must_be_of_a_knowledge_base_the_set_searches() -> None:
    check_index_of_set(RunConfig(index=INDEX), ("hr",))
    check_index_of_set(RunConfig(index=INDEX), ("sales", "hr"))
    check_index_of_set(RunConfig(), ("sales",))
    with pytest.raises(InvalidArgument) as err:
        check_index_of_set(RunConfig(index=INDEX), ("sales", "default"))
    assert str(err.value) == (
        "config.index: is an index of knowledge_bases/hr, which the set does not search"
    )
