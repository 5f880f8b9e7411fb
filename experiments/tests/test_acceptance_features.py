"""experiments.acceptance_features against a plain-Python walk of the same streams."""

import json
from collections import Counter

import numpy as np
import pytest

from experiments.acceptance_features import (
    DISTANCE_EDGES,
    FEATURES,
    LENGTH_GROUPS,
    copied_share,
    cross_validated_bits,
    main,
    observations,
)


def longest_earlier_suffix(stream):
    """(length, end positions) of the longest suffix of ``stream`` that also ends earlier; (0, []) if none."""
    n = len(stream)
    for length in range(n - 1, 0, -1):
        suffix = stream[n - length :]
        ends = [e for e in range(length - 1, n - 1) if stream[e - length + 1 : e + 1] == suffix]
        if ends:
            return length, ends
    return 0, []


def naive_observations(tokens, prompt_len):
    rows = []
    copied, weight = 0.5 * 8.0, 8.0  # the copy regime's share, as copy_regime defines it (6+ tokens, 0.98)
    for pos in range(prompt_len + 1, len(tokens)):
        stream = tokens[:pos]
        n = len(stream)
        length, ends = longest_earlier_suffix(stream)
        share = copied / weight
        after = longest_earlier_suffix(tokens[: pos + 1])[0]
        copied, weight = copied * 0.98 + (after >= 6), weight * 0.98 + 1.0
        if not ends:
            continue
        recent = max(ends)
        followers = Counter(stream[e + 1] for e in ends)
        follower = stream[recent + 1]
        ratio = followers[follower] / sum(followers.values())
        group = {1: "1", 2: "2", 3: "3", 4: "4-5", 5: "4-5", 6: "6-7", 7: "6-7"}.get(length, "8+")
        distance = n - 1 - recent
        rows.append(
            {
                "length": group,
                "origin": "prompt" if recent < prompt_len else "generated",
                "distance": f"{max(e for e in DISTANCE_EDGES if e <= distance)}+",
                "followers": "only" if len(followers) == 1 else ("majority" if ratio > 0.5 else "minority"),
                "regime": "copying" if share >= 0.4 else "writing",
                "hit": follower == tokens[pos],
            }
        )
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_observations_match_a_plain_walk(seed):
    rng = np.random.default_rng(seed)
    alphabet = 2 + seed % 3
    tokens = rng.integers(0, alphabet, 60).tolist()
    if seed % 2:  # a long copy with an edit, so that long matches and far occurrences occur too
        tokens = tokens[:30] + tokens[:12] + [9] + tokens[13:30]
    prompt_len = 20
    assert observations(tokens, prompt_len) == naive_observations(tokens, prompt_len)
    copied = [longest_earlier_suffix(tokens[: pos + 1])[0] >= 6 for pos in range(prompt_len + 1, len(tokens))]
    assert copied_share(tokens, prompt_len) == pytest.approx(np.mean(copied))


def test_observations_of_a_copy_and_a_contested_follower():
    rows = observations([1, 2, 1, 3, 1, 3, 1, 2], 2)
    # at "1 2 1": "1" followed by 2 only, recent follower 2 but 3 comes: a miss from the prompt
    assert rows[0] == {
        "length": "1",
        "origin": "prompt",
        "distance": "0+",
        "followers": "only",
        "regime": "copying",
        "hit": False,
    }
    # at "1 2 1 3 1 3 1": "1 3 1" occurred ending at 4, followed by 3, and the truth is 2: a miss from
    # generated text
    assert rows[-1]["length"] == "3" and rows[-1]["origin"] == "generated" and not rows[-1]["hit"]
    assert observations([1, 2, 3], 3) == [] and observations([4, 5, 6, 7], 1) == []
    assert LENGTH_GROUPS == ("1", "2", "3", "4-5", "6-7", "8+")


def test_cross_validated_bits_reward_a_predictive_feature_only():
    rng = np.random.default_rng(0)
    requests = []
    for _ in range(8):
        rows = []
        for _ in range(200):
            signal, noise = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
            hit = bool(rng.random() < (0.9 if signal else 0.1))
            rows.append({"length": "1", "origin": "prompt", "signal": signal, "noise": noise, "hit": hit})
        requests.append(rows)
    base = cross_validated_bits(requests, ("length", "origin"))
    assert base == pytest.approx(1.0, abs=0.02)  # a coin flip overall
    assert cross_validated_bits(requests, ("length", "origin", "signal")) < base - 0.4
    assert cross_validated_bits(requests, ("length", "origin", "noise")) > base - 0.01
    assert np.isnan(cross_validated_bits([requests[0]], ("length",)))  # no second half to score on


def test_main_writes_tables_and_json(tmp_path, capsys):
    tokens = [5, 6, 7, 8, 9, 5, 6, 7, 8, 3, 5, 6, 7, 8, 3, 5, 6, 1]
    run = {
        "outputs": [
            {"suite": "code_edit", "prompt_id": str(i), "prompt_len": 5, "tokens": tokens[i:] + tokens}
            for i in range(4)
        ]
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    results = main([str(path), "--json", str(tmp_path / "features.json")])
    result = results[str(path)]
    total = sum(len(observations(o["tokens"], 5)) for o in run["outputs"])
    assert result["positions"] == total > 0
    for name in FEATURES:
        assert sum(row["n"] for row in result["features"][name]["table"]) == total
    assert json.loads((tmp_path / "features.json").read_text()) == results
    out = capsys.readouterr().out
    assert "`distance` added" in out and "| length | only | majority | minority |" in out
    assert set(result["copied_share"]) == {"code_edit"} and result["copied_share"]["code_edit"]["requests"] == 4
    (tmp_path / "bare.json").write_text(json.dumps({"runs": []}))
    with pytest.raises(SystemExit):
        main([str(tmp_path / "bare.json")])
