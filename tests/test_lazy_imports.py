"""``draftless.integration`` loads its public names on first use: importing the package or its command line
(``draftless --help``, a usage error) imports neither torch nor transformers, and every public name is the object
its module defines."""

import subprocess
import sys

import pytest


def _imported_after(code):
    """The heavy modules imported by ``code`` in a fresh interpreter."""
    probe = code + "\nimport sys\nprint(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "code",
    [
        "import draftless.integration",
        "import draftless.integration.cli",
        "from draftless.integration import tokenizer_files, gguf_reading",
        "import contextlib, io\nfrom draftless.integration.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])",
        "import contextlib, io\nfrom draftless.integration.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stderr(io.StringIO()):\n    main(['generate'])",
    ],
)
def test_the_package_and_its_command_line_import_no_torch(code):
    assert _imported_after(code) == "[]"


def test_a_public_name_imports_what_it_needs():
    assert _imported_after("from draftless.integration import SpeculativeGenerator") == "['torch', 'transformers']"


def test_every_public_name_is_its_modules_own():
    import draftless.integration as integration
    from draftless.integration import enabling as switch
    from draftless.integration import generation_stats, models, speculative
    from draftless.lookup import DraftConfig

    assert integration.stats is switch.stats and callable(integration.stats)  # the function, not a module
    assert integration.GenerationStats is generation_stats.GenerationStats
    assert integration.SpeculativeGenerator is speculative.SpeculativeGenerator
    assert integration.generate is speculative.generate and integration.load_model is models.load_model
    assert integration.DraftConfig is DraftConfig
    assert set(integration.__all__) <= set(dir(integration))
    for name in integration.__all__:
        assert getattr(integration, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        integration.no_such_name  # noqa: B018
