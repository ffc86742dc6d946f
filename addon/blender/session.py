"""Whole jobs for headless use (CLI, farms, TDs): fresh scene in, shot out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import bpy

from ..core.retarget.solve import RetargetOptions
from .retarget.api import RetargetError, RetargetReport, retarget_clip
from .retarget.importers import ImportFailed, import_character


def reset_scene() -> None:
    """An empty factory scene (Blender's own startup file, not the user's).

    Not ``read_factory_settings``: it also resets the preferences, which turns every
    extension off — and Blender then deletes their bundled wheels (pyzmq) from the
    shared site-packages, so the next backend this Blender starts cannot import zmq."""
    bpy.ops.wm.read_homefile(use_empty=True, use_factory_startup=True)


def stash_action(obj: bpy.types.Object, action: bpy.types.Action | None = None) -> None:
    """Push ``action`` (default: the active one) onto a muted NLA track, so it
    stays in the file, as Blender's own action stash does."""
    ad = obj.animation_data
    action = action or (ad.action if ad is not None else None)
    if action is None:
        return
    track = ad.nla_tracks.new()
    track.name = f"[Stash] {action.name}"
    track.strips.new(action.name, int(action.frame_range[0]), action)
    track.mute = True


def retarget_files(
    clips: Sequence[Path],
    target: Path,
    source_map: str = "auto",
    target_map: str = "auto",
    options: RetargetOptions | None = None,
    progress: Callable[[int, str], None] | None = None,
    clip_action: str | None = None,
    failures: list[tuple[Path, str]] | None = None,
    fps: float | None = None,
) -> list[RetargetReport]:
    """Import ``target`` into a fresh scene and retarget every clip onto it (``fps``:
    bake every clip at that rate, resampled; default: each clip's own).

    Each clip becomes one Action; all but the last are stashed on NLA tracks,
    the last stays active. A bad clip stops the batch with its message (the
    actions made before it are kept in memory only; nothing is written) unless
    ``failures`` is given: then each bad clip's (path, message) is added to it and
    the batch goes on (a failed clip leaves no action behind).
    """
    reset_scene()
    try:
        arm = import_character(target)
    except ImportFailed as e:
        raise RetargetError(str(e)) from None
    reports = []
    for k, clip in enumerate(clips):
        if progress:
            progress(k, clip.name)
        ad = arm.animation_data
        before = ad.action if ad is not None else None
        try:
            report = retarget_clip(clip, arm, source_map, target_map, options,
                                   clip_action=clip_action, fps=fps)
        except ValueError as e:  # RetargetError, ImportFailed, BvhError, map errors
            if failures is None:
                raise
            failures.append((clip, str(e)))
            continue
        if before is not None and before is not arm.animation_data.action:
            stash_action(arm, before)  # the previous clip's action stays in the file
        reports.append(report)
    if progress:
        progress(len(clips), "done")
    return reports
