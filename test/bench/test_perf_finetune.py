"""`amf bench perf-finetune` runs end to end on a tiny config and writes the output contract."""

from __future__ import annotations

import json

from amf_ros.bench.perf_finetune import main


def test_perf_finetune_tiny(tmp_path):
    out = tmp_path / "perf"
    assert main(["--out", str(out), "--steps", "3", "--frames", "200", "--seeds", "2", "--cases", "state"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["benchmark"] == "perf-finetune" and res["config"]["frames"] == 200
    (setting,) = res["settings"]
    assert set(setting["methods"]) == {"cached trunk embeddings", "trunk every step"}
    assert all(v > 0 for m in setting["methods"].values() for v in m["mean"])
    assert setting["details"]["embed_cold_s"] > 0 and setting["details"]["peak_rss_mb"] > 0
    assert (out / "table.txt").read_text().startswith("case")
