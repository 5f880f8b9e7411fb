"""Drafting policy on top of ``draftless.index`` (numpy only): which occurrence, how many tokens,
from the request's own text or a reference corpus shared across requests."""

from .adaptive import AdaptiveConfig, AdaptiveProposer
from .config import DraftConfig
from .corpus import ReferenceCorpus
from .peer_rules import NgramRule, PromptLookupRule, SuffixDecodingRule
from .peer_rules_retrieval import LlamaCppLookupRule, RestRule, SamDecodingRule
from .proposer import NullProposer, Proposer, SuffixProposer
from .request_start import RequestStart, RequestStarts, carried_starts

__all__ = ["AdaptiveConfig", "AdaptiveProposer", "DraftConfig", "LlamaCppLookupRule", "NgramRule", "NullProposer",
           "PromptLookupRule", "Proposer", "ReferenceCorpus", "RequestStart", "RequestStarts", "RestRule",
           "SamDecodingRule", "SuffixDecodingRule", "SuffixProposer", "carried_starts"]
