"""A caller's own proposer (``SpeculativeGenerator(model, proposer=...)``): any 1-D sequence of integer token ids
is verified exactly; anything else is refused naming the proposer, not met as an error deep in the model."""

import numpy as np
import pytest
import torch
from tiny_models import VOCAB, repetitive_prompt, tiny_model

from draftless.integration import SpeculativeGenerator


class Fixed:
    """Proposes the same draft every step."""

    def __init__(self, draft):
        self.draft = draft

    def reset(self, tokens):
        pass

    def update(self, tokens):
        pass

    def propose(self, max_tokens):
        return self.draft


@pytest.mark.parametrize(
    "draft",
    [[5, 6, 7], (5,), torch.tensor([5, 6]), np.arange(2, 90, dtype=np.int32), []],
    ids=["list", "tuple", "tensor", "int32 array longer than any budget", "empty"],
)
def test_any_integer_sequence_is_verified_exactly(draft):
    model = tiny_model("llama")
    ids = repetitive_prompt(20)
    out = SpeculativeGenerator(model, proposer=Fixed(draft)).generate(ids, max_new_tokens=10, eos_token_id=None)
    assert torch.equal(out, model.generate(ids, max_new_tokens=10, eos_token_id=None, do_sample=False))


@pytest.mark.parametrize(
    "draft, error, words",
    [
        (np.array([5.7, 6.2]), TypeError, "dtype float64"),  # not truncated to 5, 6 in silence
        (np.array([[5, 6]]), TypeError, r"shape \(1, 2\)"),
        (None, TypeError, "NoneType"),
        (np.array([True, False]), TypeError, "dtype bool"),
        ("ab", TypeError, "str"),
        (np.array([5, VOCAB]), ValueError, f"token id {VOCAB}, outside the model's vocabulary of {VOCAB}"),
        ([-1], ValueError, "token id -1"),
    ],
)
def test_a_draft_that_is_not_token_ids_is_refused_by_name(draft, error, words):
    generator = SpeculativeGenerator(tiny_model("llama"), proposer=Fixed(draft))
    with pytest.raises(error, match=r"proposer's propose\(\)") as raised:
        generator.generate(repetitive_prompt(20), max_new_tokens=10, eos_token_id=None)
    assert raised.match(words)


@pytest.mark.parametrize(
    "proposer, words", [(5, "int has no reset, propose, update"), ([1, 2], "list has no reset, propose, update")]
)
def test_a_proposer_without_the_protocol_is_refused_when_given(proposer, words):
    with pytest.raises(TypeError, match=words):  # not an AttributeError at the first request
        SpeculativeGenerator(tiny_model("llama"), proposer=proposer)
