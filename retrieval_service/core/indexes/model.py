"""What an index is (docs/api.md#indexes): its name, config, state and build counts, the checks
of what a request says of one, and the generation — the set of chunk collections — its config
puts it in. Pure: no I/O."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from retrieval_service.core.chunking import ChunkingConfig
from retrieval_service.core.identity import canonical_json, check_kb_id
from shared.access import KB_PREFIX
from shared.errors import InternalFailure, InvalidArgument
from shared.index_names import INDEX_NAME, INDEXES_SEGMENT, NAME_RULE

BUILDING, READY, FAILED, DELETING = 1, 2, 3, 4
STATE_NAMES = {BUILDING: "BUILDING", READY: "READY", FAILED: "FAILED", DELETING: "DELETING"}
#: The index every knowledge base starts on, made from the service's settings.
INITIAL = "initial"
#: The built-in embedder's name in EMBEDDERS and IndexConfig.embedder.
BUILTIN = "builtin"
#: The only BM25 analyzer this release builds (the chunk schema's).
ANALYZERS = ("standard",)
MIN_CHUNK_SIZE, MAX_CHUNK_SIZE = 64, 8192


@dataclass(frozen=True, slots=True)
class IndexConfig:
    """How an index makes its chunks: the embedder (a name EMBEDDERS declares) and its vector
    size, the leaf chunk size and overlap, the leaf context header and the BM25 analyzer."""

    embedder: str = BUILTIN
    dimension: int = 0
    chunk_size: int = 800
    chunk_overlap: int = 100
    leaf_context_header: bool = False
    analyzer: str = "standard"

    @property
    def key(self) -> str:
        """What makes two indexes share a generation: every field."""
        return canonical_json(
            [
                self.embedder,
                self.dimension,
                self.chunk_size,
                self.chunk_overlap,
                self.leaf_context_header,
                self.analyzer,
            ]
        )

    def chunking(self) -> ChunkingConfig:
        return ChunkingConfig.from_chunk_size(
            self.chunk_size, self.chunk_overlap, context_header=self.leaf_context_header
        )


@dataclass(frozen=True, slots=True)
class IndexRecord:
    """One index as stored: its knowledge base (full name), id, config, state, build counts,
    creation instant (epoch ms), the generation's collection base name, the operation that
    builds it ("" for `initial`) and, while it builds, the greatest document id its build
    has read (`build_read_to`: "" before its first page; None from its last on, and for every
    index not building — see `build_takes_writes`)."""

    knowledge_base: str
    index_id: str
    config: IndexConfig
    collection: str
    state: int = BUILDING
    documents_indexed: int = 0
    documents_total: int = 0
    create_time: int = 0
    operation: str = ""
    build_read_to: str | None = None

    @property
    def name(self) -> str:
        return index_name(self.knowledge_base, self.index_id)


#: `BuildProgress.after` once a build's pass has read every document id (each id is below
#: "~", `identity.DOCUMENT_ID`): what is left is its backlog.
READ_ALL = "~"


def build_takes_writes(state: int, build_read_to: str | None) -> bool:
    """Whether an index's build reads every version committed from now on itself, so a writer
    need not write it there: the index is BUILDING and its build has a read position. A
    document past the position is read in the build's pass (in id order); one behind it is
    put in the build's backlog by the commit (`index_build_backlog`), in the transaction
    that commits it, and read once the pass is done. The position moves, and the pass's last
    page sets it to None (every write reaches the index itself from then on, so the backlog
    only shrinks), in transactions that hold the knowledge base's row against every commit's
    check."""
    return state == BUILDING and build_read_to is not None


class IndexesBehind(InternalFailure):
    """A commit found indexes (by collection) that neither hold some of its versions nor take
    them in their build — an index appeared, turned READY, or its build finished reading —
    since its writer looked: nothing was committed; the writer writes them there, then
    commits again. Never leaves the process (were it to, INTERNAL)."""

    def __init__(self, collections: frozenset[str]) -> None:
        super().__init__("an index build moved past the documents being committed")
        self.collections = collections


def index_name(knowledge_base: str, index_id: str) -> str:
    return f"{knowledge_base}{INDEXES_SEGMENT}{index_id}"


def parse_index_name(text: str, field: str) -> tuple[str, str]:
    """(knowledge base full name, index id) of `knowledge_bases/{kb}/indexes/{id}`
    (`shared.index_names`, the form both services check); INVALID_ARGUMENT naming `field`
    otherwise."""
    match = INDEX_NAME.fullmatch(text)
    if match is None:
        raise InvalidArgument(field, NAME_RULE)
    return KB_PREFIX + match["kb"], match["index"]


def check_index_id(index_id: str, field: str) -> str:
    return check_kb_id(index_id, field)


def checked_config(
    config: IndexConfig,
    dimensions: dict[str, int],
    *,
    default_size: int,
    default_overlap: int,
    default_header: bool,
) -> IndexConfig:
    """The config a CreateIndex asks for with its defaults filled in (an empty embedder is
    `builtin`, a zero dimension the embedder's, a zero chunk size CHUNK_SIZE with its
    overlap, a false leaf header LEAF_CONTEXT_HEADER, an empty analyzer `standard`), so an
    index asked for with a chunk size alone differs from the service's in its chunk size
    alone; INVALID_ARGUMENT naming `index.config.<field>`
    for an embedder EMBEDDERS does not declare, a dimension that is not the embedder's, a
    chunk size out of range or an overlap not below it. `dimensions`: each embedder's."""
    prefix = "index.config."
    embedder = config.embedder or BUILTIN
    if embedder not in dimensions:
        declared = ", ".join(sorted(dimensions))
        raise InvalidArgument(
            prefix + "embedder", f"{embedder!r} is not one of {declared} (EMBEDDERS)"
        )
    dimension = config.dimension or dimensions[embedder]
    if dimension != dimensions[embedder]:
        raise InvalidArgument(
            prefix + "dimension",
            f"is {dimension}, but {embedder!r} makes {dimensions[embedder]}-d vectors",
        )
    size, overlap = config.chunk_size, config.chunk_overlap
    if size == 0:
        size, overlap = default_size, overlap or default_overlap
    if not MIN_CHUNK_SIZE <= size <= MAX_CHUNK_SIZE:
        raise InvalidArgument(
            prefix + "chunk_size", f"is {size}, must be {MIN_CHUNK_SIZE}..{MAX_CHUNK_SIZE}"
        )
    if not 0 <= overlap < size:
        raise InvalidArgument(
            prefix + "chunk_overlap", f"is {overlap}, must be 0 ≤ overlap < {size}"
        )
    analyzer = config.analyzer or ANALYZERS[0]
    if analyzer not in ANALYZERS:
        raise InvalidArgument(
            prefix + "analyzer", f"{analyzer!r} is not one of {', '.join(ANALYZERS)}"
        )
    header = config.leaf_context_header or default_header
    return IndexConfig(embedder, dimension, size, overlap, header, analyzer)


def generation_collection(base: str, config: IndexConfig) -> str:
    """The collection base name of the generation `config` puts an index in: one per distinct
    config, beside the service's own (MILVUS_COLLECTION)."""
    return f"{base}_g{hashlib.sha256(config.key.encode()).hexdigest()[:10]}"
