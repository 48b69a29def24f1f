"""Policies behind one protocol (:class:`amf_ros.policies.base.Policy`): diffusion head, MLP head, GP; trunks."""
