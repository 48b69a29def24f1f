"""Octo backend: checkpoint parsing, observation windows, the frozen JAX trunk, head weight conversion, head
checkpoints (heads.py) and acting (actor.py).

Only :mod:`trunk` imports JAX/Octo (lazily, at construction); everything else is numpy (+ torch for the head
conversion) so it is usable and tested without Octo installed.
"""
