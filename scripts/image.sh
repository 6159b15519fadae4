#!/usr/bin/env bash
# Builds the container image (Containerfile) with podman where no registry is reachable: the
# Debian 12 base comes from Debian's mirrors (mmdebstrap into a tarball, `podman import`ed
# once as localhost/debian12-base), then an ordinary multi-stage `podman build` on it.
# KVW_CCACHE_DIR=DIR lends the build stage that ccache directory (mounted at /ccache).
# KVW_PREBUILT=1 takes build/apps/kvwarden/kvwarden (a host Release build of this tree) instead
# of compiling in the build stage (Containerfile's KVWARDEN_FROM=prebuilt).
# Needs root, podman and mmdebstrap. Prints the image name.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${KVW_IMAGE:-localhost/kvwarden:latest}
BASE=${KVW_BASE_IMAGE:-localhost/debian12-base}
MIRROR=${KVW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# vfs: overlay mounts need kernel features some sandboxes and CI runners refuse.
podman=(podman --storage-driver vfs)

if ! "${podman[@]}" image exists "$BASE"; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # merged-usr hook: /bin -> usr/bin without the usrmerge package (and the perl it pulls in).
  mmdebstrap --quiet --variant=minbase --aptopt='Acquire::Languages "none"' \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' bookworm \
    "$tmp/base.tar" "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
    "deb ${MIRROR%/debian}/debian-security bookworm-security main"
  # The same PATH and CMD as Docker Hub's debian:12-slim.
  "${podman[@]}" import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$tmp/base.tar" "$BASE" >/dev/null
fi

build_args=(--build-arg "BASE=$BASE")
if [ "${KVW_PREBUILT:-0}" = 1 ]; then
  [ -x build/apps/kvwarden/kvwarden ] || { echo "image.sh: KVW_PREBUILT=1 needs build/apps/kvwarden/kvwarden" >&2; exit 1; }
  build_args+=(--build-arg KVWARDEN_FROM=prebuilt)
fi
if [ -n "${KVW_CCACHE_DIR:-}" ]; then
  build_args+=(--build-arg CCACHE=1 --volume "$KVW_CCACHE_DIR:/ccache")
fi
# docker format: the OCI format has no HEALTHCHECK. chroot isolation: RUN steps need no OCI
# runtime (crun refuses cgroup setups like this sandbox's); the result is the same image.
"${podman[@]}" build --quiet --isolation chroot --format docker "${build_args[@]}" --tag "$IMAGE" . >/dev/null
echo "$IMAGE"
