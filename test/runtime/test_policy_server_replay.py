"""policy_server's fine-tune with replay of pre-training data (replay_dir, replay_fraction; data/replay.py), without
ROS: the worker gets the replayed rows marked beside the recorded ones and trains on them at their share, the adaptive
prior is fitted on the recorded rows only, and bad replay settings are refused before anything trains."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("metaworld")

from synthetic_store import write_synthetic_episodes  # noqa: E402

from amf_ros.data.replay import REPLAYED  # noqa: E402
from amf_ros.data.transitions import load_transitions  # noqa: E402
from amf_ros.policies.fine_tuning import FineTuneSettings  # noqa: E402
from amf_ros.policies.loading import load_native  # noqa: E402
from amf_ros.runtime.policy_server import PolicyRuntime  # noqa: E402

TASKS = ("reach", "push")
STEPS = 60


def _write_replay(root) -> None:
    """Two "reach" episodes of 20 steps whose action is one constant: something a fine-tune learns in few steps,
    and only if it trains on these rows (the recorded "push" rows are random)."""
    from amf_ros.data.store import EpisodeStore
    from amf_ros.policies.action_spaces import native_to_eef7

    store, rng = EpisodeStore(root), np.random.default_rng(1)
    action = np.asarray(native_to_eef7(np.array([0.6, -0.5, 0.3, 0.8])), np.float32)
    for _ in range(2):
        store.write_episode("reach", "do reach", [
            {"observation": {"state": rng.normal(size=39).astype(np.float32)}, "action": action,
             "stamp_ns": k * 100_000_000} for k in range(20)], robot="synthetic", control_rate_hz=10.0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One fine-tune of the same checkpoint on the same recorded "push" episodes with replay 0.5 of "reach"
    pre-training episodes and one without replay (one worker process for both); the jobs and their data captured."""
    from amf_ros.bench.tiny_checkpoint import tiny_checkpoint

    root = tmp_path_factory.mktemp("replay")
    pre = tiny_checkpoint(root / "pretrained", TASKS, head="diffusion")
    write_synthetic_episodes(root / "dataset", ("push",))
    _write_replay(root / "replay")
    kw = dict(settings=FineTuneSettings(steps=STEPS, batch_size=32, lr=1e-3, alpha_steps=20), torch_threads=1)
    rt = PolicyRuntime(load_native(pre), pre, root / "with", root / "dataset", replay_dir=root / "replay",
                       replay_fraction=0.5, **kw)
    jobs, run = [], rt.worker.run

    def capture(job, **k):
        with np.load(job.transitions, allow_pickle=False) as npz:
            jobs.append((job, {key: npz[key] for key in npz.files}))
        return run(job, **k)

    rt.worker.run = capture
    try:
        with_replay = rt.fine_tune()
        plain_rt = PolicyRuntime(load_native(pre), pre, root / "without", root / "dataset", worker=rt.worker, **kw)
        plain_rt.worker.run = capture
        without = plain_rt.fine_tune()
    finally:
        rt.close()
    return dict(root=root, pre=pre, with_replay=with_replay, without=without, jobs=jobs)


def test_the_worker_gets_the_replayed_rows_marked_and_the_fraction(runs):
    (job, data), (plain_job, plain) = runs["jobs"]
    replayed = data[REPLAYED]
    assert job.replay_fraction == 0.5 and plain_job.replay_fraction == 0.0 and REPLAYED not in plain
    assert replayed.sum() == 40 and (~replayed).sum() == 40  # 2 episodes x 20 steps on each side
    assert set(data["task"][replayed]) == {"reach"} and set(data["task"][~replayed]) == {"push"}
    np.testing.assert_array_equal(data["state"][~replayed], plain["state"])  # the recorded rows, unchanged


def test_training_on_the_replay_keeps_its_loss_lower_than_training_without_it(runs):
    """The replayed episodes are trained on: their loss after the replay fine-tune is below the loss after the same
    fine-tune without them (measured: 0.29x with AVX2 and with SSE kernels; the test asks only for a clear drop,
    < 0.9x)."""
    replay = load_transitions(runs["root"] / "replay", action_space="metaworld")
    with_loss = load_native(runs["with_replay"].checkpoint).loss(replay)
    without_loss = load_native(runs["without"].checkpoint).loss(replay)
    assert with_loss < 0.9 * without_loss, (with_loss, without_loss)


def test_the_adaptive_prior_is_fitted_on_the_recorded_rows_only(runs):
    """alpha(reach) stays the pre-trained one: only "push" was recorded, "reach" appears only in the replay."""
    pre = load_native(runs["pre"]).alphas
    after = dict(zip(runs["with_replay"].tasks, runs["with_replay"].alphas, strict=True))
    assert after["reach"] == pytest.approx(float(pre["reach"]), abs=1e-7)  # untouched: float32 logit round trip
    assert abs(after["push"] - float(pre["push"])) > 1e-3  # the recorded task's alpha was fitted


def test_bad_replay_settings_are_refused_before_anything_trains(tmp_path, runs):
    pre = runs["pre"]
    policy = load_native(pre)
    with pytest.raises(ValueError, match="replay_dir is empty"):
        PolicyRuntime(policy, pre, tmp_path / "c", runs["root"] / "dataset", replay_fraction=0.5)
    with pytest.raises(ValueError, match="is not a directory"):
        PolicyRuntime(policy, pre, tmp_path / "c", runs["root"] / "dataset", replay_dir=tmp_path / "none",
                      replay_fraction=0.5)
    with pytest.raises(ValueError, match="needs the state policy"):
        PolicyRuntime(policy, pre, tmp_path / "c", runs["root"] / "dataset", replay_dir=runs["root"] / "replay",
                      replay_fraction=0.5, transitions_fn=lambda tasks, cancelled: None)
    (tmp_path / "empty").mkdir()
    rt = PolicyRuntime(policy, pre, tmp_path / "c", runs["root"] / "dataset", replay_dir=tmp_path / "empty",
                       replay_fraction=0.5)
    with pytest.raises(ValueError, match="holds no episodes"):
        rt.fine_tune()
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())  # nothing written
    rt.close()
