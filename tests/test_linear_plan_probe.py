"""Which weights ``linear_plan`` times each shape's forms over: a probe past the last-level cache."""

import pytest
import torch

from draftless.integration.fastpass import linear_plan, weight_probe


def test_forms_are_timed_over_a_probe_past_the_cache_not_every_layer():
    """Each shape's forms stream ``probe_bytes`` of weights: whole layers in turn until that many bytes, or a row
    slice of one layer larger than that (an output layer), never fewer bytes than asked where the layers hold
    them."""
    layers = [torch.nn.Linear(16, 32) for _ in range(5)]  # 2 KiB of weights each
    per_layer = 16 * 32 * 4
    assert len(weight_probe.probe_weights(layers, 2 * per_layer + 1)) == 3
    assert len(weight_probe.probe_weights(layers, 100 * per_layer)) == 5  # all there is
    assert [w is m.weight for (w, _), m in zip(weight_probe.probe_weights(layers, per_layer), layers)] == [True]
    ((weight, bias),) = weight_probe.probe_weights(layers[:1], 10 * 16 * 4)  # ten rows' worth of one 32-row weight
    assert weight.shape == (10, 16) and bias.shape == (10,) and weight.data_ptr() == layers[0].weight.data_ptr()
    ((weight, bias),) = weight_probe.probe_weights([torch.nn.Linear(16, 32, bias=False)], 1)
    assert weight.shape == (1, 16) and bias is None
    with pytest.raises(ValueError, match="nbytes"):
        weight_probe.probe_weights(layers, 0)
    cache = weight_probe.last_level_cache_bytes("cpu")
    assert isinstance(cache, int) and cache >= 0
    assert weight_probe.probe_bytes("cpu") == max(weight_probe.MIN_PROBE_BYTES, 2 * cache)


@pytest.mark.parametrize("cache_mib", [0, 32, 480])
def test_layers_that_stay_in_the_cache_are_timed_over_the_least_probe(monkeypatch, cache_mib):
    """Where a shape's layers fill at most ``WARM_SHARE`` of the last-level cache, the race times them warm
    whatever it streams: ``MIN_PROBE_BYTES`` then; layers that fill more (or a cache of unknown size) are timed
    over twice the cache, as before. ``measure_plan`` asks with its layers' bytes."""
    monkeypatch.setattr(weight_probe, "last_level_cache_bytes", lambda device: cache_mib << 20)
    least, full = weight_probe.MIN_PROBE_BYTES, max(weight_probe.MIN_PROBE_BYTES, 2 * (cache_mib << 20))
    share = int(weight_probe.WARM_SHARE * (cache_mib << 20))
    assert weight_probe.probe_bytes("cpu") == full
    assert weight_probe.probe_bytes("cpu", held=share + 1) == full
    assert weight_probe.probe_bytes("cpu", held=share) == (least if cache_mib else full)
    assert weight_probe.probe_bytes("cpu", held=1) == (least if cache_mib else full)
    asked = []
    real = weight_probe.probe_bytes
    monkeypatch.setattr(linear_plan, "probe_bytes", lambda device, held=None: asked.append(held) or real(device, held))
    layers = [torch.nn.Linear(16, 32) for _ in range(3)]
    linear_plan.measure_plan(layers, max_rows=2, wide_rows=(), repeats=1)
    assert asked == [3 * 16 * 32 * 4]  # the weights, as ``part_bytes`` counts them


