"""Scoped API keys, pure parts (docs/api.md#api-keys): the roles table, what each RPC needs,
document visibility, the keys file, its reload, the quotas and the ACL expression."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest
from supermew.v1 import orchestrator_pb2, retrieval_pb2

from orchestrator_service.policy import ORCHESTRATOR_POLICIES
from retrieval_service.adapters.milvus.filters import acl_column, acl_expr
from retrieval_service.core.identity import check_metadata
from retrieval_service.policy import RETRIEVAL_POLICIES
from shared.access import (
    UNRESTRICTED,
    Permission,
    Principal,
    Role,
    document_visible,
    kb_id_named,
)
from shared.auth import Quotas, bearer_key
from shared.errors import ConfigurationError, InvalidArgument, PermissionDenied
from shared.keys import AUTH_TOKEN_KEY_ID, KeyRing, parse_keys
from shared.policy import knowledge_bases_named, require_rpc


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def principal(role: Role, *kbs: str, groups: tuple[str, ...] = ()) -> Principal:
    return Principal("k", role, frozenset(kbs), frozenset(groups))


# ---- roles and RPCs ----------------------------------------------------------------------

ROLE_TABLE = [
    # role, permission, allowed
    (Role.READER, Permission.READ, True),
    (Role.READER, Permission.WRITE, False),
    (Role.READER, Permission.MANAGE, False),
    (Role.WRITER, Permission.READ, True),
    (Role.WRITER, Permission.WRITE, True),
    (Role.WRITER, Permission.MANAGE, False),
    (Role.ADMIN, Permission.READ, True),
    (Role.ADMIN, Permission.WRITE, True),
    (Role.ADMIN, Permission.MANAGE, True),
]


@pytest.mark.parametrize(("role", "permission", "allowed"), ROLE_TABLE)
def test_roles_table(role: Role, permission: Permission, allowed: bool) -> None:
    assert principal(role, "*").has(permission) is allowed


# Every RPC of each service has a row, with its permission: tests/unit/test_rpc_policies.py.


def test_a_method_without_a_row_is_refused_to_every_role() -> None:
    future = "/supermew.v1.RetrievalService/Future"
    with pytest.raises(PermissionDenied):
        require_rpc(
            principal(Role.ADMIN, "*"), RETRIEVAL_POLICIES, future, retrieval_pb2.RetrieveRequest()
        )


def test_permission_denied_names_the_permission_and_knowledge_base_not_the_key() -> None:
    key = Principal("secret-id", Role.READER, frozenset({"team-a"}))
    with pytest.raises(PermissionDenied) as denied:
        key.require(Permission.WRITE, "team-a")
    assert '"write"' in denied.value.message and '"team-a"' in denied.value.message
    assert "secret-id" not in denied.value.message
    with pytest.raises(PermissionDenied, match='"read" on knowledge base "team-b"'):
        key.require(Permission.READ, "team-b")
    key.require(Permission.READ, "team-a")


def test_a_role_without_the_rpcs_permission_is_told_which_and_where() -> None:
    reader = principal(Role.READER, "*")
    delete_kb = "/supermew.v1.RetrievalService/DeleteKnowledgeBase"
    with pytest.raises(PermissionDenied) as denied:
        require_rpc(
            reader,
            RETRIEVAL_POLICIES,
            delete_kb,
            retrieval_pb2.DeleteKnowledgeBaseRequest(name="knowledge_bases/team-a"),
        )
    assert denied.value.message == (
        'permission "manage" on knowledge base "team-a" is not granted to this key'
    )
    run = orchestrator_pb2.RunRequest(question="q", knowledge_bases=["team-a"])
    require_rpc(reader, ORCHESTRATOR_POLICIES, "/supermew.v1.OrchestratorService/Run", run)


@pytest.mark.parametrize(
    ("method", "request_", "named"),
    [
        ("Retrieve", retrieval_pb2.RetrieveRequest(), ["default"]),
        (
            "Retrieve",
            retrieval_pb2.RetrieveRequest(knowledge_bases=["a", "knowledge_bases/b"]),
            ["a", "b"],
        ),
        (
            "DeleteKnowledgeBase",
            retrieval_pb2.DeleteKnowledgeBaseRequest(name="knowledge_bases/x"),
            ["x"],
        ),
        (
            "UpdateKnowledgeBase",
            retrieval_pb2.UpdateKnowledgeBaseRequest(
                knowledge_base=retrieval_pb2.KnowledgeBase(name="knowledge_bases/y")
            ),
            ["y"],
        ),
        (
            "CreateKnowledgeBase",
            retrieval_pb2.CreateKnowledgeBaseRequest(knowledge_base_id="z"),
            ["z"],
        ),
        ("ListKnowledgeBases", retrieval_pb2.ListKnowledgeBasesRequest(), []),
    ],
)
def test_knowledge_bases_named(method: str, request_: object, named: list[str]) -> None:
    policy = RETRIEVAL_POLICIES[f"/supermew.v1.RetrievalService/{method}"]
    assert knowledge_bases_named(policy, request_) == named


def test_star_means_every_knowledge_base() -> None:
    assert principal(Role.READER, "*").may_use("anything")
    assert not principal(Role.READER, "team-a").may_use("team-b")


@pytest.mark.parametrize(
    ("text", "kb_id"),
    [("", "default"), ("team-a", "team-a"), ("knowledge_bases/team-a", "team-a")],
)
def test_kb_id_named(text: str, kb_id: str) -> None:
    assert kb_id_named(text) == kb_id


# ---- document visibility -----------------------------------------------------------------

VISIBILITY = [
    # metadata, groups, visible
    (None, frozenset({"a"}), True),
    ({}, frozenset({"a"}), True),
    ({"team": "x"}, frozenset(), True),
    ({"acl": ["a"]}, frozenset({"a"}), True),
    ({"acl": ["b", "c"]}, frozenset({"a", "c"}), True),
    ({"acl": ["b"]}, frozenset({"a"}), False),
    ({"acl": ["b"]}, frozenset(), False),
    ({"acl": []}, frozenset({"a"}), False),
    ({"acl": ["b"]}, None, True),  # unrestricted (AUTH_TOKEN, no auth)
]


@pytest.mark.parametrize(("metadata", "groups", "visible"), VISIBILITY)
def test_document_visibility(
    metadata: dict | None, groups: frozenset | None, visible: bool
) -> None:
    assert document_visible(metadata, groups) is visible


def test_unrestricted_sees_everything() -> None:
    assert document_visible({"acl": ["nobody"]}, UNRESTRICTED.groups)
    assert UNRESTRICTED.may_use("any") and UNRESTRICTED.has(Permission.MANAGE)


def test_acl_column_and_expression() -> None:
    assert acl_column(None) == acl_column({"team": "x"}) == ""
    assert acl_column({"acl": ["b", "a", "b"]}) == "|61|62|"
    assert acl_column({"acl": []}) == "||"  # nobody's groups match
    assert acl_expr(None) is None
    assert acl_expr(frozenset()) == 'acl == ""'
    assert acl_expr(frozenset({"b", "a"})) == (
        'acl == "" or acl like "%|61|%" or acl like "%|62|%"'
    )
    # A group is hex in the column and the expression: no character of a group name (a LIKE
    # wildcard, a quote) reaches Milvus as written.
    hostile = 'x_%" or 1==1'
    token = hostile.encode().hex()
    assert acl_expr(frozenset({hostile})) == f'acl == "" or acl like "%|{token}|%"'
    assert set(token) <= set("0123456789abcdef")


def test_acl_metadata_must_be_a_list_of_group_names() -> None:
    assert check_metadata({"acl": ["a", "b"]}, "documents[0].metadata") == {"acl": ["a", "b"]}
    with pytest.raises(InvalidArgument, match=r"^documents\[0\]\.metadata\.acl: must be a list"):
        check_metadata({"acl": "a"}, "documents[0].metadata")


# ---- the keys file -----------------------------------------------------------------------


def entry(key_id: str, key: str, role: str = "reader", **more: object) -> dict[str, object]:
    return {"id": key_id, "sha256": sha(key), "role": role, "knowledge_bases": ["team-a"], **more}


def test_parse_yaml_and_json() -> None:
    yaml_text = f"""
