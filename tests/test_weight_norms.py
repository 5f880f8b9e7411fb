"""The screen's weight norms (``screen_bound.row_norms``, one compiled pass) against a plain float64 reference, on
random and adversarial weights: ties and subnormals in the bfloat16 rounding, rows of one weight, NaN and
infinities."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from draftless.integration.fastpass.screen_bound import weight_norms
from draftless.integration.fastpass.screened_head import bfloat16_copy


def reference_norms(weight):
    """The nine norms in float64 from the definitions: row L2, L1 and max of the weight, of ``weight - low`` and of
    ``low`` (``low`` torch's bfloat16 rounding), each the largest over the rows."""
    w = weight.double()
    low = weight.bfloat16().double()
    return [float(v) for m in (w, w - low, low) for v in (m.norm(dim=1).max(), m.abs().sum(dim=1).max(), m.abs().max())]


def assert_norms(weight):
    low, norms = bfloat16_copy(weight)
    assert torch.equal(low.view(torch.int16), weight.bfloat16().view(torch.int16))  # torch's rounding, bit for bit
    want = reference_norms(weight)
    for k, (got, expected) in enumerate(zip(norms, want)):
        if k % 3 == 2:
            assert got == expected  # a max is exact
        else:  # fp32 sums in any order: within the n u32 the bound's margin allows
            assert got == pytest.approx(expected, rel=2 * weight.shape[1] * 2.0**-24, abs=1e-38)


@pytest.mark.parametrize("shape", [(1, 1), (1, 37), (50, 13), (7, 256), (300, 65)])
def test_the_norms_are_those_of_their_definitions_on_random_weights(shape):
    generator = torch.Generator().manual_seed(sum(shape))
    assert_norms(
        torch.randn(shape, generator=generator) * 10.0 ** torch.randint(-3, 4, (shape[0], 1), generator=generator)
    )


def test_ties_subnormals_and_signed_zeros_round_as_torch_does():
    halfway = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000], np.uint32)  # ties to even, both ways
    subnormal = np.array([0x00000001, 0x00008000, 0x00018000, 0x807FFFFF], np.uint32)
    signed_zeros = np.array([0x00000000, 0x80000000, 0x5E7F8000, 0xDE7F7FFF], np.uint32)  # and large ties
    weight = torch.from_numpy(np.stack([halfway, subnormal, signed_zeros]).view(np.float32).copy())
    assert_norms(weight)


@settings(max_examples=150, deadline=None)
@given(
    arrays(
        np.float32,
        st.tuples(st.integers(1, 9), st.integers(1, 70)),
        elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True),
    )
)
def test_the_norms_match_the_reference_on_any_finite_weights(values):
    assert_norms(torch.from_numpy(values.copy()))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 3.4e38])
def test_a_weight_not_finite_or_rounding_to_infinity_leaves_norms_not_finite(bad):
    weight = torch.randn(20, 33, generator=torch.Generator().manual_seed(1))
    weight[17, 32] = bad  # the last weight of a later row: every norm of that row and its maxima see it
    norms = bfloat16_copy(weight)[1]
    assert not all(math.isfinite(n) for n in norms)
    assert not math.isfinite(norms[8])  # the copy's max: 3.4e38 rounds to infinity in bfloat16
    assert math.isfinite(norms[2]) == math.isfinite(bad)
    if math.isnan(bad):
        assert all(math.isnan(n) for n in norms)


def test_weights_whose_squares_leave_fp32_keep_their_norms():
    for value in (3.3e38, 1e-30, 1e-45):  # squares above fp32's largest, and below its smallest subnormal
        weight = torch.full((2, 3), value)
        assert_norms(weight)
        assert bfloat16_copy(weight)[1][0] > 0


def test_bad_arguments_are_refused_by_name():
    weight = torch.randn(4, 5)
    for args in [
        (weight.double(), weight.bfloat16()),
        (weight, weight.half()),
        (weight, weight[:3].bfloat16()),
        (weight[0], weight[0].bfloat16()),
        (weight[:0], weight[:0].bfloat16()),
        (weight.to("meta"), weight.bfloat16()),
    ]:
        with pytest.raises(ValueError, match="weight"):
            weight_norms(*args)


def test_a_parameter_is_read_as_its_values():
    weight = torch.nn.Parameter(torch.randn(6, 10, generator=torch.Generator().manual_seed(2)))  # requires grad
    assert list(weight_norms(weight, weight.detach().bfloat16())) == pytest.approx(
        reference_norms(weight.detach()), rel=1e-5
    )


def test_a_weight_not_contiguous_is_read_as_its_values():
    weight = torch.randn(40, 24, generator=torch.Generator().manual_seed(5)).T  # 24 x 40, strided
    low = weight.bfloat16()
    assert list(weight_norms(weight, low)) == pytest.approx(reference_norms(weight), rel=1e-5)


@pytest.mark.parametrize("threads", [2, 3, 7, 400])
def test_blocks_of_rows_read_by_threads_give_the_norms_of_one_pass_bit_for_bit(threads):
    generator = torch.Generator().manual_seed(threads)
    weight = torch.randn(301, 65, generator=generator) * 10.0 ** torch.randint(-3, 4, (301, 1), generator=generator)
    weight[17, 3] = float("nan") if threads == 7 else weight[17, 3]  # a nan in one block spreads to every max
    low = weight.bfloat16()
    one = weight_norms(weight, low, threads=1)
    assert np.array_equal(weight_norms(weight, low, threads=threads), one, equal_nan=True)
    assert np.array_equal(weight_norms(weight, low, threads=0), one, equal_nan=True)


def test_a_thread_count_that_is_not_a_count_is_refused_by_name():
    weight = torch.randn(4, 5)
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="threads"):
            weight_norms(weight, weight.bfloat16(), threads=bad)
