"""A document's extracted pages as the registry keeps them (`document_texts`): JSON, zlib
compressed — what an index build re-chunks, so nobody sends the documents again."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence

from retrieval_service.core.chunking import Page

#: zlib's level 6: a third of plain text's size at a few ms per MB.
_LEVEL = 6


def pack_pages(pages: Sequence[Page]) -> bytes:
    data = json.dumps([[p.number, p.text] for p in pages], ensure_ascii=False)
    return zlib.compress(data.encode(), _LEVEL)


def unpack_pages(blob: bytes) -> list[Page]:
    return [Page(int(number), str(text)) for number, text in json.loads(zlib.decompress(blob))]
