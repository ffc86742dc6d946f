"""``bench transport`` runs end to end at a tiny size and ends with its summary line."""

from __future__ import annotations

import re

import numpy as np


def test_png_roundtrip_and_quantisation():
    from painted_skin.bench import transport as T

    p = T.make_passes(40)
    q = T.to_png_images({k: p[k] for k in T.BENCH_PASSES})
    for a in q.values():
        np.testing.assert_array_equal(T.png_decode(T.png_encode(a)), a)
    back = T.from_png_images(q)
    m = p["mask"] > 0
    assert np.allclose(back["depth"][m], p["depth"][m], atol=2e-3)
    assert np.isinf(back["depth"][~m]).all()
    assert np.abs(back["motion"].astype(np.float32) - p["motion"]).max() <= 1 / 64


def test_bench_transport_last_line(capsys):
    from painted_skin.bench.transport import main
    from painted_skin.wire import shm_supported

    assert main(frames=4, size=32) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert "zeromq tcp, 4 frames streamed" in out  # the TCP figure is always there
    if shm_supported():  # and the local default, shared memory, is the headline figure
        assert "zeromq shm, 4 frames streamed" in out and "zeromq shm (the figure below)" in out
    assert re.fullmatch(r"transport speedup: \d+(\.\d+)?x overhead_ms: \d+\.\d+ gbps: \d+\.\d+",
                        last), last
