"""The torso as chains: hips -> neck (the spine) and neck -> head, any bone count.

Rigs disagree on how many bones make a spine (1 to 5) or a neck (1 or 2) and on
their rest curvature, so pairing bones one to one bends the character's torso
along another curve than the source's. Instead each chain is retargeted as a
whole, as the UE5 IK Retargeter's chains do:

- every torso bone is laid straight up (+Z) in the common reference pose
  (:func:`torso_aims`, used by ``reference_pose``), so "at rest" means the same
  upright posture on every rig;
- the source chain is a curve parameterised by normalised length; each target
  bone takes the segment of that curve it covers (its direction) and the
  source's rotation at its end, slerped between source bones (its twist);
- one small swing per frame then puts the whole target chain's end exactly on
  the source chain's overall direction (hips -> neck, neck -> head), measured
  from the hips' head like the source's.

Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..rig.skeleton import Skeleton, rotations
from ..rig.transforms import matrix_to_quat, normalize, quat_slerp, quat_to_matrix

# Canonical joints that end a torso chain, base first.
CHAIN_ENDS = ("hips", "neck", "head")
# The top of the torso path when the head is not mapped, best first.
_TOPS = ("head", "neck", "upperChest", "chest", "spine")
UP = np.array([0.0, 0.0, 1.0])


def path_between(skel: Skeleton, top: int, bottom: int) -> list[int] | None:
    """Bones strictly between ``top`` and its descendant ``bottom`` (top first);
    None when ``bottom`` is not below ``top``."""
    out = []
    p = int(skel.parents[bottom])
    while p >= 0 and p != top:
        out.append(p)
        p = int(skel.parents[p])
    return out[::-1] if p == top else None


def _mapped(skel: Skeleton, bone_map: dict[str, str]) -> dict[str, int]:
    return {c: skel.index(b) for c, b in bone_map.items() if b in skel}


def torso_aims(skel: Skeleton, bone_map: dict[str, str]) -> dict[int, np.ndarray]:
    """World rest direction of every torso bone between the hips and the head.

    Each bone aims at the next bone's head on the path to the head (its tail when
    it is the top of the path, or when that head sits on its own). Empty when the
    hips or every bone above them is unmapped.
    """
    mapped = _mapped(skel, bone_map)
    if "hips" not in mapped:
        return {}
    hips = mapped["hips"]
    for name in _TOPS:
        if name in mapped and (path := path_between(skel, hips, mapped[name])) is not None:
            top = mapped[name]
            break
    else:
        return {}
    heads = skel.world_heads()
    tails = skel.world_tails()
    tiny = 1e-9 * skel.height()
    chain = path if name == "head" else [*path, top]
    aims = {}
    for k, i in enumerate(chain):
        nxt = chain[k + 1] if k + 1 < len(chain) else (top if name == "head" else None)
        d = heads[nxt] - heads[i] if nxt is not None else tails[i] - heads[i]
        if np.linalg.norm(d) <= tiny:
            d = tails[i] - heads[i]
        aims[i] = d
    return aims


@dataclass(frozen=True)
class Chain:
    """One torso chain of one skeleton, as the solver needs it."""

    bones: tuple[int, ...]  # the bones the chain drives, base first
    parent: int  # the bone the chain hangs from (its rotation starts the twist)
    lengths: np.ndarray  # (k,) world rest distance from each bone's head to the next
    base: int | None  # bone whose rotation places the first head (hips), or None
    base_offset: np.ndarray  # (3,) that offset in the base bone's world rest frame

    def end_params(self) -> np.ndarray:
        """Where each bone ends along the chain, as a fraction of its length."""
        total = float(self.lengths.sum())
        if total <= 0.0:
            return np.arange(1, len(self.bones) + 1) / len(self.bones)
        return np.cumsum(self.lengths) / total


def chain_ends(source: Skeleton, source_map: dict[str, str], target: Skeleton,
               target_map: dict[str, str]) -> tuple[str, ...]:
    """The :data:`CHAIN_ENDS` both skeletons have, each below the previous one."""
    ends: list[str] = []
    for c in CHAIN_ENDS:
        ok = True
        for skel, bmap in ((source, source_map), (target, target_map)):
            if c not in bmap or bmap[c] not in skel:
                ok = False
            elif ends and path_between(skel, skel.index(bmap[ends[-1]]),
                                       skel.index(bmap[c])) is None:
                ok = False
        if ok:
            ends.append(c)
        elif c == "hips":
            return ()
    return tuple(ends) if len(ends) > 1 else ()


def torso_chains(skel: Skeleton, bone_map: dict[str, str],
                 ends: tuple[str, ...]) -> list[Chain | None]:
    """The chains between consecutive ``ends`` (None for an empty one)."""
    mapped = _mapped(skel, bone_map)
    rest_world = skel.world @ skel.rest
    r_rest = rotations(rest_world)
    heads = rest_world[:, :3, 3]
    out: list[Chain | None] = []
    for lo, hi in zip(ends[:-1], ends[1:], strict=True):
        a, b = mapped[lo], mapped[hi]
        between = path_between(skel, a, b) or []
        bones = between if lo == "hips" else [a, *between]
        if not bones:
            out.append(None)
            continue
        nxt = [*bones[1:], b]
        lengths = np.linalg.norm(heads[nxt] - heads[bones], axis=1)
        base = a if lo == "hips" else None
        offset = (r_rest[a].T @ (heads[bones[0]] - heads[a]) if base is not None
                  else np.zeros(3))
        out.append(Chain(tuple(bones), int(skel.parents[bones[0]]), lengths, base, offset))
    return out


def _apply(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(F, 3, 3) rotations applied to one vector: (F, 3)."""
    return m @ np.asarray(v)


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton products of (F, 4) quaternions (w, x, y, z)."""
    aw, ax, ay, az = a.T
    bw, bx, by, bz = b.T
    return np.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=1)


def _qz(q: np.ndarray) -> np.ndarray:
    """Where (F, 4) unit quaternions take +Z: their matrices' third column."""
    w, x, y, z = q.T
    return np.stack([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)], axis=1)


