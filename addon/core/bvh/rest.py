"""The rest skeleton Blender's BVH importer (``io_anim_bvh``) builds, reproduced without
it, so a BVH clip can be read with the project's own parser — about six times faster
than the importer and without adding anything to the scene — and still give the bones,
tails and bone axes a user's bone map, the auto-matcher and the retarget saw before.

The importer places tails by two rules, in BVH axes and in single precision (mathutils
stores float32, and which bones count as "zero length" depends on that rounding, so it
is reproduced here, the operator's float32 scale included): while reading, a tail
closer than ``0.001 * scale`` to its head is moved up by ``scale / 10``; while building
edit bones, a bone still shorter than 0.001 continues its parent's direction (or, if
the parent has none, goes up by the mean bone length). A few bones are then connected
to their parent, which moves their head (see :func:`importer_rest`). Each edit bone gets
roll 0, so its axes are Blender's ``vec_roll_to_mat3`` of its direction.
"""

from __future__ import annotations

import numpy as np

from .clip import BvhClip

_F = np.float32


def _length(v: np.ndarray) -> float:
    """``Vector.length`` as mathutils computes it (matched bit for bit on random
    vectors): float32 squares, summed and rooted in double."""
    sq = (v.astype(_F) * v.astype(_F)).astype(np.float64)
    return float(np.sqrt(sq[0] + sq[1] + sq[2]))


