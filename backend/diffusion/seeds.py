"""Deterministic per-frame seeds.

Formula (the same as ``backend.server.frame_seed``, so a frame restyled through
the server or through the Python API gets the same noise)::

    frame_seed(seed, frame) = int.from_bytes(blake2b(f"{seed}:{frame}".encode(),
                                                      digest_size=4).digest(), "little")

a uint32, stable across Python versions, platforms and processes (unlike
``hash()``), and different for every (shot seed, frame) pair in practice.
The pipelines draw their initial noise from ``torch.Generator("cpu")`` seeded
with it, so the noise is also the same on every device.
"""

from __future__ import annotations

import hashlib


def frame_seed(seed: int, frame: int) -> int:
    """The uint32 seed of ``frame`` in a shot seeded with ``seed``."""
    digest = hashlib.blake2b(f"{int(seed)}:{int(frame)}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")