def _quat_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest rotations (F, 4) taking directions ``a`` onto ``b`` (F, 3);
    identity where either is zero. Written out per component: this runs per
    chain bone on every frame of a clip."""
    ax, ay, az = a.T
    bx, by, bz = b.T
    na = np.sqrt(ax * ax + ay * ay + az * az)
    nb = np.sqrt(bx * bx + by * by + bz * bz)
    zero = (na < 1e-12) | (nb < 1e-12)
    dot = (ax * bx + ay * by + az * bz) / np.where(zero, 1.0, na * nb)
    q = np.stack([np.where(zero, 1.0, 1.0 + dot), ay * bz - az * by, az * bx - ax * bz,
                  ax * by - ay * bx], axis=1)
    q[:, 1:] /= np.where(zero, 1.0, na * nb)[:, None]
    q[zero, 1:] = 0.0
    anti = ~zero & (dot < -1 + 1e-9)
    if np.any(anti):  # half a turn about any axis perpendicular to a
        helper = np.where(np.abs(a[anti, :1]) < 0.9 * na[anti, None], [1.0, 0.0, 0.0],
                          [0.0, 1.0, 0.0])
        q[anti] = np.concatenate([np.zeros((int(anti.sum()), 1)),
                                  normalize(np.cross(a[anti], helper))], axis=1)
    return q / np.sqrt(np.sum(q * q, axis=1))[:, None]


def _segment_weights(src_ends: np.ndarray, tgt_ends: np.ndarray) -> np.ndarray:
    """(k_tgt, k_src): how much of each source bone's span each target bone covers."""
    s0 = np.concatenate([[0.0], src_ends[:-1]])
    t0 = np.concatenate([[0.0], tgt_ends[:-1]])
    lo = np.maximum(t0[:, None], s0[None, :])
    hi = np.minimum(tgt_ends[:, None], src_ends[None, :])
    return np.maximum(hi - lo, 0.0)


def _sample_quats(keys: list[np.ndarray], params: np.ndarray, at: np.ndarray) -> list[np.ndarray]:
    """Quaternions (F, 4) at chain parameters ``at``, slerped between the rotations
    ``keys`` (F, 3, 3) placed at ``params`` (increasing); exact at a key."""
    quats: dict[int, np.ndarray] = {}

    def quat(k: int) -> np.ndarray:
        if k not in quats:
            quats[k] = matrix_to_quat(keys[k])
        return quats[k]

    out = []
    for x in at:
        k = min(int(np.searchsorted(params, x - 1e-9)), len(params) - 1)
        if abs(params[k] - x) <= 1e-9 or k == 0:
            out.append(quat(k))
            continue
        # Between keys k-1 and k (a zero-length source bone repeats a parameter).
        w = (x - params[k - 1]) / max(params[k] - params[k - 1], 1e-12)
        out.append(quat_slerp(quat(k - 1), quat(k), float(np.clip(w, 0.0, 1.0))))
    return out


def solve_chain(src: Chain, src_d: dict[int, np.ndarray], src_base_rot: np.ndarray | None,
                tgt: Chain, tgt_base_rot: np.ndarray | None,
                align: bool = True) -> list[np.ndarray]:
    """Reference-relative rotations ``D`` (F, 3, 3) for the target chain's bones.

    ``src_d``: ``D = W @ C^T`` of the source chain's bones and of its parent,
    with torso bones straightened (``D @ +Z`` is the bone's world direction);
    ``*_base_rot``: each base bone's world rotations (F, 3, 3) when the chain
    has a base (the hips). ``align``: swing the chain so its end lies on the
    source's overall direction (off only to see what the sampling alone does).
    """
    src_ends, tgt_ends = src.end_params(), tgt.end_params()
    # Each source bone's world direction: D @ +Z, the third column.
    dirs = np.stack([src_d[i][:, :, 2] for i in src.bones], axis=1)  # (F, ks, 3)
    chords = np.einsum("ts,fsk->ftk", _segment_weights(src_ends, tgt_ends), dirs)
    keys = [src_d[src.parent], *(src_d[i] for i in src.bones)]
    sampled = _sample_quats(keys, np.concatenate([[0.0], src_ends]), tgt_ends)
    # Each target bone: the sampled rotation (its twist), swung onto its chord.
    quats = [_qmul(_quat_between(_qz(q), chords[:, j]), q) for j, q in enumerate(sampled)]
    if align:
        u = np.einsum("s,fsk->fk", src.lengths, dirs)
        if src.base is not None and src_base_rot is not None:
            u = u + _apply(src_base_rot, src.base_offset)
        u = normalize(u)
        b = sum(tgt.lengths[j] * _qz(q) for j, q in enumerate(quats))
        goal = u
        if tgt.base is not None and tgt_base_rot is not None:
            # The end must lie on the source's direction seen from the base's head:
            # |s u - a| = |b| for the base's own offset a.
            a = _apply(tgt_base_rot, tgt.base_offset)
            ua = np.sum(u * a, axis=1)
            s = ua + np.sqrt(np.maximum(ua * ua - np.sum(a * a, axis=1)
                                        + np.sum(b * b, axis=1), 0.0))
            goal = s[:, None] * u - a
        fix = _quat_between(b, goal)
        quats = [_qmul(fix, q) for q in quats]
    return [quat_to_matrix(q) for q in quats]
