"""The packed-products benchmark (``experiments.packed_products``): what it reports and what it refuses."""

import pytest
import torch

from experiments import packed_products


def test_each_shape_and_row_count_gets_both_times_and_the_packed_product_agrees():
    if not packed_products.packed_supported():
        pytest.skip("this torch build has no MKL packed products")  # CPU builds from PyPI have them
    from tiny_models import tiny_model

    model = tiny_model("llama")
    table = packed_products.compare_model(model, rows=(1, 4, 17), nbytes=1 << 20, rounds=1)
    shapes = {f"{m.weight.shape[0]}x{m.weight.shape[1]}" for m in model.modules() if type(m) is torch.nn.Linear}
    assert set(table) == shapes
    for by_rows in table.values():
        assert sorted(by_rows) == [1, 4, 17]
        for row in by_rows.values():
            assert row["plain_ms"] > 0 and row["packed_ms"] > 0 and (row["onednn_ms"] is None or row["onednn_ms"] > 0)
            others = [t for t in (row["plain_ms"], row["onednn_ms"]) if t is not None]
            assert row["ratio"] == pytest.approx(row["packed_ms"] / min(others), rel=1e-9)
            assert row["max_rel_diff"] < 1e-5 and (row["max_rel_diff"] == 0) == row["identical"]
    totals = packed_products.pass_totals(table)
    assert sorted(totals) == [1, 4, 17]
    for r, (without, with_packed) in totals.items():  # racing one more form never makes the pass slower
        assert 0 < with_packed <= without
        assert without == pytest.approx(
            sum(min(t for t in (b[r]["plain_ms"], b[r]["onednn_ms"]) if t is not None) for b in table.values())
        )
    text = packed_products.markdown(table)
    assert text.count("\n") == (2 + 3 * len(shapes)) + (2 + 3)


def test_bad_arguments_are_refused_by_name():
    layer = torch.nn.Linear(8, 8).to(torch.bfloat16)
    with pytest.raises(ValueError, match="fp32"):
        packed_products.compare_shape([layer])
    with pytest.raises(ValueError, match="rounds"):
        packed_products.compare_shape([torch.nn.Linear(8, 8)], rounds=0)
    for argv in (["--rows", "a,b"], ["--rows", "0,4"], ["--mib", "0"]):
        with pytest.raises(SystemExit):
            packed_products.main(argv)
