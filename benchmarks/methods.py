"""The compared methods, each a function ``(model, tokenizer, inputs, max_new_tokens, streamer, reference,
sampling)`` returning ``(sequences, GenerationStats or None)``; ``sampling`` holds ``do_sample`` and its
settings, or is empty for greedy decoding.

``vanilla`` and the ``hf_*`` methods are transformers' own ``generate``; ``hf_pld_planned`` is transformers'
prompt lookup with every linear layer in the form draftless's loop uses (``linear_plan``), so that a table
compares the drafting on an equal pass; the ``rule_*`` methods plug the peers' drafting rules into
draftless's verification loop (transformers' prompt lookup, vLLM's n-gram proposer, SuffixDecoding,
SAM-Decoding, REST and llama.cpp's lookup); ``no_draft`` runs that loop drafting nothing, so that a table shows
what the loop alone (its linear layers' forms, its lighter step) gains over ``generate`` before any drafting;
``oracle_k*`` drafts the true continuation (``reference``: greedy, the vanilla run's; sampled, the loop's text
for the run's seed) in linear drafts of k tokens: the ceiling for linear drafting. ``draftless_quick`` is the
default policy under a calibration of a second or two: c(0) and c(63) only, one warm-up and one timed pass each
(``quick_cost_curve``), instead of the cached curve's 17 lengths in two rounds; ``PREPARE`` holds what such a
method measures before any run is timed.
``draftless_history`` is the default policy with a ``ReferenceCorpus`` holding the outputs of every prompt run
before the current one (``remember``, called by the run after each prompt's rounds): the cross-request
history of SuffixDecoding and llama.cpp's lookup cache, as a service that keeps it would draft.
``draftless[knob=value+knob=value]`` is the default policy with those ``AdaptiveConfig`` knobs set
(``variant_config``), so that a knob's evidence from replay can be measured end to end, side by side with the
default, e.g. ``--methods draftless,draftless[earliest_in_prompt=0]``.
"""

import contextlib
import dataclasses
import re
import weakref

from draftless.integration import SpeculativeGenerator
from draftless.integration.calibration import cached_inexact_drafts, cached_linear_plans, measure_cost_curve
from draftless.integration.fastpass.linear_plan import planned_linears
from draftless.lookup import AdaptiveConfig, AdaptiveProposer, NullProposer, ReferenceCorpus

from .oracle import ORACLE_KS, OracleProposer
from .peer_rules import NgramRule, PromptLookupRule, SuffixDecodingRule
from .peer_rules_retrieval import LlamaCppLookupRule, RestRule, SamDecodingRule


def knob_value(knob, text):
    """``text`` as a value of ``AdaptiveConfig`` field ``knob``, of its default's type (``true``/``false`` for a
    bool); tuple-valued knobs (``prior``) are refused."""
    fields = {f.name for f in dataclasses.fields(AdaptiveConfig)}
    if knob not in fields:
        raise ValueError(f"knob must be one of {sorted(fields)}, got {knob!r}")
    default = getattr(AdaptiveConfig(), knob)
    if isinstance(default, tuple):
        raise ValueError(f"knob {knob!r} holds a tuple, which cannot be set from the command line")
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"values of {knob!r} must be true or false, got {text!r}")
        return text.lower() == "true"
    try:
        return type(default)(text)
    except ValueError:
        raise ValueError(f"values of {knob!r} must be of type {type(default).__name__}, got {text!r}") from None


def _hf(planned=False, **extra):
    def run(model, tokenizer, inputs, max_new_tokens, streamer, reference, sampling):
        settings = sampling or {"do_sample": False}
        form = planned_linears(model, cached_linear_plans(model)) if planned else contextlib.nullcontext()
        with form:
            return model.generate(**inputs, max_new_tokens=max_new_tokens, streamer=streamer, **settings, **extra), None

    return run


def _loop(make_proposer=None, make_corpus=None, make_config=None):
    def run(model, tokenizer, inputs, max_new_tokens, streamer, reference, sampling):
        proposer = make_proposer(reference) if make_proposer is not None else None
        corpus = make_corpus(model) if make_corpus is not None else None
        config = make_config() if make_config is not None else None
        gen = SpeculativeGenerator(model, tokenizer, config=config, proposer=proposer, corpus=corpus)
        out = gen.generate(**inputs, max_new_tokens=max_new_tokens, streamer=streamer, **sampling)
        return out, gen.last_stats

    return run


QUICK_KS = (0, 63)  # the two ends a second or two holds on a 2-core CPU (Gemma 3 270M: about 0.06 + 0.26 s a pass)
_quick_curves = weakref.WeakKeyDictionary()


