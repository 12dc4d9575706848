"""The command line of the retrieval service, a client of its RPCs (the service owns the store;
Milvus Lite allows one process per data directory):

    python -m retrieval_service ingest PATH… [--kb ID] [--document-id ID] [--metadata K=V]…
    python -m retrieval_service list [--kb ID]
    python -m retrieval_service delete [NAME…] [--document-id ID]… [--kb ID]
    python -m retrieval_service search QUERY [--kb ID]… [--filter EXPR] [--top-k N]
        [--index NAME]
    python -m retrieval_service sync DIR --kb ID [--metadata K=V]… [--dry-run]
        [--max-deletion-percent N] [--allow-deletions]
    python -m retrieval_service import URI… [--kb ID] [--include G]… [--exclude G]…
        [--metadata K=V]… [--delete-missing [--max-deletion-percent N]] [--request-id ID] [--wait]
    python -m retrieval_service operations list [--filter F] [--kb ID] · get|wait|cancel NAME
    python -m retrieval_service kb create|get|update|delete ID … · kb list
    python -m retrieval_service index create KB ID [--embedder NAME] [--dimension N]
        [--chunk-size N] [--chunk-overlap N] [--leaf-context-header] [--analyzer NAME] [--wait]
    python -m retrieval_service index list KB · index get|activate|delete NAME
    python -m retrieval_service keys new --id ID --role ROLE --kb ID… [--group G…]

each with [--addr A] [--timeout S] [--json] but `keys new`, which calls no server: it prints a
fresh random key once and its AUTH_KEYS_FILE entry (docs/api.md#making-a-key).

`ingest` takes files or folders (recursively) and sends one document per
StreamIngestDocuments call, so a bad file fails alone and by name while the others land; a
bar per document counts its leaves as they embed (rate, ETA) under a bar over all the bytes,
and a summary of ingested, replaced, unchanged and failed files ends the run, which exits 1
when any failed. A document's metadata (docs/api.md#knowledge-bases) is its sidecar
`<file>.meta.json` (a JSON object), overridden key by key by `--metadata key=value`: a value
that reads as JSON — a number, `true`/`false`, a "quoted string" or a list `["a","b"]` — is
that value, anything else is the text as given (`year=2024` is a number, `year='"2024"'` a
string).

`sync DIR --kb ID` makes the knowledge base hold exactly DIR's supported files (hidden files
and folders skipped), each under its path relative to DIR (`/`-separated) as document_id: it
lists the knowledge base's documents, sends only the files whose SHA-256 or metadata differ
from the stored ones (an unchanged file is never sent, so never embedded; a file whose
metadata alone changed is sent, and the service keeps its chunks and vectors: `changed …:
metadata only`), deletes the documents whose files are gone, prints one line per file (added,
changed, unchanged, deleted, failed) and a summary, and with `--dry-run` only says what it
would do.

`import` starts an ImportDocuments job on the server (docs/api.md#imports) — a bare path is sent
as the `file://` uri of its absolute path, which the server must be allowed to read
(IMPORT_ROOTS) — and prints its operation's name; `--wait` follows it with a progress bar and
prints its counts and failures, exiting 0 when every document got in, 1 when the job failed, was
cancelled or some documents failed. `operations` lists, shows, follows (`wait`, exit code as
`import --wait`, 3 when `--for` ran out first) or cancels jobs.

`index` manages a knowledge base's indexes (docs/api.md#indexes): `index create` starts
building another index from the documents the knowledge base holds — each config flag not
given takes the service's setting — and prints its operation's name; `--wait` follows it with
a progress bar and prints the READY index (exit 1 when the build failed); `operations
get|wait|list` show a build the same way. `index list` marks the active index, `index activate
NAME` switches the knowledge base's reads to a READY index (UpdateKnowledgeBase, mask
`active_index`), `index delete` removes one that is not active. An
index is named `knowledge_bases/KB/indexes/ID` or `KB/ID`. `search --index NAME` reads that
READY index instead of the active one, e.g. to compare two before a switch; `kb get` and
`kb list` show each knowledge base's active index.

Target: `--addr`, else RETRIEVAL_ADDR, else localhost:RETRIEVAL_PORT; `--json` prints the
outcome as one JSON object (progress stays on stderr). TLS as the orchestrator reaches
retrieval (RETRIEVAL_TLS_CA_FILE, and RETRIEVAL_TLS_CERT_FILE / RETRIEVAL_TLS_KEY_FILE for
mTLS), or the flags `--tls-ca`, `--tls-cert`, `--tls-key` (`--tls`: the system's roots). The
API key is SUPERMEW_API_KEY, else AUTH_TOKEN, sent as `authorization: Bearer <key>`. An
error the service answers prints its status and message and exits 1."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from retrieval_service.cli.common import (
    CliSettings,
    Handler,
    call,
    closed_pipe,
    common_arguments,
)
from retrieval_service.cli.documents import delete, ingest, list_documents
from retrieval_service.cli.imports import add_import_parsers
from retrieval_service.cli.indexes import add_index_parsers
from retrieval_service.cli.kb import kb_create, kb_delete, kb_get, kb_list, kb_update
from retrieval_service.cli.keys import add_keys_parser
from retrieval_service.cli.search import search
from retrieval_service.cli.sync import sync

__all__ = ["main"]


def build_parser(settings: CliSettings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m retrieval_service")
    sub = parser.add_subparsers(dest="command", required=True)
    common = common_arguments(settings)
    kb_flag = "knowledge base id or name (default: knowledge_bases/default)"
    meta_help = (
        "document metadata, repeatable; over the file's sidecar <file>.meta.json; a JSON "
        'number, true/false, "string" or ["list"] is that value, anything else text'
    )

    def command(name: str, handler: Handler, helptext: str, into: Any = sub) -> Any:
        p = into.add_parser(name, parents=[common], help=helptext)
        p.set_defaults(handler=handler)
        return p

    p = command("ingest", ingest, "ingest files or folders (recursively)")
    p.add_argument("paths", nargs="+")
    p.add_argument("--kb", help=kb_flag)
    p.add_argument("--document-id", help="the document_id of the one file given")
    p.add_argument("--metadata", action="append", metavar="KEY=VALUE", help=meta_help)
    p = command("list", list_documents, "list a knowledge base's documents")
    p.add_argument("--kb", help=kb_flag)
    p = command("delete", delete, "delete documents by file name or document_id")
    p.add_argument("filenames", nargs="*")
    p.add_argument("--document-id", action="append", help="a document_id (repeatable)")
    p.add_argument("--kb", help=kb_flag)
    p = command("search", search, "retrieve the chunks that answer a query")
    p.add_argument("query")
    p.add_argument("--kb", action="append", help="a knowledge base to search (repeatable)")
    p.add_argument("--filter", help="AIP-160 filter, e.g. metadata.year >= 2023 (docs/api.md)")
    p.add_argument("--top-k", type=int)
    p.add_argument(
        "--index",
        metavar="NAME",
        help="read this READY index (knowledge_bases/KB/indexes/ID) instead of the active one",
    )
    p = command("sync", sync, "make a knowledge base hold exactly a folder's files")
    p.add_argument("dir")
    p.add_argument("--kb", required=True, help="the knowledge base id or name")
    p.add_argument("--metadata", action="append", metavar="KEY=VALUE", help=meta_help)
    p.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    p.add_argument(
        "--max-deletion-percent",
        type=int,
        default=50,
        metavar="N",
        help="refuse (before changing anything) to delete more than N%% of the knowledge "
        "base's documents (default 50)",
    )
    p.add_argument(
        "--allow-deletions", action="store_true", help="delete whatever share the folder lacks"
    )

    add_import_parsers(sub, command, kb_flag, meta_help)

    kb = sub.add_parser("kb", help="create, get, list, update or delete knowledge bases")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True)
    p = command("create", kb_create, "create a knowledge base", kb_sub)
    p.add_argument("id", help="[a-z][a-z0-9-]{0,62}")
    p.add_argument("--display-name")
    p.add_argument("--description")
    p = command("get", kb_get, "one knowledge base with its counts", kb_sub)
    p.add_argument("id")
    command("list", kb_list, "every knowledge base", kb_sub)
    p = command("update", kb_update, "change the display name and/or description", kb_sub)
    p.add_argument("id")
    p.add_argument("--display-name")
    p.add_argument("--description")
    p = command("delete", kb_delete, "delete a knowledge base", kb_sub)
    p.add_argument("id")
    p.add_argument("--force", action="store_true", help="also delete every document it holds")
    add_index_parsers(sub, command)
    add_keys_parser(sub)
    return parser


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        return closed_pipe()
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's code for SIGINT, no traceback
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    settings = CliSettings()
    args = build_parser(settings).parse_args(argv)
    if local := getattr(args, "local", None):  # a command that calls no server
        return int(local(args))
    return call(settings, args)
