"""`amf run`: the main job (the AMF loop on the embedded simulation) on top of the node graph."""
