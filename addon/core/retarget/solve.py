"""The retarget solver: source motion + two bone maps -> target pose per frame.

For each canonical joint mapped on both sides, the source's world rotation
relative to its reference frame (see ``reference_pose``) is

    D(t) = W_src(t) @ C_src^T

and the target bone takes ``W_tgt(t) = D(t) @ C_tgt``. The torso (hips to neck,
neck to head, any bone count on either side) is solved as chains instead (see
``body_chains``): its overall direction and twist follow the source's and the
bend is shared over the target's bones by their lengths. Bone positions follow
from the target's own rest offsets (forward kinematics), so proportions are
the target's; only the hips carry translation, scaled by the leg-length ratio.
Other target bones without a source (a twist bone) follow their mapped
neighbours.

Pure numpy: the Blender layer reads arrays in and writes keyframes out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..rig.humanoid import canonical_parent
from ..rig.skeleton import (
    Motion,
    Skeleton,
    affine_inverse,
    bone_major,
    compose,
    forward_kinematics,
    rotations,
)
from ..rig.transforms import matrix_to_quat, orthonormalize, quat_slerp, quat_to_matrix
from .chains import Chain, chain_ends, path_between, solve_chain, torso_chains
from .footlock import FootLockResult, foot_skate_cm, lock_feet
from .reference_pose import reference_frames

Ground = Literal["floor", "keep"]


@dataclass
class RetargetOptions:
    """What a user can choose; defaults are what an animator expects."""

    in_place: bool = False
    ground: Ground = "floor"  # "floor": lowest foot of the clip meets the target's floor
    foot_lock: bool = True
    root_scale: float | None = None  # None: leg-length ratio target/source
    # True: the character keeps its own rest posture (a stylised hunch) as a constant
    # offset on top of the source's torso motion; False: its torso follows the source's.
    keep_posture: bool = False


@dataclass
class RetargetResult:
    """Target pose per frame plus the figures the report shows."""

    basis_rot: np.ndarray  # (F, n, 3, 3) pose-bone basis rotations
    basis_loc: np.ndarray  # (F, n, 3) pose-bone basis locations
    rotations: np.ndarray  # (F, n, 3, 3) target world rotations
    positions: np.ndarray  # (F, n, 3) target world head positions
    world_scale: float
    keyed: np.ndarray  # (n,) bool: bones that move and get keyframes
    root_scale: float
    pairs: dict[str, tuple[str, str]]  # canonical -> (source bone, target bone)
    foot: FootLockResult | None = None
    # "hips-neck" / "neck-head" -> (source bones, target bones) solved as one chain
    chains: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    keep_posture: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def basis(self) -> np.ndarray:
        """(F, n, 4, 4) pose-bone basis matrices."""
        return compose(self.basis_rot, self.basis_loc)

    @property
    def world(self) -> np.ndarray:
        """(F, n, 4, 4) target world matrices."""
        return compose(self.world_scale * self.rotations, self.positions)


def leg_length(skel: Skeleton, bone_map: dict[str, str]) -> float:
    """Mean upper+lower leg length in world units (the root-scale yardstick)."""
    heads = (skel.world @ skel.rest)[:, :3, 3]
    lengths = []
    for side in ("left", "right"):
        names = [f"{side}UpperLeg", f"{side}LowerLeg", f"{side}Foot"]
        if all(n in bone_map and bone_map[n] in skel for n in names):
            a, b, c = (heads[skel.index(bone_map[n])] for n in names)
            lengths.append(np.linalg.norm(b - a) + np.linalg.norm(c - b))
    if not lengths:
        return skel.height() * 0.5
    return float(np.mean(lengths))


def _foot_indices(skel: Skeleton, bone_map: dict[str, str], names: tuple[str, ...]) -> list[int]:
    return [skel.index(bone_map[n]) for n in names if n in bone_map and bone_map[n] in skel]


_CHAIN_GROUPS = ("spine", "chest", "upperChest", "neck", "head")


def implicit_pairs(source: Skeleton, source_map: dict[str, str], target: Skeleton,
                   target_map: dict[str, str]) -> list[tuple[int, int]]:
    """Pair unmapped bones that sit at the same place on both sides.

    Between two joints mapped on both sides, chains with the same number of
    unmapped bones (CMU's LHipJoint) are paired one to one (the torso's are
    solved as chains instead); unmapped leaves under a mapped joint pair by
    equal names.
    """
    pairs = []
    both = [c for c in target_map if c in source_map and source_map[c] in source
            and target_map[c] in target]
    for c in both:
        ti, si = target.index(target_map[c]), source.index(source_map[c])
        parent = canonical_parent_in(c, both)
        if parent is None:
            continue
        t_chain = path_between(target, target.index(target_map[parent]), ti)
        s_chain = path_between(source, source.index(source_map[parent]), si)
        if t_chain and s_chain and len(t_chain) == len(s_chain):
            pairs += list(zip(s_chain, t_chain, strict=True))
    paired = {j for _, j in pairs} | {target.index(target_map[c]) for c in both}
    for j, name in enumerate(target.names):
        if j not in paired and name in source and target.parents[j] >= 0:
            i = source.index(name)
            tp, sp = target.parents[j], source.parents[i]
            if sp >= 0 and target.names[tp] == source.names[sp]:
                pairs.append((i, j))
    return pairs


def canonical_parent_in(name: str, present: list[str]) -> str | None:
    return canonical_parent(name, frozenset(present))


def _fill_unmapped(skel: Skeleton, w: np.ndarray, has: np.ndarray, moves: np.ndarray,
                   canonical_of: dict[int, str], c_ref: np.ndarray) -> None:
    """World rotations of target bones that have no source, in place.

    A bone in the spine/neck chain between a mapped ancestor A and a mapped
    descendant D gets D = slerp(D_A, D_D, k/len) — the bend is shared out; any
    other bone (a hip offset bone, a twist or face bone) follows its nearest
    mapped ancestor rigidly (an identity basis). Bones with no mapped ancestor
    keep their pose (``has`` stays False).
    """
    n = len(skel)
    children = [skel.children(i) for i in range(n)]
    for i in range(n):
        if has[i]:
            continue
        steps, a = 1, skel.parents[i]
        while a >= 0 and not has[a]:
            a = skel.parents[a]
            steps += 1
        if a < 0:
            continue
        down, d = 0, i
        while not has[d] and len(children[d]) == 1:
            d = children[d][0]
            down += 1
        if has[d] and d != i and canonical_of.get(d) in _CHAIN_GROUPS:
            q = quat_slerp(matrix_to_quat(rmul(w[:, a], c_ref[a].T)),
                           matrix_to_quat(rmul(w[:, d], c_ref[d].T)), steps / (steps + down))
            w[:, i] = rmul(quat_to_matrix(q), c_ref[i])
            moves[i] = True
        else:
            w[:, i] = rmul(w[:, a], c_ref[a].T @ c_ref[i])
        has[i] = True


def rmul(stack: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``stack[f] @ m`` for a (F, 3, 3) stack and one 3x3 matrix, as one GEMM
    (numpy's batched 3x3 matmul is ~5x slower)."""
    return (stack.reshape(-1, 3) @ m).reshape(stack.shape)


