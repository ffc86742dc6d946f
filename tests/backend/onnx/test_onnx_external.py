"""The TorchScript export path writes the graph without weights and streams the
weights into a side file (no multi-second GIL stall); the graph computes the same."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import torch  # noqa: E402
from painted_skin.backend.diffusion.onnx.external import ALIGN, torchscript_export  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 64, 3, padding=1)
        self.norm = torch.nn.GroupNorm(8, 64)
        self.proj = torch.nn.Linear(64, 64)
        self.head = torch.nn.Linear(64, 64, bias=False)
        self.head.weight = self.proj.weight  # tied: one weight under two names
        self.register_buffer("offset", torch.linspace(-1, 1, 64))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.conv(x)).flatten(2).transpose(1, 2)  # (b, hw, 64)
        return self.head(torch.nn.functional.silu(self.proj(h) + self.offset)) * t


def test_weights_are_external_aligned_and_the_graph_matches_torch(tmp_path) -> None:
    torch.manual_seed(0)
    net = _Net().eval()
    x, t = torch.randn(2, 3, 6, 5), torch.tensor([0.5])
    path = tmp_path / "net.onnx"
    torchscript_export(net, (x, t), path, ["x", "t"], ["y"])

    model = onnx.load(str(path), load_external_data=False)
    assert [i.name for i in model.graph.input] == ["x", "t"]  # weights are not inputs
    inits = {i.name: i for i in model.graph.initializer}
    n_weights = sum(p.numel() for p in net.parameters()) + net.offset.numel()
    external = [i for i in inits.values() if i.data_location == onnx.TensorProto.EXTERNAL]
    assert external and all(not i.raw_data for i in inits.values())
    offsets = [int(dict((e.key, e.value) for e in i.external_data)["offset"]) for i in external]
    assert all(o % ALIGN == 0 for o in offsets)
    assert (tmp_path / "net.onnx.data").stat().st_size >= 4 * n_weights
    assert path.stat().st_size < 4 * n_weights  # the graph file holds no weights

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x.numpy(), "t": t.numpy()})[0]
    with torch.no_grad():
        want = net(x, t).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_a_graph_input_without_a_weight_is_an_error(tmp_path, monkeypatch) -> None:
    from painted_skin.backend.diffusion.onnx import external as onnx_external

    monkeypatch.setattr(onnx_external, "_named_tensors", lambda m: {})
    with pytest.raises(RuntimeError, match="no weight"):
        torchscript_export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), tmp_path / "l.onnx",
                           ["x"], ["y"])


def test_export_cache_folders_are_readable_by_the_farm(tmp_path) -> None:
    """mkdtemp makes 0700 folders: a cache shared by a farm's users must follow the umask."""
    import os

    from painted_skin.backend.diffusion.onnx import export as E
    from painted_skin.backend.diffusion.tiny import tiny_components

    old = os.umask(0o022)
    from painted_skin.addon.core.files import atomic

    atomic._umask.cache_clear()
    try:
        folder = E.export_components(tiny_components(), E.ExportSpec(64, 64), tmp_path,
                                     dynamo=False)
    finally:
        os.umask(old)
        atomic._umask.cache_clear()
    assert folder.stat().st_mode & 0o777 == 0o755
