"""Every test but the real models' keeps out of the user's cache: the tiny models' calibrations (linear-layer plans,
cost curves) go to one directory per test session, not ``~/.cache/draftless`` beside the user's own. The slow tests
keep the user's cache, where the bundled models' converted weights and calibrations already lie; they alone
replay recorded runs with their model's tokenizer."""

import sys
from pathlib import Path

import pytest

# the tests' helpers (tiny models, naive references) import by name from the experiments' tests too
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("draftless-cache")


@pytest.fixture(autouse=True)
def steady_timings(monkeypatch):
    """The machine's timings taken as steady, so that what a test calibrates is cached whatever else runs beside
    the suite; the tests of the unsteady case set their own."""
    monkeypatch.setattr("draftless.integration.store.timing_spread", lambda: 1.0)


@pytest.fixture(autouse=True)
def keep_out_of_the_user_cache(request, monkeypatch, session_cache):
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setenv("DRAFTLESS_CACHE", str(session_cache))
        # a replay of a recorded run would load its bundled model's tokenizer for the re-flowed drafts, converting
        # the model into that empty cache first (a minute for Gemma): the slow tests replay with tokenizers
        monkeypatch.setattr("benchmarks.recorded_run._model_text_classes", lambda model: None)
        monkeypatch.setattr("benchmarks.recorded_run._model_digit_tokens", lambda model: None)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A cache of this test's own, empty, with nothing of it memoised in the process before or after."""
    from draftless.integration import store

    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path))
    store.forget_read_files()
    yield tmp_path
    store.forget_read_files()


@pytest.fixture
def short_curve(monkeypatch):
    """The curve measured after a short context in one round: the same steps, a fraction of the time."""
    from draftless.integration import calibration

    real = calibration.measure_cost_curve
    monkeypatch.setattr(
        calibration,
        "measure_cost_curve",
        lambda m, ks, progress=None: real(m, ks, context=16, repeats=1, progress=progress),
    )


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks small enough that tiny weights are split: 64-feature multiples, 2 KiB of result, from 2 rows."""
    from draftless.integration.fastpass import blocked_product

    monkeypatch.setattr(blocked_product, "OUTPUT_BLOCK_BYTES", 2048)
    monkeypatch.setattr(blocked_product, "BLOCK_MULTIPLE", 64)
    monkeypatch.setattr(blocked_product, "BLOCKED_FROM_ROWS", 2)
    monkeypatch.setattr(blocked_product, "BLOCKED_FROM_BYTES", 0)
