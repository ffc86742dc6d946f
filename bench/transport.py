"""``painted-skin bench transport``: our ZeroMQ transport against HTTP + base64 PNG.

The same frames of passes (depth f32, normal f16×3, skeleton u8×3, mask u8,
motion f16×4 — 5.5 MB a frame at 512²) go, in one run, through

* the real backend (``painted-skin serve``, echo pipeline, its own process on
  loopback) with :class:`BackendClient`: raw arrays, zero-copy, credits — once
  over TCP (``shm=False``) and once the way a local client talks by default,
  the passes in shared memory (when the platform and the backend grant it);
* an HTTP server (``http.server.ThreadingHTTPServer``, its own process) the way
  the A1111/ComfyUI bridges of other Blender add-ons move images: one JSON POST
  per frame whose passes are base64 PNGs (zlib level 6, PIL's default; float
  passes quantised to 16-bit PNG), answered by a base64 PNG.

Both servers run the same echo picture. Throughput: ZeroMQ streams with the
session's credits in flight; the HTTP bridges are sequential. Overhead per
frame: wall time minus the no-op baseline, i.e. the work the server does anyway
(ZeroMQ: the backend's own ``compute_ms``; HTTP: the echo picture timed
in-process) — for ZeroMQ both streamed (what a shot pays) and with one frame in
flight (the bare latency, ~5.5 MB each way). Last line:
``transport speedup: <x>x overhead_ms: <ms> gbps: <GB/s>`` with speedup = HTTP
ms/frame ÷ ZeroMQ streamed ms/frame, overhead = ZeroMQ streamed, GB/s = array
and header bytes moved both ways per second of the streamed run (socket bytes
plus, on the shared-memory path, the pass bytes handed over in shared memory).
The ZeroMQ figure of the last line is the default local path (shared memory
when granted; the line before says which); the TCP figures are printed too.
All end to end: a slow backend pipeline caps the speedup and GB/s.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import struct
import subprocess
import sys
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from ..addon.blender.client.backend_client import BackendClient
from ..backend.pipelines.echo import echo_image

PNG_LEVEL = 6  # PIL's default compress_level (what the A1111 API encodes with)
FLOW_SCALE = 64.0  # 16-bit PNG motion: value * 64 + 32768 (1/64 px steps, +-512 px)


# -- the frames -------------------------------------------------------------------------------

def make_passes(size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A character-like frame: a blob covering about a third of the image with
    smooth depth/normal/motion inside (smooth fields favour PNG: conservative)."""
    h = w = size
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    cx, cy, r = w * 0.5, h * 0.5, size * 0.33
    d2 = ((x - cx) ** 2 + (y - cy) ** 2) / r**2
    mask = d2 < 1.0
    rng = np.random.default_rng(seed)
    depth = np.where(mask, 3.0 - np.sqrt(np.clip(1 - d2, 0, 1)) * 0.3, np.inf).astype(np.float32)
    nz = np.sqrt(np.clip(1 - d2, 0, 1))
    normal = np.where(mask[..., None], np.stack([(x - cx) / r, (y - cy) / r, nz], -1), 0)
    motion = np.where(mask[..., None], np.stack([np.sin(y / 17), np.cos(x / 23), -np.sin(y / 17),
                                                 -np.cos(x / 23)], -1) * 2.0, 0)
    skeleton = np.zeros((h, w, 3), np.uint8)
    for _ in range(12):  # a few limb-like strokes
        a, b = rng.integers(0, size, 2), rng.integers(0, size, 2)
        t = np.linspace(0, 1, size * 2)[:, None]
        p = np.round(a + (b - a) * t).astype(int).clip(0, size - 1)
        skeleton[p[:, 1], p[:, 0]] = (rng.integers(64, 256, 3)).astype(np.uint8)
    parts = np.where(mask, (y / size * 10).astype(np.uint8) + 1, 0).astype(np.uint8)
    return {"depth": depth, "normal": normal.astype(np.float16), "skeleton": skeleton,
            "mask": mask.astype(np.uint8) * 255, "motion": motion.astype(np.float16),
            "parts": parts}


BENCH_PASSES = ("depth", "normal", "skeleton", "mask", "motion")


# -- PNG with zlib (what the HTTP bridges do) ---------------------------------------------------

def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def png_encode(a: np.ndarray, level: int = PNG_LEVEL) -> bytes:
    """8/16-bit grey, RGB or RGBA PNG of a uint8/uint16 (H, W[, C]) array."""
    a = a if a.ndim == 3 else a[..., None]
    h, w, c = a.shape
    depth = 16 if a.dtype == np.uint16 else 8
    color = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    rows = np.ascontiguousarray(a.astype(">u2") if depth == 16 else a).reshape(h, -1)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rows.view(np.uint8)], axis=1)
    return (b"\x89PNG\r\n\x1a\n"
            + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw.tobytes(), level)) + _chunk(b"IEND", b""))


