"""The result cache never answers a frame that depends on its session's state: a
cross-frame frame depends on its anchor, not only on its passes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from painted_skin import wire as P  # noqa: E402
from painted_skin.backend.diffusion import temporal as T  # noqa: E402
from painted_skin.backend.server import ServeConfig, Server  # noqa: E402
from test_session_open import Client  # noqa: E402

H = W = 64


@pytest.fixture
def endpoint() -> Iterator[str]:
    srv = Server(ServeConfig(bind="tcp://127.0.0.1:*", cache_mb=64, session_timeout=60))
    ep = srv.bind()
    thread = srv.start()
    yield ep
    srv.stop()
    thread.join(10)


def _shot(c: Client, session: str, frames: list[int], options: dict) -> dict[int, np.ndarray]:
    opened = c.wait(c.send(P.OPEN, session=session, pipeline="sd15-controlnet", width=W,
                           height=H, seed=7, options=options), timeout=300)
    assert opened.type == P.OPENED, opened.header
    shot = T.synthetic_shot(6, H, W, speed=2)
    out = {}
    for f in frames:
        passes = {"depth": shot[f]["depth"].astype(np.float32),
                  "normal": shot[f]["normal"].astype(np.float16),
                  "motion": shot[f]["motion"].astype(np.float16)}
        m = c.wait(c.send(P.FRAME, passes, session=session, frame=f), timeout=300)
        assert m.type == P.RESULT, m.header
        out[f] = m.arrays["rgb"]
    return out


def test_a_cross_frame_result_is_not_taken_from_another_sessions_anchor(endpoint) -> None:
    c = Client(endpoint)
    try:
        base = {"tiny": True, "steps": 2, "scheduler": "lcm", "temporal": False}
        anchored = _shot(c, "a", [3, 5], {**base, "cross_frame": "first"})  # 5 attends to 3
        alone = _shot(c, "b", [5], {**base, "cross_frame": "first"})  # 5 is its own anchor
        plain = _shot(c, "c", [5], base)
    finally:
        c.close()
    assert not np.array_equal(anchored[5], alone[5])  # not the cached answer of session a
    assert np.array_equal(alone[5], plain[5])  # an anchor renders as without cross-frame
