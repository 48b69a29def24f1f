"""The WidowX AI in Trossen's own simulator (trossen-arm-sim): the Bridge-style tabletop of amf_ros/envs/widowx_sim,
driven by Trossen's driver over the controller's wire protocol on loopback."""
