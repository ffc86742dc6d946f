"""Stage 2 of :func:`~.auto_map`: canonical joints from bone names.

Each bone's name is read as side + body part (:mod:`.names`); the hierarchy
then decides between candidates, one body part at a time: the limbs as chains
(CMU-3dsMax ``LeftShoulder`` is an upper arm because a ``LeftCollar`` sits above it),
hips above legs and head, the neck below the head, spine segments spread along the
hips-to-neck path, twist bones below their limb bone, fingers along their chain.

Pure Python + numpy, no bpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..rig.humanoid import FINGER_SEGMENTS, FINGERS, SIDES
from .bone_map import BoneMap
from .names import (
    ARM_ROLES,
    FINGER_WORDS,
    LEG_ROLES,
    META_WORDS,
    SEG_WORDS,
    SIDED_SYNONYMS,
    TWISTABLE,
    UNSIDED_SYNONYMS,
    ParsedName,
)
from .tree import BoneTree, spread_spine

Scored = list[tuple[int, float]]  # (bone index, name score)


@dataclass
class _Candidates:
    """The bones each body part's name points at, before the hierarchy decides."""

    sided: dict[tuple[str, str], Scored] = field(default_factory=dict)  # (side, role)
    unsided: dict[str, Scored] = field(default_factory=dict)  # "hips", "neck", "head"
    twist: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (side, limb role)
    fingers: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (side, finger)

    def unused(self, role: str, used: set[int]) -> list[int]:
        """Bones named for the unsided ``role`` not taken yet, best name first."""
        return [i for i, _ in self.unsided.get(role, []) if i not in used]


class _Picks:
    """Writes the chosen bones into the map and remembers which are taken."""

    def __init__(self, tree: BoneTree, bm: BoneMap) -> None:
        self.tree, self.bm = tree, bm
        self.used: set[int] = set()

    def put(self, canon: str, i: int, conf: float, src: str = "name") -> None:
        self.bm.set(canon, self.tree.skel.names[i], round(min(conf, 1.0), 3), src)
        self.used.add(i)

    def index(self, canon: str) -> int:
        return self.tree.skel.index(self.bm.bones[canon])


def by_name(tree: BoneTree, bm: BoneMap) -> None:
    """Map what the names of ``tree``'s bones say, the hierarchy deciding conflicts."""
    cands = _collect(tree)
    picks = _Picks(tree, bm)
    _name_limbs(tree, cands, picks)
    hips, head = _name_hips_and_head(tree, cands, picks)
    neck = _name_neck(tree, cands, picks, hips, head)
    _name_spine(tree, picks, hips, neck, head)
    _name_twists(tree, cands, picks)
    _name_fingers(tree, cands, picks)


# -- reading the names


def _finger_of(p: ParsedName) -> str | None:
    finger = next((FINGER_WORDS[w] for w in p.words if w in FINGER_WORDS), None)
    words = set(p.words)
    if finger is None and "finger" in words and p.number is not None and 1 <= p.number <= 5 \
            and words & (set(SEG_WORDS) | META_WORDS):
        finger = FINGERS[p.number - 1]  # Rokoko style LeftFinger2Medial
    return finger


def _collect(tree: BoneTree) -> _Candidates:
    cands = _Candidates()
    for i, p in enumerate(tree.parsed):
        if tree.usable(i):
            _classify(cands, i, p)
    return cands


def _classify(cands: _Candidates, i: int, p: ParsedName) -> None:
    """File bone ``i`` under the body part its name says: finger, twist or limb/trunk."""
    words = set(p.words)
    finger = _finger_of(p)
    if p.side and finger:
        if not (words & META_WORDS and finger != "Thumb"):
            cands.fingers.setdefault((p.side, finger), []).append(i)
        return
    if "twist" in words or "roll" in words:
        base = p.key.replace("twist", "").replace("roll", "")
        roles = [r for r, _ in SIDED_SYNONYMS.get(base, []) if r in TWISTABLE]
        if p.side and roles:
            cands.twist.setdefault((p.side, roles[0]), []).append(i)
        return
    if p.side:
        for role, score in SIDED_SYNONYMS.get(p.key, []):
            cands.sided.setdefault((p.side, role), []).append((i, score))
    else:
        for role, score in UNSIDED_SYNONYMS.get(p.key, []):
            cands.unsided.setdefault(role, []).append((i, score))


# -- one body part at a time


def _name_limbs(tree: BoneTree, cands: _Candidates, picks: _Picks) -> None:
    """Per side, the best hierarchy-consistent assignment of the arm and leg roles."""
    for side in SIDES:
        for roles in (ARM_ROLES, LEG_ROLES):
            ranked = {r: _rank(tree, cands.sided.get((side, r), [])) for r in roles}
            choice, notes = _assign_chain(tree, roles, ranked)
            for role, (i, score) in choice.items():
                picks.put(f"{side}{role}", i, score)
            picks.bm.ambiguous += [f"{side}{n}" for n in notes]


def _name_hips_and_head(tree: BoneTree, cands: _Candidates,
                        picks: _Picks) -> tuple[int | None, int | None]:
    """The shallowest head-named bone, and hips above legs and head."""
    legs = [picks.index(f"{s}UpperLeg") for s in SIDES if f"{s}UpperLeg" in picks.bm.bones]
    heads = sorted(cands.unused("head", picks.used), key=lambda i: tree.depth[i])
    head = heads[0] if heads else None
    hips = _name_hips(tree, cands, picks, legs + ([head] if head is not None else []))
    if head is not None and (hips is None or tree.is_ancestor(hips, head)):
        picks.put("head", head, 0.9)
        return hips, head
    return hips, None