def lmul(m: np.ndarray, stack: np.ndarray) -> np.ndarray:
    """``m @ stack[f]`` for one 3x3 matrix and a (F, 3, 3) stack, as one GEMM."""
    return rmul(stack.swapaxes(-1, -2), m.T).swapaxes(-1, -2)


def rigid_rotations(m: np.ndarray) -> np.ndarray:
    """Rotations of (F, 3, 3) matrices. Rigid motion under a uniform object scale
    (the usual case) only needs dividing by that scale — checked on the first and
    last frames; anything else goes through :func:`rotations`' orthonormalisation."""
    c = m[:, :, 0]
    s = np.sqrt(c[:, 0] * c[:, 0] + c[:, 1] * c[:, 1] + c[:, 2] * c[:, 2])  # = norm, summed alike
    r = np.array(m, order="C")  # a pose track's 3x3 block is strided: divide a packed copy
    r /= s[:, None, None]
    ends = r[[0, -1]]
    if np.abs(ends.swapaxes(-1, -2) @ ends - np.eye(3)).max() < 1e-6:
        return r
    return orthonormalize(m)


def retarget(
    source: Skeleton,
    motion: Motion,
    source_map: dict[str, str],
    target: Skeleton,
    target_map: dict[str, str],
    options: RetargetOptions | None = None,
    target_basis: np.ndarray | None = None,
) -> RetargetResult:
    """Retarget ``motion`` of ``source`` onto ``target``.

    ``*_map`` map canonical joint names to bone names. ``target_basis``: the
    target's current pose-bone basis matrices (n, 4, 4), default identity. Bones
    that get no keys (no mapped ancestor, e.g. a glTF root the importer left posed
    away from the bind pose) keep theirs, and the floor moves with them.
    """
    opts = options or RetargetOptions()
    if "hips" not in source_map or "hips" not in target_map:
        raise ValueError("both skeletons need a mapped 'hips' bone to carry the root motion")
    frames = motion.frames
    c_src = reference_frames(source, source_map)
    c_tgt = reference_frames(target, target_map)

    pairs = {
        c: (source_map[c], target_map[c])
        for c in target_map
        if c in source_map and source_map[c] in source and target_map[c] in target
    }
    n = len(target)
    has = np.zeros(n, dtype=bool)
    ends = chain_ends(source, source_map, target, target_map)
    chain_pairs = [(f"{lo}-{hi}", sc, tc) for lo, hi, sc, tc in zip(
        ends[:-1], ends[1:], torso_chains(source, source_map, ends),
        torso_chains(target, target_map, ends), strict=True)
        if sc is not None and tc is not None]
    in_chain = {j for _, _, tc in chain_pairs for j in tc.bones}
    bone_pairs = [(source.index(sb), target.index(tb)) for sb, tb in pairs.values()]
    bone_pairs += implicit_pairs(source, source_map, target, target_map)
    bone_pairs = [(i, j) for i, j in bone_pairs if j not in in_chain]
    for j in [*(j for _, j in bone_pairs), *in_chain]:
        has[j] = True
    r_rest_t = rotations(target.world @ target.rest)
    # Where the target stands: its unmoved bones as posed now, the rest at rest.
    still_basis = np.broadcast_to(np.eye(4), (n, 4, 4)).copy()
    if target_basis is not None:
        still_basis[~has] = np.asarray(target_basis)[~has]
    still = target.world @ forward_kinematics(target, still_basis[None])[0]
    w_tgt = bone_major(frames, n, 3, 3)  # every (F, n, ...) track below is stored bone-major
    w_tgt[:] = rotations(still)
    # W_tgt = D @ C_tgt with D = W_src @ C_src^T: one constant offset per pair,
    # applied as a single (3F x 3) @ (3 x 3) product. Only the paired source bones'
    # world rotations are needed, not the clip's whole world pose.
    obj_rot = source.world[:3, :3]
    moved_obj = not np.array_equal(obj_rot, np.eye(3))

    def src_world(i: int) -> np.ndarray:
        rot = motion.pose[:, i, :3, :3]
        return rigid_rotations(lmul(obj_rot, rot) if moved_obj else rot)

    for i, j in bone_pairs:
        w_tgt[:, j] = rmul(src_world(i), c_src[i].T @ c_tgt[j])
    c_chain = reference_frames(target, target_map, straighten_torso=False) \
        if opts.keep_posture else c_tgt
    _solve_chains(chain_pairs, src_world, c_src, w_tgt, c_chain)
    moves = has.copy()
    canonical_of = {target.index(tb): c for c, (_, tb) in pairs.items()}
    _fill_unmapped(target, w_tgt, has, moves, canonical_of, c_tgt)

    # Root translation.
    scale = opts.root_scale or leg_length(target, target_map) / leg_length(source, source_map)
    hips_s, hips_t = source.index(source_map["hips"]), target.index(target_map["hips"])
    root = scale * (motion.pose[:, hips_s, :3, 3] @ obj_rot.T + source.world[:3, 3])
    rest_heads_t = still[:, :3, 3]
    if opts.in_place:
        root[:, :2] = rest_heads_t[hips_t, :2]

    anchors = _anchors(target, target_map)
    order = _fk_order(target, anchors)

    def _fk(w: np.ndarray) -> np.ndarray:
        return _fk_positions(target, w, root, hips_t, has, rest_heads_t, anchors, order)

    positions = _fk(w_tgt)
    warnings: list[str] = []
    feet = _foot_indices(target, target_map, ("leftFoot", "rightFoot", "leftToes", "rightToes"))
    if opts.ground == "floor" and feet:
        # The clip's lowest foot joint meets the target's own rest foot height:
        # a target standing on its floor in rest stands on it in the clip too.
        shift = rest_heads_t[feet, 2].min() - positions[:, feet, 2].min()
        root[:, 2] += shift
        positions = _fk(w_tgt)

    foot_result = None
    if opts.foot_lock:
        foot_result = lock_feet(target, target_map, w_tgt, positions, motion.fps,
                                leg_length(target, target_map))
        if foot_result is not None:
            w_tgt = foot_result.world_rotations
            positions = _fk(w_tgt)
            ankles = [target.index(target_map[f"{s}Foot"]) for s in ("left", "right")]
            foot_result.skate_after_cm = float(np.mean([
                foot_skate_cm(positions[:, a], foot_result.contacts[s])
                for a, s in zip(ankles, ("left", "right"), strict=True)]))
        else:
            warnings.append("foot lock skipped: legs are not fully mapped on the target")

    # Bones that only follow an ancestor rigidly have an identity basis: no keys.
    keyed = moves.copy()
    keyed[[hips_t, *anchors]] = True
    basis_rot, basis_loc = _basis(target, w_tgt, positions, r_rest_t, [hips_t, *anchors], keyed)
    return RetargetResult(basis_rot=basis_rot, basis_loc=basis_loc, rotations=w_tgt,
                          positions=positions,
                          world_scale=target.world_scale(), keyed=keyed,
                          root_scale=float(scale), pairs=pairs, foot=foot_result,
                          warnings=warnings,
                          chains={name: ([source.names[i] for i in sc.bones],
                                         [target.names[j] for j in tc.bones])
                                  for name, sc, tc in chain_pairs},
                          keep_posture=opts.keep_posture)


