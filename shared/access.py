"""Who a call comes from and what it may do (docs/api.md#api-keys): roles and their permissions,
the knowledge bases a key may use and the documents it may see (the permission each RPC needs is
its service's policy table, shared.policy). Pure: the keys file (shared.keys) makes principals,
the auth interceptor (shared.auth) sets the one of the call being served, and servicers ask it
before they touch a knowledge base.

A document is visible to a principal when its metadata has no `acl` (ACL_KEY) or the `acl`
shares a group with the principal's groups. The principal of AUTH_TOKEN, and of a server with
no auth at all, is UNRESTRICTED: every permission, every knowledge base, every document."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from shared.errors import PermissionDenied

#: The reserved metadata key holding a document's access groups (a list of group names).
ACL_KEY: Final = "acl"
#: In a key's `knowledge_bases`: every knowledge base.
ANY_KNOWLEDGE_BASE: Final = "*"
#: A knowledge base's full name is KB_PREFIX + its id; a request naming none means the default.
KB_PREFIX: Final = "knowledge_bases/"
DEFAULT_KB_ID: Final = "default"


def kb_id_named(text: str) -> str:
    """The id of the knowledge base a request names by full name, by id, by the name of
    something inside it (`knowledge_bases/{kb}/indexes/{id}`), or by "" (the default). The
    form is not checked here (retrieval refuses a malformed name)."""
    return text.removeprefix(KB_PREFIX).split("/", 1)[0] or DEFAULT_KB_ID


class Permission(StrEnum):
    """What an RPC does to a knowledge base."""

    READ = "read"  # retrieve, run, list documents, see knowledge bases
    WRITE = "write"  # ingest, replace and delete documents
    MANAGE = "manage"  # create, update and delete knowledge bases


class Role(StrEnum):
    READER = "reader"
    WRITER = "writer"
    ADMIN = "admin"


ROLE_PERMISSIONS: Final[Mapping[Role, frozenset[Permission]]] = {
    Role.READER: frozenset({Permission.READ}),
    Role.WRITER: frozenset({Permission.READ, Permission.WRITE}),
    Role.ADMIN: frozenset({Permission.READ, Permission.WRITE, Permission.MANAGE}),
}


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one RPC, as its key says. `groups` None: sees every document."""

    key_id: str
    role: Role
    knowledge_bases: frozenset[str]
    groups: frozenset[str] | None = frozenset()
    rate_per_second: float | None = None
    burst: int | None = None

    def has(self, permission: Permission) -> bool:
        return permission in ROLE_PERMISSIONS[self.role]

    def may_use(self, kb_id: str) -> bool:
        return ANY_KNOWLEDGE_BASE in self.knowledge_bases or kb_id in self.knowledge_bases

    def require(self, permission: Permission, kb_id: str) -> None:
        """PERMISSION_DENIED naming the permission and the knowledge base (never the key)
        unless this principal holds `permission` on knowledge base `kb_id`."""
        if not (self.has(permission) and self.may_use(kb_id)):
            raise PermissionDenied(
                f'permission "{permission}" on knowledge base "{kb_id}" is not granted to this key'
            )

    def require_method(
        self, method: str, permission: Permission | None, kb_ids: Sequence[str] = ()
    ) -> None:
        """PERMISSION_DENIED unless the role holds `permission`, the one the RPC `method`
        (`/pkg.Service/Name`) needs (None: the RPC has no policy row, refused to every role),
        naming the permission and the knowledge bases the request names (`kb_ids`)."""
        if permission is not None and self.has(permission):
            return
        needed = f'permission "{permission}"' if permission else f"a permission for {method}"
        quoted = ", ".join(f'"{kb_id}"' for kb_id in kb_ids)
        where = f" on knowledge base{'s' if len(kb_ids) > 1 else ''} {quoted}" if kb_ids else ""
        raise PermissionDenied(f"{needed}{where} is not granted to this key")


def document_visible(metadata: Mapping[str, Any] | None, groups: frozenset[str] | None) -> bool:
    """A document is visible when `groups` is None (unrestricted), it has no `acl`, or its
    `acl` names one of `groups`."""
    if groups is None or not metadata:
        return True
    acl = metadata.get(ACL_KEY)
    if acl is None:
        return True
    return not groups.isdisjoint(acl if isinstance(acl, list) else (acl,))


UNRESTRICTED: Final = Principal(
    key_id="", role=Role.ADMIN, knowledge_bases=frozenset({ANY_KNOWLEDGE_BASE}), groups=None
)

_CURRENT: ContextVar[Principal] = ContextVar("supermew_principal", default=UNRESTRICTED)


def current_principal() -> Principal:
    """The principal of the RPC being served: UNRESTRICTED when the server has no auth."""
    return _CURRENT.get()


def set_current_principal(principal: Principal) -> None:
    """Called by the auth interceptor inside the call's own task, before the servicer runs."""
    _CURRENT.set(principal)
