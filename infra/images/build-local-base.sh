#!/usr/bin/env bash
# Builds, on a machine that cannot pull from any image registry, the base images toolrl's
# Dockerfiles start from, from Debian's packages only:
#   toolrl/debian-base:bookworm   debootstrap --variant=minbase bookworm, then `docker import`
#   toolrl/python:3.11-bookworm   Debian's python3.11 (3.11.2) + venv + pip: stands in for
#                                 python:3.11.14-slim-bookworm (PYTHON_IMAGE build argument)
#   toolrl/postgres:15-bookworm   Debian's PostgreSQL 15 with the official image's first-start
#                                 contract (POSTGRES_*, /docker-entrypoint-initdb.d, pg_isready)
#   toolrl/airflow:3.3.2-python3.11  apache-airflow[postgres] from PyPI as the "airflow" user:
#                                 stands in for apache/airflow (AIRFLOW_IMAGE), built only
#                                 when "airflow" is in PROJECT_IMAGES
# and then, with BUILD_PROJECT_IMAGES=1 (the default), the project images on top of them:
#   toolrl-training-cpu:0.1.0, toolrl-mlflow:3.17.2, toolrl-s3-emulator:5.2, toolrl-mcp:0.1.0,
#   toolrl-airflow:0.1.0 (PROJECT_IMAGES below).
# The Dockerfiles keep the public images as their defaults; this script passes the local ones:
#   docker build --build-arg PYTHON_IMAGE=toolrl/python:3.11-bookworm ...
#
# Network: every build runs with `--network host`, so pip inside a build reaches PyPI the same
# way pip on this machine does (pip's default index, https://pypi.org/simple, through this
# machine's egress); no traffic goes to the docker0 bridge. Where the egress re-signs TLS with
# its own CA (this machine: /usr/local/share/ca-certificates/*.crt), those certificates are
# copied into the Python base image and pip uses the system bundle (PIP_CERT). The host's
# extra file:// indexes (pip config list) are not visible inside a build; the CPU torch wheel
# that lies in /opt/wheels is served to the build on loopback (python -m http.server on
# 127.0.0.1) and passed as PIP_FIND_LINKS.
#
# Usage (as root, dockerd running):  infra/images/build-local-base.sh
#   ROOTFS_DIR=/var/tmp/toolrl-rootfs/bookworm   where debootstrap writes (never in the repo)
#   DEBIAN_MIRROR=http://deb.debian.org/debian
#   BUILD_PROJECT_IMAGES=1|0      also build the project images (default 1)
#   PROJECT_IMAGES="training-cpu mlflow s3-emulator mcp airflow"   which ones, in order
#   FORCE_IMPORT=0|1              re-import the root file system even if the image exists
#   BUILD_BASE_IMAGES=1|0         build the three base images first (default 1)
#   TIMINGS_FILE=/var/tmp/toolrl-build-timings.tsv   name, seconds, exit status per step
set -euo pipefail

