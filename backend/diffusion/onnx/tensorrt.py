"""What TensorRT this process can really use, and where its engines are cached.

``onnxruntime.get_available_providers()`` lists the TensorRT EP whenever the
onnxruntime-gpu build has it compiled in, whether or not TensorRT's own library
(``libnvinfer``) can be loaded; a session asked for it then quietly falls back to
the CUDA EP. Choosing TensorRT on that list alone would export graphs without the
fused attention the CUDA EP runs fastest, so :func:`tensorrt_version` checks that
the library loads.

TensorRT engines only load in the TensorRT version, and on the GPU architecture,
that built them, and onnxruntime does not check its engine cache for either (its
docs ask users to clear the cache by hand after an upgrade).
:func:`engine_cache_dir` therefore keys the cache folder by TensorRT version,
onnxruntime version and GPU compute capability: an upgrade or another GPU builds
fresh engines next to the old ones instead of failing to load them.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
from pathlib import Path

# The TensorRT major version onnxruntime's TensorRT EP is built against (10 since
# onnxruntime 1.18): another major (a leftover libnvinfer.so.8) would not be loaded
# by the EP, which would fall back to CUDA quietly.
_SONAMES = ("libnvinfer.so.10",) if sys.platform != "win32" else ("nvinfer_10.dll",)


def format_version(code: int) -> str:
    """``getInferLibVersion()``'s integer as "major.minor.patch" (TensorRT >= 10
    encodes major*10000 + minor*100 + patch; 8.x major*1000 + minor*100 + patch)."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _library_candidates() -> list[str]:
    """Where onnxruntime would find libnvinfer: pip's ``tensorrt_libs`` folder,
    then the loader's search path."""
    found: list[str] = []
    try:
        import tensorrt_libs  # type: ignore[import-not-found]

        for folder in getattr(tensorrt_libs, "__path__", []):
            for name in _SONAMES:
                found += sorted(glob.glob(os.path.join(folder, name + "*")))
    except ImportError:
        pass
    return [*found, *_SONAMES]


@functools.lru_cache(maxsize=1)
def tensorrt_version() -> str | None:
    """The TensorRT version this process can load, or None if it can load none."""
    for lib in _library_candidates():
        try:
            handle = ctypes.CDLL(lib)
            get = handle.getInferLibVersion
        except (OSError, AttributeError):
            continue
        get.restype = ctypes.c_int32
        return format_version(int(get()))
    return None


def gpu_arch(device_id: int = 0) -> str:
    """"sm90"-style compute capability of the CUDA device, or "gpu" if torch
    cannot tell."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(device_id)
            return f"sm{major}{minor}"
    except Exception:  # noqa: BLE001 - a probe: any failure means "unknown"
        pass
    return "gpu"


def engine_cache_dir(folder: str | os.PathLike, device_id: int = 0) -> Path:
    """``<folder>/trt/trt<version>-ort<version>-<arch>``: the TensorRT engine and
    timing cache of one export folder for this TensorRT, onnxruntime and GPU."""
    import onnxruntime

    tag = f"trt{tensorrt_version() or 'unknown'}-ort{onnxruntime.__version__}-" \
          f"{gpu_arch(device_id)}"
    return Path(folder) / "trt" / tag


__all__ = ["engine_cache_dir", "format_version", "gpu_arch", "tensorrt_version"]
