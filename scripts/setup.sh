#!/usr/bin/env bash
# Idempotent set-up of everything amf_ros needs on a fresh Debian 12 / Python 3.11 machine:
#   .venv/      project-local virtual environment (torch CPU, ROS 2 Kilted wheels, colcon, runtime deps)
#   build/ install/   colcon build of the amf_ros package (interfaces + Python package + nodes)
# A second run checks two fingerprints and returns in seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=${PYTHON:-python3}
VENV="$ROOT/.venv"

# One set-up at a time (parallel test runs or shells must not build into the same tree concurrently).
exec 9>"$ROOT/.setup.lock"
flock 9

log() { printf '[setup] %s\n' "$*" >&2; }
fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

# --- 1. system packages (OSMesa only matters for optional Metaworld rendering) -------------------------
if ! ldconfig -p 2>/dev/null | grep -q libOSMesa; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing libosmesa6 (optional camera rendering)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libosmesa6 >/dev/null) \
      || log "warning: libosmesa6 not installed; rendered camera images will be unavailable"
  fi
fi

# Headless Chromium + its WebDriver: the operator console's browser tests (test/console) drive the real page.
if ! command -v chromedriver >/dev/null; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing chromium + chromium-driver (operator console browser tests)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
      || log "warning: chromium not installed; the console's browser tests will be skipped"
  fi
fi

# --- 2. virtual environment + Python dependencies ------------------------------------------------------
REQS=(requirements/ros.txt requirements/base.txt scripts/setup.sh)
want=$(fingerprint "${REQS[@]}")
have=$(cat "$VENV/.amf-deps" 2>/dev/null || true)
if [ "$want" != "$have" ]; then
  log "creating/updating $VENV (first run: several minutes)"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # colcon-core wants setuptools<80
  "$VENV/bin/pip" install -q -U pip "setuptools<80" wheel
  # torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
  "$VENV/bin/pip" install -q torch==2.13.0
  "$VENV/bin/pip" install -q -r requirements/ros.txt -r requirements/base.txt
  # The ROS wheels' exported CMake files point at their build container's Python/numpy include dirs.
  PYINC=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  NPINC=$("$VENV/bin/python" -c "import numpy; print(numpy.get_include())")
  grep -rl /opt/python/cp311-cp311 "$VENV/share" --include='*.cmake' 2>/dev/null | xargs -r sed -i \
    -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$NPINC#g" \
    -e "s#/opt/python/cp311-cp311/include/python3.11#$PYINC#g" || true  # nothing left to patch on re-runs
  echo "$want" > "$VENV/.amf-deps"
fi

# --- 3. colcon build (symlink install: Python edits need no rebuild; new files or interfaces do) -------
src_list=$( (ls package.xml CMakeLists.txt; \
             find msg srv action amf_ros launch config scripts -type f -not -path '*__pycache__*' -printf '%p\n' \
               2>/dev/null || true) | sort)
want_build=$( (echo "$src_list"; cat package.xml CMakeLists.txt msg/* srv/* action/*) | sha256sum | cut -d' ' -f1)
have_build=$(cat "$ROOT/install/.amf-build" 2>/dev/null || true)
if [ "$want_build" != "$have_build" ] || [ ! -f install/setup.bash ]; then
  log "colcon build"
  (
    set +u
    export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV"
    # shellcheck disable=SC1091
    source "$VENV/bin/activate"
    colcon build --base-paths . --symlink-install \
      --event-handlers console_cohesion- summary- status- \
      --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF >build.log 2>&1 \
      || { cat build.log >&2; exit 1; }
  )
  echo "$want_build" > install/.amf-build
fi
log "ready"