def png_decode(data: bytes) -> np.ndarray:
    """Inverse of :func:`png_encode` (filter type 0 rows, as written there)."""
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    assert ihdr is not None
    w, h, depth, color = ihdr[:4]
    c = {0: 1, 4: 2, 2: 3, 6: 4}[color]
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(h, -1)
    if raw[:, 0].any():
        raise ValueError("only filter type 0 rows are handled")
    px = raw[:, 1:]
    a = px.copy().view(">u2").astype(np.uint16) if depth == 16 else px.copy()
    return a.reshape(h, w, c) if c > 1 else a.reshape(h, w)


def to_png_images(p: dict[str, np.ndarray], near: float = 0.1, far: float = 100.0
                  ) -> dict[str, np.ndarray]:
    """Quantise float passes to 16 bits (PNG has no floats); 8-bit ones as they are."""
    d = p["depth"]
    q = np.where(np.isfinite(d), (np.clip(d, near, far) - near) / (far - near) * 65534 + 1, 0)
    return {"depth": q.astype(np.uint16),
            "normal": np.round((p["normal"].astype(np.float32) + 1) * 32767.5).astype(np.uint16),
            "skeleton": p["skeleton"], "mask": p["mask"],
            "motion": np.clip(np.round(p["motion"].astype(np.float32) * FLOW_SCALE + 32768),
                              0, 65535).astype(np.uint16)}


def from_png_images(q: dict[str, np.ndarray], near: float = 0.1, far: float = 100.0
                    ) -> dict[str, np.ndarray]:
    d = q["depth"].astype(np.float32)
    return {"depth": np.where(d > 0, (d - 1) / 65534 * (far - near) + near, np.inf
                              ).astype(np.float32),
            "normal": (q["normal"].astype(np.float32) / 32767.5 - 1).astype(np.float16),
            "skeleton": q["skeleton"], "mask": q["mask"],
            "motion": ((q["motion"].astype(np.float32) - 32768) / FLOW_SCALE).astype(np.float16)}


