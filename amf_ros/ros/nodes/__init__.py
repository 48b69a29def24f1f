"""One thin adapter per node (`ros2 run amf_ros <node>`): parameters in, runtime calls, messages out."""
