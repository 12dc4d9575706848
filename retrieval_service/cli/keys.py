"""`keys new`: a fresh API key and its AUTH_KEYS_FILE entry (docs/api.md#making-a-key). Local:
it calls no server and writes no file. The key is printed once and kept nowhere; the entry
holds its SHA-256 only, so the keys file never holds a key."""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import sys
from typing import Any

from pydantic import ValidationError

from retrieval_service.core.identity import KB_ID
from shared.access import ANY_KNOWLEDGE_BASE, Role
from shared.keys import KeyEntry

#: Random bytes in a key (printed URL-safe base64, 43 characters).
KEY_BYTES = 32
#: The environment variable both CLIs read the key from.
API_KEY_ENV = "SUPERMEW_API_KEY"
# A failed validation names the flag, not the entry's field.
_FLAG_OF = {
    "id": "--id",
    "role": "--role",
    "knowledge_bases": "--kb",
    "groups": "--group",
    "rate_per_second": "--rate-per-second",
    "burst": "--burst",
}


def kb_id(text: str) -> str:
    """A `--kb` value: `*` (every knowledge base) or an id; a full name is cut to its id."""
    value = text.removeprefix("knowledge_bases/")
    if value != ANY_KNOWLEDGE_BASE and not KB_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a knowledge base id ([a-z][a-z0-9-]{{0,62}}) or *"
        )
    return value


def add_keys_parser(sub: Any) -> None:
    """`keys new` under the CLI's subcommands."""
    keys = sub.add_parser("keys", help="make API keys for AUTH_KEYS_FILE")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    p = keys_sub.add_parser(
        "new",
        help="print a fresh random key once and the keys-file entry to paste",
        description="Prints a fresh random key (32 bytes, URL-safe) once, and the entry to "
        "paste under `keys:` in AUTH_KEYS_FILE, which holds the key's SHA-256, never the key.",
    )
    p.set_defaults(local=keys_new)
    p.add_argument("--id", required=True, help="the key's id, as logs and metrics name it")
    p.add_argument("--role", required=True, choices=[r.value for r in Role])
    p.add_argument(
        "--kb",
        required=True,
        nargs="+",
        action="extend",
        type=kb_id,
        metavar="ID",
        help="knowledge base ids the key may use (repeatable; * = every one)",
    )
    p.add_argument(
        "--group",
        nargs="+",
        action="extend",
        default=[],
        metavar="G",
        help="the caller's access groups: documents whose `acl` names one are visible",
    )
    p.add_argument(
        "--rate-per-second", type=float, metavar="R", help="quota: calls a second (token bucket)"
    )
    p.add_argument(
        "--burst", type=int, metavar="N", help="quota: calls at once (default: the rate)"
    )
    p.add_argument("--json", action="store_true", help="print {key, entry} as one JSON object")


def new_key() -> str:
    return secrets.token_urlsafe(KEY_BYTES)


def key_sha256(key: str) -> str:
    """The hex SHA-256 of the key's UTF-8 bytes: the entry's `sha256`."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_entry(args: argparse.Namespace, key: str) -> dict[str, Any]:
    """The entry, validated as the server validates the file; ValueError naming the flag."""
    entry: dict[str, Any] = {
        "id": args.id,
        "sha256": key_sha256(key),
        "role": args.role,
        "knowledge_bases": list(dict.fromkeys(args.kb)),
        "groups": list(dict.fromkeys(args.group)),
    }
    if args.rate_per_second is not None:
        entry["rate_per_second"] = args.rate_per_second
    if args.burst is not None:
        entry["burst"] = args.burst
    try:
        KeyEntry.model_validate(entry)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        raise ValueError(f"{_FLAG_OF.get(field, field)}: {first['msg']}") from None
    return entry


def entry_yaml(entry: dict[str, Any]) -> str:
    """The entry as one item of the file's `keys` list. Every value is written as JSON, which
    YAML reads as is: an id such as `yes` or `1e3`, `*` and any group stay strings."""
    lines = [f"{name}: {json.dumps(value, ensure_ascii=False)}" for name, value in entry.items()]
    return "- " + "\n  ".join(lines) + "\n"


def keys_new(args: argparse.Namespace) -> int:
    """Prints the key and the entry (stdout); a bad flag exits 2."""
    key = new_key()
    try:
        entry = key_entry(args, key)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"key": key, "entry": entry}, ensure_ascii=False))
        return 0
    print(f"# The key, shown once: send it as `authorization: Bearer <key>` ({API_KEY_ENV} for")
    print("# the CLIs). Keep no other copy; a lost key is replaced, not recovered.")
    print(key)
    print("# The entry to paste under `keys:` in AUTH_KEYS_FILE (it holds the key's SHA-256):")
    print(entry_yaml(entry), end="")
    return 0
