"""Demonstration data: episode schema, crash-safe episode store, RLDS export, rosbag2 import."""
