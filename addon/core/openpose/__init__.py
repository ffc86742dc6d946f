"""OpenPose keypoints from the canonical humanoid: 3D points, projection, JSON and drawing.

Pure numpy (no bpy, no OpenCV), with optional numba kernels (``jit.py``) for the depth
test and the drawing that give the same results. The pipeline per frame:

1. :func:`joints_3d` turns the world pose of the canonical joints (``addon/core/rig/humanoid.py``
   names) into 3D keypoints: BODY_25 body, 21 per hand, the placed face points;
2. :func:`project_skeleton` / :func:`project_keypoints` project them through a
   :class:`~painted_skin.addon.core.passes.camera.Camera` and test each against a depth buffer;
3. :func:`openpose_json` writes OpenPose's JSON (BODY_25 or COCO-18 body), and
   :func:`draw_openpose` the coloured stick figure ControlNet's openpose models were
   trained on.

Keypoint orders, checked against the sources:

- BODY_25 and COCO-18: OpenPose ``doc/02_output.md`` ("Keypoint Ordering in C++/Python")
  and ``include/openpose/pose/poseParameters.hpp`` (``POSE_BODY_25_BODY_PARTS``,
  ``POSE_COCO_BODY_PARTS``; the trailing "Background" entry is not a keypoint);
- hand (21): OpenPose ``keypoints_hand.png`` and ControlNet's ``draw_handpose`` edges
  (wrist 0, then thumb 1-4, index 5-8, middle 9-12, ring 13-16, little 17-20, base->tip);
- face (70): OpenPose ``faceParameters.hpp`` (``FACE_NUMBER_PARTS = 70``: 0-16 jaw,
  17-26 brows, 27-30 nose bridge with 30 the tip, 31-35 nostrils, 36-41 right eye,
  42-47 left eye, 48-67 mouth, 68/69 right/left pupil);
- drawing: huggingface ``controlnet_aux`` ``src/controlnet_aux/open_pose/util.py``
  (``draw_bodypose``: 17 limbs of ``limbSeq`` as filled ellipses, stickwidth 4, in an
  18-colour list, the limb layer scaled by 0.6, then radius-4 keypoint circles in the same
  colours; ``draw_handpose``: 20 edges coloured by HSV hue ie/20, thickness 2, then radius-4
  dots of colour (0, 0, 255) -- blue, since ControlNet's canvas is RGB; ``draw_facepose``:
  radius-3 white dots). The optional "xinsr" stick scaling is comfyui_controlnet_aux's.
  The JSON layout (``people[0]`` + ``canvas_width``/``canvas_height``) is the one
  sd-webui-controlnet's ``encode_poses_as_json`` writes; its ``decode_json_as_poses``
  keeps only points with confidence >= 1.

Conventions:

- left/right are the *character's* (OpenPose's R/L are the person's sides);
- ``Keypoints.xy`` is in the project's pixel convention (``camera.py``: u right, v down,
  pixel centres at +0.5); the JSON uses OpenPose's / OpenCV's pixel-index convention
  (centre of the top-left pixel = (0, 0)), i.e. ``x = u - 0.5``, ``y = v - 0.5``;
- confidence: 1 visible; :data:`OCCLUDED_CONFIDENCE` (0.5) for a point in view but hidden
  by the depth test (kept with its position, drawn only with ``draw_occluded=True``);
  0 with x = y = 0 for a point that is missing, behind the camera or outside the image
  (what OpenPose writes for an undetected part).
"""

from __future__ import annotations

from .figure import (  # noqa: F401
    LIMB_COLORS,
    Primitives,
    draw_bodypose,
    draw_facepose,
    draw_handpose,
    draw_line,
    draw_openpose,
    fill_circle,
    fill_ellipse,
)

# The public names of the parts, importable from here.
from .formats import (  # noqa: F401
    BIG_TOE_MEDIAL,
    BODY25_INDEX,
    BODY25_MARGIN,
    BODY25_NAMES,
    BODY25_TO_COCO18,
    COCO18_COLORS,
    COCO18_INDEX,
    COCO18_LIMBS,
    COCO18_NAMES,
    FACE_COUNT,
    FACE_LAYOUT,
    FACE_LEFT_PUPIL,
    FACE_MARGIN,
    FACE_NOSE_TIP,
    FACE_POINT_COLOR,
    FACE_RIGHT_PUPIL,
    HAND_EDGE_COLORS,
    HAND_EDGES,
    HAND_FINGERS,
    HAND_MARGIN,
    HAND_NAMES,
    HAND_POINT_COLOR,
    HEEL_BACK,
    HEEL_DOWN,
    LIMB_ALPHA,
    MARGINS,
    NOMINAL_TORSO,
    OCCLUDED_CONFIDENCE,
    SMALL_TOE_BACK,
    SMALL_TOE_LATERAL,
)
from .keypoints_json import (  # noqa: F401
    openpose_json,
    round3,
)
from .points import (  # noqa: F401
    JointPose,
    body_scale,
    joints_3d,
)
from .project import (  # noqa: F401
    Keypoints,
    _sample_min,
    project_keypoints,
    project_skeleton,
)