def _solve_chains(chain_pairs: list[tuple[str, Chain, Chain]], src_world, c_src: np.ndarray,
                  w_tgt: np.ndarray, c_tgt: np.ndarray) -> None:
    """Target world rotations of the torso chains' bones, in place (hips first:
    the spine chain starts from the target hips' solved rotation)."""
    cache: dict[int, np.ndarray] = {}

    def world(i: int) -> np.ndarray:
        if i not in cache:
            cache[i] = src_world(i)
        return cache[i]

    for _, sc, tc in chain_pairs:
        src_d = {i: rmul(world(i), c_src[i].T) for i in (sc.parent, *sc.bones)}
        base_s = world(sc.base) if sc.base is not None else None
        base_t = w_tgt[:, tc.base] if tc.base is not None else None
        for j, d in zip(tc.bones, solve_chain(sc, src_d, base_s, tc, base_t), strict=True):
            w_tgt[:, j] = rmul(d, c_tgt[j])



def _basis(skel: Skeleton, w: np.ndarray, pos: np.ndarray, r_rest: np.ndarray,
           moved: list[int], keyed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pose-bone basis rotations (F, n, 3, 3) and locations (F, n, 3).

    With rest world rotations R, a bone's basis rotation is
    ``R[b]^T R[p] W[p]^T W[b]`` (the object matrix cancels), so only 3x3
    products are needed, and only for the ``keyed`` bones (the others follow
    their parent rigidly: identity). Locations are non-zero only for the
    ``moved`` bones (the motion root, IK-target feet), done with 4x4 matrices.
    """
    frames, n = w.shape[:2]
    rot = bone_major(frames, n, 3, 3)
    rot[:, ~keyed] = np.eye(3)
    loc = bone_major(frames, n, 3)
    loc[:] = 0.0
    for i in np.flatnonzero(keyed):
        p = skel.parents[i]
        if p < 0:
            rot[:, i] = lmul(r_rest[i].T, w[:, i])
        else:
            # (W[p] R[p]^T R[b])^T W[b]: the constant goes in as one GEMM on the
            # parent's (contiguous) track, then one batched product, written in place.
            parent = rmul(w[:, p], r_rest[p].T @ r_rest[i])
            np.matmul(parent.swapaxes(-1, -2), w[:, i], out=rot[:, i])
    obj_inv = np.linalg.inv(skel.world)
    s = skel.world_scale()
    local = skel.local_rest()
    for i in moved:
        p = skel.parents[i]
        m_b = obj_inv @ compose(s * w[:, i], pos[:, i])
        if p < 0:
            full = np.linalg.inv(local[i]) @ m_b
        else:
            m_p = obj_inv @ compose(s * w[:, p], pos[:, p])
            full = np.linalg.inv(local[i]) @ affine_inverse(m_p) @ m_b
        loc[:, i] = full[:, :3, 3]
    return rot, loc


# Limb ends that IK rigs often parent elsewhere (RobotExpressive: FootL under the root).
_ANCHORED = ("leftFoot", "rightFoot", "leftHand", "rightHand")


def _anchors(skel: Skeleton, bone_map: dict[str, str]) -> dict[int, int]:
    """Mapped feet/hands whose bone is not below their canonical parent's bone
    (IK-target feet): bone -> the bone it must follow rigidly (shin/forearm)."""
    mapped = {c: skel.index(b) for c, b in bone_map.items() if b in skel}
    out = {}
    for c in _ANCHORED:
        cp = canonical_parent(c, frozenset(mapped)) if c in mapped else None
        if cp is None:
            continue
        j, a = mapped[c], mapped[cp]
        p = skel.parents[j]
        while p >= 0 and p != a:
            p = skel.parents[p]
        if p < 0:
            out[j] = a
    return out


def _fk_order(skel: Skeleton, anchors: dict[int, int]) -> list[int]:
    """Bones ordered so each comes after the bone it hangs from."""
    order: list[int] = []
    done: set[int] = set()
    pending = list(range(len(skel)))
    while pending:
        later = []
        for i in pending:
            e = anchors.get(i, int(skel.parents[i]))
            if e < 0 or e in done:
                order.append(i)
                done.add(i)
            else:
                later.append(i)
        if len(later) == len(pending):
            raise ValueError("bone anchors form a cycle")
        pending = later
    return order


def _fk_positions(skel: Skeleton, w: np.ndarray, root: np.ndarray, root_index: int,
                  moving: np.ndarray, still: np.ndarray, anchors: dict[int, int],
                  order: list[int]) -> np.ndarray:
    """World head positions from world rotations (F, n, 3, 3) and the root track.
    Bones that do not move keep their ``still`` heads; anchored bones hang from
    their anchor instead of their parent."""
    rest_world = skel.world @ skel.rest
    r_rest = rotations(rest_world)
    heads = rest_world[:, :3, 3]
    frames, n = w.shape[:2]
    pos = bone_major(frames, n, 3)
    for i in order:
        p = anchors.get(i, int(skel.parents[i]))
        if i == root_index:
            pos[:, i] = root
        elif p < 0 or not moving[i]:
            pos[:, i] = still[i]
        else:
            offset = r_rest[p].T @ (heads[i] - heads[p])
            pos[:, i] = pos[:, p] + (w[:, p].reshape(-1, 3) @ offset).reshape(-1, 3)
    return pos


def resample_positions(frames: int, source_fps: float, fps: float) -> np.ndarray:
    """Where each output frame falls in the source clip, in (fractional) source frames.

    A clip of ``frames`` samples at ``source_fps`` lasts ``frames / source_fps``
    seconds; at ``fps`` that is ``round(frames * fps / source_fps)`` frames (at least
    one), output frame k sampling the clip at time ``k / fps``. Times past the last
    sample (upsampling the final fraction of a frame) hold the last pose.
    """
    if frames < 1 or source_fps <= 0 or fps <= 0:
        raise ValueError(f"cannot resample {frames} frames from {source_fps} to {fps} fps")
    count = max(1, int(round(frames * fps / source_fps)))
    return np.minimum(np.arange(count) * (source_fps / fps), frames - 1)


def resample_basis(basis_rot: np.ndarray, basis_loc: np.ndarray, keyed: np.ndarray,
                   source_fps: float, fps: float) -> tuple[np.ndarray, np.ndarray]:
    """A solved clip (pose-bone basis rotations (F, n, 3, 3) and locations (F, n, 3))
    re-timed from ``source_fps`` to ``fps``: same duration in seconds, each output
    frame sampled at its own time (rotations slerped, locations lerped between the
    two nearest solved frames; see :func:`resample_positions`). Output frames that
    coincide with a solved frame are that frame exactly. Unkeyed bones stay identity.
    """
    frames, n = basis_rot.shape[:2]
    if source_fps == fps:
        return basis_rot, basis_loc
    pos = resample_positions(frames, source_fps, fps)
    i0 = np.minimum(np.floor(pos + 1e-9).astype(np.int64), frames - 1)
    i1 = np.minimum(i0 + 1, frames - 1)
    w = np.clip(pos - i0, 0.0, 1.0)
    w[w < 1e-9] = 0.0
    between = np.flatnonzero(w > 0.0)
    count = len(pos)
    rot = bone_major(count, n, 3, 3)
    rot[:, ~keyed] = np.eye(3)
    loc = bone_major(count, n, 3)
    for i in range(n):
        a, b = basis_loc[i0, i], basis_loc[i1, i]
        loc[:, i] = a + (b - a) * w[:, None]
        if not keyed[i]:
            continue
        rot[:, i] = basis_rot[i0, i]  # exact where the times coincide
        if len(between):
            q0 = matrix_to_quat(basis_rot[i0[between], i])
            q1 = matrix_to_quat(basis_rot[i1[between], i])
            rot[between, i] = quat_to_matrix(quat_slerp(q0, q1, w[between]))
    return rot, loc
