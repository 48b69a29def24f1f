"""`amf bench --resume-dir`: a rerun reuses the kept pre-training and job records of the same config and code
(slices share pre-training, a killed run resumes), runs only what is missing, and a changed config starts afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("mujoco")

from amf_ros.bench import metaworld as mw
from amf_ros.bench.resume import METHOD_FIELDS, JobRecords, resume_key

SMOKE = Path(__file__).resolve().parents[2] / "config" / "bench" / "widowx_smoke.yaml"


def _cfg(**overrides):
    return mw.bench_config("widowx", SMOKE, **{"methods": ["uniform"], "rounds": 1, **overrides})


def _forbid(monkeypatch, *names):
    """Make the named job functions fail if the run calls them."""
    for name in names:
        def boom(*args, _name=name, **kwargs):
            raise AssertionError(f"{_name} ran although its record was kept")
        monkeypatch.setattr(mw, name, boom)


def _runs(raw):
    return json.dumps([{k: v for k, v in r.items() if k not in ("time_s", "timing_s")} for r in raw["runs"]],
                      sort_keys=True)


def test_a_rerun_reuses_kept_jobs_and_runs_only_the_missing_ones(tmp_path, monkeypatch):
    cfg = _cfg()
    first = mw.run(cfg, resume_dir=tmp_path, progress=False)
    kept = JobRecords(tmp_path, cfg)
    assert kept.checkpoint("mismatched", 0).is_dir()
    assert kept.load(kept.method_record("mismatched", 0, "uniform"))["method"] == "uniform"

    _forbid(monkeypatch, "pretrain_job", "method_job")
    again = mw.run(cfg, resume_dir=tmp_path, progress=False)
    assert again["pretrain"] == first["pretrain"] and again["runs"] == first["runs"]

    # another slice of methods on the same seed: pre-training is reused, only the new method runs
    monkeypatch.undo()
    _forbid(monkeypatch, "pretrain_job")
    wider = mw.run(_cfg(methods=["uniform", "rebalancing"]), resume_dir=tmp_path, progress=False)
    assert [r["method"] for r in wider["runs"]] == ["uniform", "rebalancing"]
    assert wider["runs"][0] == first["runs"][0]
    assert wider["runs"][1]["rounds"][0]["selected"]  # rebalancing really ran on the kept checkpoint


def test_the_key_ignores_job_selection_but_not_settings():
    assert resume_key(_cfg()) == resume_key(_cfg(methods=["rebalancing"], seeds=3, first_seed=2))
    assert resume_key(_cfg()) != resume_key(_cfg(finetune_steps=6))
    assert resume_key(_cfg()) != resume_key(_cfg(eval_episodes=2))
    # the pre-training key leaves out what only the method jobs read, not what pre-training reads
    assert resume_key(_cfg(), METHOD_FIELDS) == resume_key(_cfg(finetune_steps=6, noise_var=100.0), METHOD_FIELDS)
    assert resume_key(_cfg(), METHOD_FIELDS) != resume_key(_cfg(eval_episodes=2), METHOD_FIELDS)
    assert resume_key(_cfg(), METHOD_FIELDS) != resume_key(_cfg(pretrain_steps=7), METHOD_FIELDS)


def test_runs_that_differ_in_method_settings_share_pretraining(tmp_path, monkeypatch):
    """A paired comparison of a criterion setting (the paper's batch conditioning vs recorded) pre-trains once: the
    second run reuses the checkpoint and its record, and keeps its method records apart from the first's."""
    paper = _cfg(methods=["amf"], demos_per_round=2)
    first = mw.run(paper, resume_dir=tmp_path, progress=False)
    _forbid(monkeypatch, "pretrain_job")
    other = _cfg(methods=["amf"], demos_per_round=2, batch_conditioning="recorded")
    second = mw.run(other, resume_dir=tmp_path, progress=False)
    assert second["pretrain"] == first["pretrain"]
    assert JobRecords(tmp_path, other).dir != JobRecords(tmp_path, paper).dir
    assert JobRecords(tmp_path, other).method_record("mismatched", 0, "amf").is_file()


def test_a_killed_pretraining_reruns_its_seed_and_drops_the_seeds_method_records(tmp_path, monkeypatch, caplog):
    cfg = _cfg()
    first = mw.run(cfg, resume_dir=tmp_path, progress=False)
    kept = JobRecords(tmp_path, cfg)
    kept.pretrain_record("mismatched", 0).unlink()  # as if killed after saving the checkpoint, before its record
    assert kept.load_pretrain("mismatched", 0) is None
    assert not kept.checkpoint("mismatched", 0).exists()
    assert not kept.method_record("mismatched", 0, "uniform").exists()

    again = mw.run(cfg, resume_dir=tmp_path, progress=False)  # everything of the seed runs again, same results
    assert _runs(again) == _runs(first)

    kept.method_record("mismatched", 0, "uniform").write_text("{trunc", encoding="utf-8")
    _forbid(monkeypatch, "pretrain_job")
    with caplog.at_level("WARNING", logger="amf_ros.bench.resume"):
        third = mw.run(cfg, resume_dir=tmp_path, progress=False)
    assert "unreadable benchmark record" in caplog.text
    assert _runs(third) == _runs(first)
