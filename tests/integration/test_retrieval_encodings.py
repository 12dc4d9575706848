"""Text in the encodings people have, through the real IngestDocuments RPC: GBK/GB18030,
UTF-16 with a byte-order mark and Latin-1 files keep their characters in the stored chunks and
in Retrieve's answers; a binary file is INVALID_ARGUMENT naming the file, and changes nothing."""

from __future__ import annotations

import grpc
import pytest

from tests.integration.retrieval_harness import copy_corpus, running_service

GBK_TEXT = "龙井茶产于杭州西湖一带，属于绿茶，冲泡时水温八十度左右为宜。碧螺春产于苏州太湖。"
GB18030_TEXT = "欧元符号€在GB18030里有编码。乌龙茶介于绿茶与红茶之间，铁观音是其代表。"
UTF16_TEXT = "Mixed text 混合文本: the café sells 抹茶 matcha lattes and Grüner Tee."
LATIN1_TEXT = (
    "La crème brûlée est un dessert français. Les élèves de l'école préfèrent le gâteau "
    "à la façon de grand-mère; ça coûte très cher à Zürich."
)

FILES = [
    ("longjing.txt", GBK_TEXT.encode("gbk"), "龙井茶产于哪里", "龙井茶产于杭州西湖"),
    ("euro.md", GB18030_TEXT.encode("gb18030"), "铁观音属于什么茶", "铁观音"),
    ("matcha.md", UTF16_TEXT.encode("utf-16"), "café matcha lattes", "the café sells 抹茶"),
    ("dessert.txt", LATIN1_TEXT.encode("latin-1"), "crème brûlée dessert", "crème brûlée"),
]


async def test_legacy_encodings_round_trip_their_text(tmp_path) -> None:
    async with running_service(copy_corpus(tmp_path), auto_merge_enabled=False) as svc:
        reply = await svc.ingest(*[(name, content) for name, content, _, _ in FILES])
        assert [d.filename for d in reply.documents] == [f[0] for f in FILES]
        for (name, _, query, expected), original in zip(
            FILES, (GBK_TEXT, GB18030_TEXT, UTF16_TEXT, LATIN1_TEXT), strict=True
        ):
            docs, _ = await svc.retrieve(query, top_k=5)
            hits = [d for d in docs if d["filename"] == name]
            assert hits, f"{name}: not retrieved by {query!r}"
            assert expected in hits[0]["text"], (name, hits[0]["text"])
            assert all(piece in original for piece in (d["text"] for d in hits)), name


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)) * 8,  # every byte value: binary
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(200)),
        b"\x01\x02\x03\x04" * 64,  # valid UTF-8, but control characters, not text
    ],
)
async def test_binary_content_is_invalid_argument_naming_the_file(tmp_path, content) -> None:
    async with running_service(copy_corpus(tmp_path)) as svc:
        before = (await svc.counts(), await svc.listing())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await svc.ingest(("fine.txt", "正常的文本".encode("gbk")), ("image.txt", content))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("documents[1].content")
        assert "image.txt" in err.value.details()
        assert (await svc.counts(), await svc.listing()) == before
