"""What the loop takes from a proposer, checked: its draft (``proposed_draft``) and the rows of the output layer it
asks to compute first (``staged_rows``). A proposer is any object with ``reset``/``propose``/``update``: what it
returns is refused naming it, not met as an error deep inside the model.
"""

import numpy as np


def may_stage(proposer):
    """Whether ``proposer`` may ask for a staged output layer: it has ``first_rows`` and does not say otherwise
    by ``stages_output_layer`` (the adaptive proposer with ``staged_head`` off, the default)."""
    return hasattr(proposer, "first_rows") and bool(getattr(proposer, "stages_output_layer", True))


def staged_rows(proposer, k):
    """The rows of the output layer the proposer asks the loop to compute first for its latest draft, as verified
    (``k`` tokens, after any cut to the budget or to an exact length), or None for all at once (None, or at least
    ``1 + k`` rows: a draft cut below the first stage is verified whole); anything but a positive int or None
    refused naming the proposer."""
    rows = getattr(proposer, "first_rows", None)
    if rows is None:
        return None
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)):
        raise TypeError(f"the proposer's first_rows must be an int or None, got {type(rows).__name__}")
    if rows < 1:
        raise ValueError(f"the proposer's first_rows must be at least 1 (or None), got {rows}")
    return None if rows >= k + 1 else int(rows)


def proposed_draft(raw, room, rows):
    """A proposer's draft as at most ``room`` int64 token ids. Anything else (None, floats, a 2-D array, an id
    the input embedding of ``rows`` rows has none for) is refused naming the proposer, not met as an error deep
    inside the model or truncated to integers in silence."""
    draft = np.asarray(raw)
    if draft.ndim != 1 or (draft.size and not np.issubdtype(draft.dtype, np.integer)):
        raise TypeError(f"the proposer's propose() must return a 1-D sequence of integer token ids, got "
                        f"{type(raw).__name__} of dtype {draft.dtype} and shape {draft.shape}")
    draft = draft[:room].astype(np.int64, copy=False)
    if rows is not None and draft.size and (draft.min() < 0 or draft.max() >= rows):
        bad = draft[(draft < 0) | (draft >= rows)][0]
        raise ValueError(f"the proposer's propose() returned token id {int(bad)}, outside the model's vocabulary "
                         f"of {rows} embeddings")
    return draft
