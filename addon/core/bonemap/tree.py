"""The armature as a tree for the matchers: parents, children, depths, parsed names.

Built once per :func:`~.auto_map` call; helper bones (IK targets, poles,
end markers) are flagged here so every stage skips them the same way.

Pure Python + numpy, no bpy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..rig.humanoid import canonical_parent
from ..rig.skeleton import Skeleton
from .bone_map import BoneMap
from .names import parse_name


class BoneTree:
    """Parent/child/depth queries over a Skeleton, with helper bones flagged."""

    def __init__(self, skel: Skeleton) -> None:
        self.skel = skel
        self.n = len(skel)
        self.parents = [int(p) for p in skel.parents]
        self.children: list[list[int]] = [[] for _ in range(self.n)]
        for i, p in enumerate(self.parents):
            if p >= 0:
                self.children[p].append(i)
        self.depth = [0] * self.n
        for i, p in enumerate(self.parents):
            self.depth[i] = self.depth[p] + 1 if p >= 0 else 0
        self.parsed = [parse_name(n) for n in skel.names]
        self.excluded = [False] * self.n
        for i, p in enumerate(self.parents):
            self.excluded[i] = self.parsed[i].helper_subtree or (p >= 0 and self.excluded[p])
        self.heads = skel.world_heads()
        self.tails = skel.world_tails()

    def usable(self, i: int) -> bool:
        return not self.excluded[i] and not self.parsed[i].helper

    def ancestors(self, i: int) -> list[int]:
        out = []
        p = self.parents[i]
        while p >= 0:
            out.append(p)
            p = self.parents[p]
        return out

    def is_ancestor(self, a: int, b: int) -> bool:
        """True when ``a`` is a strict ancestor of ``b``."""
        p = self.parents[b]
        while p >= 0:
            if p == a:
                return True
            p = self.parents[p]
        return False

    def lca(self, nodes: Iterable[int]) -> int | None:
        nodes = list(nodes)
        if not nodes:
            return None
        common = [nodes[0], *self.ancestors(nodes[0])]
        for n in nodes[1:]:
            chain = {n, *self.ancestors(n)}
            common = [c for c in common if c in chain]
        return common[0] if common else None

    def path_between(self, top: int, bottom: int) -> list[int]:
        """Bones strictly between ``top`` and its descendant ``bottom``, top first."""
        out = []
        p = self.parents[bottom]
        while p >= 0 and p != top:
            out.append(p)
            p = self.parents[p]
        return out[::-1] if p == top else []


# --------------------------------------------------------------------------- hierarchy checks


def hierarchy_stats(tree: BoneTree, idx: Mapping[str, int]) -> tuple[int, int]:
    """(joints not below their mapped canonical parent, bones skipped in between)."""
    violations = gaps = 0
    present = set(idx)
    for canon, i in idx.items():
        parent = canonical_parent(canon, present)
        if parent is None:
            continue
        p = idx[parent]
        if not tree.is_ancestor(p, i):
            violations += 1
        else:
            gaps += tree.depth[i] - tree.depth[p] - 1
    return violations, gaps


def check_hierarchy(tree: BoneTree, bm: BoneMap) -> None:
    """Note in ``bm.ambiguous`` each joint whose bone is not below its parent joint's."""
    idx = {c: tree.skel.index(b) for c, b in bm.bones.items() if b in tree.skel}
    present = set(idx)
    for canon, i in idx.items():
        parent = canonical_parent(canon, present)
        if parent is not None and not tree.is_ancestor(idx[parent], i):
            bm.ambiguous.append(
                f"{canon} {bm.bones[canon]!r} is not below {parent} {bm.bones[parent]!r} "
                f"(IK or helper hierarchy?)")


def spread_spine(path: list[int]) -> dict[str, int]:
    """spine / chest / upperChest over the bones between hips and neck."""
    n = len(path)
    if n == 0:
        return {}
    if n == 1:
        return {"spine": path[0]}
    if n == 2:
        return {"spine": path[0], "chest": path[1]}
    return {"spine": path[0], "chest": path[round((n - 1) / 2)], "upperChest": path[-1]}
