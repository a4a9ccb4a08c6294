# compilecache: every target creates .venv and installs what it needs from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# torch first and pinned: 2.13.0 is the local CPU wheel; an open range would pull CUDA builds.
TORCH := torch==2.13.0
EXTRAS := jax,torch,test,dev,redis,s3
PYTEST_ARGS ?=

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m compilecache demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest -n 2 --durations=15 $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/bench_store.py
	$(PY) benchmarks/bench_scale.py
	$(PY) benchmarks/bench_jax_warm.py
	$(PY) benchmarks/bench_redis.py
	$(PY) benchmarks/bench_torch.py
	$(PY) benchmarks/bench_singleflight.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
