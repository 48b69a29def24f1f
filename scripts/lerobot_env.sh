#!/usr/bin/env bash
# The side virtual environment in which lerobot's own LeRobotDataset reads our LeRobot export back
# (test/data/test_lerobot_reader.py). lerobot 0.4.4 pins torch<2.11 and the project's .venv runs torch 2.13, so it
# lives outside the clone, keyed by what goes into it, and is made only when a test asks for it:
#
#   ${AMF_LEROBOT_CACHE:-${XDG_CACHE_HOME:-~/.cache}/amf_ros}/
#     lerobot-<hash>/       the venv; <hash> = sha256 of requirements/lerobot-reader.txt, the Python version, RECIPE
#     lerobot-<hash>.lock   flock: one build at a time (a second caller waits, then finds it complete)
#     wheels/               every pinned wheel, downloaded once (pip's own HTTP cache stored nothing on this
#                           machine: ~/.cache/pip/http-v2 stayed empty), so a rebuild needs no network
#
# Usage: scripts/lerobot_env.sh           make the venv unless complete; print its python on stdout (logs: stderr)
#        scripts/lerobot_env.sh --check   print its python if complete, else exit 1 (builds nothing)
#        scripts/lerobot_env.sh --prune   delete the other lerobot-* venvs in the cache (older pins)
# Environment: AMF_LEROBOT_ENV_TIMEOUT  seconds for waiting on the lock plus the build (default 600)
#              PYTHON                   the interpreter to base the venv on (default python3; must be 3.11)
#
# Idempotent: a complete venv has the marker .amf-complete, written last by an atomic rename; a venv without it (a
# build killed half-way, or out of time) is deleted and built again. The build installs exactly the pinned list,
# with hashes and --no-deps, then imports what the reader uses before it writes the marker.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REQS="$ROOT/requirements/lerobot-reader.txt"
RECIPE=1  # bump when the build steps below change what ends up in the venv
PY=${PYTHON:-python3}
TIMEOUT=${AMF_LEROBOT_ENV_TIMEOUT:-600}
CACHE=${AMF_LEROBOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/amf_ros}
# torchcodec (lerobot's default decoder) dlopens the system FFmpeg; Debian 12's FFmpeg 5.1 runtime libraries:
FFMPEG_DEBS=(libavutil57 libavcodec59 libavformat59 libavdevice59 libavfilter8 libswscale6 libswresample4)
# What the reader imports (torch without CUDA, the dataset class, both video decoders), checked before the marker:
SMOKE='
import av, torch, torchcodec.decoders, torchvision
from importlib.metadata import version
from lerobot.datasets.lerobot_dataset import LeRobotDataset
print("[lerobot_env] lerobot", version("lerobot"), "torch", torch.__version__, "torchvision", torchvision.__version__,
      "torchcodec", version("torchcodec"), "av", av.__version__)
'
T0=$SECONDS

log() { printf '[lerobot_env] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
quiet() { grep -v "is ignored: it is neither a file nor a directory" >&2 || true; }  # this machine's empty indexes

run() {  # run CMD...: with what is left of the time budget
  local rc=0 left=$((TIMEOUT - (SECONDS - T0)))
  [ "$left" -gt 0 ] || die "out of time (${TIMEOUT} s, AMF_LEROBOT_ENV_TIMEOUT) before: $*"
  # --foreground: COMMAND stays in this script's process group, so whoever kills that group (the test fixture, on
  # its own timeout) kills the pip under it too, instead of leaving it to finish while holding the lock
  timeout --foreground --kill-after=10 "$left" "$@" || rc=$?
  [ "$rc" -ne 124 ] || die "out of time (${TIMEOUT} s, AMF_LEROBOT_ENV_TIMEOUT) in: $*"
  return "$rc"
}

install_ffmpeg() {  # the system FFmpeg for torchcodec (as root only, as scripts/setup.sh installs system packages)
  ldconfig -p | grep -q 'libavutil\.so\.57 ' && return 0
  command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] \
    || die "torchcodec needs FFmpeg's shared libraries: sudo apt-get install ${FFMPEG_DEBS[*]}"
  log "installing Debian's FFmpeg libraries for torchcodec: ${FFMPEG_DEBS[*]}"
  run apt-get install -y -qq "${FFMPEG_DEBS[@]}" >/dev/null 2>&1 \
    || { run apt-get update -qq >/dev/null && run apt-get install -y -qq "${FFMPEG_DEBS[@]}" >/dev/null; } \
    || die "apt-get install ${FFMPEG_DEBS[*]} failed"
}