def quick_cost_curve(model):
    """c(k) at ``QUICK_KS`` only, each length warmed up once and timed once, measured once per model in this
    process and never cached on disk (``docs/evidence.md``, "A calibration of a second or two")."""
    if model not in _quick_curves:
        _quick_curves[model] = measure_cost_curve(model, ks=QUICK_KS, repeats=1)
    return _quick_curves[model]


def _quick(model, tokenizer, inputs, max_new_tokens, streamer, reference, sampling):
    proposer = AdaptiveProposer(AdaptiveConfig(), cost=quick_cost_curve(model), excluded=cached_inexact_drafts(model))
    return _loop(lambda ref: proposer)(model, tokenizer, inputs, max_new_tokens, streamer, reference, sampling)


_histories = weakref.WeakKeyDictionary()  # model -> ReferenceCorpus of the earlier prompts' outputs


def history_corpus(model):
    """The outputs remembered for ``model`` so far in this run (``draftless_history``'s corpus)."""
    return _histories.setdefault(model, ReferenceCorpus())


def remember(model, tokens):
    """Add one prompt's output (its new tokens) to ``model``'s history, once all its runs are done."""
    _histories.setdefault(model, ReferenceCorpus()).add(tokens)


def forget(model):
    _histories.pop(model, None)


METHODS = {
    "vanilla": _hf(),
    "hf_pld": _hf(prompt_lookup_num_tokens=10),
    "hf_pld_n3": _hf(prompt_lookup_num_tokens=10, max_matching_ngram_size=3),
    "hf_pld_planned": _hf(planned=True, prompt_lookup_num_tokens=10),
    "draftless": _loop(),
    "rule_pld": _loop(lambda ref: PromptLookupRule()),
    "rule_ngram32": _loop(lambda ref: NgramRule()),
    "rule_suffix": _loop(lambda ref: SuffixDecodingRule()),
    "rule_sam": _loop(lambda ref: SamDecodingRule()),
    "rule_rest": _loop(lambda ref: RestRule()),
    "rule_llamacpp": _loop(lambda ref: LlamaCppLookupRule()),
    "no_draft": _loop(lambda ref: NullProposer()),
    "draftless_quick": _quick,
    "draftless_history": _loop(make_corpus=lambda model: history_corpus(model)),  # looked up per run
    **{f"oracle_k{k}": _loop(lambda ref, k=k: OracleProposer(ref, k)) for k in ORACLE_KS},
}
DEFAULT_METHODS = (
    "vanilla",
    "hf_pld",
    "hf_pld_n3",
    "hf_pld_planned",
    "draftless",
    "rule_pld",
    "rule_ngram32",
    "rule_suffix",
    "rule_sam",
    "rule_rest",
    "rule_llamacpp",
    "no_draft",
    "oracle",
)
PREPARE = {"draftless_quick": quick_cost_curve}  # measured before any run is timed, so that no run pays for it


VARIANT = re.compile(r"draftless\[(?P<knobs>[^\[\]]+)\]")


def variant_config(name):
    """The ``AdaptiveConfig`` of a method named ``draftless[knob=value+knob=value]`` (the default with those
    knobs set; the config's own checks apply), or None for any other name."""
    match = VARIANT.fullmatch(name)
    if match is None:
        return None
    knobs = {}
    for item in match["knobs"].split("+"):
        knob, sep, text = (part.strip() for part in item.partition("="))
        if not sep or not text:
            raise ValueError(f"method {name!r}: each knob needs a value, as draftless[knob=value], got {item!r}")
        if knob in knobs:
            raise ValueError(f"method {name!r} sets {knob!r} twice")
        knobs[knob] = knob_value(knob, text)
    return AdaptiveConfig(**knobs)


def method(name):
    """The function that runs method ``name``: one of ``METHODS`` or a ``draftless[...]`` variant."""
    if name in METHODS:
        return METHODS[name]
    config = variant_config(name)
    if config is None:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(DEFAULT_METHODS)} or draftless[knob=value]")
    return _loop(make_config=lambda: config)


def in_loop(name):
    """Whether method ``name`` runs in draftless's loop (every method but ``vanilla`` and transformers' ``hf_*``):
    under sampling, its text for a seed is the loop's plain steps' text, whatever it drafts."""
    return name != "vanilla" and not name.startswith("hf_")


def expand(methods, sampling=False):
    """Method names to run, ``oracle`` standing for its three k values; vanilla always runs first (the
    reference for identity checks and, greedy, for the oracle; sampled, the oracle drafts the loop's text for
    the seed, which its verification then accepts)."""
    names = ["vanilla"]
    for m in methods:
        for name in [f"oracle_k{k}" for k in ORACLE_KS] if m == "oracle" else [m]:
            method(name)  # a ValueError for an unknown name or a bad variant
            if name not in names:
                names.append(name)
    return names
