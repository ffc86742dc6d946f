"""The per-character skin model: a neural renderer learned by self-reconstruction.

Blender gives the exact geometry of every frame as passes; the model only paints
the skin. It samples a learned neural texture at the UV pass (or a learned 3-D
feature grid at the rest-position pass, for meshes without UVs) and renders the
features with a small U-Net (Deferred Neural Rendering, Thies et al. 2019).

Serving modules (numpy + onnxruntime, never torch): :mod:`.features`,
:mod:`.runtime`, :mod:`.registry`, :mod:`.synthetic`. Training modules (torch):
:mod:`.model`, :mod:`.train`, :mod:`.export`. Import the one you need explicitly.
"""

FORMAT_VERSION = 1  # of a model folder: a runtime refuses folders of another version