# -- the HTTP side ------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the bridges' requests sessions do
    disable_nagle_algorithm = True  # as urllib3 does: no 40 ms delayed-ACK stalls

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        q = {k: png_decode(base64.b64decode(v)) for k, v in body["passes"].items()}
        p = from_png_images(q)
        rgb = echo_image(p, body["seed"], body["width"], body["height"])
        out = json.dumps({"images": [base64.b64encode(png_encode(rgb)).decode()]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args) -> None:
        pass


def http_serve(port: int) -> None:
    """Run the HTTP echo (``python -m painted_skin.bench.transport --http PORT``)."""
    srv = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    print("ready", flush=True)
    srv.serve_forever()


def _http_frame(conn: http.client.HTTPConnection, p: dict, seed: int, size: int) -> np.ndarray:
    q = to_png_images(p)
    body = json.dumps({"passes": {k: base64.b64encode(png_encode(v)).decode()
                                  for k, v in q.items()},
                       "seed": seed, "width": size, "height": size}).encode()
    conn.request("POST", "/sdapi/v1/restyle", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = json.loads(resp.read())
    return png_decode(base64.b64decode(out["images"][0]))


# -- the run -------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _shot(c: BackendClient, p: dict, frames: range) -> tuple[float, float]:
    """(wall seconds, mean backend compute ms) of one shot."""
    compute: list[float] = []
    t = time.perf_counter()
    c.run_shot(((f, p) for f in frames),
               lambda r: compute.append(r.timings.get("compute_ms", 0.0)))
    return time.perf_counter() - t, float(np.mean(compute))


def bench_zmq(url: str, p: dict, frames: int, size: int, shm: bool = False) -> dict:
    """Stream ``frames`` frames through the backend (credits in flight), then a
    few one at a time (the bare round trip); ms per frame, GB/s both ways.
    ``shm``: let the client use shared memory (``path`` says whether it did)."""
    with BackendClient(url, timeout_s=60, shm=shm) as c:
        c.ping()
        c.open("echo", size, size, seed=1, options={"progress": False})
        _shot(c, p, range(10_000, 10_003))  # warm-up (and the slots' first page faults)

        def moved() -> int:
            return c.bytes_sent + c.bytes_received + c.bytes_shm

        b0, s0 = moved(), c.bytes_shm
        wall, compute = _shot(c, p, range(frames))
        nbytes, via_shm = moved() - b0, c.bytes_shm - s0
        c.max_inflight = 1
        n1 = max(2, frames // 4)
        wall1, compute1 = _shot(c, p, range(frames, frames + n1))
        path = "shm" if c.shm_active and via_shm else "tcp"
    return {"ms": wall / frames * 1000, "gbps": nbytes / wall / 1e9,
            "bytes_per_frame": nbytes / frames, "compute_ms": compute,
            "rt_ms": wall1 / n1 * 1000, "rt_compute_ms": compute1, "path": path}


def _zmq_line(z: dict, frames: int) -> str:
    via = ("passes in shared memory, rgb on the socket" if z["path"] == "shm"
           else "everything on the socket")
    return (f"zeromq {z['path']}, {frames} frames streamed: {z['ms']:.2f} ms/frame, "
            f"{1000 / z['ms']:.1f} frames/s, {z['gbps']:.2f} GB/s "
            f"({z['bytes_per_frame'] / 1e6:.2f} MB/frame both ways, {via}); backend compute "
            f"{z['compute_ms']:.2f} ms/frame; one in flight {z['rt_ms']:.2f} ms round trip")


def bench_http(port: int, p: dict, frames: int, size: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as urllib3 does
    _http_frame(conn, p, 1, size)  # warm-up
    q = to_png_images(p)
    body_bytes = sum(len(base64.b64encode(png_encode(v))) for v in q.values())
    t = time.perf_counter()
    for f in range(frames):
        rgb = _http_frame(conn, p, f, size)
    wall = time.perf_counter() - t
    conn.close()
    assert rgb.shape == (size, size, 3)
    return {"ms": wall / frames * 1000, "body_bytes": body_bytes}


def bench_noop(p: dict, frames: int, size: int) -> float:
    """The echo picture in-process: the work every path does (ms per frame)."""
    echo_image(p, 0, size, size)
    t = time.perf_counter()
    for f in range(frames):
        echo_image(p, f, size, size)
    return (time.perf_counter() - t) / frames * 1000


def main(frames: int = 48, size: int = 512, http_frames: int | None = None) -> int:
    p = {k: v for k, v in make_passes(size).items() if k in BENCH_PASSES}
    raw = sum(a.nbytes for a in p.values())
    http_frames = http_frames or max(2, frames // 6)
    url = f"tcp://127.0.0.1:{_free_port()}"
    port = _free_port()
    backend = _spawn(["painted_skin.backend", "serve", "--bind", url,
                      "--cache-mb", "0"])
    web = _spawn(["painted_skin.bench.transport", "--http", str(port)])
    try:
        assert web.stdout is not None
        web.stdout.readline()  # "ready"
        print(f"frames of {size}x{size}: {', '.join(BENCH_PASSES)} = {raw / 1e6:.2f} MB raw")
        noop = bench_noop(p, frames, size)
        print(f"no-op baseline (echo in-process): {noop:.2f} ms/frame")
        zt = bench_zmq(url, p, frames, size, shm=False)
        print(_zmq_line(zt, frames))
        zs = bench_zmq(url, p, frames, size, shm=True)
        if zs["path"] == "shm":
            print(_zmq_line(zs, frames))
        else:
            print("zeromq shm: not granted here (needs Linux and a local backend): tcp only")
        z = zs if zs["path"] == "shm" else zt
        h = bench_http(port, p, http_frames, size)
        print(f"http+png, {http_frames} frames: {h['ms']:.2f} ms/frame, {1000 / h['ms']:.1f} "
              f"frames/s; request body {h['body_bytes'] / 1e6:.2f} MB of base64 PNG "
              f"(zlib level {PNG_LEVEL}, floats as 16-bit)")
    finally:
        _stop(backend)
        _stop(web)
    # Overhead per frame = wall time minus what the server computes anyway: streamed
    # (what a shot pays, credits in flight) and with one frame in flight (latency).
    overhead = max(z["ms"] - z["compute_ms"], 0.0)
    rt_over = max(z["rt_ms"] - z["rt_compute_ms"], 0.0)
    print(f"overhead per frame: zeromq tcp streamed {max(zt['ms'] - zt['compute_ms'], 0.0):.2f}"
          f" ms ({zt['gbps']:.2f} GB/s, {h['ms'] / zt['ms']:.1f}x http), one in flight "
          f"{max(zt['rt_ms'] - zt['rt_compute_ms'], 0.0):.2f} ms; http {h['ms'] - noop:.2f} ms "
          f"({h['ms']:.2f} - echo {noop:.2f})")
    print(f"overhead per frame, zeromq {z['path']} (the figure below): streamed "
          f"{overhead:.2f} ms, one in flight {rt_over:.2f} ms ({z['rt_ms']:.2f} round trip - "
          f"{z['rt_compute_ms']:.2f} backend)")
    print(f"transport speedup: {h['ms'] / z['ms']:.1f}x overhead_ms: {overhead:.3f} "
          f"gbps: {z['gbps']:.2f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        http_serve(int(sys.argv[2]))
    else:
        sys.exit(main())
