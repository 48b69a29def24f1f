"""The operator console: a web page beside the robot that says which task to demonstrate next and why (no rclpy)."""
