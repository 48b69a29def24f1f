"""amf_ros.paths: where a node keeps its relative data folders, per workspace and namespace (issue 29: a graph in
another namespace wrote the default namespace's dataset and checkpoints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amf_ros.paths import data_root, in_data_root, in_workspace, workspace_root


@pytest.fixture
def default_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AMF_WORKSPACE", str(tmp_path / "ws"))
    return (tmp_path / "ws").resolve()


def test_the_default_namespace_keeps_the_workspace_root(default_root: Path) -> None:
    """Existing workspaces keep working: /amf's data stays where it always was."""
    for ns in ("amf", "/amf", "/amf/"):
        assert data_root("", ns) == default_root == workspace_root()
    assert in_data_root("sim/dataset", "", "/amf") == default_root / "sim/dataset" == in_workspace("sim/dataset")


def test_another_namespace_gets_its_own_folder(default_root: Path) -> None:
    a, b = in_data_root("sim/dataset", "", "/robot1"), in_data_root("sim/dataset", "", "/robot2")
    assert a == default_root / "namespaces/robot1/sim/dataset"
    assert b == default_root / "namespaces/robot2/sim/dataset"
    assert in_data_root("sim/checkpoints", "", "/lab/arm") == default_root / "namespaces/lab.arm/sim/checkpoints"
    # a namespace named like a folder of the root (cache, graphs, sim) never lands inside it
    assert in_data_root("sim/dataset", "", "/cache") == default_root / "namespaces/cache/sim/dataset"
    assert in_data_root("sim/dataset", "", "/") == default_root / "namespaces/_root/sim/dataset"


def test_an_explicit_workspace_or_absolute_path_is_used_as_given(default_root: Path, tmp_path: Path) -> None:
    """`workspace:=` says otherwise: two graphs given one workspace share it on purpose (the fleet shares a store
    by absolute dataset_dir / checkpoint_dir, which no namespace changes)."""
    ws = tmp_path / "mine"
    assert in_data_root("sim/dataset", ws, "/robot1") == ws.resolve() / "sim/dataset"
    assert in_data_root("sim/dataset", ws, "/amf") == ws.resolve() / "sim/dataset"
    assert in_data_root(tmp_path / "store", "", "/robot1") == tmp_path / "store"
    assert in_data_root(tmp_path / "store", ws, "/robot2") == tmp_path / "store"
