"""ROS-free, I/O-free heart of AMF: posterior algebra, the criterion, importance weights, selectors, adaptive prior.

Depends on numpy (and scipy) only.
"""
