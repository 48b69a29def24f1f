"""The LeRobot export read back by lerobot's own LeRobotDataset (lerobot 0.4.x).

Runs wherever ``lerobot`` is importable. It is not in the project's environment: lerobot 0.4 pins torch<2.11 and
this project runs torch 2.13, so the two cannot be installed side by side (docs/data.md: how to run this test in a
venv of its own). Every frame LeRobotDataset returns is compared with the episode store it was exported from:
state, action, stamp and flags equal, the camera within the video codec's tolerance, the task string, and the
episode boundaries.
"""

from __future__ import annotations

import numpy as np
import pytest
from data_helpers import EPISODES, MIN_PSNR_DB, RATES, psnr

lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset")


@pytest.mark.parametrize("backend", ["pyav", None])  # None: lerobot's default (torchcodec where it loads)
def test_lerobot_dataset_reads_every_frame_of_the_export(exported, backend):
    rate, store, res = exported
    n = RATES[rate]
    ds = lerobot_dataset.LeRobotDataset(f"local/{res.path.name}", root=res.path, video_backend=backend)
    assert (len(ds), ds.num_episodes, ds.fps) == (EPISODES * n, EPISODES, rate)
    assert ds.meta.video_keys == ["observation.images.primary"]
    ids = store.episode_ids()
    worst = np.inf
    for e, eid in enumerate(ids):
        ep = store.load(eid)
        row = ds.meta.episodes[e]
        assert (row["dataset_from_index"], row["dataset_to_index"]) == (e * n, (e + 1) * n)
        for k in range(n):
            item = ds[e * n + k]
            assert item["task"] == ep.meta.instruction
            assert (int(item["episode_index"]), int(item["frame_index"])) == (e, k)
            assert float(item["timestamp"]) == pytest.approx(k / rate, abs=1e-6)
            np.testing.assert_array_equal(item["observation.state"].numpy(), ep.steps["observation/state"][k])
            np.testing.assert_array_equal(item["action"].numpy(), ep.steps["action"][k])
            assert int(item["stamp_ns"]) == int(ep.steps["stamp_ns"][k])
            assert bool(item["next.done"]) == (k == n - 1)
            assert bool(item["next.success"]) == (k == n - 1 and ep.meta.success is True)
            frame = item["observation.images.primary"]  # (3, H, W) float in [0, 1]
            assert tuple(frame.shape) == (3, 480, 640)
            got = np.round(frame.permute(1, 2, 0).numpy() * 255).astype(np.uint8)
            worst = min(worst, psnr(got, ep.steps["observation/image_primary"][k]))
    assert worst >= MIN_PSNR_DB, f"worst frame {worst:.1f} dB as decoded by LeRobotDataset"
    print(f"{rate} Hz, backend {backend or 'default'}: {len(ds)} frames read, worst frame {worst:.1f} dB")


def test_lerobot_metadata_and_stats(exported):
    rate, store, res = exported
    meta = lerobot_dataset.LeRobotDatasetMetadata(f"local/{res.path.name}", root=res.path)
    assert meta.total_episodes == EPISODES and meta.fps == rate and meta.robot_type == "widowx"
    assert sorted(meta.tasks.index) == ["push the object", "reach the object"]
    actions = np.concatenate([store.load(i, images=False).steps["action"] for i in store.episode_ids()])
    np.testing.assert_allclose(meta.stats["action"]["mean"], actions.mean(axis=0), rtol=1e-5, atol=1e-7)
    assert meta.stats["observation.images.primary"]["mean"].shape == (3, 1, 1)