def _name_hips(tree: BoneTree, cands: _Candidates, picks: _Picks,
               targets: list[int]) -> int | None:
    """The named candidate above all ``targets`` (legs, head), else their common parent."""
    hip_cands = cands.unused("hips", picks.used)
    ok = [i for i in hip_cands if all(t == i or tree.is_ancestor(i, t) for t in targets)]
    if ok:
        hips = max(ok, key=lambda i: tree.depth[i]) if targets else ok[0]
        picks.put("hips", hips, 0.9)
        return hips
    if len(targets) < 2:
        return None
    hips = tree.lca(targets)
    if hips is None or hips in targets or hips in picks.used:
        return None
    picks.put("hips", hips, 0.6, "topology")
    if hip_cands:
        names = tree.skel.names
        picks.bm.ambiguous.append(
            f"hips: {names[hip_cands[0]]!r} does not carry the legs; used their "
            f"common parent {names[hips]!r}")
    return hips


def _name_neck(tree: BoneTree, cands: _Candidates, picks: _Picks, hips: int | None,
               head: int | None) -> int | None:
    """The lowest neck-named bone between hips and head."""
    if head is None:
        return None
    necks = [i for i in cands.unused("neck", picks.used) if tree.is_ancestor(i, head)
             and (hips is None or tree.is_ancestor(hips, i))]
    if not necks:
        return None
    neck = min(necks, key=lambda i: tree.depth[i])
    picks.put("neck", neck, 0.85)
    return neck


def _name_spine(tree: BoneTree, picks: _Picks, hips: int | None, neck: int | None,
                head: int | None) -> None:
    """Spine segments spread along the hips -> neck/head path, up to where the arms
    branch; a single bone between that branch and the head is the neck."""
    if hips is None or head is None:
        return
    top = neck if neck is not None else head
    path = [i for i in tree.path_between(hips, top) if i not in picks.used]
    arm_roots = [picks.index(f"{s}{r}") for s in SIDES for r in ("Shoulder", "UpperArm")
                 if f"{s}{r}" in picks.bm.bones]
    branch = tree.lca(arm_roots) if len(arm_roots) >= 2 else None
    if branch is not None and branch in path:
        above = path[path.index(branch) + 1:]
        path = path[: path.index(branch) + 1]
        if neck is None and len(above) == 1:
            picks.put("neck", above[0], 0.6, "topology")
    for canon, i in spread_spine(path).items():
        picks.put(canon, i, 0.8)


def _name_twists(tree: BoneTree, cands: _Candidates, picks: _Picks) -> None:
    """The lowest-numbered twist bone below its limb bone."""
    for (side, role), bones in cands.twist.items():
        if f"{side}{role}" not in picks.bm.bones:
            continue
        li = picks.index(f"{side}{role}")
        below = [i for i in bones if i not in picks.used and tree.is_ancestor(li, i)]
        if below:
            i = min(below, key=lambda i: (tree.parsed[i].number or 0, tree.depth[i]))
            picks.put(f"{side}{role}Twist", i, 0.85)


def _name_fingers(tree: BoneTree, cands: _Candidates, picks: _Picks) -> None:
    """Each finger's bones ordered along its chain onto its segments."""
    for (side, finger), bones in cands.fingers.items():
        bones = sorted((i for i in bones if i not in picks.used),
                       key=lambda i: (tree.depth[i], tree.parsed[i].number or 0))
        for seg, i in zip(FINGER_SEGMENTS[finger], bones, strict=False):
            picks.put(f"{side}{finger}{seg}", i, 0.85)


# -- limb chains


def _rank(tree: BoneTree, cands: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Best candidates first; among equal 'palm' siblings prefer the middle one."""
    if not cands:
        return []
    palms = [i for i, _ in cands if tree.parsed[i].key == "palm"]
    bonus: dict[int, float] = {}
    if len(palms) >= 3:
        palms.sort(key=lambda i: (tree.parsed[i].number or 0, i))
        bonus[palms[len(palms) // 2]] = 0.01
    out = [(i, s + bonus.get(i, 0.0) - 1e-4 * tree.depth[i]) for i, s in cands]
    out.sort(key=lambda t: -t[1])
    return out[:6]


def _assign_chain(tree: BoneTree, roles: tuple[str, ...],
                  cands: dict[str, list[tuple[int, float]]]
                  ) -> tuple[dict[str, tuple[int, float]], list[str]]:
    """Pick one bone per role so that each lies below the previous one; max total score."""
    best: tuple[float, dict[str, tuple[int, float]]] = (-1e9, {})

    def rec(k: int, prev: int | None, total: float, chosen: dict[str, tuple[int, float]]):
        nonlocal best
        if k == len(roles):
            if total > best[0]:
                best = (total, dict(chosen))
            return
        role = roles[k]
        core = role not in ("Shoulder", "Toes")
        rec(k + 1, prev, total - (1.0 if core else 0.0), chosen)
        taken = {i for i, _ in chosen.values()}
        for i, score in cands[role]:
            if i in taken:
                continue
            penalty = 0.0
            if prev is not None and not tree.is_ancestor(prev, i):
                penalty = 0.6
            chosen[role] = (i, score)
            rec(k + 1, i, total + score - penalty, chosen)
            del chosen[role]

    rec(0, None, 0.0, {})
    choice = best[1]
    notes = []
    for role, (i, score) in choice.items():
        rivals = [j for j, s in cands[role] if j != i and abs(s - score) < 0.02
                  and j not in {c for c, _ in choice.values()}]
        if rivals:
            notes.append(f"{role}: chose {tree.skel.names[i]!r} over "
                         + ", ".join(repr(tree.skel.names[j]) for j in rivals))
    return choice, notes
