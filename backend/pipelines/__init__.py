"""The backend's pipelines: the contract (:mod:`.base`), the registry
(:mod:`.registry`, filled by :func:`register_builtin`), and the pipelines themselves
(``echo``, ``skin``, the diffusion factories). Importing this package registers nothing
and imports neither torch nor onnxruntime; the backend never imports bpy."""

from __future__ import annotations

from .base import CROSS_FRAME_OFF, Cancelled, Entry, Factory, Pipeline, StepCallback, may_cache
from .registry import REGISTRY, create, get, model_names, names, register, register_builtin

__all__ = ["CROSS_FRAME_OFF", "REGISTRY", "Cancelled", "Entry", "Factory", "Pipeline",
           "StepCallback", "create", "get", "may_cache", "model_names", "names", "register",
           "register_builtin"]
