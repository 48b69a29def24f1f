"""Bring-up: the node graph, parameter schemas, `amf up` (nodes as processes) and `amf run` (the main job).

Nothing here imports rclpy at module level, so the launch files, the static launch tests and `amf up` can read
the node list and every node's parameter schema on any machine.
"""
