"""demo_recorder's decisions that need no ROS: start checks, when an ending episode has settled, what to do with
partial episodes, and throttling of per-message error logs. Unit-tested without rclpy.
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

from amf_ros.data.store import EpisodeStore


def stream_topics(action_topic: str, state_topic: str, image_topics: Sequence[str],
                  image_keys: Sequence[str] = ()) -> dict[str, str]:
    """topic -> stream name for the synchroniser: "action", "state" (if ``state_topic``), one image key per camera
    (default ``image_primary``, ``image_1``, ...)."""
    keys = list(image_keys) or ["image_primary", *(f"image_{i}" for i in range(1, len(image_topics)))]
    keys = keys[:len(image_topics)] if not image_keys else keys
    if len(keys) != len(image_topics) or not all(k.startswith("image") for k in keys):
        raise ValueError(f"image_keys must name every image topic with a key starting with 'image', got "
                         f"{list(image_keys)} for {list(image_topics)}")
    topics = {action_topic: "action", **dict(zip(image_topics, keys))}
    if state_topic:
        topics[state_topic] = "state"
    if len(topics) != 1 + len(image_topics) + bool(state_topic):
        raise ValueError(f"every recorded topic must be distinct, got {action_topic=}, {state_topic=}, "
                         f"{list(image_topics)}")
    return topics


def start_problem(received: Mapping[str, float], now: float, timeout_s: float, action_topic: str,
                  action_publishers: int) -> str:
    """Why an episode cannot start ("" = it can).

    Args:
        received: topic -> monotonic time its newest message arrived (-1 = never).
        now: monotonic time now.
        timeout_s: an observation topic silent for longer is considered dead.
        action_topic: the teleop topic; it only needs a publisher (teleop starts when the episode does).
        action_publishers: number of publishers on the action topic.
    """
    problems = [f"no message on {topic} for {timeout_s} s" for topic, r in received.items()
                if topic != action_topic and (r < 0 or now - r > timeout_s)]
    if action_publishers == 0:
        problems.append(f"no publisher on the action topic {action_topic}")
    return "; ".join(problems)


def settled(last_stamp: Mapping[str, int], received: Mapping[str, float], t_end_ns: int, since: float,
            now: float, quiet_s: float) -> bool:
    """True when every topic delivered a message stamped at/after ``t_end_ns``, or nothing arrived on it for
    ``quiet_s`` counted from ``since`` (the request) at the earliest, so that messages already queued when the
    request came in get taken first.

    Args:
        last_stamp: topic -> header stamp (ns) of its newest message (missing = none).
        received: topic -> monotonic receive time of its newest message (-1 = never).
        t_end_ns: when EndEpisode was requested (node clock, ns).
        since: when EndEpisode was requested (monotonic).
        now: monotonic time now.
        quiet_s: silence that counts as "nothing more in flight".
    """
    return all(last_stamp.get(topic, -1) >= t_end_ns or now - max(r, since) >= quiet_s
               for topic, r in received.items())


def handle_partial(store: EpisodeStore, policy: str, min_age_s: float) -> list[str]:
    """Recover, ignore or discard the episodes a crash left partial; returns one line per episode saying which.

    Args:
        policy: "recover" (commit the complete chunks; meta.recovered = true), "ignore" or "discard".
        min_age_s: a partial episode modified more recently may belong to a live recorder: left as is.
    """
    if policy not in ("recover", "ignore", "discard"):
        raise ValueError(f"policy must be recover, ignore or discard, got {policy=}")
    lines = []
    for part in store.partial():
        what = f"partial episode {part.episode_id} ({part.num_steps} steps in complete chunks)"
        if policy == "ignore" or part.age_s < min_age_s:
            lines.append(f"{what}: left as is (on_partial={policy}, age {part.age_s:.1f} s)")
        elif policy == "discard":
            store.discard_partial(part.episode_id)
            lines.append(f"{what}: discarded")
        else:
            res = store.recover(part.episode_id)
            lines.append(f"{what}: {res.action} ({res.reason})")
    return lines


class ErrorThrottle:
    """At most one log line per ``period_s`` per kind of problem (a broken 30 Hz camera must not flood the log);
    the suppressed ones are counted into the next line."""

    def __init__(self, period_s: float = 1.0) -> None:
        self.period_s = period_s
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # kind -> (time of last line, suppressed)

    def line(self, kind: tuple[str, str], text: str, now: float | None = None) -> str | None:
        """The line to log for this problem now, or None if it is suppressed."""
        now = time.monotonic() if now is None else now
        last, suppressed = self._last.get(kind, (float("-inf"), 0))
        if now - last < self.period_s:
            self._last[kind] = (last, suppressed + 1)
            return None
        self._last[kind] = (now, 0)
        return text + (f" ({suppressed} similar messages not logged)" if suppressed else "")
