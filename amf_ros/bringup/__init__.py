"""Bring-up in the ROS sense: the node graph shared by launch files and `amf up`, the process manager, the
parameter tables (one per node) and the embedded simulation's pre-trained checkpoint. No rclpy here (enforced by
test/test_boundaries.py), so launch files and `amf up --dry-run` read the plan on any machine.
"""
