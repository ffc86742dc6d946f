"""The backend client's shared-memory ring: frame slots in one segment it owns.

Linux, ipc:// or loopback URLs: when OPENED grants shared memory, each frame's passes
are copied into a free slot and the FRAME carries only their descriptors. A slot
stays bound to its frame until the frame is answered (RESULT or its error), then it
is reused; each write gets a new generation the backend checks, so a stale read is
never used. No bpy import.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from .... import wire as P

if TYPE_CHECKING:
    from .shot import Arrays, Shot

log = logging.getLogger("painted_skin.client")

# All the passes of a frame (23 bytes, 63 with the canonical ones skin takes), rounded
# up to 8 bytes: a slot holds any frame of its size.
SHM_BYTES_PER_PIXEL = -(-P.bytes_per_pixel() // 8) * 8
SHM_MIN_SLOTS = 8


class ShmRing:
    """Frame slots in one shared-memory segment the client owns.

    Layout: the segment header (magic + probe token), then ``slots`` slots of
    ``slot_bytes``: a 64-byte slot header (uint64 generation) and the arrays,
    each 64-byte aligned. A slot belongs to ``(shot, frame)`` until that frame
    leaves ``shot.held`` (answered or dropped) or another shot starts.
    """

    def __init__(self, slots: int, slot_bytes: int) -> None:
        self.slots = slots
        self.slot_bytes = -(-slot_bytes // 4096) * 4096
        self.seg = P.ShmSegment.create(P.SHM_HEADER + slots * self.slot_bytes)
        self.token = uuid.uuid4().hex
        self.seg.buf[:24] = P.SHM_MAGIC + bytes.fromhex(self.token)
        self._owner: list[tuple[Shot, int] | None] = [None] * slots
        self._placed: list[tuple[dict, dict] | None] = [None] * slots
        self._gen = 0

    @property
    def name(self) -> str:
        return self.seg.name

    def probe(self) -> dict[str, str]:
        """OPEN's ``shm_probe``: the backend grants shm only if it reads this token."""
        return {"segment": self.seg.name, "token": self.token}

    def _free(self, i: int, shot: Shot) -> bool:
        o = self._owner[i]
        return o is None or o[0] is not shot or o[1] not in shot.held

    def in_use(self, shot: Shot | None) -> bool:
        return shot is not None and not all(self._free(i, shot) for i in range(self.slots))

    def place(self, shot: Shot, frame: int, arrays: Arrays) -> tuple[dict, dict] | None:
        """``(placements, slot)`` of ``frame``: its slot again when it has one (a
        re-send: nothing rewritten), else a free slot written now. None: no free
        slot or too big (send inline)."""
        for i, o in enumerate(self._owner):
            if o is not None and o[0] is shot and o[1] == frame:
                return self._placed[i]
        i = next((i for i in range(self.slots) if self._free(i, shot)), None)
        if i is None:
            return None
        base = P.SHM_HEADER + i * self.slot_bytes
        self._owner[i] = self._placed[i] = None
        self.seg.write_u64(base, 0)  # invalid while the data changes
        placements = self.seg.write(arrays, base + P.SHM_ALIGN, base + self.slot_bytes)
        if placements is None:
            return None
        self._gen += 1
        self.seg.write_u64(base, self._gen)
        slot = {"segment": self.seg.name, "offset": base, "gen": self._gen}
        self._owner[i], self._placed[i] = (shot, frame), (placements, slot)
        return placements, slot

    def close(self) -> None:
        """Unlink the segment (the backend's mappings stay valid until it drops them)."""
        self._owner = [None] * self.slots
        self._placed = [None] * self.slots
        self.seg.close()


def ensure_ring(ring: ShmRing | None, slots: int, pixels: int,
                shot: Shot | None) -> ShmRing | None:
    """A ring of at least ``slots`` slots of ``pixels`` each: ``ring`` itself when it
    is big enough or a slot of ``shot`` is in use, else a new one (the old one closed).
    Without shared memory (an OSError or ValueError making it), ``ring`` as it was:
    the passes go through the socket."""
    need = SHM_BYTES_PER_PIXEL * pixels + P.SHM_ALIGN * (P.MAX_ARRAYS + 1)
    if ring is not None and (ring.slot_bytes >= need and ring.slots >= slots
                             or ring.in_use(shot)):
        return ring
    slots = max(slots, ring.slots if ring is not None else 0)
    try:
        P.sweep_shm()  # segments of crashed clients
        new = ShmRing(slots, max(need, ring.slot_bytes if ring is not None else 0))
    except (OSError, ValueError) as e:
        log.warning("no shared memory (%s): passes go through the socket", e)
        return ring
    if ring is not None:
        ring.close()
    return new
