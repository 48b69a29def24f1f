"""The embedded WidowX's scripted experts: pick-and-place and pushing, each a function of the observation alone.

Why stateless (as Metaworld's scripted policies): the same expert runs inside the suite and in scripted_teleop,
which sees only the published observation (14,) = 8-D proprio, the moved object's xyz and the receptacle's (or the
mark's) xyz; a policy cloned from it learns a function of the state. Closing the loop follows from it: the phase is
read off the state at every step, so a missed grasp (fingers closed on nothing, or on an object that then slips) is
followed by opening and a new approach, and a dropped object is picked up again from wherever it lies.

Pick and place (``skill: place``; put on, put in, stack):

- not held: move above the object, descend while centring until the fingertips press on what the object rests on
  (the pads reach down to the tips and the tips slide, :mod:`amf_ros.envs.widowx_sim.model`), close;
- held (fingers closed but not empty, the object between them): rise to the carrying height, carry it over the
  receptacle, lower it until it is just above the supporting surface, open;
- placed (the object lies on the receptacle and the fingers are open): back off upwards and wait.

Pushing (``skill: push``; the target is a mark on the table): with the fingers closed as a pusher, go behind the
object on the line from the object to the mark, lower to just above the table, and push along that line, steering
sideways as the object turns; re-approach from above when the pusher is no longer behind the object.

Tolerances are wide enough for a noisy hand: the fingers close within 10 mm of the object's centre (a grasp within
about 1 cm holds: ``python -m amf_ros.bench.widowx_expert`` measures it), and the approach and lowering keep
centring instead of starting over when noise pushes the gripper off by a centimetre or two.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from amf_ros.envs.widowx_sim.objects import BODIES

CLEAR_Z = 0.12
"""Carrying height of the gripper tip, m (above the walls of the basket and the pot)."""
ABOVE = 0.04
"""Approach height of the tip above the object's top, m."""
PRESS = 0.004
"""The grasp aims the tip this far below the object's bottom, m: the fingertips rest on the surface under it."""
CLOSE_XY = 0.010
"""Horizontal distance (m) from the object's centre within which the fingers close."""
DESCEND_XY = 0.022
"""Horizontal distance (m) within which the gripper descends onto the object, centring on the way; farther off it
moves above the object first."""
OPEN = 0.9
"""Measured opening (1 = open) above which the fingers count as open."""
EMPTY = 0.1
"""Measured opening below which closed fingers hold nothing (the smallest object, the spoon, keeps them at ~0.33)."""
DROP = 0.012
"""Height (m) of the held object's bottom above the receptacle's surface when it is let go."""
LOWER_XY = 0.03
"""Horizontal distance (m) from the spot over the receptacle within which a held object is lowered, centring on the
way; farther off it is carried at :data:`CLEAR_Z`."""
PUSH_Z = 0.006
"""Height of the tip above the table while pushing, m (the pads hit the object's lower half)."""
PUSH_STEP = 0.025
"""Largest push per step, m (5 Hz: 12.5 cm/s)."""
PUSHER = 0.012
"""Half width of the closed fingers seen from the object, m."""
PUSH_LATERAL = 0.015
"""Sideways offset (m) of the pusher from the object's centre line within which pushing goes on."""
ROTATION_GAIN = 0.25
"""Largest rotation per step that turns the gripper back to pointing straight down, rad."""


class TaskFacts(Protocol):
    """What the experts read off a task spec."""

    source: str
    target: str
    skill: str


def release_tolerance(target: str) -> float:
    """Horizontal distance (m) from the receptacle's centre within which a held object is let go: the landing zone
    less 2 cm (the noise of the last step and the fall), at least 7 mm, at most 2 cm."""
    _, size = BODIES[target].landing
    return float(np.clip(size - 0.02, 0.007, 0.02))


def placed(obs: np.ndarray, spec: TaskFacts) -> bool:
    """The object lies on its receptacle (within the landing zone's inscribed disc, at the resting height)."""
    src, tgt = obs[8:11], obs[11:14]
    target, source = BODIES[spec.target], BODIES[spec.source]
    rest = target.top + source.half_height
    on = np.hypot(*(src[:2] - tgt[:2])) <= target.landing[1] and abs(src[2] - rest) <= 0.01
    return bool(on)


