"""Stage 3 of :func:`~.auto_map`: core joints from the tree's shape and rest pose.

For rigs whose names say nothing (``bone_042``): legs are the two chains reaching
the floor, the head the highest chain end, arms the widest branches off the spine;
sides come from rest positions and the facing of the feet. Each step is one
function below, in the order they run.

Pure Python + numpy, no bpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..rig.humanoid import CORE, SIDES
from .bone_map import BoneMap
from .names import LEG_ROLES
from .tree import BoneTree, spread_spine

_ARM = ("UpperArm", "LowerArm", "Hand")


@dataclass
class _Body:
    """What the steps after the feet share: the usable tree, its scale and its frame."""

    tree: BoneTree
    kids: dict[int, list[int]]  # children among the usable bones
    height: float
    origin: np.ndarray  # rest head of the hips
    left_dir: np.ndarray  # unit, horizontal: towards the character's left

    def reach(self, bones: list[int]) -> np.ndarray:
        """Signed distance of each bone's head to the left of the hips."""
        return (self.tree.heads[bones] - self.origin) @ self.left_dir

    def side_of(self, i: int) -> str:
        return "left" if float((self.tree.heads[i] - self.origin) @ self.left_dir) > 0 else "right"


def by_topology(tree: BoneTree, bm: BoneMap) -> None:
    """Fill missing core joints from the shape of the tree and the rest positions."""
    ok = [i for i in range(tree.n) if not tree.excluded[i]
          and not (tree.parsed[i].helper and not tree.children[i])]
    if len(ok) < 5:
        return
    okset = set(ok)
    kids = {i: [c for c in tree.children[i] if c in okset] for i in ok}
    feet = _find_feet(tree, ok, kids)
    if feet is None:
        return
    pair, top_leaf, height = feet
    hips = tree.lca(list(pair))
    if hips is None:
        return
    legs = [_segment(tree, [*tree.path_between(hips, leaf), leaf], LEG_ROLES, lead=0)
            for leaf in pair]
    left_dir = np.cross([0.0, 0.0, 1.0], _facing(tree, pair, legs, height, bm))
    body = _Body(tree, kids, height, tree.heads[hips], left_dir)
    found: dict[str, int] = {"hips": hips}
    for leaf, seg in zip(pair, legs, strict=True):
        s = body.side_of(leaf)
        for role, i in seg.items():
            found[f"{s}{role}"] = i
    spine_path = [*tree.path_between(hips, top_leaf), top_leaf]
    branch = _find_arms(body, spine_path, found)
    found.update(_spine_neck_head(tree, spine_path, branch))
    _write(tree, bm, found)


def _find_feet(tree: BoneTree, ok: list[int], kids: Mapping[int, list[int]]
               ) -> tuple[tuple[int, int], int, float] | None:
    """(the two foot leaves, the top leaf, the body's height), or None for no biped.

    Feet are low leaves whose chains split where the spine leaves (not inside one
    leg), splitting as deep as possible (not at a ground root), lowest, widest apart.
    """
    heads, tails = tree.heads, tree.tails
    leaves = [i for i in ok if not kids[i]]
    z = heads[:, 2]
    height = float(np.ptp(np.concatenate([heads[ok, 2], tails[ok, 2]]))) or 1.0
    zmin = float(min(heads[ok, 2].min(), tails[ok, 2].min()))
    low = [i for i in leaves if z[i] < zmin + 0.2 * height]
    top_leaf = max(leaves, key=lambda i: z[i])
    if len(low) < 2 or top_leaf in low:
        return None
    pairs = []
    for a in low:
        for b in low:
            if a >= b:
                continue
            split = tree.lca([a, b])
            if split is None or split != tree.lca([a, b, top_leaf]):
                continue
            pairs.append((tree.depth[split], -float(z[a] + z[b]),
                          float(np.linalg.norm(heads[a, :2] - heads[b, :2])), a, b))
    if not pairs:
        return None
    *_, a, b = max(pairs)
    return (a, b), top_leaf, height


def _facing(tree: BoneTree, pair: tuple[int, int], legs: list[dict[str, int]], height: float,
            bm: BoneMap) -> np.ndarray:
    """The horizontal unit vector the character faces: toes point forward."""
    heads, tails = tree.heads, tree.tails
    fwd = np.zeros(3)
    for seg in legs:
        if "Foot" in seg:
            end = seg.get("Toes")
            tip = heads[end] if end is not None else tails[seg["Foot"]]
            fwd += tip - heads[seg["Foot"]]
    fwd[2] = 0.0
    lateral = heads[pair[0]] - heads[pair[1]]
    lateral[2] = 0.0
    perp = np.cross([0.0, 0.0, 1.0], lateral)
    if np.linalg.norm(perp) < 1e-9:
        perp = np.array([0.0, -1.0, 0.0])
    perp /= np.linalg.norm(perp)
    if abs(float(fwd @ perp)) < 1e-6 * height:
        bm.ambiguous.append("topology: facing undecided from the feet, assumed -Y")
        return perp if perp[1] <= 0 else -perp  # undecidable: assume Blender's -Y
    return perp if float(fwd @ perp) > 0 else -perp


