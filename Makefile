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

.PHONY: demo test test-slow lint bench extension extension-fast clean backend

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

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP) $(BSTAMP)
	$(VENV)/bin/painted-skin bench retarget
	$(VENV)/bin/painted-skin bench passes
	$(VENV)/bin/painted-skin bench transport
	$(BACKEND_VENV)/bin/painted-skin bench diffusion

extension: $(STAMP)
	mkdir -p build
	$(PY) $$($(PY) -c "import importlib.util as u,os;print(os.path.join(os.path.dirname(u.find_spec('bpy').origin),'5.0','scripts','addons_core','bl_pkg','cli','blender_ext.py'))") build --source-dir . --output-dir build

# The extension with numba bundled for the fast pass engine: one zip per platform, numba and
# llvmlite wheels fetched with pip. Options go in EXTENSION_ARGS, e.g. offline farms:
# make extension-fast EXTENSION_ARGS="--wheels-dir DIR --platform linux-x64"
extension-fast: $(STAMP)
	$(PY) tools/build_extension.py $(EXTENSION_ARGS)

clean:
	rm -rf out build
