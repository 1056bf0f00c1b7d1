# litegpu developer entry points.  `make install` sets up .venv with core, every backend and plugin in
# this repo, and the test and ray extras; as root it first installs the system packages (software GPU drivers).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export XDG_RUNTIME_DIR ?= /tmp/litegpu-xdg
APT_PACKAGES := pocl-opencl-icd ocl-icd-libopencl1 mesa-vulkan-drivers libvulkan1 vulkan-validationlayers glslc spirv-tools
PACKAGES := . $(wildcard backends/*/pyproject.toml) $(wildcard plugins/example/pyproject.toml)
# Build tools inside the venv, pinned: the tests that pip-install a backend or plugin into a venv use
# --no-build-isolation (offline), so the venv's own setuptools must build our pyprojects (a fresh venv
# of Python 3.11 has setuptools 65 and no wheel, which cannot).
BUILD_TOOLS := setuptools==80.9.0 wheel==0.45.1

.PHONY: install system-packages demo test test-all ci-fresh lint bench-cpu docs dist clean

install: system-packages $(BIN)/python
	$(BIN)/pip install -q --upgrade pip $(BUILD_TOOLS)
	$(BIN)/pip install -q $(foreach p,$(PACKAGES),./$(patsubst %/pyproject.toml,%,$(p))) '.[test,ray]'

$(BIN)/python:
	$(PY) -m venv $(VENV)

# System packages: only when root (CI, containers) and only the missing ones.
system-packages:
	@mkdir -p $(XDG_RUNTIME_DIR) && chmod 700 $(XDG_RUNTIME_DIR)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(APT_PACKAGES) python3-venv; do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then echo "apt-get install $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi; \
	else echo "not root: skipping system packages ($(APT_PACKAGES))"; fi

# The main job: fetch the MediaPipe models and run one end to end on every available backend.
demo: install
	$(BIN)/python -m litegpu.demo

# The default run: everything except tests marked slow (full sweeps whose sample runs by default).
# One pytest worker per core (pytest-xdist, in the test extra), a test file to a worker: the suite is
# mostly single-threaded kernel compiles on PoCL and lavapipe, so two cores halve it.  A venv made before
# xdist joined the extra runs the suite in one process.  A worker that dies (a driver's abort) ends
# the run with its test named, instead of a replacement worker that xdist can leave waiting.
XDIST = $(shell $(BIN)/python -c 'import xdist' 2>/dev/null && printf '%s' '-n auto --dist loadfile --max-worker-restart 0')
test:
	$(BIN)/python -m pytest -q -m "not slow" --durations=25 $(XDIST)

# Everything, the slow sweeps included (about an hour on a 2-core machine).
test-all:
	$(BIN)/python -m pytest -q

# .ci/run as a new machine runs it: fresh clone, fresh HOME and caches, no pip or driver caches.
ci-fresh:
	bash .ci/fresh

lint:
	$(BIN)/ruff check core backends plugins tests bench

bench-cpu:
	$(BIN)/python bench/cpu.py

# The documentation and the API reference (mkdocs + mkdocstrings, from the docstrings) into site/,
# warnings as errors.  Installs the two tools into .venv when missing.
docs: $(BIN)/python
	@$(BIN)/python -c "import mkdocs, mkdocstrings_handlers.python" 2>/dev/null || \
	  $(BIN)/pip install -q 'mkdocs>=1.5' 'mkdocstrings[python]>=0.24'
	$(BIN)/mkdocs build --strict

# Wheels of litegpu, its three backends and the example plugin, into $(DIST).  Then, on any machine:
#   pip install --find-links dist 'litegpu[all]'      (or litegpu[opencl], litegpu[vulkan,images], ...)
DIST ?= dist
DIST_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))
dist:
	rm -rf $(DIST)/*.whl && mkdir -p $(DIST)
	$(DIST_PY) -m pip wheel -q --no-deps -w $(DIST) $(foreach p,$(PACKAGES),./$(patsubst %/pyproject.toml,%,$(p)))
	@# the in-tree build leaves egg-info next to the sources, which would shadow the installed metadata
	rm -rf build $(foreach p,$(PACKAGES),$(patsubst %/pyproject.toml,%,$(p))/build) core/*.egg-info backends/*/*.egg-info plugins/*/src/*.egg-info
	@ls -1 $(DIST)/*.whl

clean:
	rm -rf $(VENV) build dist *.egg-info core/*.egg-info
