"""Every test but the real models' keeps out of the user's cache: the tiny models' calibrations (linear-layer plans,
cost curves) go to one directory per test session, not ``~/.cache/draftless`` beside the user's own. The slow tests
keep the user's cache, where the bundled models' converted weights and calibrations already lie; they alone
replay recorded runs with their model's tokenizer."""

import pytest


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("draftless-cache")


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
    from draftless.integration import calibration

    monkeypatch.setenv("DRAFTLESS_CACHE", str(tmp_path))
    calibration._MEMO.clear()
    yield tmp_path
    calibration._MEMO.clear()
