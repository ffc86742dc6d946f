"""The ``wire`` package: neutral ground (no bpy, torch or backend), and its one pass table
shared by the add-on's conversion, the server's checks and docs/protocol.md."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from painted_skin import wire as P

REPO = Path(__file__).resolve().parents[2]
DOC_ROW = re.compile(r"^\| (\w+) \| (\w+) \| \(H, W(?:, (\d+))?\)")


def doc_passes(text: str) -> list[tuple[str, str, int]]:
    """The rows of the page's pass table: (name, dtype, channels), in order."""
    lines = text.splitlines()
    start = lines.index("| name | dtype | shape |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        m = DOC_ROW.match(line)
        assert m, f"docs/protocol.md pass row not understood: {line!r}"
        rows.append((m.group(1), m.group(2), int(m.group(3) or 0)))
    return rows


def test_the_doc_pass_table_is_the_wire_table():
    doc = doc_passes((REPO / "docs" / "protocol.md").read_text())
    assert doc == [(p.name, p.dtype, p.channels) for p in P.WIRE_PASSES.values()]
    # the comparison sees a dtype changed on either side
    changed = (REPO / "docs" / "protocol.md").read_text().replace(
        "| uv | float32 |", "| uv | float16 |")
    assert doc_passes(changed) != doc


def test_wire_imports_only_numpy_and_the_standard_library():
    """The add-on ships ``wire`` without the backend: importing it must pull in nothing
    of ours but itself, and no bpy, torch or pyzmq (pyzmq only inside recv_capped)."""
    code = ("import json, sys; import painted_skin.wire; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('bpy', 'torch', 'zmq', 'onnxruntime') or m.startswith('painted_skin.') "
            "and not m.startswith('painted_skin.wire'))))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == []
    for path in (REPO / "wire").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                assert node.level in (0, 1), f"{path.name}: from {'.' * node.level}{node.module}"
                if node.level == 0:
                    assert (node.module or "").split(".")[0] != "painted_skin", path.name


def test_a_server_takes_every_wire_pass_and_names_the_table_dtype(serve, client):
    h, w = 6, 8
    rng = np.random.default_rng(3)
    raw = {n: rng.random(p.shape(h, w)) for n, p in P.WIRE_PASSES.items()}
    arrays = {n: P.to_wire(n, a) for n, a in raw.items()}
    assert {n: (a.dtype.name, a.shape) for n, a in arrays.items()} \
        == {n: (p.dtype, p.shape(h, w)) for n, p in P.WIRE_PASSES.items()}
    _, endpoint = serve()
    c = client(endpoint)
    assert c.request(P.OPEN, session="s", pipeline="echo", width=w, height=h).type == P.OPENED
    c.send(P.FRAME, arrays, session="s", frame=0)
    m, _ = c.result("s", 0)
    assert m.type == P.RESULT and m.arrays["rgb"].shape == (h, w, 3)
    c.send(P.FRAME, {**arrays, "uv": arrays["uv"].astype(np.float16)}, session="s", frame=1)
    m, _ = c.result("s", 1)
    assert m.type == P.ERROR and m.header["code"] == P.E_BAD_ARRAY
    assert "'uv' must be float32[6, 8, 3]" in m.header["message"]


def test_flag_passes_travel_as_0_or_255():
    mask = np.array([[True, False], [False, True]])
    assert P.to_wire("mask", mask).tolist() == [[255, 0], [0, 255]]
    lit = np.array([[[0.2, 0.6, 0.5, 1.0]]], np.float32)
    assert P.to_wire("light_visibility", lit).tolist() == [[[0, 255, 0, 255]]]
    depth = P.to_wire("depth", np.array([[np.inf, 2.0]], np.float64))
    assert depth.dtype == np.float32 and depth.flags.c_contiguous and depth[0, 0] == np.inf


def test_a_frame_of_every_pass_fits_the_clients_shared_memory_slot():
    from painted_skin.addon.blender.client.backend_client import SHM_BYTES_PER_PIXEL

    h, w = 48, 40
    arrays = {n: np.zeros(p.shape(h, w), p.dtype) for n, p in P.WIRE_PASSES.items()}
    assert sum(a.nbytes for a in arrays.values()) <= SHM_BYTES_PER_PIXEL * h * w
