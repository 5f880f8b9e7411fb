"""A bundled model's tokenizer saved so that it loads in a second rather than in two or three.

transformers 5 saves a tokenizer's ``tokenizer_config.json`` without its added tokens, so that every load parses
the whole ``tokenizer.json`` in Python to find them; and a class such as ``GemmaTokenizer``, whose ``__init__``
rebuilds the backend from the vocabulary and merges, has that file parsed in Python once more and the backend built
twice. Gemma 3 270M's tokenizer (262k tokens, 6,384 of them added) took 2.5-2.7 s to load on a 2-core EPYC against
1.0-1.2 s with both fixed (``load_tokenizer`` timed three times each in one process; SmolLM2-135M's 0.12-0.26 s
against 0.08 s). So the converted copy's config is completed once: the added tokens, the class's padding and
truncation sides and model inputs, and, where the class adds nothing to ``TokenizersBackend`` but that ``__init__``,
``TokenizersBackend`` as the class, which reads ``tokenizer.json`` in Rust as it stands. The result is kept only
where the tokenizer reloaded from it encodes and decodes ``PROBES`` exactly as the original, with the same
vocabulary, special tokens and chat template; else the config is put back as transformers saved it.

Only directories draftless converted itself (``models.converted_dir``) are rewritten, never a user's; one
completed under another transformers version is put back as saved (``restore``) and looked at afresh.
"""

import json
import logging
from pathlib import Path

from .store import write_text_atomically

logger = logging.getLogger(__name__)

CONFIG = "tokenizer_config.json"
# beside the converted tokenizer: its config was completed (or found not to load the same completed) by this
# version of the rewrite under this transformers version, and the config as transformers saved it, to be put back
# before another version looks at it again (bumped when the rewrite changes)
MARK = "draftless-tokenizer.json"
VERSION = 1
# what a class may define, between itself and ``TokenizersBackend``, and still load as ``TokenizersBackend``:
# an ``__init__`` that builds the backend (``tokenizer.json`` holds what it builds) and attributes the config carries
PLAIN_NAMES = frozenset(
    {
        "__init__",
        "__doc__",
        "__module__",
        "__qualname__",
        "__annotations__",
        "__firstlineno__",
        "__static_attributes__",
        "__orig_bases__",
        "__parameters__",
        "vocab_files_names",
        "model",
        "padding_side",
        "truncation_side",
        "model_input_names",
    }
)
CARRIED = ("padding_side", "truncation_side", "model_input_names")
# texts the reloaded tokenizer must treat exactly as the original: prose, code (tabs, indentation, runs of
# spaces and newlines), digits, other scripts, emoji and bytes outside any vocabulary, special tokens as text
PROBES = (
    "The quick brown fox jumps over the lazy dog.  Twice:\n\nthe quick brown fox.",
    'def add(a, b):\n    """Sum."""\n\treturn a + b  # 3.14159, 1e-9, 0x1F, 12345678901234567890\n\n\n',
    "  leading spaces, trailing spaces   \r\n\u00a0no-break\u2009thin\u3000ideographic",
    "日本語のテキスト、中文文本，한국어 텍스트, русский текст, العربية, हिन्दी, ελληνικά",
    "emoji 🙂👩🏽‍💻🏳️‍🌈 and rare bytes \x00\x07\x1b[0m \ufffd \U0001d49c",
    "<bos><eos><pad><unk><mask><|endoftext|><|im_start|>user\nhi<|im_end|><start_of_turn>model\n<end_of_turn>",
    "",
)


def plain_backend(cls):
    """Whether ``cls`` adds to ``TokenizersBackend`` nothing a ``tokenizer.json`` and config do not hold."""
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    if not (isinstance(cls, type) and issubclass(cls, TokenizersBackend)):
        return False
    for klass in cls.__mro__[: cls.__mro__.index(TokenizersBackend)]:
        if set(vars(klass)) - PLAIN_NAMES:
            return False
    return True