def scripted_action(obs: np.ndarray, spec: TaskFacts, max_step: float) -> np.ndarray:
    """The scripted expert's EefDeltaAction (7,) (gripper 1 = open) from the observation (14,) alone (module doc).

    Args:
        obs: [x, y, z, roll, pitch, yaw, pad, gripper, object xyz, receptacle xyz] (base frame, m and rad).
        spec: the task (``source``, ``target``, ``skill``).
        max_step: largest translation per axis and step, m (the driver's ``max_translation``).
    """
    obs = np.asarray(obs, dtype=np.float64)
    if obs.shape != (14,):
        raise ValueError(f"expected an observation of shape (14,), got {obs.shape}")
    a = np.zeros(7)
    a[3:6] = np.clip(-obs[3:6], -ROTATION_GAIN, ROTATION_GAIN)  # straight down (rpy 0 relative to DEFAULT_ROTATION)
    if spec.skill == "push":
        waypoint, a[6] = _push(obs, spec)
    else:
        waypoint, a[6] = _place(obs, spec)
    if waypoint is not None:
        a[:3] = np.clip(np.asarray(waypoint) - obs[:3], -max_step, max_step)
    return a


def _place(obs: np.ndarray, spec: TaskFacts) -> tuple[tuple[float, float, float] | None, float]:
    """Pick and place: (waypoint of the tip or None = stay, gripper command)."""
    ee, grip, src, tgt = obs[:3], obs[7], obs[8:11], obs[11:14]
    body, target = BODIES[spec.source], BODIES[spec.target]
    bottom, top = src[2] - body.half_height, src[2] + body.half_height
    to_src = np.hypot(*(src[:2] - ee[:2]))
    rise = src[2] - ee[2]  # the object's centre above the tip
    held = EMPTY < grip < OPEN and to_src < 0.025 and -0.01 < rise < 0.045
    if held:
        over = ee[:2] + (tgt[:2] - src[:2])  # where the tip goes so that the object ends above the receptacle
        off = np.hypot(*(tgt[:2] - src[:2]))
        place_z = target.top + DROP + body.half_height - rise  # tip height that puts the object's bottom DROP high
        if off > LOWER_XY:  # carry at the clearance height (rise first)
            return ((*over, CLEAR_Z) if ee[2] >= CLEAR_Z - 0.02 else (*ee[:2], CLEAR_Z)), 0.0
        if off > release_tolerance(spec.target) or ee[2] > place_z + 0.01:  # lower it, centring on the way
            return (*over, place_z), 0.0
        return None, 1.0  # let go
    if grip >= OPEN and placed(obs, spec):  # done: back off upwards
        return (*ee[:2], max(ee[2], top + ABOVE)), 1.0
    above = top + ABOVE
    grasp_z = bottom - PRESS
    if to_src > DESCEND_XY:  # move above the object (rise first when low, so the fingers do not sweep it away)
        return ((*src[:2], above) if ee[2] >= top + 0.005 else (*ee[:2], above)), 1.0
    if grip < OPEN:  # closed on nothing or on a slipping object: open where it is, then try again
        return (*src[:2], max(ee[2], bottom + 0.01)), 1.0
    if to_src <= CLOSE_XY and ee[2] <= bottom + max(0.006, 0.75 * body.half_height):
        return None, 0.0  # close
    return (*src[:2], grasp_z), 1.0  # descend, centring on the way


def _push(obs: np.ndarray, spec: TaskFacts) -> tuple[tuple[float, float, float] | None, float]:
    """Push the object onto the mark with closed fingers: (waypoint of the tip, gripper command 0 = closed)."""
    ee, src, tgt = obs[:3], obs[8:11], obs[11:14]
    body = BODIES[spec.source]
    top = src[2] + body.half_height
    clear = top + 0.03
    to_go = tgt[:2] - src[:2]
    dist = float(np.hypot(*to_go))
    if dist < 0.008:  # there: lift the pusher off
        return (*ee[:2], clear), 0.0
    u = to_go / dist
    n = np.array([-u[1], u[0]])
    rel = ee[:2] - src[:2]
    along, lateral = float(rel @ u), float(rel @ n)
    if along < -0.01 and abs(lateral) < PUSH_LATERAL and ee[2] < top:  # behind it and low: push, steering sideways
        step = min(dist, PUSH_STEP)
        xy = ee[:2] + u * step - n * lateral
        return (*xy, PUSH_Z), 0.0
    start = src[:2] - u * (body.radius + PUSHER + 0.008)  # where pushing starts
    off = float(np.hypot(*(ee[:2] - start)))
    if off <= 0.015 or (along < -body.radius and ee[2] < top):  # at the start, or behind it and low: go there, low
        return (*start, PUSH_Z), 0.0
    if ee[2] < clear - 0.01 and along > -body.radius - 0.005:  # beside or past it and low: rise first
        return (*ee[:2], clear), 0.0
    return (*start, clear), 0.0
