"""Product-of-exponentials kinematics (Lynch & Park, *Modern Robotics*), numpy only.

Why: Interbotix's Python API (``interbotix_xs_modules.xs_robot.arm``) solves end-effector poses with
``modern_robotics.IKinSpace`` on the screw axes ``Slist`` and home pose ``M`` of ``mr_descriptions.py``; the
amf_ros driver does the same maths without depending on that package, so it can be unit-tested anywhere.
Written from the book's formulas (chapters 3-6); names follow the book (``Slist`` is (6, n), columns are
space-frame screw axes [omega; v]).
"""

from __future__ import annotations

import numpy as np


def skew(w: np.ndarray) -> np.ndarray:
    """(3,) -> so(3) matrix (3, 3)."""
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def exp3(omega_theta: np.ndarray) -> np.ndarray:
    """Rodrigues: exponential coordinates (3,) -> rotation (3, 3)."""
    theta = float(np.linalg.norm(omega_theta))
    if theta < 1e-12:
        return np.eye(3)
    k = skew(np.asarray(omega_theta) / theta)
    return np.eye(3) + np.sin(theta) * k + (1.0 - np.cos(theta)) * k @ k


def exp6(screw: np.ndarray, theta: float) -> np.ndarray:
    """exp([S] theta) for a unit screw axis S = [omega; v] (6,) -> (4, 4)."""
    omega, v = np.asarray(screw[:3], float), np.asarray(screw[3:], float)
    T = np.eye(4)
    if np.linalg.norm(omega) < 1e-12:  # prismatic
        T[:3, 3] = v * theta
        return T
    W = skew(omega)
    R = np.eye(3) + np.sin(theta) * W + (1.0 - np.cos(theta)) * W @ W
    G = np.eye(3) * theta + (1.0 - np.cos(theta)) * W + (theta - np.sin(theta)) * W @ W
    T[:3, :3] = R
    T[:3, 3] = G @ v
    return T


def log3(R: np.ndarray) -> np.ndarray:
    """Rotation (3, 3) -> exponential coordinates omega * theta (3,), theta in [0, pi]."""
    cos = np.clip((np.trace(R) - 1.0) / 2.0, -1.0, 1.0)
    theta = float(np.arccos(cos))
    if theta < 1e-9:
        return np.zeros(3)
    if np.pi - theta < 1e-6:  # near pi: read the axis off the symmetric part
        B = (R + np.eye(3)) / 2.0
        axis = np.sqrt(np.clip(np.diag(B), 0.0, None))
        i = int(np.argmax(axis))
        axis[:] = B[i] / axis[i]
        return axis / np.linalg.norm(axis) * theta
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / (2.0 * np.sin(theta))
    return w * theta


def log6(T: np.ndarray) -> np.ndarray:
    """Transform (4, 4) -> twist coordinates [omega; v] * theta (6,) (``se3ToVec(MatrixLog6(T))``)."""
    R, p = T[:3, :3], T[:3, 3]
    wt = log3(R)
    theta = float(np.linalg.norm(wt))
    if theta < 1e-9:
        return np.concatenate([np.zeros(3), p])
    W = skew(wt / theta)
    Ginv = np.eye(3) / theta - W / 2.0 + (1.0 / theta - 0.5 / np.tan(theta / 2.0)) * W @ W
    return np.concatenate([wt, (Ginv @ p) * theta])


def adjoint(T: np.ndarray) -> np.ndarray:
    """Adjoint representation (6, 6) of a transform, for twists ordered [omega; v]."""
    R, p = T[:3, :3], T[:3, 3]
    Ad = np.zeros((6, 6))
    Ad[:3, :3] = R
    Ad[3:, 3:] = R
    Ad[3:, :3] = skew(p) @ R
    return Ad


def trans_inv(T: np.ndarray) -> np.ndarray:
    """Inverse of a homogeneous transform (4, 4)."""
    R, p = T[:3, :3], T[:3, 3]
    out = np.eye(4)
    out[:3, :3] = R.T
    out[:3, 3] = -R.T @ p
    return out


def fk_space(M: np.ndarray, Slist: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Forward kinematics in the space frame: T = exp([S1] q1) ... exp([Sn] qn) M, (4, 4)."""
    T = np.eye(4)
    for i, qi in enumerate(np.asarray(q, float)):
        T = T @ exp6(Slist[:, i], qi)
    return T @ M


def jacobian_space(Slist: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Space Jacobian (6, n): column i = Ad(exp([S1]q1)...exp([S_{i-1}]q_{i-1})) S_i."""
    q = np.asarray(q, float)
    J = np.array(Slist, dtype=float, copy=True)
    T = np.eye(4)
    for i in range(1, len(q)):
        T = T @ exp6(Slist[:, i - 1], q[i - 1])
        J[:, i] = adjoint(T) @ Slist[:, i]
    return J


def ik_space(Slist: np.ndarray, M: np.ndarray, T_target: np.ndarray, q0: np.ndarray, eomg: float = 1e-3,
             ev: float = 1e-3, max_iterations: int = 40) -> tuple[np.ndarray, bool]:
    """Newton-Raphson IK in the space frame (``modern_robotics.IKinSpace``, as Interbotix calls it).

    Args:
        Slist: (6, n) screw axes of the joints in the space frame at the home configuration.
        M: (4, 4) end-effector pose at the home configuration.
        T_target: desired end-effector pose (4, 4) in the space (base) frame.
        q0: initial guess (n,).
        eomg: tolerance on the orientation part of the error twist (rad).
        ev: tolerance on the position part of the error twist (m).
        max_iterations: Newton steps before giving up (then ``converged`` is False).
    Returns:
        (q (n,), converged).
    """
    q = np.array(q0, dtype=float, copy=True)

    def error(qc: np.ndarray) -> np.ndarray:
        Tsb = fk_space(M, Slist, qc)
        return adjoint(Tsb) @ log6(trans_inv(Tsb) @ T_target)

    Vs = error(q)
    for _ in range(max_iterations):
        if np.linalg.norm(Vs[:3]) <= eomg and np.linalg.norm(Vs[3:]) <= ev:
            return q, True
        q = q + np.linalg.pinv(jacobian_space(Slist, q)) @ Vs
        Vs = error(q)
    return q, bool(np.linalg.norm(Vs[:3]) <= eomg and np.linalg.norm(Vs[3:]) <= ev)


def wrap_angles(q: np.ndarray) -> np.ndarray:
    """Wrap angles into (-pi, pi] (Interbotix ``_wrap_theta_list`` for revolute joints)."""
    q = np.asarray(q, float)
    return (q + np.pi) % (2 * np.pi) - np.pi
