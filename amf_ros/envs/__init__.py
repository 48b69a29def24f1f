"""Environments: the paper's 2D integrator, a Metaworld suite with scripted experts, the SIMPLER adapter."""