def importer_rest(clip: BvhClip, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(heads, tails), (n, 3) each, in BVH axes and scaled, as the importer's edit bones
    have them: the rules decided in float32 as it does, the heads in double precision
    (the OFFSETs summed exactly) and each tail that head plus the importer's bone."""
    n = clip.num_joints
    exact = clip.rest_positions() * scale
    # The operator's global_scale is a float32 property: 0.01 arrives as 0.0099999998.
    scale = float(_F(scale))
    s = _F(scale)
    local = (clip.offsets.astype(_F) * s).astype(_F)
    heads = np.zeros((n, 3), _F)
    for j, p in enumerate(clip.parents):
        heads[j] = local[j] if p < 0 else heads[p] + local[j]
    kids: list[list[int]] = [[] for _ in range(n)]
    for j, p in enumerate(clip.parents):
        if p >= 0:
            kids[p].append(j)
    tail_w = heads.copy()
    tail_l = local.copy()
    for j in range(n):
        if j in clip.end_sites:
            end = (clip.end_sites[j].astype(_F) * s).astype(_F)
            tail_w[j], tail_l[j] = heads[j] + end, local[j] + end
        elif len(kids[j]) == 1:
            tail_w[j], tail_l[j] = heads[kids[j][0]], local[j] + local[kids[j][0]]
        elif kids[j]:
            inv = _F(1.0 / len(kids[j]))
            sum_w, sum_l = np.zeros(3, _F), np.zeros(3, _F)
            for k in kids[j]:
                sum_w, sum_l = sum_w + heads[k], sum_l + local[k]
            tail_w[j], tail_l[j] = sum_w * inv, local[j] + sum_l * inv
        if _length(tail_l[j] - local[j]) <= 0.001 * scale:
            tail_l[j, 1] = _F(float(tail_l[j, 1]) + scale / 10)
            tail_w[j, 1] = _F(float(tail_w[j, 1]) + scale / 10)
    lengths = [_length(local[j] - tail_l[j]) for j in range(n)]
    nonzero = [v for v in lengths if v]
    average = sum(nonzero) / len(nonzero) if nonzero else 0.1
    tails = tail_w.copy()
    zero_area = set()
    for j, p in enumerate(clip.parents):
        if _length(heads[j] - tails[j]) < 0.001:
            zero_area.add(j)
            ofs = local[p] - tail_l[p] if p >= 0 else np.zeros(3, _F)
            if p >= 0 and _length(ofs):
                tails[j] = tails[j] - ofs
            else:
                tails[j, 1] = _F(float(tails[j, 1]) + average)
    out_tails = exact + (tails.astype(np.float64) - heads.astype(np.float64))
    out_heads = exact.copy()
    # The importer connects a bone to its parent (``use_connect``: its head snaps onto the
    # parent's tail) when it has no position channels, the parent is not zero-length, and
    # the parent's local tail equals the bone's local head: it compares a vector relative
    # to the grandparent with one relative to the parent, so this fires when the parent's
    # OFFSET plus its tail offset happens to equal the bone's OFFSET — and moves the bone.
    for j, p in enumerate(clip.parents):
        if p >= 0 and not clip.has_position(j) and p not in zero_area \
                and _same_vector(tail_l[p], local[j]):
            # (where the tail already is the head in float32, the exact head stays)
            out_heads[j] = exact[j] + (tails[p].astype(np.float64)
                                       - heads[j].astype(np.float64))
    return out_heads, out_tails


def _ordered(x: np.float32) -> int:
    """A float32's bits as an integer that orders like the floats (-0 == +0)."""
    i = int(np.asarray(x, _F).view(np.int32))
    return i if i >= 0 else -(i & 0x7FFFFFFF)


def _same_vector(a: np.ndarray, b: np.ndarray) -> bool:
    """mathutils' ``Vector ==``: every component within one float32 step."""
    return all(abs(_ordered(x) - _ordered(y)) <= 1 for x, y in zip(a, b, strict=True))


def bone_axes(heads: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """(n, 3, 3) rest rotation of bones with roll 0: Blender's ``vec_roll_to_mat3``
    (its Y axis along the bone, the rotation from +Y taken the shortest way)."""
    d = tails - heads
    d = d / np.linalg.norm(d, axis=-1, keepdims=True)
    x, y, z = d[:, 0], d[:, 1], d[:, 2]
    theta_alt = x * x + z * z
    # theta = 1 + y, which loses precision where the bone points down -Y (legs do):
    # (x² + z²) / (1 - y) is the same number for a unit vector, and stable there (Blender,
    # in float32, takes a series of it). Truly along -Y: a half turn about Z.
    theta = 1.0 + y
    down = y < 0
    theta[down] = theta_alt[down] / (1.0 - y[down])
    singular = down & (theta <= 6.1e-3) & (theta_alt <= 2.5e-4 ** 2)
    theta = np.where(singular, 1.0, theta)
    m = np.empty((len(d), 3, 3))
    # Rows/columns as numpy's m[row, col]; Blender's bMatrix[col][row].
    m[:, 0, 0] = 1 - x * x / theta
    m[:, 1, 0] = -x
    m[:, 2, 0] = -x * z / theta
    m[:, 0, 1] = x
    m[:, 1, 1] = y
    m[:, 2, 1] = z
    m[:, 0, 2] = -x * z / theta
    m[:, 1, 2] = -z
    m[:, 2, 2] = 1 - z * z / theta
    if singular.any():
        # Blender's own answer along -Y is a half turn about Z; its bone ends up with that
        # turn carried onto the bone's true direction (transform_apply rebuilds the matrix
        # from the direction and a roll), so tilt it the shortest way from -Y to there.
        m[singular] = _shortest_arc(np.array([0.0, -1.0, 0.0]), d[singular]) \
            @ np.diag([-1.0, -1.0, 1.0])
    return m


def _shortest_arc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(k, 3, 3) rotations taking unit vector ``a`` onto each unit row of ``b`` (b never
    opposite a: here they are within a few 1e-4 rad)."""
    v = np.cross(a, b)
    c = b @ a
    vx = np.zeros((len(b), 3, 3))
    vx[:, 0, 1], vx[:, 0, 2], vx[:, 1, 2] = -v[:, 2], v[:, 1], -v[:, 0]
    vx[:, 1, 0], vx[:, 2, 0], vx[:, 2, 1] = v[:, 2], -v[:, 1], v[:, 0]
    return np.eye(3) + vx + vx @ vx / (1.0 + c)[:, None, None]
