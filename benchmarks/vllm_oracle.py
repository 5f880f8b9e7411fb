"""The ceiling inside vLLM: a proposer, through the same ``custom_class`` interface as draftless's, that drafts the
continuation vLLM without speculation wrote for the same prompt (recorded by ``vllm_run`` into the JSON file that
``RECORD_ENV`` names: a list of complete token streams, prompt then output). A row whose stream is not a prefix of a
recorded one gets no draft. And the floor: ``NoDraftProposer``, which never drafts, so that its run costs what
speculation being on costs vLLM's steps."""

from __future__ import annotations

import json
import os

import numpy as np

RECORD_ENV = "DRAFTLESS_VLLM_RECORD"


class RecordedProposer:
    def __init__(self, vllm_config):
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        with open(os.environ[RECORD_ENV], encoding="utf-8") as fh:
            self.streams = [np.asarray(s, dtype=np.int64) for s in json.load(fh)]

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, **unused):
        drafts = []
        for i, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[i])
            row = token_ids_cpu[i, :n]
            draft = []
            if sampled:
                for stream in self.streams:
                    if stream.size > n and np.array_equal(stream[:n], row):
                        draft = stream[n : n + self.k].tolist()
                        break
            drafts.append(draft)
        return drafts

    def load_model(self, *args, **kwargs):
        pass


class NoDraftProposer:
    def __init__(self, vllm_config):
        pass

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, **unused):
        return [[] for _ in sampled_token_ids]

    def load_model(self, *args, **kwargs):
        pass
