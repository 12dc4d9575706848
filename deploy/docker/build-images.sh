#!/usr/bin/env bash
# `make images`: both service images from deploy/docker/Dockerfile with podman or docker
# (whichever exists; ENGINE=… picks one), tagged supermew/<service>:<version>, the version the
# Kubernetes manifests name. The base is PYTHON_IMAGE when set, else the Dockerfile's default
# when it is present or can be pulled, else a local one from deploy/docker/make-base.sh (Debian
# mirror + a supported CPython); the script says which it used.
#
# With podman, pip inside the build trusts this machine's CA bundle (mounted read-only with a
# pip.conf naming it, for builds behind a TLS-inspecting proxy); nothing of it enters an image.
set -euo pipefail
cd "$(dirname "$0")/../.."

ENGINE="${ENGINE:-$(command -v podman || command -v docker || true)}"
[ -n "$ENGINE" ] || { echo "images: neither podman nor docker found" >&2; exit 1; }
ENGINE_NAME="$(basename "$ENGINE")"

# The tag the manifests run (base Deployments; the overlays' newTag must agree, tests/deploy).
VERSION="$(sed -n 's#^ *image: supermew/retrieval:\([^ ]*\)$#\1#p' deploy/k8s/base/retrieval/deployment.yaml)"
[ -n "$VERSION" ] || { echo "images: no supermew/retrieval tag in deploy/k8s/base" >&2; exit 1; }

DEFAULT_BASE="$(sed -n 's/^ARG PYTHON_IMAGE=//p' deploy/docker/Dockerfile)"
if [ -n "${PYTHON_IMAGE:-}" ]; then
  BASE="$PYTHON_IMAGE"; WHY="PYTHON_IMAGE"
elif "$ENGINE" image inspect "$DEFAULT_BASE" >/dev/null 2>&1; then
  BASE="$DEFAULT_BASE"; WHY="present locally"
elif timeout 300 "$ENGINE" pull -q "$DEFAULT_BASE" >/dev/null 2>&1; then
  BASE="$DEFAULT_BASE"; WHY="pulled from the registry"
else
  echo "images: $DEFAULT_BASE cannot be pulled; making a local base (make-base.sh)" >&2
  BASE="$(ENGINE="$ENGINE" deploy/docker/make-base.sh | tail -1)"
  WHY="local, made by deploy/docker/make-base.sh from the Debian mirror"
fi
echo "images: base $BASE ($WHY), $ENGINE_NAME, version $VERSION"

MOUNTS=()
CA=/etc/ssl/certs/ca-certificates.crt
if [ "$ENGINE_NAME" = podman ] && [ -f "$CA" ]; then
  PIPCONF="$(mktemp /tmp/supermew-pip.XXXXXX.conf)"
  trap 'rm -f "$PIPCONF"' EXIT
  printf '[global]\ncert = %s\n' "$CA" > "$PIPCONF"
  chmod 644 "$PIPCONF"
  MOUNTS=(-v "$CA:$CA:ro" -v "$PIPCONF:/etc/pip.conf:ro")
fi

for target in retrieval orchestrator; do
  start=$(date +%s)
  "$ENGINE" build "${MOUNTS[@]}" --build-arg "PYTHON_IMAGE=$BASE" \
    -f deploy/docker/Dockerfile --target "$target" -t "supermew/$target:$VERSION" .
  size="$("$ENGINE" image inspect --format '{{.Size}}' "supermew/$target:$VERSION")"
  echo "images: supermew/$target:$VERSION built in $(( $(date +%s) - start )) s," \
    "$(( size / 1000000 )) MB"
done