pip_install() {  # pip_install ENV: the pinned list, offline from the wheels folder
  run "$1/bin/python" -m pip install -q --no-index --find-links "$CACHE/wheels" --no-deps --require-hashes \
    -r "$REQS" 2> >(quiet) >&2
}

build() {  # build ENV: from scratch (a half-made one is thrown away), under the lock
  local env=$1
  install_ffmpeg
  [ ! -e "$env" ] || { log "removing the incomplete $env"; rm -rf "$env"; }
  log "creating $env"
  run "$PY" -m venv "$env"
  mkdir -p "$CACHE/wheels"
  # Offline first; if the folder lacks a wheel (first build, new pins), download what is missing (pip skips the
  # files already there) and install again. pip resolves before installing: a failed first try installs nothing.
  # Both steps check every hash.
  log "installing from $CACHE/wheels"
  if ! pip_install "$env" 2>/dev/null; then
    log "downloading the pinned wheels that $CACHE/wheels lacks"
    run "$env/bin/python" -m pip download -q --no-deps --only-binary=:all: --require-hashes -r "$REQS" \
      -d "$CACHE/wheels" 2> >(quiet) >&2 || die "pip download failed"
    pip_install "$env" || die "pip install failed"
  fi
  run "$env/bin/python" -c "$SMOKE" >&2 || die "the new venv cannot import what the reader needs"
  echo "built $(date -u +%FT%TZ) in $((SECONDS - T0)) s from $(basename "$REQS")" >"$env/.amf-complete.tmp"
  mv "$env/.amf-complete.tmp" "$env/.amf-complete"
  log "ready in $((SECONDS - T0)) s: $(du -sh "$env" | cut -f1) venv, $(du -shL "$CACHE/wheels" | cut -f1) of wheels"
}

prune() {  # prune KEEP: every other lerobot-* venv of the cache, unless another process holds its lock
  local d
  shopt -s nullglob
  for d in "$CACHE"/lerobot-*/; do
    d=${d%/}
    [ "$d" = "$1" ] && continue
    if ( flock -n 9 || exit 1; log "removing $d"; rm -rf "$d" ) 9>"$d.lock"; then
      rm -f "$d.lock"
    else
      log "skipping $d (being built)"
    fi
  done
}

main() {
  local pyver hash env
  pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || die "no interpreter '$PY'"
  [ "$pyver" = 3.11 ] || die "the pins in $REQS are for Python 3.11; '$PY' is $pyver (set PYTHON=python3.11)"
  hash=$( (cat "$REQS"; "$PY" -VV; echo "recipe $RECIPE") | sha256sum | cut -c1-16)
  env="$CACHE/lerobot-$hash"
  case "${1:-}" in
    --check) [ -f "$env/.amf-complete" ] || exit 1 ;;
    --prune) prune "$env"; exit 0 ;;
    "")
      if [ ! -f "$env/.amf-complete" ]; then  # warm path: this one test, no lock, no pip
        mkdir -p "$CACHE"
        exec 9>"$env.lock"
        flock -w "$TIMEOUT" 9 || die "another build of $env held its lock for ${TIMEOUT} s"
        if [ -f "$env/.amf-complete" ]; then log "built by another process meanwhile"; else build "$env"; fi
      fi ;;
    *) die "unknown argument '$1' (see the header of $0)" ;;
  esac
  echo "$env/bin/python"
}

main "$@"  # the whole file is parsed before this line runs: editing it during a build cannot derail the build
exit
