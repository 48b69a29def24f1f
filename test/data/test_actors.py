"""Who acted at each step (the ``actor`` column of amf_ros/data/schema.py): written by the recorder from the control
changes, validated, absent in older episodes (all a person's), and the training rule of amf_ros/data/transitions.py
(a person's steps are the demonstrations, each run its own episode_index)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from synthetic_store import write_synthetic_episodes

from amf_ros.data.recorder import EpisodeRecorder, actor_at
from amf_ros.data.schema import ACTOR, ACTOR_HUMAN, ACTOR_POLICY, EpisodeValidationError, actors
from amf_ros.data.store import EpisodeStore
from amf_ros.data.sync import SyncConfig
from amf_ros.data.transitions import EpisodeCache, demonstration_runs, human_rows, load_transitions
from amf_ros.runtime.fine_tune_worker import write_transitions

P, H = ACTOR_POLICY, ACTOR_HUMAN


def _episode(store: EpisodeStore, who: list[int] | None, task: str = "reach") -> str:
    w = store.begin(task, "reach the goal")
    for i, a in enumerate(who if who is not None else [H] * 6):
        w.add_step({"state": np.full(3, i, np.float32)}, np.full(7, i, np.float32), stamp_ns=1000 + i,
                   actor=None if who is None else a)
    w.commit(True)
    return w.episode_id


def _state(v: float) -> SimpleNamespace:
    """A StateVector-like message of value ``v`` (what the recorder's converters read)."""
    return SimpleNamespace(values=[float(v)] * 3, names=[])


def _action(v: float) -> SimpleNamespace:
    """An EefDeltaAction-like message moving ``v`` along x."""
    return SimpleNamespace(translation=[float(v), 0, 0], rotation=[0, 0, 0], gripper=1.0)


def test_actor_at_takes_the_holder_announced_strictly_before_the_stamp() -> None:
    changes = [(100, "policy"), (200, "human"), (300, "policy"), (400, "")]
    assert [actor_at(changes, t) for t in (50, 100, 101, 200, 201, 300, 301, 400, 401)] == [H, H, P, P, H, H, P, P, H]
    assert actor_at([], 5) == H


def test_the_column_round_trips_and_older_episodes_count_as_all_human(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path)
    mixed = _episode(store, [P, P, H, H, P, P])
    legacy = _episode(store, None)
    ep = store.load(mixed)
    assert ep.steps[ACTOR].dtype == np.uint8
    np.testing.assert_array_equal(actors(ep.steps), [P, P, H, H, P, P])
    old = store.load(legacy)
    assert ACTOR not in old.steps
    np.testing.assert_array_equal(actors(old.steps), [H] * 6)


def test_a_bad_actor_value_or_a_missing_one_is_refused(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path)
    w = store.begin("reach", "reach the goal")
    with pytest.raises(ValueError, match="actor must be one of"):
        w.add_step({"state": np.zeros(3, np.float32)}, np.zeros(7, np.float32), stamp_ns=1, actor=7)
    w.add_step({"state": np.zeros(3, np.float32)}, np.zeros(7, np.float32), stamp_ns=2, actor=H)
    with pytest.raises(ValueError):  # labelled at one step, so at every step
        w.add_step({"state": np.zeros(3, np.float32)}, np.zeros(7, np.float32), stamp_ns=3)
    w.discard()
    from amf_ros.data.schema import validate_steps

    steps = {"action": np.zeros((2, 7), np.float32), "stamp_ns": np.array([1, 2], np.int64),
             "is_first": np.array([True, False]), "is_last": np.array([False, True]),
             "is_terminal": np.array([False, False]), ACTOR: np.array([0, 2], np.uint8)}
    with pytest.raises(EpisodeValidationError, match="actor"):
        validate_steps(steps, "x")


def test_demonstration_runs() -> None:
    assert demonstration_runs(np.array([P, P, H, H, P, H]), "human") == [(2, 4), (5, 6)]
    assert demonstration_runs(np.array([H, H]), "human") == [(0, 2)]
    assert demonstration_runs(np.array([P, P]), "human") == []
    assert demonstration_runs(np.array([P, H]), "all") == [(0, 2)]
    with pytest.raises(ValueError, match="actors must be one of"):
        demonstration_runs(np.array([H]), "policy")


def test_fine_tuning_data_holds_the_persons_steps_each_run_its_own_demonstration(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path)
    _episode(store, None)  # a plain demonstration of the old layout
    _episode(store, [P, P, H, H, P, H])  # an intervention: two take-overs
    _episode(store, [P] * 6)  # a policy rollout nobody corrected
    t = load_transitions(tmp_path)
    assert len(t["action"]) == 6 + 3 and set(t[ACTOR].tolist()) == {H}
    np.testing.assert_array_equal(t["episode_index"], [0] * 6 + [1, 1, 2])  # one per run: chunks never span a gap
    np.testing.assert_array_equal(t["step"], [0, 1, 2, 3, 4, 5, 2, 3, 5])
    np.testing.assert_array_equal(t["action"][6:, 0], [2, 3, 5])  # the person's actions, at their own steps
    everything = load_transitions(tmp_path, actors="all")
    assert len(everything["action"]) == 18 and set(everything["episode_index"].tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(human_rows(everything)["action"], t["action"])  # the worker's guard agrees
    cache = EpisodeCache(tmp_path, "eef7")
    assert [len(x["action"]) for _, x in cache.episodes()] == [6, 3]  # the rollout without a person's step: none
    assert load_transitions(tmp_path, episode_ids=[store.episode_ids()[2]]) is None


def test_the_worker_trains_on_the_persons_rows_only(tmp_path: Path) -> None:
    from amf_ros.data.transitions import load_transitions as load

    store = EpisodeStore(tmp_path / "d")
    _episode(store, [P, H, H, P, P, P])
    data = load(tmp_path / "d", actors="all")
    path = write_transitions(data, tmp_path / "t.npz")
    with np.load(path) as npz:
        kept = human_rows({k: npz[k] for k in npz.files})
    np.testing.assert_array_equal(kept["action"][:, 0], [1, 2])


def test_the_recorder_labels_steps_by_the_control_changes(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path)
    sync = SyncConfig(rate_hz=5.0, mode="on_action", max_obs_age_s=1e9, max_delay_s=1e9)
    rec = EpisodeRecorder(store, {"/a": "action", "/s": "state"}, sync)
    rec.control(100, "")  # policy_server's "no goal" at its start
    rec.start("reach", "reach the goal", start_ns=150)
    rec.control(200, "policy")
    rec.control(600, "human")  # out of order on purpose: kept sorted
    rec.control(400, "human")
    rec.control(500, "policy")
    for i, stamp in enumerate((300, 450, 550, 650, 700)):
        rec.feed("/s", stamp - 1, _state(i))
        rec.feed("/a", stamp, _action(i))
    rec.feed("/s", 800, _state(9))
    path = rec.end(True)
    ep = store.load(path.name)
    assert len(ep) == 5
    np.testing.assert_array_equal(actors(ep.steps), [P, H, P, H, H])
    assert ep.meta.extra["actors"] == {"human": int((actors(ep.steps) == H).sum()),
                                       "policy": int((actors(ep.steps) == P).sum())}
    assert ep.meta.extra["control"][0] == [100, ""]  # the change in force at the start, then the episode's


def _late_change_episode(store: EpisodeStore, hold_s: float) -> tuple[list[int], list[int]]:
    """The policy acts, then a person takes over at stamp 1.0 s; the change reaches the recorder only after the
    person's first action (as it did in CI). Returns (steps counted right after that action, the labels)."""
    sync = SyncConfig(rate_hz=10.0, mode="on_action", max_obs_age_s=1e9, max_delay_s=1e9)
    rec = EpisodeRecorder(store, {"/a": "action", "/s": "state"}, sync, label_hold_s=hold_s)
    ms = 1_000_000
    rec.control(0, "policy")
    rec.start("reach", "reach the goal", start_ns=1)
    counted = []
    rec.feed("/s", 50 * ms, _state(0))
    for i, stamp in enumerate(range(100 * ms, 2000 * ms, 100 * ms)):
        rec.feed("/a", stamp, _action(i))
        rec.feed("/s", stamp + ms, _state(i))  # decides the step
        counted.append(rec.num_steps)
        if stamp == 1100 * ms:
            rec.control(1000 * ms, "human")  # late: after the action stamped 1.1 s it precedes
    path = rec.end(True)
    return counted, actors(store.load(path.name).steps).tolist()


def test_a_control_change_taken_after_the_actions_it_precedes_still_labels_them(tmp_path: Path) -> None:
    counted, labels = _late_change_episode(EpisodeStore(tmp_path / "held"), hold_s=0.5)
    assert labels == [P] * 10 + [H] * 9
    assert counted == list(range(1, 20))  # held steps count: a client waiting for num_steps is not kept waiting
    _, unheld = _late_change_episode(EpisodeStore(tmp_path / "unheld"), hold_s=0.0)
    assert unheld == [P] * 11 + [H] * 8  # without the hold the person's first action is taken for the policy's


def test_held_steps_are_written_once_a_message_stamped_the_hold_later_arrives(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path)
    sync = SyncConfig(rate_hz=10.0, mode="on_action", max_obs_age_s=1e9, max_delay_s=1e9)
    rec = EpisodeRecorder(store, {"/a": "action", "/s": "state"}, sync, label_hold_s=0.5)
    rec.control(0, "policy")
    rec.start("reach", "reach the goal", start_ns=1)
    ms = 1_000_000
    rec.feed("/s", 99 * ms, _state(0))
    rec.feed("/a", 100 * ms, _action(0))
    rec.feed("/s", 101 * ms, _state(0.5))  # decides the step
    assert rec.num_steps == 1 and rec._writer.num_steps == 0  # held
    rec.feed("/s", 599 * ms, _state(1))
    assert rec._writer.num_steps == 0  # 0.499 s later: still held
    rec.feed("/s", 600 * ms, _state(2))
    assert rec._writer.num_steps == 1 and rec.num_steps == 1
    with pytest.raises(ValueError, match="label_hold_s"):
        EpisodeRecorder(store, {"/a": "action", "/s": "state"}, sync, label_hold_s=-1.0)
    rec.end(None, discard=True)


def test_without_control_changes_the_recorder_writes_no_column(tmp_path: Path) -> None:
    write_synthetic_episodes(tmp_path, ["reach"])
    store = EpisodeStore(tmp_path, create=False)
    assert ACTOR not in store.load(store.episode_ids()[0]).steps


def test_embedded_transitions_follow_the_same_training_rule(tmp_path: Path) -> None:
    """The per-frame embedding caches (Octo's trunk, the camera encoder) build their transitions with the same rule:
    a person's steps, one episode_index per run; every frame is still embedded (the cache keys whole episodes)."""
    from amf_ros.data.octo_embeddings import embedded_transitions

    store = EpisodeStore(tmp_path)
    plain = _episode(store, None)
    mixed = _episode(store, [P, P, H, H, P, H])
    embedded: list[str] = []

    def episode(st: EpisodeStore, eid: str):
        ep = st.load(eid)
        embedded.append(eid)
        return np.asarray(ep.steps["observation/state"], np.float32) * 10.0, ep

    def state(_eid: str, emb: np.ndarray, _ep) -> np.ndarray:
        return emb

    tr = embedded_transitions(tmp_path, episode, state)
    assert embedded == [plain, mixed]
    np.testing.assert_array_equal(tr["episode_index"], [0] * 6 + [1, 1, 2])
    np.testing.assert_array_equal(tr["step"], list(range(6)) + [2, 3, 5])
    np.testing.assert_array_equal(tr[ACTOR], [H] * 9)
    np.testing.assert_array_equal(tr["state"][:, 0], [10.0 * i for i in range(6)] + [20.0, 30.0, 50.0])
    np.testing.assert_array_equal(tr["action"][:, 0], list(range(6)) + [2, 3, 5])
    every = embedded_transitions(tmp_path, episode, state, actors="all")
    assert len(every["step"]) == 12 and set(every[ACTOR][6:].tolist()) == {P, H}
    policy_only = _episode(EpisodeStore(tmp_path / "p"), [P, P])
    assert policy_only and embedded_transitions(tmp_path / "p", episode, state) is None


def test_an_episode_cache_with_a_loader_keeps_each_episode_its_own_rows(tmp_path: Path) -> None:
    """task_selector's cache over an embedding loader (Octo, the camera policy): an intervention episode gives only
    its person's runs, an all-policy one nothing, and the episodes after them keep their own rows (a loader's
    episode_index is no longer one per episode once the training rule splits episodes)."""
    from amf_ros.data.octo_embeddings import embedded_transitions

    store = EpisodeStore(tmp_path)
    first = _episode(store, [P, H, H, P])
    policy_only = _episode(store, [P, P])
    last = _episode(store, None)

    def loader(ids):
        return embedded_transitions(tmp_path, lambda st, eid: (np.zeros((len(st.load(eid)), 2), np.float32),
                                                               st.load(eid)),
                                    lambda _eid, emb, ep: np.asarray(ep.steps["observation/state"]), episode_ids=ids)

    got = dict(EpisodeCache(tmp_path, "eef7", loader=loader).episodes())
    assert set(got) == {first, last} and policy_only not in got
    np.testing.assert_array_equal(got[first]["step"], [1, 2])
    np.testing.assert_array_equal(got[last]["step"], np.arange(6))
    np.testing.assert_array_equal(got[last]["state"][:, 0], np.arange(6))
