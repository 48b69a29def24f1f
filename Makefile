# The two commands of README.md. Both set up .venv/ and the colcon build by themselves (idempotent).
SHELL := /bin/bash
.PHONY: demo test setup clean

setup:
	@bash scripts/setup.sh

## demo: the main job, the AMF loop on the embedded simulation over ROS 2
demo: setup
	@source scripts/env.sh && amf run $(ARGS)

## test: the whole test suite
test: setup
	@source scripts/env.sh && pytest $(ARGS)

clean:
	rm -rf build install log build.log
