# compilecache: every target creates .venv and installs what it needs from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# torch first and pinned: 2.13.0 is the local CPU wheel; an open range would pull CUDA builds.
TORCH := torch==2.13.0
EXTRAS := jax,torch,triton,test,dev,redis,s3,azure
PYTEST_ARGS ?=

.PHONY: install demo test lint fix attacks bench bench-gpu clean compat compat-torch compat-jax-old compat-jax-new

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	# The pin again beside the extras: pip 26 otherwise replaces the CPU wheel with a CUDA build
	# of a newer release while resolving the test and s3 extras together.
	$(PY) -m pip install --quiet $(TORCH) -e '.[$(EXTRAS)]'
	# Azurite (Azure Storage's emulator, npm) for the Azure tests; they skip, saying so, without
	# (and fail under CI=true: tests/conftest.py).
	npm install --silent --no-audit --no-fund --prefix $(VENV)/azurite azurite@3 >/dev/null 2>&1 \
		|| echo "make: azurite not installed (npm); the Azure tests will skip (fail under CI)"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m compilecache demo

# lint: the checks CI runs; .pre-commit-config.yaml runs the same three (tests/test_docs.py
# keeps them equal). fix: what ruff can repair, repaired (mypy's findings stay for you).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

fix: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests benchmarks
	$(VENV)/bin/ruff format src tests benchmarks

# The venv's bin first on PATH: torch's extension builds look for `ninja` there.
test: lint
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/pytest -n 2 --durations=15 $(PYTEST_ARGS)

# The adversarial corpus of guarded JAX traces (about an hour on 2 cores): every attack must PASS.
attacks: $(STAMP)
	$(PY) tests/jax_attacks/run.py -j 2

# etils and s3fs let bench_fleet run JAX's own cache on the S3 bucket (JAX opens s3:// so);
# transformers gives bench_torch --real its models (random init, nothing downloaded); optax and
# scikit-learn give bench_jax_read_ahead optax's own test suite.
bench: $(STAMP)
	$(PY) -m pip install --quiet $(TORCH) 'etils[epath]' s3fs transformers optax scikit-learn
	$(PY) benchmarks/bench_store.py
	$(PY) benchmarks/bench_scale.py
	$(PY) benchmarks/bench_jax_warm.py
	$(PY) benchmarks/bench_jax_read_ahead.py --workloads step many
	$(PY) benchmarks/bench_jax_read_ahead.py --workloads optax --rounds 3
	$(PY) benchmarks/bench_redis.py
	$(PY) benchmarks/bench_torch.py
	$(PY) benchmarks/bench_torch.py --real
	$(PY) benchmarks/bench_torch_dynamo.py
	$(PY) benchmarks/bench_torch_portable.py
	$(PY) benchmarks/bench_singleflight.py
	$(PY) benchmarks/bench_fleet.py

# bench-gpu: needs an NVIDIA GPU (it says so and stops without one, before installing anything).
# Its own venv: CUDA builds of torch (with torchvision) and JAX, and Triton; several GB.
GPU_VENV ?= .venv-gpu
GPU_PACKAGES ?= torch torchvision triton 'jax[cuda12]'
BENCH_GPU_ARGS ?=
bench-gpu:
	@command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { \
		echo "make bench-gpu needs an NVIDIA GPU (nvidia-smi lists none here)."; \
		echo "On this machine: $(PY) benchmarks/bench_gpu.py --cpu runs its CPU-side checks."; \
		exit 2; }
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GPU_VENV)/bin/python -m pip install --quiet $(GPU_PACKAGES) -e '.[redis]'
	$(GPU_VENV)/bin/python benchmarks/bench_gpu.py $(BENCH_GPU_ARGS)

# compat: the framework versions users run, each in its own venv (several GB: not part of
# `make test` or CI). The newest torch on the index is a CUDA build; it runs here on the CPU.
# A machine-wide pip constraint must not choose the version under test (PIP_CONSTRAINT).
# docs/versions.md records what passed.
COMPAT_TORCH ?= torch
COMPAT_JAX_OLD ?= jax==0.4.30
COMPAT_JAX_NEW ?= jax
COMPAT_TORCH_VENV ?= .venv-compat-torch
COMPAT_TORCH_TESTS ?= tests/test_host.py tests/test_torch_bundle.py tests/test_torch.py \
	tests/test_torch_explain.py tests/test_torch_warm.py tests/test_torch_headers.py \
	tests/test_torch_extensions.py tests/test_triton.py tests/test_torch_switches.py \
	tests/test_torch_dynamo.py tests/test_torch_corpus.py tests/test_host_kinds.py
COMPAT_JAX_TESTS ?= tests/test_host.py tests/test_host_kinds.py tests/test_jax_versions.py \
	tests/test_jax_adapter.py tests/test_jax_read_ahead.py \
	tests/test_jax.py tests/test_explain.py tests/test_bundle.py
COMPAT_PYTEST ?= -n 0 -p no:cacheprovider --durations=10
# The JAX venvs hold no torch: this test's torch entry is then refused for that reason instead.
COMPAT_JAX_SKIP := --deselect \
	tests/test_bundle.py::test_unusable_entries_are_skipped_with_reasons_and_never_replace_good_ones

compat: compat-torch compat-jax-old compat-jax-new

# $(call compat_venv,DIR,SPECS): a venv with SPECS installed first, then compilecache with the
# test tools (no framework extra, so pip keeps SPECS as they are); prints what it holds.
define compat_venv
	test -f $(1)/.installed-stamp || ( \
	  $(PYTHON) -m venv $(1) && \
	  $(1)/bin/python -m pip install --quiet --upgrade pip && \
	  PIP_CONSTRAINT=/dev/null $(1)/bin/python -m pip install --quiet $(2) && \
	  $(1)/bin/python -m pip install --quiet -e '.[test,redis]' && \
	  touch $(1)/.installed-stamp )
	$(1)/bin/python -c "import importlib.metadata as m, importlib.util as u, sys; \
	  print('compat: python', sys.version.split()[0], *(f'{d}=={m.version(d)}' \
	  for d in ('torch', 'jax', 'jaxlib') if u.find_spec(d)))"
endef

compat-torch:
	$(call compat_venv,$(COMPAT_TORCH_VENV),'$(COMPAT_TORCH)' numpy)
	PATH="$(CURDIR)/$(COMPAT_TORCH_VENV)/bin:$$PATH" $(COMPAT_TORCH_VENV)/bin/pytest $(COMPAT_PYTEST) \
	  $(COMPAT_TORCH_TESTS)

# 0.4.30 builds seven key components, not eight (test_jax_versions checks which per version).
compat-jax-old:
	$(call compat_venv,.venv-compat-jax-old,'$(COMPAT_JAX_OLD)')
	.venv-compat-jax-old/bin/pytest $(COMPAT_PYTEST) $(COMPAT_JAX_TESTS) $(COMPAT_JAX_SKIP) \
	  --deselect tests/test_jax.py::test_entries_record_float_compile_time_and_key_components

compat-jax-new:
	$(call compat_venv,.venv-compat-jax-new,'$(COMPAT_JAX_NEW)')
	.venv-compat-jax-new/bin/pytest $(COMPAT_PYTEST) $(COMPAT_JAX_TESTS) $(COMPAT_JAX_SKIP)

clean:
	rm -rf $(VENV) .venv-compat-* \
	  .pytest_cache .mypy_cache .ruff_cache .hypothesis