def completed_config(config, tokenizer):
    """``config`` (the saved ``tokenizer_config.json``) with ``tokenizer``'s added tokens, padding and truncation
    sides and model inputs, and its class ``TokenizersBackend`` where ``plain_backend``."""
    out = dict(config)
    out["added_tokens_decoder"] = {str(i): state for i, state in sorted(_added(tokenizer).items())}
    for name in CARRIED:
        value = getattr(tokenizer, name)
        out[name] = list(value) if isinstance(value, (list, tuple)) else value
    if plain_backend(type(tokenizer)) and out.get("tokenizer_class") != "TokenizersBackend":
        out["tokenizer_class"] = "TokenizersBackend"
    return out


def differences(a, b):
    """What tells tokenizers ``a`` and ``b`` apart on ``PROBES`` and in their vocabulary, added and special tokens
    and settings (an empty list if nothing does)."""
    out = []
    for name in (
        "all_special_tokens",
        "all_special_ids",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "unk_token_id",
        "chat_template",
        "model_max_length",
        *CARRIED,
    ):
        if getattr(a, name, None) != getattr(b, name, None):
            out.append(name)
    if len(a) != len(b) or a.get_vocab() != b.get_vocab():
        out.append("vocabulary")
    if _added(a) != _added(b):  # their flags too: whether each is special, stripped, normalized
        out.append("added tokens")
    for text in PROBES:
        encoded = dict(a(text))
        if encoded != dict(b(text)):
            out.append(f"encoding of {text[:20]!r}")
            continue
        for skip in (False, True):
            if a.decode(encoded["input_ids"], skip_special_tokens=skip) != b.decode(
                encoded["input_ids"], skip_special_tokens=skip
            ):
                out.append(f"decoding of {text[:20]!r}")
    return out


def _added(tokenizer):
    return {i: token.__getstate__() for i, token in tokenizer.added_tokens_decoder.items()}


def complete(directory, tokenizer):
    """Rewrite ``directory``'s saved tokenizer config (``completed_config``) where ``tokenizer``, which it was
    saved from, reloads from it the same (``differences``), else leave it as saved; mark the directory either way.
    True if rewritten. A directory that cannot be written is left as it is (logged)."""
    from transformers import AutoTokenizer

    directory = Path(directory)
    path = directory / CONFIG
    try:
        saved = path.read_text(encoding="utf-8")
        completed = completed_config(json.loads(saved), tokenizer)
        write_text_atomically(path, json.dumps(completed, indent=2, ensure_ascii=False) + "\n")
        try:
            found = differences(tokenizer, AutoTokenizer.from_pretrained(str(directory), local_files_only=True))
        except Exception as error:  # a config this transformers cannot load: put back as saved
            found = [f"loading ({type(error).__name__}: {error})"]
        if found:
            logger.info(
                "the tokenizer in %s, config completed, differs in %s: kept as saved", directory, ", ".join(found)
            )
            write_text_atomically(path, saved)
        write_text_atomically(
            directory / MARK,
            json.dumps(
                {"version": VERSION, "transformers": _transformers_version(), "completed": not found, "saved": saved}
            )
            + "\n",
        )
    except OSError as error:
        logger.info("cannot complete the tokenizer config in %s (%s): it loads as saved", directory, error)
        return False
    return not found


def _mark(directory):
    try:
        mark = json.loads((Path(directory) / MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return mark if isinstance(mark, dict) else {}


def _transformers_version():
    import transformers

    return transformers.__version__


def completed(directory):
    """Whether ``directory``'s tokenizer config was looked at by this version of ``complete`` under the
    transformers version running now."""
    mark = _mark(directory)
    return mark.get("version") == VERSION and mark.get("transformers") == _transformers_version()


def restore(directory):
    """Put ``directory``'s tokenizer config back as transformers saved it, where ``complete`` rewrote it (a copy
    completed under another transformers version, or by another version of ``complete``, is looked at afresh
    from that). False where there was nothing to put back or it cannot be written."""
    saved = _mark(directory).get("saved")
    if not isinstance(saved, str):
        return False
    try:
        write_text_atomically(Path(directory) / CONFIG, saved)
        (Path(directory) / MARK).unlink(missing_ok=True)
    except OSError as error:
        logger.info("cannot put back the tokenizer config in %s (%s)", directory, error)
        return False
    return True
