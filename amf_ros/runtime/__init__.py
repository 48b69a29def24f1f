"""ROS-free logic of each node, one module per node named after it (typed config in, plain calls out).

A module here owns its threads and processes and never imports rclpy (test/test_boundaries.py); the
adapters in ``amf_ros.ros.nodes`` map messages to these calls.
"""
