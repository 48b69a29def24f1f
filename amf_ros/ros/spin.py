"""The lifecycle every node's ``main()`` shares: init, build, spin on a MultiThreadedExecutor, clean shutdown.

Why: Ctrl-C / SIGTERM must end a node quietly (rclpy raises KeyboardInterrupt or ExternalShutdownException out
of ``spin``), also when the signal arrives while the node is still being built (rclpy then invalidates the
context and the constructor fails with an RCLError); any other error still ends the process with a traceback.
"""

from __future__ import annotations

from typing import Callable, Sequence

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node


def spin(make_node: Callable[[], Node], args: Sequence[str] | None = None, num_threads: int = 2) -> None:
    """Initialise rclpy, build the node with ``make_node()``, spin it until shutdown, then clean up."""
    rclpy.init(args=args)
    node, executor = None, MultiThreadedExecutor(num_threads=num_threads)
    try:
        node = make_node()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():
            raise  # a real error; an interrupted start shows up as an invalid context instead
    finally:
        executor.shutdown(timeout_sec=2.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
