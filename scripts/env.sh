# Source this to get the project environment: venv + colcon install + isolated DDS.
#   source scripts/env.sh
_AMF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
set +u
export AMENT_PREFIX_PATH="$_AMF_ROOT/.venv" CMAKE_PREFIX_PATH="$_AMF_ROOT/.venv"
# shellcheck disable=SC1091
source "$_AMF_ROOT/.venv/bin/activate"
# shellcheck disable=SC1091
source "$_AMF_ROOT/install/setup.bash"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MUJOCO_GL=${MUJOCO_GL:-osmesa} PYOPENGL_PLATFORM=${PYOPENGL_PLATFORM:-osmesa}
export MPLBACKEND=Agg
unset RMW_IMPLEMENTATION
