"""draftless as vLLM's proposer: ``speculative_config={"method": "custom_class", "model":
"draftless.integration.vllm.DraftlessProposer", "num_speculative_tokens": K}``.

vLLM calls a custom proposer with each batch row's new tokens and token stream, but not with the rows' request
ids, and tells it of no request that finishes, is aborted or preempted, while rows move as requests come and go
(``InputBatch.condense`` moves the last row into a freed one). Per-request state (the request's index and what
its drafts taught) needs the ids, so draftless's ``vllm.general_plugins`` entry point (``vllm_plugin``) hands the
proposer vLLM's model runner before each call; from it the proposer reads each row's request id, prompt length
and the requests the engine still holds. The drafting itself is ``request_drafts.RequestDrafts``.

This module imports nothing of vLLM (it reads the objects vLLM passes it); the plugin imports vLLM's runner only
when vLLM loads it, inside vLLM's own processes.
"""

from __future__ import annotations

from typing import Any

from draftless.lookup.adaptive import AdaptiveConfig

from .request_drafts import RequestDrafts


class DraftlessProposer:
    """vLLM's proposer over draftless's adaptive drafting: one index a request, drafts of 0 to
    ``num_speculative_tokens`` tokens chosen for the whole batch under the cost of vLLM's step as timed."""

    def __init__(self, vllm_config: Any, config: AdaptiveConfig | None = None) -> None:
        spec = getattr(vllm_config, "speculative_config", None)
        if spec is None or not getattr(spec, "num_speculative_tokens", None):
            raise ValueError("vllm_config must carry a speculative_config with num_speculative_tokens >= 1")
        model_config = vllm_config.model_config
        self.drafts = RequestDrafts(
            max_draft=int(spec.num_speculative_tokens),
            max_model_len=int(model_config.max_model_len),
            vocab_size=int(model_config.get_vocab_size()),
            config=config,
        )
        self.runner = None

    def bind_runner(self, runner: Any) -> None:
        """The model runner whose batch the next ``propose`` drafts for (``vllm_plugin`` calls this)."""
        self.runner = runner

    def propose(
        self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any, token_ids_cpu: Any, **unused: Any
    ) -> list[list[int]]:
        """One draft a row of vLLM's batch (vLLM's ``custom_class`` call)."""
        if self.runner is None:
            raise RuntimeError(
                "DraftlessProposer needs draftless's vLLM plugin (entry point 'draftless' in vllm.general_plugins), "
                "which hands it the batch's request ids: install draftless into vLLM's environment and keep "
                "'draftless' in VLLM_PLUGINS if that is set"
            )
        batch = self.runner.input_batch
        rows = len(sampled_token_ids)
        return self.drafts.step(
            batch.req_ids[:rows],
            sampled_token_ids,
            num_tokens_no_spec,
            token_ids_cpu,
            batch.num_prompt_tokens,
            self.runner.requests,
        )

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load: no draft model."""
