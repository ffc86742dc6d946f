"""The rigid skeleton as numbers: the canonical humanoid's joint names (``humanoid``),
skeletons and motions as arrays with Blender's pose semantics (``skeleton``), and the
vectorised rotation maths everything else builds on (``transforms``). Pure Python +
numpy; imports nothing of ours outside this room."""
