"""rosbag2 import: bags written here with rosbags (sqlite3 and MCAP) become the same episode as live recording."""

from __future__ import annotations

import numpy as np
import pytest

rosbags = pytest.importorskip("rosbags")

from bag_session import MS, NO_HORIZON, TS, T, header, image_for, session, write_bag  # noqa: E402,F401
from rosbags.rosbag2 import StoragePlugin  # noqa: E402

from amf_ros.data.bag_import import bag_topics, import_bag, resolve_topics  # noqa: E402
from amf_ros.data.bag_write import write_bag as _write_bag  # noqa: E402
from amf_ros.data.recorder import record_messages  # noqa: E402
from amf_ros.data.store import EpisodeStore  # noqa: E402


@pytest.mark.parametrize("plugin", [StoragePlugin.SQLITE3, StoragePlugin.MCAP])
@pytest.mark.parametrize("compressed", [False, True])
def test_bag_import_equals_live_recording(tmp_path, plugin, compressed):
    msgs = session(20, "/wx250s/joint_states", "/blue/image_raw", compressed)
    bag = tmp_path / "bag"
    write_bag(bag, msgs, plugin)
    assert bag_topics(bag)["/amf/action"] == "amf_ros/msg/EefDeltaAction"
    result = import_bag(bag, EpisodeStore(tmp_path / "imported"), "carrot", "put the carrot on the plate",
                        robot="widowx250s")
    topics = {"/amf/action": "action", "/wx250s/joint_states": "state", "/blue/image_raw": "image_primary"}
    assert result.topics == topics and result.messages_read == len(msgs)
    imported = EpisodeStore(tmp_path / "imported").load(result.path.name)
    # "Live": the same messages, in arrival order, stamped with their headers, through the recorder.
    live_path = record_messages(EpisodeStore(tmp_path / "live"), [(topic, _stamp(m), m) for _, topic, _, m in msgs],
                                "carrot", "put the carrot on the plate", topics, robot="widowx250s")
    live = EpisodeStore(tmp_path / "live").load(live_path.name)
    assert imported.steps.keys() == live.steps.keys()
    for key in imported.steps:
        np.testing.assert_array_equal(imported.steps[key], live.steps[key], err_msg=key)
    # And the content is right: action k with joint state k and image k (not the next ones).
    ks = imported.steps["action"][:, 0].astype(int)
    assert ks.tolist() == list(range(0, 20, 2)) and len(imported) == 10
    np.testing.assert_array_equal(imported.observation["state"][:, 0], ks)
    np.testing.assert_array_equal(imported.observation["image_primary"], np.stack([image_for(k) for k in ks]))
    assert imported.meta.state_names == ["waist", "shoulder", "gripper"]
    assert imported.meta.topics["image_primary"] == "/blue/image_raw"


def _stamp(msg) -> int:
    return msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec


def test_resolve_topics_errors():
    avail = {"/amf/action": "amf_ros/msg/EefDeltaAction", "/cam1": "sensor_msgs/msg/Image",
             "/cam2": "sensor_msgs/msg/Image", "/amf/observation/state": "amf_ros/msg/StateVector"}
    with pytest.raises(ValueError, match="several topics"):
        resolve_topics(avail)
    got = resolve_topics(avail, images={"image_primary": "/cam2", "image_wrist": "/cam1"})
    assert got == {"/amf/action": "action", "/amf/observation/state": "state", "/cam2": "image_primary",
                   "/cam1": "image_wrist"}
    with pytest.raises(ValueError, match="not in the bag"):
        resolve_topics(avail, state="/nope", images={})
    with pytest.raises(ValueError, match="no topic"):
        resolve_topics({"/cam1": "sensor_msgs/msg/Image"})


def test_rclpy_serialized_messages_import(tmp_path):
    """Live rclpy messages serialised by rclpy go into a bag as CDR bytes and import like the rest."""
    from build_products import missing_build_product

    try:
        from rclpy.serialization import serialize_message
        from sensor_msgs.msg import JointState

        from amf_ros.msg import EefDeltaAction
    except ImportError as exc:  # rclpy and sensor_msgs: the ROS 2 wheels; amf_ros.msg: the colcon build
        missing_build_product(f"ROS 2 messages or amf_ros interfaces not available ({exc}): run scripts/setup.sh")
    msgs = []
    for k in range(6):
        js = JointState(name=["a"], position=[float(k)])
        js.header.stamp.sec, js.header.stamp.nanosec = k, 0
        act = EefDeltaAction(translation=[float(k), 0.0, 0.0], rotation=[0.0, 0.0, 0.0], gripper=1.0)
        act.header.stamp.sec, act.header.stamp.nanosec = k, 100_000_000
        msgs.append((k * 10**9 + 1, "/js", "sensor_msgs/msg/JointState", serialize_message(js)))
        msgs.append((k * 10**9 + 100_000_001, "/amf/action", "amf_ros/msg/EefDeltaAction", serialize_message(act)))
    bag = _write_bag(tmp_path / "bag", msgs, "sqlite3")
    res = import_bag(bag, EpisodeStore(tmp_path / "ds"), "t", "i", topics={"/amf/action": "action", "/js": "state"},
                     sync=__import__("amf_ros.data.sync", fromlist=["SyncConfig"]).SyncConfig(mode="on_action"))
    ep = EpisodeStore(tmp_path / "ds").load(res.path.name)
    assert ep.steps["action"][:, 0].tolist() == list(range(6))
    assert ep.observation["state"][:, 0].tolist() == list(range(6))


def test_lenient_deserialize_limits():
    from amf_ros.data.cdr_fixup import lenient_deserialize

    msg = T["amf_ros/msg/EefDeltaAction"](header=header(5), translation=np.array([1, 2, 3], np.float32),
                                          rotation=np.zeros(3, np.float32), gripper=0.5, valid_for=NO_HORIZON)
    raw = bytes(TS.serialize_cdr(msg, "amf_ros/msg/EefDeltaAction"))
    got = lenient_deserialize(raw + bytes(8), "amf_ros/msg/EefDeltaAction", TS)
    assert got.translation.tolist() == [1, 2, 3] and got.gripper == 0.5
    with pytest.raises(ValueError, match="bytes left"):
        lenient_deserialize(raw + bytes(12), "amf_ros/msg/EefDeltaAction", TS)
    with pytest.raises(ValueError, match="encapsulation"):
        lenient_deserialize(b"\x07\x07\x00\x00" + raw[4:], "amf_ros/msg/EefDeltaAction", TS)
