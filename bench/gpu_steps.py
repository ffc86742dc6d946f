"""The bench's own step engines: one denoising step (the ControlNets then the UNet)
run eagerly, captured as one CUDA graph, or compiled, and put into a
``RestylePipeline`` in place of its ControlNet and UNet (:mod:`.gpu`'s
``torch-cudagraph``, ``torch-cudagraph-cl`` and ``torch-compile`` engines).
"""

from __future__ import annotations

import time
from typing import Any


class StepRunner:
    """One denoising step: the ControlNets then the UNet, summed in the order of
    diffusers' ``MultiControlNetModel`` (so the image equals the ``torch``
    engine's), each net's conditioning scale a 0-d tensor (no Python float
    baked into a graph). ``graph``: on CUDA, the step is captured as one CUDA
    graph the first time a set of input shapes comes (after ``warmup`` eager
    runs on a side stream: cuDNN's search, compilation), then replayed on
    static input buffers; elsewhere (the CPU smoke run) it runs eagerly.
    SD 1.5 as built here: no ``timestep_cond``, added conditions or IP-Adapter."""

    def __init__(self, unet: Any, nets: list[Any], graph: bool = False, warmup: int = 2,
                 mark_step: bool = False) -> None:
        self.unet, self.nets = unet, list(nets)
        self.graph, self.warmup, self.mark_step = graph, warmup, mark_step
        self.pending: tuple[list[Any], list[float]] = ([], [])
        self.captured: dict[tuple, tuple[Any, list[Any], Any]] = {}
        self.capture_s = 0.0

    def eager(self, sample: Any, t: Any, ehs: Any, conds: list[Any], scales: Any) -> Any:
        down = mid = None
        for i, net in enumerate(self.nets):
            d, m = net(sample, t, encoder_hidden_states=ehs, controlnet_cond=conds[i],
                       conditioning_scale=scales[i], return_dict=False)
            if down is None:
                down, mid = list(d), m
            else:
                down = [a + b for a, b in zip(down, d, strict=True)]
                mid = mid + m
        return self.unet(sample, t, encoder_hidden_states=ehs,
                         down_block_additional_residuals=down,
                         mid_block_additional_residual=mid, return_dict=False)[0]

    def __call__(self, sample: Any, t: Any, ehs: Any, conds: list[Any],
                 scales: list[float] | Any) -> Any:
        import torch

        dev = sample.device
        sc = torch.as_tensor([float(s) for s in scales], dtype=sample.dtype).to(dev)
        tt = torch.as_tensor(t).to(dev)
        if not (self.graph and dev.type == "cuda"):
            if self.mark_step:  # inductor's own CUDA graphs: a new step (as diffusers does)
                torch.compiler.cudagraph_mark_step_begin()
            return self.eager(sample, tt, ehs, list(conds), sc)
        args = [sample, tt, ehs, *conds, sc]
        key = tuple((tuple(a.shape), a.dtype) for a in args)
        if key not in self.captured:
            self.captured[key] = self._capture(args)
        graph, static, out = self.captured[key]
        for s, a in zip(static, args, strict=True):
            s.copy_(a)
        graph.replay()
        return out.clone()  # the next replay overwrites ``out``

    def _capture(self, args: list[Any]) -> tuple[Any, list[Any], Any]:
        import torch

        t0 = time.perf_counter()
        static = [a.clone() for a in args]
        n = len(self.nets)

        def step() -> Any:
            return self.eager(static[0], static[1], static[2], static[3:3 + n], static[3 + n])

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        torch.cuda.synchronize()
        self.capture_s += time.perf_counter() - t0
        return graph, static, out


def attach_step(pipe: Any, runner: StepRunner) -> Any:
    """Put ``runner`` into ``pipe`` (a ``RestylePipeline``): its diffusers
    pipelines' ControlNet becomes a weightless shim that records the control
    images and scales of the step, their UNet a shim that runs ``runner`` (the
    pattern of the onnx engine's shims). Returns ``pipe``."""
    import torch
    from diffusers.models.controlnets.multicontrolnet import MultiControlNetModel

    dev, dtype = torch.device(pipe.device), pipe.dtype

    class NetStub(torch.nn.Module):
        def __init__(self, config: Any) -> None:
            super().__init__()
            self.config = config

    class ControlNetShim(MultiControlNetModel):
        def __init__(self, original: Any) -> None:
            super().__init__([NetStub(n.config) for n in original.nets])

        @property
        def dtype(self) -> Any:
            return dtype

        @property
        def device(self) -> Any:
            return dev

        def forward(self, sample: Any, timestep: Any, encoder_hidden_states: Any,
                    controlnet_cond: list[Any], conditioning_scale: list[float],
                    *args: Any, **kw: Any) -> tuple[None, None]:
            runner.pending = (controlnet_cond, conditioning_scale)
            return None, None

    class UNetShim(torch.nn.Module):
        def __init__(self, original: Any) -> None:
            super().__init__()
            self.config = original.config

        @property
        def dtype(self) -> Any:
            return dtype

        @property
        def device(self) -> Any:
            return dev

        def forward(self, sample: Any, timestep: Any, encoder_hidden_states: Any = None,
                    *args: Any, **kw: Any) -> tuple[Any]:
            if kw.get("timestep_cond") is not None or kw.get("added_cond_kwargs"):
                raise NotImplementedError("the step runner takes plain SD 1.5 UNets only")
            conds, scales = runner.pending
            return (runner(sample, timestep, encoder_hidden_states, conds, scales),)

    p = pipe.txt2img
    shims = {"unet": UNetShim(p.unet), "controlnet": ControlNetShim(p.controlnet)}
    for dp in (pipe.txt2img, pipe.img2img):
        dp.__dict__.update(shims)  # plain attributes: the pipeline config stays as is
    return pipe
