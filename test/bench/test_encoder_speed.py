"""`amf bench encoder-speed` (amf_ros/bench/encoder_speed.py): both runtimes timed on the same frames, their
embeddings compared, results.json and the table written."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("efficientnet_lite_pytorch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from amf_ros.bench.encoder_speed import main


def test_writes_both_runtimes_and_their_agreement(tmp_path, capsys):
    assert main(["--reps", "1", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["settings"]) == {"table_keypoints_b1", "table_keypoints_b5", "keypoints_b1", "keypoints_b5"}
    for row in res["settings"].values():
        assert row["torch_ms_p50"] > 0 and row["onnxruntime_ms_p50"] > 0
        assert row["speedup"] == pytest.approx(row["torch_ms_p50"] / row["onnxruntime_ms_p50"])
        # float32 rounding of two summation orders, far below the keypoints' scale (test_image_encoders bounds it)
        assert 0 <= row["max_abs_diff"] < 1e-3 * row["output_scale"]
    assert "ONNX Runtime ms/frame" in (tmp_path / "table.txt").read_text()
    assert "speed-up" in capsys.readouterr().out


def test_refuses_bad_counts(tmp_path):
    with pytest.raises(SystemExit):
        main(["--reps", "0", "--out", str(tmp_path)])
