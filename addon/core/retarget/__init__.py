"""The retarget solver: each bone's rotation relative to a common reference pose
(``reference_pose``) copied from source to target (``solve``), the torso solved as
chains (``chains``), the feet planted by two-bone IK (``footlock``). Pure Python +
numpy; may import ``core.rig``, ``core.bonemap`` and ``core.bvh``."""
