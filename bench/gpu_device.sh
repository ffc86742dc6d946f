#!/usr/bin/env bash
# bench/gpu_device.sh: the GPU bench (python -m painted_skin.bench.gpu) on the
# lent H200 (/work/.library/device/: Python 3.12, torch 2.11 cu130, transformers 5.17,
# onnxruntime 1.30 CPU build, no diffusers, no internet).
#
#   bash bench/gpu_device.sh prepare [--dry-run] [--ort-gpu]   HERE, with PyPI
#   bash bench/gpu_device.sh run [bench args...]                THERE: the one device command
#   bash bench/gpu_device.sh skin [gpu_skin run args...]        THERE: the skin model's training
#
# The ONE device call (the session's `run` tool), after `prepare` here:
#   command:   bash bench/gpu_device.sh run
#   carry:     [".whl"]
#   timeout_s: 540
# It installs .whl/ into /tmp/site, times torch (eager fp16), torch-cudagraph,
# torch-cudagraph-cl and torch-compile (ort-cuda / ort-trt print a skip line: the image has
# onnxruntime's CPU build and onnxruntime-gpu is ~244 MiB), prints the table and a one-line
# summary last, and leaves gpu.log + gpu.json in $OUT. The bench starts no engine after
# GPU_BENCH_BUDGET s (300) and is interrupted at GPU_BENCH_TIMEOUT s (470; the table of
# what ran still printed): the command ends within ~8.5 minutes.
# A rerun on the still-warm machine (timeout_s within what `status` says is left), e.g.
# another compile mode or the full-size fp16 export check (one line; a mode that compiles
# longer may hit the limit, the table of what ran is printed all the same):
#   command:   GPU_BENCH_TIMEOUT=220 GPU_BENCH_BUDGET=100 bash bench/gpu_device.sh run
#              --engines torch,torch-compile,onnx-export --compile-mode max-autotune-no-cudagraphs
#   carry:     [".whl"]
#   timeout_s: 280
#
# The skin model's check (python -m painted_skin.bench.gpu_skin; the image has torch,
# onnxruntime and safetensors; only the FLIP metric's wheel travels: `pip download --no-deps
# --only-binary=:all: --python-version 3.12 ... -d .whl flip-evaluator`), after its `pack`
# here (see bench/gpu_skin.py):
#   command:   bash bench/gpu_device.sh skin --minutes 2
#   carry:     [".gpudata", ".whl"]   (.whl: flip-evaluator's cp312 wheel, for FLIP)
#   timeout_s: 420
# It trains a new character from the embedded model for --minutes and learns each packed
# look, on cuda, and leaves gpu_skin.log, gpu_skin.json and the trainers' logs in $OUT.
# GPU_SKIN_NAME names its log and JSON (default gpu_skin), so two runs can share one call.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2  # the repository root (the package)
PY=${PY:-.venv-backend/bin/python}                # here: has pip, packaging, diffusers
LIMIT_MIB=${LIMIT_MIB:-60}
PIP_PLATFORM=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

mib() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1048576}'; }

wheels() { "$PY" tools/device_wheels.py "$@"; }

prepare() {
  local dry=0 ortgpu=0 a
  for a in "$@"; do
    case $a in
      --dry-run) dry=1 ;;
      --ort-gpu) ortgpu=1 ;;
      *) echo "prepare: unknown option $a" >&2; return 2 ;;
    esac
  done
  [ -x "$PY" ] || PY=python3
  echo "== the bench's import chain without zmq/bpy (nothing of the client or Blender travels)"
  wheels imports || return 1
  echo "== wheels to carry (cp312 manylinux / py3) for what the device image lacks"
  local plan
  plan=$(wheels plan) || return 1
  echo "$plan"
  mapfile -t reqs < <(grep -v '^#' <<<"$plan" | sed 's/ *#.*//' | grep .)
  if [ "$dry" = 1 ]; then
    for r in "${reqs[@]}"; do
      echo "would run: $PY -m pip download --no-deps ${PIP_PLATFORM[*]} -d .whl $r"
    done
    echo "would skip: pyzmq (not imported by the bench), onnxruntime-gpu (see --ort-gpu)"
    return 0
  fi
  grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.whl/' >>.git/info/exclude; }
  local new=.whl.new
  rm -rf "$new" && mkdir -p "$new"
  for r in "${reqs[@]}"; do
    "$PY" -m pip download -q --no-deps "${PIP_PLATFORM[@]}" -d "$new" "$r" ||
      { echo "download of $r failed" >&2; return 1; }
  done
  rm -rf .whl && mv "$new" .whl  # exactly the planned wheels: two versions of one stop the install
  echo "== carried requirements check (each wheel's Requires-Dist against the wheels + device)"
  wheels check .whl || return 1
  echo "== .whl/"
  local total=0 f s
  for f in .whl/*.whl; do
    s=$(stat -c %s "$f"); total=$((total + s))
    printf '%8s MiB  %s\n' "$(mib "$s")" "${f#.whl/}"
  done
  local tree
  tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 -r stat -c %s 2>/dev/null |
    awk '{t+=$1} END {print t+0}')
  echo "total $(mib "$total") MiB of wheels; working tree that travels $(mib "$tree") MiB" \
    "(64 MiB in all per call)"
  if [ $((total + tree)) -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "over ${LIMIT_MIB} MiB: too much to carry" >&2; return 1
  fi
  if [ "$ortgpu" = 1 ]; then
    echo "== onnxruntime-gpu (for ort-cuda / ort-trt): size only, not carried"
    local d; d=$(mktemp -d)
    if "$PY" -m pip download -q --no-deps "${PIP_PLATFORM[@]}" -d "$d" onnxruntime-gpu; then
      for f in "$d"/*.whl; do
        echo "$(mib "$(stat -c %s "$f")") MiB  ${f##*/}: over the 64 MiB a device call" \
          "carries; skipped"
      done
    else
      echo "no onnxruntime-gpu wheel for cp312 manylinux x86_64 found"
    fi
    rm -rf "$d"
    echo "(TensorRT's libraries, for ort-trt, are larger still: tensorrt-cu12/13-libs wheels)"
  fi
}

