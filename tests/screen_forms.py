"""The screen's bfloat16 product forms as a fixture, for the tests of the screen and of the loop that screens."""

import pytest

from draftless.integration.fastpass.screen_product import FORMS


@pytest.fixture(params=FORMS)
def form(request):
    """The screen's bfloat16 product in each of its forms (``screen_product``): oneDNN's over the rows (torch's own
    where oneDNN has none) and torch's weight-major one, whose scores lie tokens by rows."""
    return request.param
