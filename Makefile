# Everything a fresh machine needs: `make demo` and `make test` set up the venv themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The backend runs in its own process and environment: bpy pins numpy<2, torch/onnx
# want numpy 2. torch is pinned to the CPU build on this disk for dev and CI only.
BACKEND_VENV ?= .venv-backend
BPY := $(BACKEND_VENV)/bin/python
BSTAMP := $(BACKEND_VENV)/.installed-stamp

.PHONY: demo test test-slow test-gui lint bench extension extension-fast clean backend

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

$(BSTAMP): pyproject.toml
	$(PYTHON) -m venv $(BACKEND_VENV)
	$(BPY) -m pip install -q --upgrade pip
	$(BPY) -m pip install -q torch==2.13.0
	$(BPY) -m pip install -q -e '.[backend,backend-test]'
	touch $(BSTAMP)

backend: $(BSTAMP)

demo: $(STAMP)
	$(VENV)/bin/painted-skin demo --out out/demo

test: $(STAMP) $(BSTAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q
	$(BPY) -m pytest -q tests/backend

test-slow: $(STAMP) $(BSTAMP)
	$(PY) -m pytest -q -m slow
	$(BPY) -m pytest -q -m slow tests/backend

# The panel's modal operators in a real Blender window: needs PAINTED_SKIN_BLENDER (a
# Blender >= 5.0 with a GUI; tools/gui_blender.sh makes one on a Linux host without).
test-gui: $(STAMP) $(BSTAMP)
	$(PY) -m pytest -q -m slow tests/gui

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP) $(BSTAMP)
	$(VENV)/bin/painted-skin bench retarget
	$(VENV)/bin/painted-skin bench passes
	$(VENV)/bin/painted-skin bench transport
	$(VENV)/bin/painted-skin bench viewport
	$(BACKEND_VENV)/bin/painted-skin bench diffusion

# The extension zips: one per platform and Blender family (5.0: CPython 3.11; 5.1+: 3.13),
# each with its pyzmq wheel (downloaded once into build/wheels). Options go in
# EXTENSION_ARGS, e.g. offline farms:
# make extension EXTENSION_ARGS="--wheels-dir DIR --platform linux-x64 --blender 5.0"
extension: $(STAMP)
	$(PY) tools/build_extension.py $(EXTENSION_ARGS)

# The same with numba and llvmlite bundled too, for the fast pass engine's compiled kernels.
extension-fast: $(STAMP)
	$(PY) tools/build_extension.py --fast $(EXTENSION_ARGS)

clean:
	rm -rf out build
