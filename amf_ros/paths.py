"""Where amf_ros finds its config files and keeps its data, independent of the working directory.

Why: nodes started by `ros2 launch` or a process supervisor inherit an arbitrary working directory; a relative
dataset or checkpoint folder would then silently point somewhere new (an empty dataset, no checkpoint). Every
relative data path is therefore resolved against ONE workspace root:

    the node's ``workspace`` parameter, else $AMF_WORKSPACE, else $ROS_HOME/amf, else ~/.ros/amf

Data of a namespace (issue 29): a graph in a namespace other than the default ``amf`` keeps its relative data
folders under ``<workspace root>/namespaces/<namespace>`` when no ``workspace`` is given, so that two robots on one
machine never share a dataset or a checkpoint by accident (one robot's fine-tune became the other's policy). The
default namespace keeps ``<workspace root>`` itself (existing workspaces keep working), and an explicit
``workspace`` is used as given in any namespace (two graphs given one workspace share its data on purpose, as
`amf run --robots N` shares one store). ``namespaces/`` keeps a namespace's folder apart from the root's own
folders (sim/, cache/, graphs/), whatever the namespace is called.

and config files (task sets, params YAML) are looked up as given, then in the package (source tree or the
installed share directory).
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = "amf_ros"


def workspace_root(workspace: str | os.PathLike = "") -> Path:
    """The absolute workspace root (see the module docstring for the order of precedence)."""
    if str(workspace):
        return Path(workspace).expanduser().resolve()
    if os.environ.get("AMF_WORKSPACE"):
        return Path(os.environ["AMF_WORKSPACE"]).expanduser().resolve()
    ros_home = Path(os.environ.get("ROS_HOME") or Path.home() / ".ros").expanduser()
    return (ros_home / "amf").resolve()


def in_workspace(path: str | os.PathLike, workspace: str | os.PathLike = "") -> Path:
    """``path`` if absolute, else ``path`` under :func:`workspace_root` (``~`` is expanded first)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else workspace_root(workspace) / p


DEFAULT_NAMESPACE = "amf"
"""The namespace whose data lives at the workspace root itself (amf_ros.bringup.graph.NAMESPACE)."""
NAMESPACES_DIR = "namespaces"
"""Under the workspace root: one folder per other namespace with that graph's data (see the module docstring)."""


def namespace_folder(namespace: str) -> str:
    """``/amf`` -> ``amf``, ``/a/b`` -> ``a.b`` (one folder name); the root namespace -> ``_root``."""
    ns = str(namespace).strip("/")
    return ns.replace("/", ".") if ns else "_root"


def data_root(workspace: str | os.PathLike = "", namespace: str = DEFAULT_NAMESPACE) -> Path:
    """Where a node in ``namespace`` keeps its relative data folders: ``workspace`` when given; else the default
    :func:`workspace_root` for the namespace ``amf``, and ``<workspace_root>/namespaces/<namespace>`` for any other."""
    if str(workspace) or namespace_folder(namespace) == DEFAULT_NAMESPACE:
        return workspace_root(workspace)
    return workspace_root() / NAMESPACES_DIR / namespace_folder(namespace)


def in_data_root(path: str | os.PathLike, workspace: str | os.PathLike = "",
                 namespace: str = DEFAULT_NAMESPACE) -> Path:
    """``path`` if absolute, else ``path`` under :func:`data_root` of ``workspace`` and ``namespace``."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else data_root(workspace, namespace) / p


def package_root() -> Path:
    """The source tree root (holds config/ and launch/); also right for a symlink colcon install."""
    return Path(__file__).resolve().parents[1]


def resolve_config(path: str | os.PathLike) -> Path:
    """An existing config path: as given, else relative to the package root, else the installed share dir."""
    p = Path(path)
    candidates = [p, package_root() / p]
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / "share" / PACKAGE / p)
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise ValueError(f"config file not found: {path!s} (looked in {[str(c) for c in candidates]})")