def test_the_probe_is_cut_into_parts_of_equal_bytes_that_never_overlap():
    """``probe_parts``: whole layers where each is smaller than a part, else slices of rows, every part as large
    as the others (a form timed over one is timed as over another), fewer parts where the layers hold fewer."""
    layers = [torch.nn.Linear(16, 32) for _ in range(7)]  # 2 KiB of weights each
    per_layer = 16 * 32 * 4
    parts = weight_probe.probe_parts(layers, 6 * per_layer, 3)
    assert [len(part) for part in parts] == [2] * 3
    assert all(w is m.weight for (w, _), m in zip([pair for part in parts for pair in part], layers[:6]))
    assert len(weight_probe.probe_parts(layers, 100 * per_layer, 3)) == 3  # 2 layers each of the 7 there are
    assert [len(p) for p in weight_probe.probe_parts(layers, 100 * per_layer, 9)] == [1] * 7
    assert weight_probe.probe_parts(layers, 6 * per_layer, 1) == [weight_probe.probe_weights(layers, 6 * per_layer)]
    big = torch.nn.Linear(16, 100)
    parts = weight_probe.probe_parts([big], 60 * 16 * 4, 4)  # 15 rows a part, as many as the 100 rows hold
    assert [part[0][0].shape for part in parts] == [(15, 16)] * 4 and all(len(p) == 1 for p in parts)
    starts = [part[0][0].data_ptr() for part in parts]
    assert starts == [big.weight.data_ptr() + 15 * 16 * 4 * i for i in range(4)]  # consecutive, disjoint
    assert [part[0][1].shape for part in parts] == [(15,)] * 4
    assert len(weight_probe.probe_parts([big], 120 * 16 * 4, 2)) == 1  # 60 rows a part: one fits in 100
    assert weight_probe.part_bytes(parts[0]) == 15 * 16 * 4
    with pytest.raises(ValueError, match="parts"):
        weight_probe.probe_parts(layers, per_layer, 0)


def test_each_timing_streams_the_next_part_the_first_round_and_the_later_ones_cut_apart(monkeypatch):
    layers = [torch.nn.Linear(16, 32) for _ in range(6)]
    seen = []
    real = linear_plan.form_product
    monkeypatch.setattr(linear_plan, "form_product", lambda w, *rest: seen.append(w.data_ptr()) or real(w, *rest))
    monkeypatch.setattr(linear_plan, "in_the_race", lambda seconds, max_rows: list(seconds))  # all race on
    monkeypatch.setattr(linear_plan, "RETIME_DEPARTURES", False)  # the rounds alone (``test_plan_departures``)
    linear_plan.measure_plan(
        layers,
        max_rows=2,
        wide_rows=(),
        repeats=2,
        nbytes=6 * 16 * 32 * 4,
        parts=(3, 2),
        forms=(linear_plan.PLAIN, linear_plan.TRANSPOSED),
    )
    ptr = [m.weight.data_ptr() for m in layers]
    thirds = [ptr[0:2], ptr[2:4], ptr[4:6]]
    halves = [ptr[0:3], ptr[3:6]]
    # the first product of each order, untimed, and a round of four timings over thirds; a round over halves
    expected = [thirds[turn % 3] for turn in range(2 + 4)] + [halves[turn % 2] for turn in range(6, 6 + 4)]
    assert seen == [p for part in expected for p in part]  # the turn runs on across rounds
    with pytest.raises(ValueError, match="parts"):
        linear_plan.measure_plan(layers, max_rows=2, wide_rows=(), parts=(3,))


def test_measure_plan_times_only_the_probe(monkeypatch):
    layers = [torch.nn.Linear(16, 32) for _ in range(4)]
    seen = set()
    real = linear_plan.form_product
    monkeypatch.setattr(linear_plan, "form_product", lambda w, *rest: seen.add(w.data_ptr()) or real(w, *rest))
    linear_plan.measure_plan(layers, max_rows=2, wide_rows=(), repeats=1, nbytes=2 * 16 * 32 * 4, parts=(1, 1))
    assert seen == {layers[0].weight.data_ptr(), layers[1].weight.data_ptr()}


def test_parts_smaller_than_a_layer_are_row_slices_spread_over_the_layers():
    layers = [torch.nn.Linear(16, 40) for _ in range(3)]  # 40 rows each
    parts = weight_probe.probe_parts(layers, 4 * 25 * 16 * 4, 4)  # 25 rows a part: one fits in each layer
    assert len(parts) == 3  # only three whole slices of 25 rows in three 40-row layers
    assert [part[0][0].data_ptr() for part in parts] == [m.weight.data_ptr() for m in layers]
    assert all(part[0][0].shape == (25, 16) for part in parts)
    parts = weight_probe.probe_parts(layers, 4 * 20 * 16 * 4, 4)  # 20 rows a part: two in each layer
    assert [(part[0][0].data_ptr() - layers[i // 2].weight.data_ptr()) // (16 * 4) for i, part in enumerate(parts)] == [
        0,
        20,
        0,
        20,
    ]
