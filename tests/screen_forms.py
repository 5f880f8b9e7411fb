"""The screen's bfloat16 product forms, and a screen forced on any model, as fixtures for the tests of the screen
and of the loops that screen."""

import pytest

from draftless.integration.fastpass.screen_product import FORMS
from draftless.integration.fastpass.screened_head import ScreenedHead


@pytest.fixture(params=FORMS)
def form(request):
    """The screen's bfloat16 product in each of its forms (``screen_product``): oneDNN's over the rows (torch's own
    where oneDNN has none) and torch's weight-major one, whose scores lie tokens by rows."""
    return request.param


@pytest.fixture
def forced_screen(monkeypatch, cache_dir, form):
    """Every model screened, on any host (torch's bfloat16 product where oneDNN has none), from the default
    ``SCREEN_FROM_ROWS`` (one row: every pass); the screens built are listed. The curves timed so stay in this
    test's own cache (``cache_dir``): another test's tiny model of the same shape would read them, and find no
    output-layer times in them."""
    built = []

    def for_model(cls, model, min_weights=None):
        screen = ScreenedHead(model.get_output_embeddings(), form=form)
        calls = screen.argmax
        screen.calls = 0

        def counted(rows, timing=False, draft=None):
            screen.calls += not timing  # the loop's choices, not the calibration's timed passes
            return calls(rows, timing, draft)

        screen.argmax = counted
        built.append(screen)
        return screen

    monkeypatch.setattr(ScreenedHead, "for_model", classmethod(for_model))
    return built