def _find_arms(body: _Body, spine_path: list[int], found: dict[str, int]) -> int:
    """Add each side's widest branch off the spine as its arm to ``found``; returns
    the spine bone the arms branch from (the top of the spine proper)."""
    reach = _branches_by_side(body, spine_path)
    branch = None
    for side in SIDES:
        if not reach.get(side):
            continue
        _, c, s = max(reach[side])
        for role, i in _arm_roles(body, _arm_chain(body, c)).items():
            found[f"{side}{role}"] = i
        branch = s if branch is None or body.tree.is_ancestor(branch, s) else branch
    if branch is None:
        branch = spine_path[max(0, len(spine_path) - 3)]
    return branch


def _branches_by_side(body: _Body, spine_path: list[int]
                      ) -> dict[str, list[tuple[float, int, int]]]:
    """side -> [(how far the branch reaches sideways, its root, the spine bone it leaves)]."""
    on_path = set(spine_path)
    reach: dict[str, list[tuple[float, int, int]]] = {}
    for s in spine_path:
        for c in body.kids[s]:
            if c in on_path:
                continue
            sub = _subtree(body.kids, c)
            lat = body.reach(sub)
            far = sub[int(np.argmax(np.abs(lat)))]
            reach.setdefault(body.side_of(far), []).append((float(np.abs(lat).max()), c, s))
    return reach


def _arm_chain(body: _Body, root: int) -> list[int]:
    """From ``root`` down the child reaching furthest sideways, stopping at a hand
    (where three or more fingers branch)."""
    kids = body.kids
    chain = [root]
    while kids[chain[-1]] and len(kids[chain[-1]]) < 3:
        chain.append(max(kids[chain[-1]], key=lambda k: float(
            np.abs(body.reach(_subtree(kids, k))).max())))
    return chain


def _arm_roles(body: _Body, chain: list[int]) -> dict[str, int]:
    """The upper arm starts at the shoulder joint, well off the body's midline; a
    clavicle starts near it. Without such a joint the longest bones decide."""
    wide = [k for k, i in enumerate(chain)
            if abs(float((body.tree.heads[i] - body.origin) @ body.left_dir))
            >= 0.06 * body.height]
    if wide and len(chain) - wide[0] >= 2:
        j = wide[0]
        seg = dict(zip(_ARM, chain[j:j + 3], strict=False))
        if j >= 1:
            seg["Shoulder"] = chain[j - 1]
        return seg
    return _segment(body.tree, chain, _ARM, lead=1)


def _spine_neck_head(tree: BoneTree, spine_path: list[int], branch: int) -> dict[str, int]:
    """Spine segments up to ``branch``; above it the neck and the head, dropping an end
    marker on top of the skull (a last step much longer than the one before)."""
    heads = tree.heads
    idx = spine_path.index(branch)
    found = spread_spine(spine_path[:idx + 1])
    above = spine_path[idx + 1:]
    if len(above) >= 2:
        prev = heads[above[-3]] if len(above) >= 3 else heads[branch]
        last = float(np.linalg.norm(heads[above[-1]] - heads[above[-2]]))
        if last > 1.3 * float(np.linalg.norm(heads[above[-2]] - prev)):
            above = above[:-1]
    if above:
        found["head"] = above[-1]
        if len(above) >= 2:
            found["neck"] = above[0]
    return found


def _write(tree: BoneTree, bm: BoneMap, found: Mapping[str, int]) -> None:
    """Add what was found for joints still unmapped, on bones not taken yet."""
    skel = tree.skel
    taken = {skel.index(b) for b in bm.bones.values()}
    for canon, i in found.items():
        if canon in bm.bones or i in taken:
            continue
        taken.add(i)
        conf = 0.6 if canon in CORE else 0.5
        bm.set(canon, skel.names[i], conf, "topology")


def _subtree(kids: Mapping[int, list[int]], root: int) -> list[int]:
    out, stack = [], [root]
    while stack:
        i = stack.pop()
        out.append(i)
        stack.extend(kids.get(i, []))
    return out


def _segment(tree: BoneTree, chain: list[int], roles: tuple[str, ...],
             lead: int) -> dict[str, int]:
    """Assign roles along a limb chain: the two longest consecutive bones are the
    upper and lower limb; those after them follow; with ``lead`` a bone before
    them is the shoulder/clavicle."""
    if len(chain) < 2:
        return {}
    heads, tails = tree.heads, tree.tails
    lengths = [float(np.linalg.norm(heads[chain[k + 1]] - heads[chain[k]]))
               for k in range(len(chain) - 1)]
    lengths.append(float(np.linalg.norm(tails[chain[-1]] - heads[chain[-1]])))
    j = max(range(len(chain) - 1), key=lambda k: lengths[k] + lengths[k + 1] - 1e-6 * k)
    out = {}
    for k, role in enumerate(roles):
        if j + k < len(chain):
            out[role] = chain[j + k]
    if lead and j >= 1:
        out["Shoulder"] = chain[j - 1]
    return out