keys:
  - id: svc-a
    sha256: {sha("k1")}
    role: writer
    knowledge_bases: [team-a, team-b]
    groups: [a]
    rate_per_second: 5
    burst: 10
"""
    (parsed,) = parse_keys(yaml_text)
    p = parsed.principal()
    assert (p.key_id, p.role, p.knowledge_bases, p.groups) == (
        "svc-a",
        Role.WRITER,
        frozenset({"team-a", "team-b"}),
        frozenset({"a"}),
    )
    assert (p.rate_per_second, p.burst) == (5.0, 10)
    (from_json,) = parse_keys(json.dumps({"keys": [entry("svc-b", "k2")]}))
    assert from_json.principal().groups == frozenset()


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ("keys: [", "not YAML or JSON"),
        ("- a", "top level must be a mapping"),
        ({"keys": [entry("a", "k", role="owner")]}, "keys.0.role"),
        ({"keys": [{**entry("a", "k"), "sha256": "nothex"}]}, "keys.0.sha256"),
        ({"keys": [{**entry("a", "k"), "knowledge_bases": []}]}, "keys.0.knowledge_bases"),
        (
            {"keys": [{**entry("a", "k"), "knowledge_bases": ["Team A"]}]},
            "keys.0.knowledge_bases.0",
        ),
        ({"keys": [{**entry("a", "k"), "key": "plain"}]}, "keys.0.key"),
        ({"keys": [entry("a", "k"), entry("a", "k2")]}, "two keys share id a"),
        ({"keys": [entry("a", "k"), entry("b", "k")]}, "two keys share sha256 a hash"),
        ({"keys": [{**entry("a", "k"), "rate_per_second": 0}]}, "keys.0.rate_per_second"),
    ],
)
def test_a_broken_file_says_what_is_wrong(document: object, says: str) -> None:
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(ValueError, match=says) as error:
        parse_keys(text)
    assert sha("k") not in str(error.value)


def write(path: Path, keys: list[dict[str, object]]) -> None:
    path.write_text(json.dumps({"keys": keys}))
    # A fresh modification time even within the file system's clock granularity.
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_key_ring_reloads_a_changed_file_and_keeps_the_last_good_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys.json"
    write(path, [entry("a", "key-a")])
    ring = KeyRing(str(path), auth_token="legacy")
    assert ring.authenticate("key-a") is not None
    assert ring.authenticate("key-b") is None
    legacy = ring.authenticate("legacy")
    assert legacy is not None and legacy.key_id == AUTH_TOKEN_KEY_ID
    assert legacy.role is Role.ADMIN and legacy.groups is None and legacy.may_use("x")

    write(path, [entry("b", "key-b")])
    ring.refresh(now=1e9)
    assert ring.authenticate("key-b") is not None
    assert ring.authenticate("key-a") is None  # removed: refused from now on

    path.write_text("keys: [")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    with caplog.at_level(logging.ERROR, logger="shared.keys"):
        ring.refresh(now=2e9)
        ring.refresh(now=3e9)  # the same broken file: not reported again
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "AUTH_KEYS_FILE not reloaded, the last good keys stay: not YAML or JSON at line 1"
    ]
    assert ring.authenticate("key-b") is not None


def test_a_broken_or_missing_file_at_start_up_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="AUTH_KEYS_FILE: no such file"):
        KeyRing(str(tmp_path / "absent.yaml"), None)
    (tmp_path / "bad.yaml").write_text("keys: 3")
    with pytest.raises(ConfigurationError, match=r"AUTH_KEYS_FILE: keys: Input should be"):
        KeyRing(str(tmp_path / "bad.yaml"), None)


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        ((("authorization", "Bearer abc"),), "abc"),
        ((("authorization", "bearer  abc "),), "abc"),
        ((("authorization", "Basic abc"),), None),
        ((("authorization", "Bearer "),), None),
        ((), None),
        (None, None),
    ],
)
def test_bearer_key(metadata: object, key: str | None) -> None:
    assert bearer_key(metadata) == key


# ---- quotas ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def limited(rate: float, burst: int | None) -> Principal:
    return Principal("q", Role.READER, frozenset({"*"}), rate_per_second=rate, burst=burst)


def test_burst_then_refusal_with_the_time_to_wait() -> None:
    clock = Clock()
    quotas = Quotas(clock)
    key = limited(rate=2.0, burst=3)
    assert [quotas.wait(key) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert quotas.wait(key) == pytest.approx(0.5)
    clock.now += 0.5
    assert quotas.wait(key) == 0.0
    clock.now += 100  # refills to burst, never beyond
    assert [quotas.wait(key) > 0 for _ in range(4)] == [False, False, False, True]


def test_no_rate_is_no_limit_and_burst_defaults_to_the_rate() -> None:
    quotas = Quotas(Clock())
    free = Principal("f", Role.READER, frozenset({"*"}))
    assert all(quotas.wait(free) == 0.0 for _ in range(1000))
    key = limited(rate=2.5, burst=None)
    assert [quotas.wait(key) == 0.0 for _ in range(4)] == [True, True, True, False]


def test_a_changed_quota_starts_a_full_bucket() -> None:
    quotas = Quotas(Clock())
    assert quotas.wait(limited(1.0, 1)) == 0.0
    assert quotas.wait(limited(1.0, 1)) > 0
    assert quotas.wait(limited(1.0, 2)) == 0.0
