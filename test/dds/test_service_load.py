"""NextTask under concurrent load: N clients, each with one request in flight, for a bounded time (issue 33 item 4).

With the services' default QoS (keep-last depth 10) the request queue of /amf/next_task held 10 requests of all
clients together: one that arrived while 10 waited for the executor replaced the oldest, which was never answered
(an outside probe: 89 of 3,594 lost with 50 clients over 60 s). The services now use amf_ros.ros.qos.SERVICES,
sized for the callers they must take. Every request must be answered (a lost request is never answered: the client
would wait forever). Latency p50/p99 is printed for the record, never asserted.

Each client first gets one answer, resending as the package's clients do (amf_ros/ros/client.py call_resending):
rmw_fastrtps drops a response when the server has not yet discovered the client's response reader 100 ms after the
request (RESEND_AFTER_S there), which 50 clients discovered at once on a loaded machine hit (CI, session 32: 1 of
373 requests, p99 1032 ms). That is discovery, which AMFClient handles by resending, not the queue depth measured
here, so the load starts once every client has been answered.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytestmark = pytest.mark.ros

LOAD_S = 2.0
"""Seconds each client keeps sending; with depth 10 the first burst of 50 (and later bursts of 10) already loses."""
DRAIN_S = 20.0
"""Bound on waiting for the last answers after sending stopped; a request unanswered past it is counted lost (the
selector answers one request in a few ms, so this is > 100x the queue of 50 even on a loaded 2-core machine)."""


def load(node, n_clients: int, seconds: float) -> tuple[int, list[float], int]:
    """(requests sent, latencies of the answered ones in s, answers with ok=false): each client sends its next
    request as soon as its previous one is answered, until ``seconds`` have passed."""
    from amf_ros.ros import qos
    from amf_ros.ros.client import call_resending
    from amf_ros.srv import NextTask

    clients = [node.create_client(NextTask, "/amf/next_task", qos_profile=qos.SERVICES) for _ in range(n_clients)]
    try:
        for c in clients:
            assert c.wait_for_service(timeout_sec=60), "next_task did not appear"
        for c in clients:  # discovery complete both ways (see the module docstring)
            call_resending(c, NextTask.Request(), timeout=60.0)
        lock = threading.Lock()
        sent, refused = [0], [0]
        latencies: list[float] = []
        all_answered = threading.Event()
        deadline = time.monotonic() + seconds

        def send(client) -> None:
            with lock:
                sent[0] += 1
            t0 = time.monotonic()
            client.call_async(NextTask.Request()).add_done_callback(lambda f: answered(client, t0, f))

        def answered(client, t0: float, future) -> None:
            now = time.monotonic()
            with lock:
                latencies.append(now - t0)
                refused[0] += not future.result().ok
                if now >= deadline and len(latencies) == sent[0]:
                    all_answered.set()
            if now < deadline:
                send(client)

        for c in clients:
            send(c)
        time.sleep(seconds)
        all_answered.wait(DRAIN_S)
        with lock:
            return sent[0], list(latencies), refused[0]
    finally:
        for c in clients:
            node.destroy_client(c)


@pytest.mark.parametrize("n_clients", [10, 50])
def test_next_task_answers_every_request_of_concurrent_clients(start_nodes, client_node, n_clients):
    procs = start_nodes({"task_selector": {"selector": "round_robin", "tasks_file": "config/tasks/metaworld.yaml"}},
                        name="selector")  # round_robin: no policy needed
    sent, latencies, refused = load(client_node, n_clients, LOAD_S)
    lost = sent - len(latencies)
    p50, p99 = (np.percentile(latencies, [50, 99]) * 1e3) if latencies else (float("nan"), float("nan"))
    print(f"\nnext_task, {n_clients} concurrent clients for {LOAD_S:g} s: {sent} requests, {lost} lost, "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    assert sent >= n_clients and lost == 0, f"{lost} of {sent} requests never answered"
    assert refused == 0 and procs.dead() == {}
