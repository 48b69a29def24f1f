"""`amf bench store` on a tiny setting: results.json fields, frame accounting, bytes per codec."""

from __future__ import annotations

import json

from amf_ros.cli import main


def test_bench_store_small(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("width: 64\nheight: 48\nrate_hz: 30\nmax_write_frames: 20\nread_batches: 5\nbatch_size: 8\n"
                   "train_image_size: 32\nchunk_steps: 10\n")
    assert main(["bench", "store", "--out", str(tmp_path / "out"), "--config", str(cfg), "--duration", "1"]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["benchmark"] == "store" and set(res["methods"]) == {"raw", "png", "jpeg", "h264", "av1"}
    for r in res["methods"].values():
        p = r["paced_write"]
        assert p["frames_offered"] == 30 and p["frames_written"] + p["dropped_frames"] == 30
        assert r["read"]["steps"] == p["frames_written"] and r["read"]["samples_per_s"] > 0
    raw, png, jpeg = (res["methods"][c]["max_write"]["bytes_per_step"] for c in ("raw", "png", "jpeg"))
    assert raw > 64 * 48 * 3 and jpeg < raw and png < raw  # raw holds every byte; codecs compress
    h264, av1 = (res["methods"][c]["max_write"]["bytes_per_step"] for c in ("h264", "av1"))
    assert h264 < png and av1 < png  # video compresses across frames
    fid = {c: res["methods"][c]["fidelity"] for c in res["methods"]}
    assert fid["raw"]["exact"] and fid["png"]["exact"]
    for lossy in ("jpeg", "h264", "av1"):  # lossy, still the same picture
        assert not fid[lossy]["exact"] and 25 < fid[lossy]["psnr_db_min"] < 100, (lossy, fid[lossy])
    assert not (tmp_path / "out" / "stores").exists()
    out = capsys.readouterr().out
    assert "dropped" in out and "sustains 30 Hz" in out
