"""The objects of the embedded WidowX's tabletop: primitive stand-ins for BridgeData's toy-kitchen items.

Why primitives: boxes, capsules and spheres collide cheaply (the benchmark steps thousands of episodes on two
cores), and a state-based policy sees only positions. Sizes are those of the real items, roughly; everything the
gripper holds fits between its open pads (46 mm apart) and is at least 12 mm tall, so the 40 mm pads cover it.

Two kinds of bodies:

- movable objects (``free``): a free joint, placed at every reset; round ones (carrot, eggplant, corn) have rolling
  friction (condim 6), so a finger that nudges them does not send them rolling off the table, as real vegetables
  (not perfect cylinders) do not roll far;
- receptacles and marks (not ``free``): fixed bodies placed at every reset, so a nudge never moves them. Each says
  where a placed object must land (``landing``: a disc radius or a square's half side around its centre) and how
  high its supporting surface is (``top``). The cloth is a mark drawn on the table (no collision: an object slides
  onto it, as onto a real cloth a millimetre thick).

Heights are metres above the table top (z = 0 of ``base_link``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from amf_ros.envs.widowx_sim.model import OBJECT_CONTACT


@dataclass(frozen=True)
class Body:
    """One object of a scene: its name, MJCF geometry (inside the ``<body>``), whether it moves, and its size.

    Attributes:
        half_height: z of its centre above the table when resting in its initial pose, metres.
        radius: horizontal radius of its footprint (receptacles: of the whole receptacle), metres; layouts keep
            objects apart by it and the pushing expert starts this far behind the object.
        top: receptacles: height of the supporting surface (where a placed object's bottom rests), metres.
        landing: receptacles: ``("round", r)`` or ``("square", half_side)``, metres: where a placed object's centre
            must land (in the receptacle's own frame, which turns with its yaw).
    """

    name: str
    geoms: str
    free: bool
    half_height: float
    radius: float = 0.0
    top: float = 0.0
    landing: tuple[str, float] | None = None


_RGBA = {"orange": "0.95 0.45 0.05 1", "white": "0.92 0.92 0.9 1", "grey": "0.6 0.6 0.62 1",
         "blue": "0.25 0.4 0.8 1", "green": "0.1 0.7 0.2 1", "yellow": "0.95 0.85 0.1 1",
         "purple": "0.4 0.1 0.45 1", "brown": "0.55 0.38 0.2 1", "red": "0.8 0.1 0.1 1",
         "corn": "0.98 0.88 0.4 1", "steel": "0.45 0.47 0.5 1", "wood": "0.93 0.8 0.6 1",
         "sponge": "0.6 0.8 0.25 1", "cloth": "0.75 0.2 0.25 1", "navy": "0.1 0.15 0.55 1"}


def _obj(geom: str, colour: str, mass: float, roll: bool = False) -> str:
    """A colliding geom of an object or receptacle (round ones with rolling friction, see module doc)."""
    contact = 'friction="1.2 0.01 0.004" condim="6"' if roll else 'friction="1.2 0.01 0.001" condim="4"'
    return f'<geom {geom} rgba="{_RGBA[colour]}" mass="{mass}" {contact} {OBJECT_CONTACT}/>'


def _walls(shape: str, inner: float, height: float, colour: str, base_top: float) -> str:
    """A floor and the walls of an open container: ``shape`` "square" (4 walls) or "round" (8, an octagon)."""
    t = 0.004  # wall half thickness
    h = height / 2
    a, h0 = inner + 2 * t, base_top / 2
    if shape == "round":  # a disc inside 8 walls
        floor = [_obj(f'type="cylinder" size="{a:.4g} {h0:.4g}" pos="0 0 {h0:.4g}"', colour, 0.1)]
        n, half_len = 8, (inner + t) * math.tan(math.pi / 8) + t
    else:
        floor = [_obj(f'type="box" size="{a:.4g} {a:.4g} {h0:.4g}" pos="0 0 {h0:.4g}"', colour, 0.1)]
        n, half_len = 4, inner + 2 * t
    walls = []
    for k in range(n):
        ang = 2 * math.pi * k / n
        x, y = (inner + t) * math.cos(ang), (inner + t) * math.sin(ang)
        walls.append(_obj(f'type="box" size="{t} {half_len:.4g} {h:.4g}" pos="{x:.4g} {y:.4g} {h:.4g}" '
                          f'euler="0 0 {ang:.4f}"', colour, 0.05))
    return "\n".join(floor + walls)


BODIES: dict[str, Body] = {
    # movable objects (the first four: SIMPLER's WidowX objects)
    "carrot": Body("carrot", _obj('type="capsule" size="0.012 0.03" euler="0 1.5708 0"', "orange", 0.03, roll=True),
                   free=True, half_height=0.012, radius=0.045),
    "spoon": Body("spoon", _obj('type="box" size="0.045 0.008 0.006"', "grey", 0.02), free=True, half_height=0.006,
                  radius=0.045),
    "green_block": Body("green_block", _obj('type="box" size="0.015 0.015 0.015"', "green", 0.03), free=True,
                        half_height=0.015, radius=0.022),
    "eggplant": Body("eggplant", _obj('type="capsule" size="0.015 0.028" euler="0 1.5708 0"', "purple", 0.04,
                                      roll=True), free=True, half_height=0.015, radius=0.045),
    "corn": Body("corn", _obj('type="capsule" size="0.013 0.03" euler="0 1.5708 0"', "corn", 0.04, roll=True),
                 free=True, half_height=0.013, radius=0.045),
    "red_block": Body("red_block", _obj('type="box" size="0.015 0.015 0.015"', "red", 0.03), free=True,
                      half_height=0.015, radius=0.022),
    "sponge": Body("sponge", _obj('type="box" size="0.03 0.02 0.012"', "sponge", 0.05), free=True,
                   half_height=0.012, radius=0.036),
    # receptacles and marks (the first four: SIMPLER's WidowX receptacles)
    "plate": Body("plate", _obj('type="cylinder" size="0.065 0.004"', "white", 0.2), free=False,
                  half_height=0.004, radius=0.065, top=0.008, landing=("round", 0.055)),
    "towel": Body("towel", _obj('type="box" size="0.06 0.06 0.002"', "blue", 0.05), free=False,
                  half_height=0.002, radius=0.06, top=0.004, landing=("square", 0.055)),
    "yellow_block": Body("yellow_block", _obj('type="box" size="0.02 0.02 0.02"', "yellow", 0.1), free=False,
                         half_height=0.02, radius=0.02, top=0.04, landing=("square", 0.014)),
    "basket": Body("basket", _walls("square", 0.052, 0.05, "brown", 0.006), free=False, half_height=0.0,
                   radius=0.05, top=0.006, landing=("square", 0.045)),
    "pot": Body("pot", _walls("round", 0.066, 0.04, "steel", 0.005), free=False, half_height=0.0, radius=0.075,
                top=0.005, landing=("round", 0.035)),
    "cutting_board": Body("cutting_board", _obj('type="box" size="0.07 0.07 0.006"', "wood", 0.2), free=False,
                          half_height=0.006, radius=0.07, top=0.012, landing=("square", 0.055)),
    "blue_block": Body("blue_block", _obj('type="box" size="0.02 0.02 0.02"', "navy", 0.1), free=False,
                       half_height=0.02, radius=0.02, top=0.04, landing=("square", 0.014)),
    "cloth": Body("cloth", f'<geom type="box" size="0.05 0.05 0.0005" rgba="{_RGBA["cloth"]}" contype="0" '
                           'conaffinity="0"/>', free=False, half_height=0.0005, radius=0.05, top=0.0,
                  landing=("square", 0.04)),
}
"""Every object a scene may hold, by name (module doc)."""

RECEPTACLES = tuple(k for k, b in BODIES.items() if b.landing is not None)
"""Names of the bodies an object can be put on or in, or pushed onto."""
MOVABLE = tuple(k for k, b in BODIES.items() if b.free)
"""Names of the objects the gripper moves."""
