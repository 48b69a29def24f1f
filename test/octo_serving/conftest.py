"""Make the helpers (fake_octo, test_octo_backend, test/octo's octo_testlib) importable.

ros_env, rclpy_context and client_node are session-wide: test/conftest.py.
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for d in (_HERE, _HERE.parent / "octo"):
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))
