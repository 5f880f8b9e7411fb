"""The modelled tree verification (``experiments.tree_replay``): branch choice, tree size, replay (no model)."""

import json

import numpy as np

from benchmarks.replay import main as replay_main
from draftless.index import SuffixIndex
from draftless.lookup import AdaptiveConfig, AdaptiveProposer
from draftless.lookup.cost_model import FLAT
from experiments.tree_replay import grow_tree, tree_replay_one, tree_size
from experiments.tree_replay import main as tree_main

# "1 2 3" was followed by "4 9" first and by "5 6" last; the output goes on "4 9 8"
PROMPT = [1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2]
TOKENS = PROMPT + [3, 4, 9, 8]


def test_tree_size_counts_shared_prefixes_once():
    assert tree_size([]) == 0
    assert tree_size([np.array([1, 2, 3]), np.array([1, 2, 4]), np.array([5])]) == 5
    assert tree_size([np.array([1, 2]), np.array([1, 2, 3])]) == 3


def test_a_tree_adds_the_other_occurrence_within_its_budget():
    index = SuffixIndex(np.array(TOKENS[:13]))
    primary = np.array([5, 6])  # the latest occurrence's continuation
    branches = grow_tree(index, primary, count=3, length=4, depth=2, budget=64)
    assert [b.tolist() for b in branches] == [[5, 6], [4, 9]]  # the latest occurrence adds nothing new
    assert [b.tolist() for b in grow_tree(index, primary, 3, 4, 2, budget=3)] == [[5, 6]]
    assert [b.tolist() for b in grow_tree(index, primary, 3, 4, 2, 64, excluded=(4,))] == [[5, 6]]
    assert [b.tolist() for b in grow_tree(index, primary, 0, 4, 2, 64)] == [[5, 6]]
    assert [b.tolist() for b in grow_tree(index, np.empty(0, np.int64), 1, 1, 2, 64)] == [[5]]


def test_the_pass_keeps_the_branch_the_output_agrees_with():
    def replay(count):
        # the "frequent" occurrence wherever it lies: the prompt holds both branches, and the case is the tree's
        proposer = AdaptiveProposer(AdaptiveConfig(occurrence="frequent", earliest_in_prompt=0), cost=FLAT)
        return tree_replay_one(proposer, TOKENS, len(PROMPT), 4, count, 4)

    # the single branch "5 6" fails at once; then "1 2 3 4" drafts "9", accepted, with the bonus "8"
    assert replay(0) == ([1, 2], [2, 1])
    kept, sizes = replay(3)
    assert kept == [3] and sizes == [4]  # "4 9" accepted, then the bonus "8": the whole output in one pass


def test_the_single_branch_reproduces_replay_and_ratios_are_to_it(tmp_path):
    rng = np.random.default_rng(0)
    unit = rng.integers(0, 50, 12).tolist()
    outputs = [
        {"suite": "code_edit", "prompt_id": "a", "prompt_len": 30, "tokens": (unit * 5)[:30] + unit * 3},
        {"suite": "qa", "prompt_id": "b", "prompt_len": 20, "tokens": rng.integers(0, 50, 56).tolist()},
    ]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"max_new_tokens": 36, "outputs": outputs}))
    rows = tree_main([str(path), "--json", str(tmp_path / "tree.json")])
    single = {r["suite"]: r for r in rows if r["count"] == 0}
    replayed = {r["suite"]: r for r in replay_main([str(path)]) if r["config"] == "draftless"}
    for suite in ("code_edit", "qa", "all"):
        assert single[suite]["est_speedup"] == replayed[suite]["est_speedup"]
        assert single[suite]["mean_accepted"] == replayed[suite]["mean_accepted"]
        assert single[suite]["vs_single"] == 1.0
    assert all(r["mean_tree_size"] <= 64 for r in rows)
    assert json.loads((tmp_path / "tree.json").read_text())["rows"] == rows
