"""API keys (docs/api.md#api-keys): the keys file AUTH_KEYS_FILE, read again when it changes,
and the lookup of a presented key.

The file (YAML or JSON; JSON is YAML) holds a top-level `keys` list of
`{id, sha256, role, knowledge_bases, groups, rate_per_second, burst}`. It never holds a key:
`sha256` is the hex SHA-256 of the key's UTF-8 bytes. A presented key is hashed and compared
with every entry in constant time (`hmac.compare_digest`, no early exit), so the time a lookup
takes says nothing about which entry, or how much of one, matched.

A file that is broken when it changes (unreadable, not YAML, an entry that does not validate)
keeps the last good keys in use and logs one line saying why; at start-up it is a
configuration error."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shared.access import ANY_KNOWLEDGE_BASE, UNRESTRICTED, Principal, Role
from shared.errors import ConfigurationError

log = logging.getLogger(__name__)

#: The `key_id` of the principal AUTH_TOKEN authenticates (an admin on every knowledge base).
AUTH_TOKEN_KEY_ID: Final = "auth-token"
#: How often, at most, the file's modification time is looked at.
RECHECK_SECONDS: Final = 1.0

_KB_ID_PATTERN = r"^(\*|[a-z][a-z0-9-]{0,62})$"
_SHA256_PATTERN = r"^[0-9a-f]{64}$"
#: A key's `id`: it names the key in logs, the audit log and metric labels.
KEY_ID_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"


class KeyEntry(BaseModel):
    """One entry of the keys file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(pattern=KEY_ID_PATTERN)]
    sha256: Annotated[str, Field(pattern=_SHA256_PATTERN)]
    role: Role
    knowledge_bases: Annotated[
        list[Annotated[str, Field(pattern=_KB_ID_PATTERN)]], Field(min_length=1)
    ]
    groups: list[Annotated[str, Field(min_length=1, max_length=128)]] = []
    rate_per_second: Annotated[float, Field(gt=0)] | None = None
    burst: Annotated[int, Field(ge=1)] | None = None

    @field_validator("sha256", mode="before")
    @classmethod
    def _lower_hex(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    def principal(self) -> Principal:
        return Principal(
            key_id=self.id,
            role=self.role,
            knowledge_bases=frozenset(self.knowledge_bases),
            groups=frozenset(self.groups),
            rate_per_second=self.rate_per_second,
            burst=self.burst,
        )


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[KeyEntry]

    @field_validator("keys")
    @classmethod
    def _unique(cls, keys: list[KeyEntry]) -> list[KeyEntry]:
        for attribute in ("id", "sha256"):
            seen: set[str] = set()
            for entry in keys:
                value = getattr(entry, attribute)
                if value in seen:
                    shown = value if attribute == "id" else "a hash"
                    raise ValueError(f"two keys share {attribute} {shown}")
                seen.add(value)
        return keys


def parse_keys(text: str) -> list[KeyEntry]:
    """The entries of a keys file's text; ValueError saying what is wrong (never a hash)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"not YAML or JSON{where}") from None
    if not isinstance(document, dict):
        raise ValueError("the top level must be a mapping with a `keys` list")
    try:
        return KeysFile.model_validate(document).keys
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{where}: {first['msg']}") from None


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True, slots=True)
class _Known:
    digest: bytes
    principal: Principal


def _table(entries: Sequence[KeyEntry], auth_token: str | None) -> tuple[_Known, ...]:
    known = [_Known(bytes.fromhex(e.sha256), e.principal()) for e in entries]
    if auth_token:
        admin = Principal(
            key_id=AUTH_TOKEN_KEY_ID,
            role=Role.ADMIN,
            knowledge_bases=frozenset({ANY_KNOWLEDGE_BASE}),
            groups=UNRESTRICTED.groups,
        )
        known.append(_Known(key_digest(auth_token), admin))
    return tuple(known)


class KeyRing:
    """The keys a server accepts: AUTH_KEYS_FILE's entries and AUTH_TOKEN (one admin key on
    every knowledge base, seeing every document). `authenticate` looks at the file's
    modification time at most once a second and reloads it when it changed."""

    def __init__(self, keys_file: str | None, auth_token: str | None) -> None:
        self._path = keys_file
        self._auth_token = auth_token
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        entries: list[KeyEntry] = []
        if keys_file:
            try:
                entries, self._stamp = self._read()
            except (OSError, ValueError) as exc:
                raise ConfigurationError(f"AUTH_KEYS_FILE: {_reason(exc)}") from None
        self._known = _table(entries, auth_token)
        self.key_count = len(entries)

    def _read(self) -> tuple[list[KeyEntry], tuple[int, int]]:
        assert self._path is not None
        with open(self._path, encoding="utf-8") as handle:
            stat = os.fstat(handle.fileno())
            text = handle.read()
        return parse_keys(text), (stat.st_mtime_ns, stat.st_size)

    def _stat(self) -> tuple[int, int] | None:
        assert self._path is not None
        try:
            stat = os.stat(self._path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def refresh(self, now: float | None = None) -> None:
        """Reload the file if it changed since it was last read (checked at most once per
        RECHECK_SECONDS). A broken file keeps the last good keys and logs why, once."""
        if not self._path:
            return
        now = time.monotonic() if now is None else now
        if now - self._checked < RECHECK_SECONDS:
            return
        self._checked = now
        stamp = self._stat()
        if stamp == self._stamp:
            return
        self._stamp = stamp  # a broken version is reported once, not on every check
        try:
            entries, self._stamp = self._read()
        except (OSError, ValueError) as exc:
            log.error("AUTH_KEYS_FILE not reloaded, the last good keys stay: %s", _reason(exc))
            return
        self._known = _table(entries, self._auth_token)
        self.key_count = len(entries)
        log.info("AUTH_KEYS_FILE reloaded: %d keys", len(entries))

    def authenticate(self, key: str) -> Principal | None:
        """The principal of `key`, or None when no entry's hash matches."""
        self.refresh()
        digest = key_digest(key)
        found: Principal | None = None
        for known in self._known:  # every entry, matched or not: no early exit
            if hmac.compare_digest(digest, known.digest):
                found = known.principal
        return found


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, PermissionError):
        return "permission denied reading the file"
    if isinstance(exc, OSError):
        return f"cannot read the file ({exc.strerror or type(exc).__name__})"
    return str(exc)
