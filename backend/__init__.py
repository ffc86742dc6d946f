"""The backend: a separate process (its own Python, with torch and onnxruntime) that
paints the frames Blender sends: the ZeroMQ server and broker, quotas, the pipelines
(echo, the skin model, diffusion and its ONNX engine), evaluation and the doctor. It may
import ``addon/core`` and ``wire`` only — never bpy, never the add-on's bpy layer, never
the CLI (ARCHITECTURE.md). Importing this package imports nothing; run it with
``python -m painted_skin.backend``."""
