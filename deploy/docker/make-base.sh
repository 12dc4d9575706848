#!/usr/bin/env bash
# A local base image for deploy/docker/Dockerfile where no registry can be reached: a Debian
# minbase root filesystem from the package mirror (debootstrap) with a CPython the project
# supports copied under /usr/local, imported as an image. Prints the image's name on its last
# line; `make images` passes it as PYTHON_IMAGE.
#
#   deploy/docker/make-base.sh                 # localhost/supermew-base:py<X.Y.Z>-<suite>
#   PYTHON_PREFIX=/opt/python3.12 MIRROR=http://deb.debian.org/debian deploy/docker/make-base.sh
#
# Needs root, debootstrap, and podman (or docker). The CPython comes from PYTHON_PREFIX, else the
# newest pyenv 3.12.x / 3.11.x (>= 3.11.5, what the lock needs) under $PYENV_ROOT; it must be
# built for this machine's Debian release (its glibc), which is why the suite is this machine's.
# Debian's own python3 does not fit: bookworm's 3.11.2 is below the lock's floor, trixie's 3.13
# above requires-python.
set -euo pipefail

ENGINE="${ENGINE:-$(command -v podman || command -v docker || true)}"
[ -n "$ENGINE" ] || { echo "make-base.sh: neither podman nor docker found" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "make-base.sh: debootstrap not found" >&2; exit 1; }

. /etc/os-release
SUITE="${SUITE:-${VERSION_CODENAME:-bookworm}}"
if [ -z "${MIRROR:-}" ]; then
  MIRROR="$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null \
    | grep -v security | head -1 || true)"
  MIRROR="${MIRROR:-$(awk '$1 == "deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)}"
  MIRROR="${MIRROR:-http://deb.debian.org/debian}"
fi

supported() {  # a CPython X.Y.Z within requires-python and the lock's floor
  "$1/bin/python3" -c 'import sys; v = sys.version_info[:3]; sys.exit(not ((3, 11, 5) <= v < (3, 13)))' 2>/dev/null
}
if [ -z "${PYTHON_PREFIX:-}" ]; then
  for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[12].* 2>/dev/null | sort -V -r); do
    if supported "$candidate"; then PYTHON_PREFIX="$candidate"; break; fi
  done
fi
[ -n "${PYTHON_PREFIX:-}" ] && supported "$PYTHON_PREFIX" || {
  echo "make-base.sh: no CPython >=3.11.5,<3.13 found (set PYTHON_PREFIX)" >&2; exit 1; }
PYVER="$("$PYTHON_PREFIX/bin/python3" -c 'import platform; print(platform.python_version())')"
PYXY="${PYVER%.*}"
TAG="${1:-localhost/supermew-base:py${PYVER}-${SUITE}}"

if "$ENGINE" image exists "$TAG" 2>/dev/null || "$ENGINE" image inspect "$TAG" >/dev/null 2>&1; then
  echo "make-base.sh: $TAG exists (CPython $PYVER from $PYTHON_PREFIX, Debian $SUITE)" >&2
  echo "$TAG"
  exit 0
fi

ROOTFS="$(mktemp -d /var/tmp/supermew-base.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
echo "make-base.sh: debootstrap $SUITE from $MIRROR, CPython $PYVER from $PYTHON_PREFIX" >&2
# The shared libraries CPython's extension modules load, and the CA certificates.
debootstrap --variant=minbase \
  --include=ca-certificates,libssl3,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,zlib1g,libreadline8,libncursesw6,libuuid1,libexpat1,tzdata \
  "$SUITE" "$ROOTFS" "$MIRROR" >/dev/null

# CPython under /usr/local, without its tests, tkinter/idle and installed packages.
tar -C "$PYTHON_PREFIX" \
  --exclude="lib/python$PYXY/test" --exclude="lib/python$PYXY/idlelib" \
  --exclude="lib/python$PYXY/tkinter" --exclude="lib/python$PYXY/turtledemo" \
  --exclude="lib/python$PYXY/site-packages/*" --exclude='*/__pycache__/*.opt-*.pyc' \
  --exclude="lib/python$PYXY/config-*" --exclude='lib/pkgconfig' --exclude='share' \
  -cf - bin include lib | tar -C "$ROOTFS/usr/local" -xf -
ln -sf python3 "$ROOTFS/usr/local/bin/python"
echo /usr/local/lib > "$ROOTFS/etc/ld.so.conf.d/usr-local.conf"
chroot "$ROOTFS" ldconfig
chroot "$ROOTFS" /usr/local/bin/python3 -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, uuid, venv'
# Smaller: no debug symbols in CPython's shared objects, no downloaded packages, docs, lists.
if command -v strip >/dev/null; then
  find "$ROOTFS/usr/local" -name '*.so*' -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
  strip --strip-unneeded "$ROOTFS/usr/local/bin/python$PYXY" 2>/dev/null || true
fi
rm -rf "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/* \
  "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin \
  "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*

tar -C "$ROOTFS" -cf - . | "$ENGINE" import \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' - "$TAG" >/dev/null
echo "make-base.sh: built $TAG (CPython $PYVER, Debian $SUITE minbase)" >&2
echo "$TAG"
