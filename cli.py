"""``painted-skin`` command line: the headless face of the add-on.

Runs Blender as a Python module (``pip install painted-skin[blender]``); the
same functions back the panel and the Python API. Exit codes: 0 success,
2 bad input (the message says what and how to fix it), 1 anything else.
"""

from __future__ import annotations

import argparse
import sys

from .addon.core.files.paths import check_distinct

# the commands and the checks the tests call, importable from here as before
from .cli_commands import (  # noqa: F401
    EXIT_BAD_INPUT,
    MAX_SIZE,
    MIN_SIZE,
    BadInput,
    _have,
    _parse_options,
    _parse_passes,
    _parse_size,
    cmd_demo,
    cmd_learn_look,
    cmd_passes,
    cmd_render,
    cmd_restyle,
    cmd_retarget,
    cmd_train_skin,
)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.what == "retarget":
        from .bench.retarget import main as bench_main

        return bench_main(frames=args.frames or 2400)
    if args.what == "passes":
        from .addon.core.passes.raster import tune_allocator
        from .bench.passes import main as bench_passes

        tune_allocator()

        return bench_passes(frames=args.frames or 24)
    if args.what == "diffusion":
        from .bench.diffusion import main as bench_diffusion

        return bench_diffusion()
    if args.what == "skin":
        from .bench.skin import main as bench_skin

        return bench_skin(model=args.model, frames=args.frames, size=args.size,
                          cameras=args.cameras.split(",") if args.cameras else None,
                          lights=args.lights.split(",") if args.lights else None,
                          character=args.character, blend=args.stabilize,
                          converged=args.converged)
    if args.what == "look":
        from .bench.look import main as bench_look

        return bench_look(model=args.model, frames=args.frames,
                          looks=args.looks.split(",") if args.looks else None,
                          keys=_ints(args.keys_per_look, "--key-counts"), steps=args.steps,
                          python=args.python, keep=args.keep)
    if args.what == "viewport":
        from .bench.viewport import main as bench_viewport

        return bench_viewport(steps=args.frames)
    if args.what == "transport":
        from .bench.transport import main as bench_transport

        return bench_transport(frames=args.frames or 48)
    raise BadInput(f"unknown benchmark {args.what!r}")


