"""widowx_driver for a WidowX AI (backend wxai): EefDeltaAction -> Trossen's driver, the arm's state -> 8-D proprio.

The same node name, parameters (amf_ros/bringup/params/widowx_driver.py, ``backend: wxai`` and the ``wxai_*`` ones),
topics and services as the Interbotix widowx_driver (amf_ros/ros/nodes/widowx_driver.py), so every other node is
indifferent to which WidowX runs: ``action`` in, ``action/applied`` (the echo of each action that became the arm's
target), ``observation/state`` (StateVector, published ``state_rate_hz`` times a second from the vendor's forward
kinematics), ``stop`` (ArmStop), ``widowx/estop`` (SetBool), latched ``arm/status``. What each input does is
:class:`amf_ros.robots.wxai.WXAIArm` (the vendor's Cartesian command, the shared action gate and bounds); this file
maps messages to its calls. The driver connects at start, before the node spins (the vendor's connect is bounded by
``wxai_connect_timeout_s``): an address that does not answer ends the process with one line naming it and the bound,
exit 1 (launch and `amf up` restart it: an arm still powering up is found on a later try). An empty ``wxai_ip`` ends
it with one line saying how to give one, exit 78 (no respawn: no restart sets it). On exit the vendor driver's cleanup
sets the joints idle: park the arm first. Without ``trossen_arm`` the process prints one line naming the package to
install and exits 78 (no respawn).
"""

from __future__ import annotations

from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.robots.wxai import NO_IP_LINE, ConnectError, WXAIArm, require_trossen_arm
from amf_ros.ros.arm_driver import ArmDriverNode
from amf_ros.ros.spin import StartupError, spin
from amf_ros.runtime.log_lines import ErrorThrottle


class WXAIDriverNode(ArmDriverNode):
    """See the module docstring (the shared endpoints: amf_ros/ros/arm_driver.py); the state comes from a timer."""

    def __init__(self) -> None:
        super().__init__()
        if self.p.backend != "wxai":
            raise NoRespawnError(f"wxai_driver drives backend 'wxai', got backend={self.p.backend!r}")
        if not self.p.wxai_ip:
            raise NoRespawnError(f"wxai_driver: {NO_IP_LINE}")
        self.rt = WXAIArm(self.p.wxai_config(), throttle=ErrorThrottle())
        self.get_logger().info(f"connecting to the WidowX AI at {self.p.wxai_ip} (at most "
                               f"{self.p.wxai_connect_timeout_s:g} s)")
        try:
            self.rt.connect()
        except ConnectError as exc:
            raise StartupError(f"wxai_driver: {exc}") from None
        self.create_timer(1.0 / self.p.state_rate_hz, self._on_tick, callback_group=self.group)
        self.wire()
        self.get_logger().info(f"ready: {self.p.action_topic} -> WidowX AI at {self.p.wxai_ip}; "
                               f"e-stop {'ENGAGED' if self.rt.stopped else 'released'}")

    def _on_tick(self) -> None:
        self.publish_state(self.rt.observe(), self.get_clock().now().to_msg())


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/wxai_driver``; without trossen_arm: one line on stderr, exit 78."""

    def make() -> WXAIDriverNode:
        try:
            require_trossen_arm()
        except ImportError as exc:
            raise NoRespawnError(f"wxai_driver: {exc}") from None
        return WXAIDriverNode()

    spin(make, args, executor="single")


if __name__ == "__main__":
    main()
