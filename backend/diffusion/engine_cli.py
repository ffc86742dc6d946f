"""``painted-skin export-onnx``: export a registry model (SD 1.5, or SDXL with ``--xl``;
or the tiny ones) to ONNX.

Wire into ``cli.py``'s ``build_parser``::

    from .backend.diffusion.engine_cli import add_commands
    add_commands(sub)

Torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
import time


def cmd_export_onnx(args: argparse.Namespace) -> int:
    """Export (or find in the cache) the graphs; prints the folder."""
    import torch

    from .components import load_components, load_registry
    from .onnx.export import ExportSpec, export_components, parse_size
    from .tiny import tiny_components

    width, height = parse_size(args.size)
    if args.union and not args.xl:
        raise ValueError("--union is an SDXL ControlNet-Union: add --xl")
    if args.tiny and args.xl:
        from .sdxl_pipeline import tiny_xl_components

        comps = tiny_xl_components(0, union=args.union, n_controlnets=int(args.controlnets))
    elif args.tiny:
        comps = tiny_components(0, int(args.controlnets))
    else:
        registry = load_registry(args.registry)
        if args.model not in registry:
            raise ValueError(f"model {args.model!r} is not in the registry "
                             f"(it has: {', '.join(sorted(registry))})")
        dtype = torch.float16 if args.precision == "fp16" else torch.float32
        if args.xl:
            from .sdxl_pipeline import load_xl_components

            # the entry's separate ControlNets, or (--union) its ControlNet-Union
            comps = load_xl_components(args.model, dtype, union=args.union)
        else:
            comps = load_components(registry[args.model], dtype)
    if args.precision == "fp16":
        for m in (comps.unet, comps.vae, comps.text_encoder,
                  getattr(comps, "text_encoder_2", None), getattr(comps, "union", None),
                  *comps.controlnets.values()):
            if m is not None:
                m.to("cuda")
    dynamo = {"auto": None, "on": True, "off": False}[args.dynamo]
    t0 = time.perf_counter()
    spec = ExportSpec(height, width, args.batch, args.precision, cross_frame=args.cross_frame)
    folder = export_components(comps, spec, args.out, dynamo=dynamo, force=args.force)
    print(f"exported {comps.name or args.model} {width}x{height} {args.precision} "
          f"in {time.perf_counter() - t0:.1f} s -> {folder}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from .components import MissingWeights

    try:
        return cmd_export_onnx(args)
    except MissingWeights as e:
        print(f"painted-skin: error: {e}", file=sys.stderr)
        return 2


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export-onnx`` to the ``painted-skin`` subcommands."""
    p = subparsers.add_parser(
        "export-onnx", help="export a diffusion model (UNet + ControlNets, VAE, text encoder) "
        "to ONNX for the onnx engine (cached by weights, size, precision, onnxruntime)")
    p.add_argument("--model", default="sd15", help="a model of the registry (default: sd15)")
    p.add_argument("--registry", help="registry TOML (default: $PAINTED_SKIN_MODELS or the "
                   "example)")
    p.add_argument("--size", default="512x512", help="WIDTHxHEIGHT (multiples of 8)")
    p.add_argument("--out", help="cache folder (default: $PAINTED_SKIN_ONNX_CACHE or "
                   "~/.cache/painted_skin/onnx); the export lands in a subfolder named by its key")
    p.add_argument("--precision", choices=("fp32", "fp16"), default="fp32",
                   help="fp16 exports on CUDA (for the CUDA/TensorRT providers)")
    p.add_argument("--batch", type=int, default=1, help="static batch of the UNet graph")
    p.add_argument("--dynamo", choices=("auto", "on", "off"), default="auto",
                   help="exporter: auto tries dynamo then TorchScript")
    p.add_argument("--force", action="store_true", help="export even when cached")
    p.add_argument("--xl", action="store_true", help="an SDXL model (both text encoders, "
                   "added conditions)")
    p.add_argument("--union", action="store_true", help="with --xl: the model's "
                   "ControlNet-Union instead of its separate ControlNets")
    p.add_argument("--cross-frame", action="store_true", help="the UNet graph's cross-frame "
                   "variant (sessions with the cross_frame option; cached apart)")
    p.add_argument("--tiny", action="store_true", help="tiny random components (no weights)")
    p.add_argument("--controlnets", type=int, default=3, help="with --tiny: how many (1-3)")
    p.set_defaults(func=_run)