def _ints(text: str | None, flag: str) -> list[int] | None:
    """``1,2,4`` -> [1, 2, 4] (None stays None); anything else is bad input."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise BadInput(f"{flag} {text!r}: write whole numbers separated by commas, "
                       "e.g. 1,2,4") from None


FRAMES_HELP = "FIRST-LAST, a list 3,5-10 or a step 1-100x2 (default: the scene's range)"


def _backend_arguments(p: argparse.ArgumentParser, skin_model_note: str = "") -> None:
    """--keys, --start-backend and --skin-model: the backend a painting command uses."""
    p.add_argument("--keys", help="CurveZMQ keys folder, for a backend on another machine")
    p.add_argument("--start-backend", metavar="PYTHON",
                   help="start a local backend with this Python (painted-skin[backend]) "
                        "for the run, and stop it after")
    p.add_argument("--skin-model", metavar="DIR",
                   help="paint with this skin-model folder (train-skin's --out): the "
                        f"backend --start-backend starts serves it{skin_model_note}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="painted-skin", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("retarget", help="retarget mocap clips onto a character")
    r.add_argument("--source", required=True, help="clip (.bvh .fbx .glb .gltf) or a folder")
    r.add_argument("--target", required=True, help="character (.blend .fbx .glb .gltf)")
    r.add_argument("--map", default="auto", help="source bone map: auto, a preset or a file")
    r.add_argument("--target-map", default="auto", help="target bone map: auto, preset, file")
    r.add_argument("--out", help="write SHOT.blend with the character and baked action(s)")
    r.add_argument("--report", help="write a JSON report")
    r.add_argument("--clip-action", help="the animation to use when a clip holds several")
    r.add_argument("--keep-going", action="store_true",
                   help="batch: skip clips that fail (reported; exit 2) instead of stopping")
    r.add_argument("--fps", type=float,
                   help="bake at this frame rate, the clip resampled (a 120 fps capture "
                        "for a 24 fps shot); default: the clip's own")
    r.add_argument("--in-place", action="store_true", help="drop horizontal root motion")
    r.add_argument("--no-foot-lock", action="store_true", help="do not pin feet in contact")
    r.add_argument("--keep-posture", action="store_true",
                   help="keep the character's own rest posture (a stylised hunch) on top of "
                        "the source's torso motion (default: the torso follows the source)")
    r.add_argument("--ground", choices=("floor", "keep"), default="floor",
                   help="floor: feet meet the character's floor; keep: scaled source height")
    r.set_defaults(func=cmd_retarget)

    d = sub.add_parser("demo", help="the demo end to end: a held-out motion retargeted onto "
                                    "the demo character, painted by its skin model, against "
                                    "Cycles")
    d.add_argument("--out", default="out/demo")
    d.add_argument("--frames", type=int, default=48)
    d.add_argument("--fps", type=float, default=24.0)
    d.add_argument("--kind", default="wave", help="walk, run, jump, turn, wave, sit (wave "
                   "is the motion the skin model never trained on)")
    d.add_argument("--model", default="demo", help="skin-model registry name")
    d.add_argument("--no-paint", action="store_true",
                   help="only retarget and render 512² passes (no backend, no Cycles)")
    d.set_defaults(func=cmd_demo)

    p_ = sub.add_parser("passes", help="render control passes of a shot")
    p_.add_argument("shot", help="SHOT.blend (a character with an action, and a camera)")
    p_.add_argument("--frames", help=FRAMES_HELP)
    p_.add_argument("--size", default="512x512", help="WIDTHxHEIGHT")
    p_.add_argument("--engine", choices=("fast", "cycles"), default="fast")
    p_.add_argument("--passes", default="depth,normal,skeleton,mask,parts,motion",
                    help="comma list of depth,normal,skeleton,mask,parts,motion,beauty and "
                         "the canonical ones rest_position,uv,normal_world,view_dir,"
                         "light_visibility")
    p_.add_argument("--beauty-samples", type=int, default=16,
                    help="beauty: Cycles samples of its render (default 16, denoised: the "
                         "skin model's training target)")
    p_.add_argument("--no-beauty-denoise", action="store_true",
                    help="beauty: render it without denoising")
    p_.add_argument("--out", required=True, help="output folder (re-running resumes)")
    p_.add_argument("--openpose-normalized", action="store_true",
                    help="also write skeleton_normalized/####.json: COCO-18 keypoints in 0-1 "
                         "coordinates, the form controlnet_aux and ComfyUI pose tools read "
                         "(skeleton/ keeps OpenPose's pixel form)")
    p_.add_argument("--camera", help="camera object to render through, or 'auto': a "
                    "three-quarter camera following the character (default: the scene's)")
    p_.set_defaults(func=cmd_passes)

    rs = sub.add_parser("restyle", help="restyle a shot's frames through a backend")
    rs.add_argument("shot", help="SHOT.blend (a character with an action, and a camera)")
    rs.add_argument("--out", required=True,
                    help="output folder (re-running resumes); or, as Blender's render "
                         "output, a file pattern such as //render/shot_####.png: frames "
                         "are written there (#### = the frame, zero padded; // = the "
                         "shot's folder)")
    rs.add_argument("--frame-pattern", metavar="NAME",
                    help="file name of each frame in OUT/restyled, e.g. shot_#### "
                         "(# count = zero padding; no #: 4 digits appended; default ####)")
    rs.add_argument("--frames", help=FRAMES_HELP)
    rs.add_argument("--from-scene", action="store_true",
                    help="render what the artist set: pipeline, model and options, prompts, "
                         "seed, size and reference images from the shot's Restyle panel "
                         "(saved in the .blend); the options given here override them")
    rs.add_argument("--size", help="WIDTHxHEIGHT (default 512x512)")
    rs.add_argument("--pipeline", help="backend pipeline (default sd15-controlnet)")
    rs.add_argument("--prompt")
    rs.add_argument("--negative-prompt")
    rs.add_argument("--seed", type=int, help="shot seed (per frame: seed, frame; default 0)")
    rs.add_argument("--options", help="pipeline options: a JSON object or a .json/.toml file")
    rs.add_argument("--look", help="skin pipeline: a look of the model (learn-look --look "
                    "NAME), or a mix by weight, e.g. young=0.3,old=0.7 (default: base)")
    rs.add_argument("--ref", action="append", help="reference image (IP-Adapter); repeatable")
    rs.add_argument("--ref-weight", action="append", metavar="W",
                    help="weight of the matching --ref (the references' embeddings are "
                         "averaged with these weights; default 1); repeatable, one per --ref, "
                         "same order")
    rs.add_argument("--camera", help="camera object, or 'auto' (see passes --camera)")
    rs.add_argument("--url", default="tcp://127.0.0.1:5555", help="backend address")
    _backend_arguments(rs, " (implies --pipeline skin)")
    rs.add_argument("--timeout", type=float, default=30.0,
                    help="seconds of silence before giving up on the backend (a model "
                         "loading answers heartbeats: it is waited for)")
    rs.set_defaults(func=cmd_restyle)

    rn = sub.add_parser("render", help="render a shot with the Painted Skin render engine "
                                       "(Blender's own render pipeline, in the bpy module)")
    rn.add_argument("shot", help="SHOT.blend (a character with an action, and a camera)")
    rn.add_argument("--out", required=True,
                    help="output folder (frames named ####, re-running resumes), or a "
                         "Blender output path such as //render/shot_#### (// = the shot's "
                         "folder); the file format is the shot's (Output Properties)")
    rn.add_argument("--frames", help=FRAMES_HELP)
    rn.add_argument("--size", help="WIDTHxHEIGHT (default: the shot's resolution)")
    rn.add_argument("--model", help="skin-model registry name (default: the shot's Render "
                                    "Properties ▸ Painted Skin, else the Skin Model panel's)")
    rn.add_argument("--camera", help="camera object, or 'auto' (see passes --camera)")
    rn.add_argument("--url", help="backend address (default: the shot's, else "
                                  "tcp://127.0.0.1:5555)")
    _backend_arguments(rn)
    rn.set_defaults(func=cmd_render)

    lk = sub.add_parser("learn-look", help="learn a look from a few painted keyframes of a "
                                           "shot (fine-tunes a skin model)")
    lk.add_argument("--shot", required=True, help="SHOT.blend the keys were painted on")
    lk.add_argument("--suggest", type=int, metavar="K", help="only print the K frames to "
                    "paint: those that show the most of the character's surface together")
    lk.add_argument("--frames", help="--suggest: the frames to choose from (" + FRAMES_HELP
                    + ")")
    lk.add_argument("--keys", help="folder of painted keyframes NNNN.png (the "
                    "frame number; RGB or RGBA at the shot's render size), e.g. restyle's "
                    "output")
    lk.add_argument("--base", default="demo", help="the base skin model: a model folder or "
                    "a registry name (default: demo)")
    lk.add_argument("--out", help="the look's model folder (with --look: a "
                    "multi-look folder, the base copied there first)")
    lk.add_argument("--look", help="add the look under this name to the --out folder "
                    "(restyle --look NAME picks it; the base stays the look 'base')")
    lk.add_argument("--camera", help="camera object, or 'auto' (default: the shot's)")
    lk.add_argument("--minutes", type=float, help="a time cap: the 100-step schedule "
                    "shortens to fit it")
    lk.add_argument("--steps", type=int, help="schedule length")
    lk.add_argument("--device", default="cpu", help="cpu or cuda")
    lk.add_argument("--resume", action="store_true", help="continue the last checkpoint")
    lk.add_argument("--python", help="the backend Python that trains (default: "
                                     ".venv-backend/bin/python)")
    lk.set_defaults(func=cmd_learn_look)

    t = sub.add_parser("train-skin", help="learn a character's skin model from its own "
                                          "renders (self-reconstruction)")
    t.add_argument("--character", required=True,
                   help="the rigged character (.blend .glb .gltf .fbx), or 'demo'")
    t.add_argument("--out", required=True, help="model folder to write")
    t.add_argument("--minutes", type=float, help="training time budget (default: 10, or "
                   "none with --steps: the schedule runs whole)")
    t.add_argument("--size", type=int, default=128, help="training render size: 128, 256 or 512 "
                   "(crops keep the step's cost the same; at 512 the neural texture "
                   "gains a 512² level)")
    t.add_argument("--device", default="cpu", help="cpu or cuda")
    t.add_argument("--resume", action="store_true", help="continue the last checkpoint")
    t.add_argument("--python", help="the backend Python that trains (default: "
                                    ".venv-backend/bin/python)")
    t.add_argument("--cache", help="where training renders are kept and reused (default: "
                                   "~/.cache/painted-skin/skin-data)")
    t.add_argument("--frames-per-clip", type=int, default=24,
                   help="training frames rendered from each motion (default 24)")
    t.add_argument("--samples", type=int, default=16, help="Cycles samples (denoised)")
    t.add_argument("--steps", type=int, help="schedule length (default: fits --minutes)")
    t.add_argument("--temporal", action=argparse.BooleanOptionalAction, default=True,
                   help="feed the previous output warped by the motion vectors (default: "
                        "on; steadier shots, and the embedded demo model is trained so)")
    t.add_argument("--lights", choices=("scene", "varied"), default="varied",
                   help="varied (default): every other clip under a random light rig, so "
                        "the model paints by the scene's lights (the irradiance pass) "
                        "instead of remembering one rig; scene: the file's lights only")
    t.add_argument("--motion", action="append", default=[], metavar="FILE",
                   help="real mocap (.bvh .fbx .glb) to train on beside the generated "
                        "motions; repeatable (windows of --frames-per-clip frames)")
    t.add_argument("--detail-size", type=int, metavar="N",
                   help="also render the motions at N² (256 or 512, 8 frames a clip) and "
                        "train on them too: larger frames and close-ups paint sharper "
                        "(the embedded model is trained so at 256; 512 adds a 512² level "
                        "to the neural texture; ~1 s more per frame rendered)")
    t.add_argument("--init-from", metavar="MODEL",
                   help="start from this skin model's network: the shading it learned "
                        "carries over (default: the embedded model for your own character; "
                        "'none' starts from scratch)")
    t.set_defaults(func=cmd_train_skin)

    from .backend.commands import add_commands

    add_commands(sub)  # serve, broker, keys
    from .backend.doctor import add_doctor_command

    add_doctor_command(sub)  # doctor
    # The Blender extension ships neither the diffusion nor the evaluation code.
    if _have(".backend.diffusion.engine_cli"):
        from .backend.diffusion.engine_cli import add_commands as add_engine_commands

        add_engine_commands(sub)  # export-onnx
    if _have(".backend.evaluate.score"):
        from .backend.evaluate.score import add_arguments as add_score_arguments
        from .backend.evaluate.score import run as run_score

        sc = sub.add_parser("score", help="masked PSNR/SSIM/FLIP and warping error of frames "
                                          "against a reference sequence")
        add_score_arguments(sc)
        sc.set_defaults(func=_score_checked(run_score))

    b = sub.add_parser("bench", help="speed benchmarks (ratio against a baseline in one run)")
    b.add_argument("what", choices=("retarget", "passes", "transport", "diffusion", "skin",
                                    "look", "viewport"))
    b.add_argument("--frames", type=int,
                   help="frames (retarget: 2400, passes: 24, transport: 48, skin: 24 a "
                        "cell, viewport: 48 view changes a size)")
    b.add_argument("--model", help="skin: model folder (default rigs/skin_models/demo)")
    b.add_argument("--size", type=int,
                   help="skin: frame size (default: the model's training size)")
    b.add_argument("--cameras", help="skin: the matrix's cameras, comma-separated (default: "
                                     "demo,three_quarter,behind,low,high,close_up)")
    b.add_argument("--lights", help="skin: the light rigs, comma-separated (default: "
                                    "scene,turned)")
    b.add_argument("--character", help="skin: the character file the --model was trained on "
                                       "(default: the demo)")
    b.add_argument("--stabilize", type=float,
                   help="skin: the serving blend with the previous output (default 0, "
                        "as restyle: the network's own frames)")
    b.add_argument("--converged", type=int, metavar="SAMPLES",
                   help="skin: also score Cycles at SAMPLES (e.g. 128) per cell: where a "
                        "nearly noise-free render's warp ratio falls (slow)")
    b.add_argument("--looks", help="look: the looks, comma-separated (default: "
                                   "ill,toon,hatched)")
    b.add_argument("--key-counts", dest="keys_per_look",
                   help="look: keyframe counts, comma-separated (default: 1,2,4)")
    b.add_argument("--steps", type=int,
                   help="look: training steps per look (default 100, as learn-look)")
    b.add_argument("--python", help="look: the Python that trains (default: .venv-backend)")
    b.add_argument("--keep", metavar="DIR", help="look: keep the keys, looks and frames here")
    b.set_defaults(func=cmd_bench)
    return p


def _score_checked(run_score):
    """``score`` with its ``--json`` output checked against its input folders."""
    def run(args: argparse.Namespace) -> int:
        check_distinct({"--json": args.json}, {"--reference": args.reference,
                                                "--frames": args.frames,
                                                "--passes": args.passes})
        return run_score(args)

    return run


def main(argv: list[str] | None = None, shot_open: bool = False) -> int:
    """Run one command; the exit code. ``shot_open``: Blender has opened the shot
    (``blender -b shot.blend -P addon/farm_entry.py -- ...``): use it, not a re-open."""
    args = build_parser().parse_args(argv)
    args.shot_open = shot_open
    try:
        return args.func(args)
    except BadInput as e:
        print(f"painted-skin: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as e:  # RetargetError, ImportFailed, BvhError, map errors, outputs
        print(f"painted-skin: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:  # the disk, not the input: one line, exit 1
        print(f"painted-skin: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
