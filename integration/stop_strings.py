"""Where generation stops (``first_stop``: the length limit, EOS, stop strings, stopping criteria), and stop
strings over decoded text, found with an Aho-Corasick automaton (pyahocorasick).

A stop string stops generation at the first token whose text completes it, as transformers'
``StopStringCriteria`` does: the string may start in earlier tokens (even in the prompt) and the completing
token may run past its end. Only the decoded tail is searched, so the cost per check is bounded by the
stop strings' length, not the context's.
"""

import ahocorasick


class StopStringMatcher:
    def __init__(self, stop_strings, tokenizer):
        if isinstance(stop_strings, str):
            stop_strings = [stop_strings]
        if tokenizer is None:
            raise ValueError("stop_strings need the tokenizer: pass tokenizer=... to generate")
        strings = [s for s in stop_strings]
        if not strings or not all(isinstance(s, str) and s for s in strings):
            raise ValueError("stop_strings must be a non-empty string or a list of non-empty strings")
        self.tokenizer = tokenizer
        self.automaton = ahocorasick.Automaton()
        for s in strings:
            self.automaton.add_word(s, s)
        self.automaton.make_automaton()
        self.max_chars = max(len(s) for s in strings)

    def _decode(self, ids):
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def first_stop(self, ids, start):
        """Index ``j >= start`` of the first token of ``ids`` (a 1-D sequence or tensor of ids) that completes a
        stop string, else None. Only a window of tokens before ``start`` is read."""
        if start >= len(ids):
            return None
        window = max(0, start - (self.max_chars + 2))
        while window > 0 and len(self._decode(ids[window:start])) < self.max_chars:
            window = max(0, window - (self.max_chars + 2))  # tokens that decode to little or nothing
        # ends[i]: characters decoded up to and including token start - 1 + i
        ends = [len(self._decode(ids[window : j + 1])) for j in range(start - 1, len(ids))]
        text = self._decode(ids[window:])
        first = None
        for last_char, _ in self.automaton.iter(text):
            if last_char < ends[0]:
                continue  # completed before the new tokens
            j = next((i for i in range(1, len(ends)) if last_char < ends[i]), len(ends) - 1)
            first = j if first is None else min(first, j)
        return None if first is None else start - 1 + first


def first_stop(plan, ids, start):
    """Index of the first token at or after ``start`` after which ``generate`` would stop, else None."""
    end = ids.shape[1]
    candidates = [min(end, plan.max_length) - 1] if end >= plan.max_length else []
    new = ids[0, start:].tolist()
    for i, tok in enumerate(new):
        if tok in plan.eos_token_ids:
            candidates.append(start + i)
            break
    if plan.stop_strings is not None:
        j = plan.stop_strings.first_stop(ids[0], start)  # the tensor: only a tail window is decoded
        if j is not None:
            candidates.append(j)
    if len(plan.stopping_criteria):
        limit = min(candidates) if candidates else end - 1
        for j in range(start, limit + 1):
            if bool(plan.stopping_criteria(ids[:, : j + 1], None).any()):
                candidates.append(j)
                break
    return min(candidates) if candidates else None
