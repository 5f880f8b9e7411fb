"""The context a calibration times its passes after (``pass_timing``): one prefilled token and random keys and
values, rolled back after each pass."""

import pytest
import torch
from tiny_models import tiny_model

from draftless.integration import pass_timing


@pytest.mark.parametrize("kind", ["llama", "gemma3", "qwen2", "gpt2"])  # gemma3: a context past its window
def test_the_timed_context_is_one_prefilled_token_and_random_keys_and_values(kind):
    model = tiny_model(kind)
    timers = pass_timing.pass_timers(model, (0, 3), context=20)
    cache = timers[0].args[1]
    for i, layer in enumerate(cache.layers):
        assert cache.get_seq_length(i) == 20
        assert 1 <= layer.keys.shape[-2] <= 20 and layer.keys.dtype == model.dtype
        assert layer.keys.shape[:-2] == layer.values.shape[:-2]
    assert all(run() > 0 for run in timers) and cache.get_seq_length() == 20  # each pass rolled back
    with torch.no_grad():  # a pass over the filled context: logits for every row, finite
        out = model(
            input_ids=torch.tensor([[1, 2, 3]]),
            position_ids=torch.arange(20, 23)[None],
            cache=cache,
            use_cache=True,
            logits_to_keep=3,
        )
    assert out.logits.shape[1] == 3 and torch.isfinite(out.logits).all()


def test_the_context_is_filled_only_onto_a_prefilled_cache_and_up_to_its_length():
    model = tiny_model("llama")
    cache = pass_timing.pass_timers(model, (0,), context=5)[0].args[1]
    with pytest.raises(ValueError, match="positions=4"):
        pass_timing.fill_context(cache, 4, torch.Generator())
    with pytest.raises(ValueError, match="positions"):
        pass_timing.fill_context(cache, 0, torch.Generator())
    with pytest.raises(ValueError, match="context"):
        pass_timing.pass_timers(model, (0,), context=0)
    pass_timing.fill_context(cache, 5, torch.Generator())  # already there: nothing appended
    assert cache.get_seq_length() == 5
