"""Shared by all commands: settings, deadlines, metadata, common flags, channel, errors."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from google.longrunning import operations_pb2_grpc
from google.longrunning import operations_proto_pb2 as operations_pb2
from google.protobuf import json_format
from pydantic_settings import BaseSettings, SettingsConfigDict
from supermew.v1 import retrieval_pb2_grpc
from tqdm import tqdm

from shared.errors import ConfigurationError
from shared.tls import add_tls_arguments, credentials_from_arguments, mismatch_hint

# A document's deadline: long, because the built-in CPU model embeds a few leaves a second
# and one large document holds thousands.
INGEST_TIMEOUT_SECONDS = 3600.0
CALL_TIMEOUT_SECONDS = 60.0
# The largest page ListDocuments and ListKnowledgeBases serve: the fewest round trips.
LIST_PAGE = 1000
KB_PREFIX = "knowledge_bases/"
SIDECAR_SUFFIX = ".meta.json"

Metadata = list[tuple[str, str]]
Json = dict[str, Any]


class CliSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    retrieval_addr: str | None = None
    retrieval_port: int = 50051
    supermew_api_key: str | None = None
    auth_token: str | None = None
    retrieval_tls_ca_file: str | None = None
    retrieval_tls_cert_file: str | None = None
    retrieval_tls_key_file: str | None = None

    @property
    def target(self) -> str:
        return self.retrieval_addr or f"localhost:{self.retrieval_port}"

    @property
    def metadata(self) -> Metadata:
        """The caller's key, SUPERMEW_API_KEY else AUTH_TOKEN, as a bearer header."""
        key = self.supermew_api_key or self.auth_token
        return [("authorization", f"Bearer {key}")] if key else []


def kb_name(value: str) -> str:
    """`knowledge_bases/{id}` from an id or a full name."""
    return value if value.startswith(KB_PREFIX) else KB_PREFIX + value


def deadline(args: argparse.Namespace) -> float:
    return float(args.timeout or CALL_TIMEOUT_SECONDS)


def message_dict(message: Any) -> Json:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def struct_dict(message: Any, name: str) -> Json:
    """A Struct field as a dict; {} when absent."""
    return message_dict(getattr(message, name)) if message.HasField(name) else {}


# ---- metadata ------------------------------------------------------------------------------


def metadata_value(text: str) -> Any:
    """A `--metadata` value: a JSON number, boolean, "string" or list of strings when the text
    is one, else the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return text


def parse_metadata_flags(pairs: list[str] | None) -> Json:
    """`--metadata key=value` flags as a dict; a later flag for the same key wins."""
    out: Json = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--metadata {pair!r}: expected key=value")
        out[key.strip()] = metadata_value(value)
    return out


def sidecar_of(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def document_metadata(path: Path, flags: Json) -> Json:
    """The file's sidecar `<file>.meta.json` (a JSON object), then the flags over it. Raises
    ValueError naming the sidecar when it is unreadable or not an object."""
    sidecar = sidecar_of(path)
    base: Json = {}
    if sidecar.is_file():
        try:
            loaded = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{sidecar.name}: not a readable JSON file ({exc})") from exc
        if not isinstance(loaded, dict):
            raise ValueError(f"{sidecar.name}: not a JSON object")
        base = loaded
    return {**base, **flags}


#: How often a followed operation is read again.
POLL_SECONDS = 0.5
#: Where an operation is: (documents in all, documents done, its state's name).
Position = Callable[[operations_pb2.Operation], tuple[int, int, str]]


def follow_operation(
    ops: Any,
    name: str,
    metadata: Metadata,
    args: argparse.Namespace,
    position: Position,
    timeout: float | None = None,
) -> operations_pb2.Operation:
    """Reads the operation `name` until it is done (or `timeout` seconds), a bar over its
    documents on stderr as `position` reads them (none with --json)."""
    end = None if timeout is None else time.monotonic() + timeout
    request = operations_pb2.GetOperationRequest(name=name)
    with tqdm(total=0, unit="doc", file=sys.stderr, disable=args.json, leave=False) as bar:
        while True:
            op = ops.GetOperation(request, timeout=deadline(args), metadata=metadata)
            bar.total, bar.n, state = position(op)
            bar.set_description(state.lower())
            bar.refresh()
            if op.done or (end is not None and time.monotonic() >= end):
                return op
            time.sleep(POLL_SECONDS)


def rpc_reason(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else ""
    return f"{code.name}: {details}"


Handler = Callable[[retrieval_pb2_grpc.RetrievalServiceStub, argparse.Namespace, Metadata], int]


def common_arguments(settings: CliSettings) -> argparse.ArgumentParser:
    """The flags every command takes: TLS, --json, --addr, --timeout."""
    common = argparse.ArgumentParser(add_help=False)
    add_tls_arguments(common)
    common.set_defaults(
        tls_ca=settings.retrieval_tls_ca_file,
        tls_cert=settings.retrieval_tls_cert_file,
        tls_key=settings.retrieval_tls_key_file,
    )
    common.add_argument("--json", action="store_true", help="print the outcome as JSON")
    common.add_argument(
        "--addr", help="retrieval address (default RETRIEVAL_ADDR, else localhost:RETRIEVAL_PORT)"
    )
    common.add_argument(
        "--timeout",
        type=float,
        help=f"deadline in seconds per call (default: {INGEST_TIMEOUT_SECONDS:g} per document "
        f"for ingest and sync, {CALL_TIMEOUT_SECONDS:g} otherwise)",
    )
    return common


def closed_pipe() -> int:
    """`… | head` closed the pipe: stop quietly (no traceback, and none at exit when Python
    flushes stdout again) with status 0, as the reader asked for no more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def call(settings: CliSettings, args: argparse.Namespace) -> int:
    """Runs the command's handler over a channel to the target; a failed call prints its
    status (with a TLS mismatch hint) and exits 1, a bad path or TLS setting exits 2."""
    label = " ".join(
        filter(
            None,
            [
                args.command,
                getattr(args, "kb_command", None),
                getattr(args, "index_command", None),
                getattr(args, "operations_command", None),
            ],
        )
    )
    target = args.addr or settings.target
    try:
        credentials = credentials_from_arguments(args)
    except (ValueError, ConfigurationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    try:
        with channel:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
            # The import and operations commands follow jobs on the same channel.
            args.operations = operations_pb2_grpc.OperationsStub(channel)
            handler: Handler = args.handler
            return handler(stub, args, settings.metadata)
    except grpc.RpcError as exc:
        reason = rpc_reason(exc)
        hint = mismatch_hint(
            reason,
            tls=credentials is not None,
            setting="--tls-ca <ca.pem> or RETRIEVAL_TLS_CA_FILE",
        )
        print(f"{label} failed: {reason}{hint}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # main's: not a path problem
    except (OSError, ValueError) as exc:  # a path that does not exist or is unsupported
        print(f"error: {exc}", file=sys.stderr)
        return 2
