"""amf_ros: active multi-task fine-tuning for a WidowX arm driven by Octo.

Importing the package pulls in neither torch, jax nor rclpy; heavy backends load lazily
(see :mod:`amf_ros._optional`). In a colcon install the generated ROS interfaces live in the same
package: ``amf_ros.msg``, ``amf_ros.srv``, ``amf_ros.action``.
"""

from pkgutil import extend_path

# Why: run from the repository root, `import amf_ros` finds this source folder first, which has no generated
# msg/srv/action; extending __path__ also searches the colcon install's amf_ros (on PYTHONPATH).
__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"
