"""draftless's ``vllm.general_plugins`` entry point: lets a drafter see which request each batch row holds.

vLLM loads general plugins in each of its processes. ``register`` wraps the model runner's
``propose_draft_token_ids`` so that, where the runner's drafter has a ``bind_runner`` method (draftless's
``DraftlessProposer``), the drafter is handed the runner before vLLM asks it for drafts; every other drafter runs
as before. Pinned to the vLLM release it was tested with: under another, nothing is changed and a warning says so.
"""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger(__name__)

TESTED_VLLM = "0.32.0"


def register() -> None:
    """Wrap vLLM's runner (once a process) if vLLM is the tested release."""
    try:
        import vllm
    except ImportError:
        return
    if vllm.__version__ != TESTED_VLLM:
        logger.warning(
            "draftless's vLLM proposer is tested with vLLM %s, this is %s: not enabled", TESTED_VLLM, vllm.__version__
        )
        return
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner.propose_draft_token_ids
    if getattr(original, "binds_drafter", False):
        return

    @functools.wraps(original)
    def propose_draft_token_ids(self, *args, **kwargs):
        bind = getattr(getattr(self, "drafter", None), "bind_runner", None)
        if bind is not None:
            bind(self)
        return original(self, *args, **kwargs)

    propose_draft_token_ids.binds_drafter = True
    GPUModelRunner.propose_draft_token_ids = propose_draft_token_ids
