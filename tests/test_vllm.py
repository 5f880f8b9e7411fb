"""draftless's proposer inside vLLM (``integration.vllm``), run in vLLM's own environment (``make test-vllm``):
greedy outputs identical to vLLM without speculation on both bundled models, for single requests and for eight
prompts from every suite submitted at once, with budgets that end them at different steps; and the plugin that
hands the proposer its batch's request ids."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("model", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_outputs_equal_vllm_without_speculation(model, tmp_path):
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "benchmarks.vllm_run", "--model", model, "--suite", "mixed", "--limit", "8",
               "--concurrency", "1,8", "--max-new-tokens", "48", "--stagger", "--methods", "plain,draftless",
               "--json", str(report)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(report.read_text())["rows"]
    assert {row["concurrency"] for row in rows} == {1, 8}
    for row in rows:
        result = row["methods"]["draftless"]
        assert result["identical"], row
        assert result["tokens"] == row["methods"]["plain"]["tokens"]
    assert any(row["methods"]["draftless"]["accepted_length"] > 1 for row in rows)  # it did draft


def test_the_plugin_wraps_the_runner_once_and_binds_only_a_drafter_that_asks():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from draftless.integration.vllm_plugin import register

    register()
    wrapped = GPUModelRunner.propose_draft_token_ids
    register()
    assert GPUModelRunner.propose_draft_token_ids is wrapped and wrapped.binds_drafter

    bound = []
    binding = type("Binding", (), {"bind_runner": lambda self, runner: bound.append(runner)})()
    for drafter in (binding, object()):
        runner = type("Runner", (), {})()
        runner.drafter = drafter
        with pytest.raises(AttributeError):  # vLLM's own method needs a real runner: the binding comes first
            wrapped(runner, None, [], None, None, None, None, None, None, None)
        assert bound == [runner] if drafter is binding else len(bound) == 1
