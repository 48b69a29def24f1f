"""Benchmarks behind `amf bench NAME`; every one writes the results.json of :mod:`amf_ros.bench.results`."""
