"""AMFClient resends a request until a service has answered it once (rmw_fastrtps drops a response whose client it
has not discovered yet: amf_ros/ros/client.py RESEND_AFTER_S), and never resends where a repeat would do harm."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("rclpy")


class LossyClient:
    """A service client stub whose first ``lost`` requests are never answered (their responses were dropped)."""

    def __init__(self, lost: int, answer_after_s: float = 0.0) -> None:
        from rclpy.task import Future

        self.Future, self.lost, self.answer_after_s = Future, lost, answer_after_s
        self.srv_name, self.sent, self.removed = "/amf/next_task", [], []

    def wait_for_service(self, timeout_sec: float) -> bool:
        return True

    def call_async(self, request):
        future = self.Future()
        self.sent.append((time.monotonic(), request))
        if len(self.sent) > self.lost:
            threading.Timer(self.answer_after_s, future.set_result,
                            args=(SimpleNamespace(ok=True, copy=len(self.sent)),)).start()
        return future

    def remove_pending_request(self, future) -> None:
        self.removed.append(future)


def _call(client: LossyClient, owner: SimpleNamespace, resend: bool = True, timeout: float = 20.0):
    from amf_ros.ros.client import AMFClient

    return AMFClient._call(owner, client, SimpleNamespace(), timeout, True, resend=resend)


def test_a_lost_first_answer_is_asked_again_and_the_unanswered_copies_are_dropped():
    from amf_ros.ros.client import RESEND_AFTER_S

    owner, cli = SimpleNamespace(_answered=set()), LossyClient(lost=2)
    resp = _call(cli, owner)
    assert resp.ok and resp.copy == 3  # sends 1 and 2 lost, the third answered
    gaps = [b[0] - a[0] for a, b in zip(cli.sent, cli.sent[1:], strict=False)]
    assert gaps[0] >= RESEND_AFTER_S and gaps[1] >= 2 * RESEND_AFTER_S  # backs off, doubling
    assert len(cli.removed) == 2  # the lost copies no longer wait for an answer
    assert cli.srv_name in owner._answered


def test_after_the_first_answer_and_where_a_repeat_harms_nothing_is_resent():
    from amf_ros.ros.client import ROSCallError

    answered = LossyClient(lost=0, answer_after_s=2.5)  # a slow answer of a service that answered before
    resp = _call(answered, SimpleNamespace(_answered={answered.srv_name}))
    assert resp.copy == 1 and len(answered.sent) == 1
    lost = LossyClient(lost=1)  # start_episode: a second start would be refused as "already recording"
    with pytest.raises(ROSCallError, match="no answer within 3 s"):
        _call(lost, SimpleNamespace(_answered=set()), resend=False, timeout=3.0)
    assert len(lost.sent) == 1