repo=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
here="$repo/infra/images"
ROOTFS_DIR=${ROOTFS_DIR:-/var/tmp/toolrl-rootfs/bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BUILD_PROJECT_IMAGES=${BUILD_PROJECT_IMAGES:-1}
PROJECT_IMAGES=${PROJECT_IMAGES:-"training-cpu mlflow s3-emulator mcp airflow"}
TIMINGS_FILE=${TIMINGS_FILE:-/var/tmp/toolrl-build-timings.tsv}
WHEELS_DIR=${WHEELS_DIR:-/opt/wheels}
WHEELS_PORT=${WHEELS_PORT:-18765}

BASE=toolrl/debian-base:bookworm
PY=toolrl/python:3.11-bookworm
PG=toolrl/postgres:15-bookworm

# BuildKit: the project images use COPY --chmod and per-Dockerfile .dockerignore files
# (X.Dockerfile.dockerignore), which the classic builder lacks (it would send the whole
# repository, .venv included, as the context). Debian's docker.io client (/usr/bin/docker, 20.10)
# has BuildKit built in; a newer static client without the buildx plugin refuses
# DOCKER_BUILDKIT=1, so that one is preferred. The Dockerfiles carry no `# syntax=` line: it
# would make BuildKit fetch the frontend image from Docker Hub.
export DOCKER_BUILDKIT=1
DOCKER=${DOCKER:-$( [ -x /usr/bin/docker ] && echo /usr/bin/docker || echo docker )}
docker() { "$DOCKER" "$@"; }

step() {  # step NAME CMD...: runs CMD, appends "NAME<TAB>seconds<TAB>rc" to TIMINGS_FILE
    local name=$1; shift
    local t0 rc
    t0=$(date +%s.%N)
    set +e; "$@"; rc=$?; set -e
    printf '%s\t%.1f\t%s\n' "$name" "$(echo "$(date +%s.%N) - $t0" | bc)" "$rc" | tee -a "$TIMINGS_FILE"
    return "$rc"
}

make_rootfs() {
    if [ -x "$ROOTFS_DIR/usr/bin/apt-get" ]; then
        echo "rootfs exists: $ROOTFS_DIR"; return 0
    fi
    mkdir -p "$ROOTFS_DIR"
    debootstrap --variant=minbase --include=ca-certificates bookworm "$ROOTFS_DIR" "$DEBIAN_MIRROR"
}

import_rootfs() {
    # A new import is a new image ID, which would rebuild everything above it: keep the
    # existing one unless FORCE_IMPORT=1.
    if [ "${FORCE_IMPORT:-0}" != 1 ] && docker image inspect "$BASE" >/dev/null 2>&1; then
        echo "$BASE exists (FORCE_IMPORT=1 re-imports)"; return 0
    fi
    # apt inside the image uses the same mirror; no recommends, no caches.
    printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
        > "$ROOTFS_DIR/etc/apt/apt.conf.d/99toolrl-norecommends"
    rm -rf "$ROOTFS_DIR"/var/cache/apt/archives/*.deb "$ROOTFS_DIR"/var/lib/apt/lists/*
    tar -C "$ROOTFS_DIR" -c . | docker import \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'CMD ["bash"]' - "$BASE"
}

build_python() {
    local ctx
    ctx=$(mktemp -d /var/tmp/toolrl-pyctx.XXXXXX)
    mkdir -p "$ctx/extra-ca"
    cp /usr/local/share/ca-certificates/*.crt "$ctx/extra-ca/" 2>/dev/null || true
    cp "$here/python311.Dockerfile" "$ctx/Dockerfile"
    docker build --network host --build-arg BASE_IMAGE="$BASE" -t "$PY" "$ctx"
    rm -rf "$ctx"
}

AF=toolrl/airflow:3.3.2-python3.11
build_airflow_base() {  # only when the Airflow image is asked for
    docker build --network host --build-arg PYTHON_IMAGE="$PY" -t "$AF" \
        -f "$here/airflow.Dockerfile" "$here"
}

build_postgres() {
    docker build --network host --build-arg BASE_IMAGE="$BASE" -t "$PG" \
        -f "$here/postgres.Dockerfile" "$here"
}

wheels_server_pid=
links=
start_wheels_server() {  # the CPU torch wheel on disk, served on loopback to the builds
    if [ -d "$WHEELS_DIR" ] && ls "$WHEELS_DIR"/torch-*+cpu-*.whl >/dev/null 2>&1; then
        python3 -m http.server --bind 127.0.0.1 "$WHEELS_PORT" --directory "$WHEELS_DIR" \
            >/dev/null 2>&1 &
        wheels_server_pid=$!
        sleep 1
        links="http://127.0.0.1:$WHEELS_PORT/"
    fi
}

build_project() {  # build_project NAME
    local name=$1 find_links=${2:-}
    case "$name" in
        training-cpu)
            docker build --network host --build-arg PYTHON_IMAGE="$PY" \
                --build-arg PIP_FIND_LINKS="$find_links" --build-arg TORCH_INDEX_URL= \
                -f "$repo/infra/docker/training-cpu.Dockerfile" -t toolrl-training-cpu:0.1.0 "$repo" ;;
        mlflow)
            docker build --network host --build-arg PYTHON_IMAGE="$PY" \
                -f "$repo/infra/docker/mlflow.Dockerfile" -t toolrl-mlflow:3.17.2 "$repo" ;;
        mcp)
            docker build --network host --build-arg PYTHON_IMAGE="$PY" \
                -f "$repo/infra/docker/mcp.Dockerfile" -t toolrl-mcp:0.1.0 "$repo" ;;
        s3-emulator)
            docker build --network host --build-arg PYTHON_IMAGE="$PY" \
                -f "$repo/infra/docker/s3-emulator.Dockerfile" -t toolrl-s3-emulator:5.2 "$repo" ;;
        airflow)  # on the local Airflow base (infra/images/airflow.Dockerfile)
            docker image inspect "$AF" >/dev/null 2>&1 || step airflow-base build_airflow_base
            docker build --network host --build-arg PYTHON_IMAGE="$PY" \
                --build-arg AIRFLOW_IMAGE="$AF" \
                -f "$repo/infra/docker/airflow.Dockerfile" -t toolrl-airflow:0.1.0 "$repo" ;;
        *) echo "unknown image: $name" >&2; return 2 ;;
    esac
}

main() {
    command -v docker >/dev/null && docker info >/dev/null
    : > "$TIMINGS_FILE"
    if [ "${BUILD_BASE_IMAGES:-1}" = 1 ]; then
        step debootstrap make_rootfs
        step import-debian-base import_rootfs
        step python-base build_python
        step postgres build_postgres
    fi
    if [ "$BUILD_PROJECT_IMAGES" = 1 ]; then
        start_wheels_server
        trap '[ -z "$wheels_server_pid" ] || kill "$wheels_server_pid" 2>/dev/null || true' EXIT
        for img in $PROJECT_IMAGES; do
            step "$img" build_project "$img" "$links" || echo "build of $img failed" >&2
        done
    fi
    docker image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep -E '^toolrl' || true
}

main "$@"
