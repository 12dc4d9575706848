"""Logging configured once per process by the entry points: plain text for a terminal, JSON
lines (one object per record) for containers and log shippers."""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from typing import Any

_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {
    "message",
    "asctime",
}


class JsonLineFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, extras and any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


CHATTY_LOGGERS = ("faiss.loader", "milvus_lite.engine.collection")
# Loggers that log a failure with its traceback and then raise it to us, where it is reported
# once (e.g. a Milvus Lite data directory locked by another process): shown only at DEBUG.
RERAISING_LOGGERS = ("milvus_lite.server_manager",)


class MilvusLiteUnimplementedFilter(logging.Filter):
    """Drops the traceback Milvus Lite's in-process gRPC adapter logs each time pymilvus asks it
    for AllocTimestamp (while waiting for an index): the adapter does not implement the method,
    pymilvus ignores UNIMPLEMENTED by design and carries on, so the traceback reports nothing
    wrong. Any other NotImplementedError still gets through."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or not isinstance(record.exc_info[1], NotImplementedError):
            return True
        frames = traceback.extract_tb(record.exc_info[2])
        return not (frames and frames[-1].name == "AllocTimestamp")


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """Install one stderr handler on the root logger (replacing any earlier one)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonLineFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
        )
    handler.addFilter(MilvusLiteUnimplementedFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Dependency chatter shown only at DEBUG: faiss reports each AVX512/AVX2 build it fails to
    # load ("Could not load library …") before loading the generic one it ships, and Milvus
    # Lite logs every background segment-index build, i.e. after each flush of an ingest.
    quiet_level = logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(quiet_level)
    for name in RERAISING_LOGGERS:
        logging.getLogger(name).setLevel(
            logging.NOTSET if root.level <= logging.DEBUG else logging.CRITICAL + 1
        )
