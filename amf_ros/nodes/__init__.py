"""Thin rclpy adapters around the library. Importing a node module requires rclpy."""