smi() {  # read-only queries; the card's settings are left alone
  if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu="$1" --format=csv 2>&1
  else echo "(no nvidia-smi)"; fi
}

use_site() {  # SITE WHEELS: the carried wheels (if any) into SITE, the package linked there
  local site=$1 whl=$2
  if ls "$whl"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" "$whl"/*.whl || { echo "wheel install failed"; return 3; }
  fi
  ln -sfn "$PWD" "$site/painted_skin"  # the repository root is the package
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
}

run() {
  # GPU_BENCH_SITE / GPU_BENCH_WHEELS: for a rehearsal elsewhere (defaults: the device's)
  local out=${OUT:-/tmp/painted_skin_gpu_out} site=${GPU_BENCH_SITE:-/tmp/site}
  local whl=${GPU_BENCH_WHEELS:-.whl}
  mkdir -p "$out"
  {
    echo "== $(date -u +%FT%TZ) $(uname -m), $(nproc) CPUs, repo $PWD"
    smi name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu,power.draw
    ls "$whl"/*.whl >/dev/null 2>&1 || { echo "no $whl/*.whl: run 'prepare' here, carry .whl"; exit 3; }
    use_site "$site" "$whl" || exit 3
    python3 -P -m pip list 2>/dev/null | grep -iE '^(torch|triton|diffusers|transformers|onnx|onnxruntime|onnxruntime-gpu|numpy|huggingface.hub|safetensors) ' |
      tr -s ' ' | paste -sd ';' - | sed 's/^/packages: /'
    # -P: the repository root is not put on sys.path (its folders are not top-level modules)
    timeout -s INT -k 30 "${GPU_BENCH_TIMEOUT:-470}" python3 -P -m painted_skin.bench.gpu \
      --budget "${GPU_BENCH_BUDGET:-300}" --json "$out/gpu.json" "$@"
    rc=$?
    [ $rc = 124 ] && echo "the bench ran past GPU_BENCH_TIMEOUT"
    smi clocks.sm,clocks.mem,temperature.gpu,power.draw
    exit $rc
  } 2>&1 | tee "$out/gpu.log"
  return "${PIPESTATUS[0]}"
}

skin() {
  local out=${OUT:-/tmp/painted_skin_gpu_out} site=${GPU_BENCH_SITE:-/tmp/site}
  mkdir -p "$out" "$site"
  {
    echo "== $(date -u +%FT%TZ) $(uname -m), $(nproc) CPUs, repo $PWD"
    smi name,driver_version,memory.total,memory.used,clocks.sm,temperature.gpu,power.draw
    [ -d .gpudata/train ] || { echo "no .gpudata: run bench/gpu_skin.py pack here, carry it"; exit 3; }
    use_site "$site" .whl || exit 3  # .whl: flip-evaluator (the FLIP metric) when carried
    python3 -P -c 'import numpy, onnxruntime, safetensors, torch; print("packages:", "torch",
      torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__, "onnxruntime",
      onnxruntime.__version__)'
    timeout -s INT -k 30 "${GPU_SKIN_TIMEOUT:-380}" python3 -P -m painted_skin.bench.gpu_skin run \
      --data .gpudata --device cuda --json "$out/${GPU_SKIN_NAME:-gpu_skin}.json" "$@"
    rc=$?
    [ $rc = 124 ] && echo "the check ran past GPU_SKIN_TIMEOUT"
    smi memory.used,clocks.sm,temperature.gpu,power.draw
    exit $rc
  } 2>&1 | tee "$out/${GPU_SKIN_NAME:-gpu_skin}.log"
  return "${PIPESTATUS[0]}"
}

case ${1:-} in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  skin) shift; skin "$@" ;;
  *) sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
