# Everything a fresh machine needs: `make demo` and `make test` set up the venv themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-slow lint bench extension clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/painted-skin demo --out out/demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(VENV)/bin/painted-skin bench retarget

extension: $(STAMP)
	mkdir -p build
	$(PY) $$($(PY) -c "import bpy,os;print(os.path.join(os.path.dirname(bpy.__file__),'5.0','scripts','addons_core','bl_pkg','cli','blender_ext.py'))") build --source-dir . --output-dir build

clean:
	rm -rf out build
