"""Real-robot adapter math (no rclpy): WidowX 250 6DOF kinematics, EefDeltaAction -> joint targets, proprio."""
