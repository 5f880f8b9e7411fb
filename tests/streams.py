"""Token streams for the index tests: random, adversarially repetitive and code-like."""

from hypothesis import strategies as st

small_vocab = st.lists(st.integers(0, 3), max_size=120)
large_vocab = st.lists(st.integers(0, 262143), max_size=60)
one_token = st.integers(1, 150).map(lambda n: [7] * n)
periodic = st.tuples(st.sampled_from([2, 7]), st.integers(1, 150)).map(
    lambda pn: [(i % pn[0]) * 3 + 1 for i in range(pn[1])]
)


@st.composite
def edited_repeats(draw):
    """A block repeated with small edits, like code or prose rewritten."""
    block = draw(st.lists(st.integers(0, 50), min_size=1, max_size=30))
    out = []
    for _ in range(draw(st.integers(1, 5))):
        copy = list(block)
        for _ in range(draw(st.integers(0, 3))):
            copy[draw(st.integers(0, len(copy) - 1))] = draw(st.integers(0, 50))
        out += copy
    return out


def code_like():
    """Tokens of a small repetitive Python source file, one id per word or symbol."""
    src = "\n".join(
        f"def f{i}(x, y):\n    if x > {i}:\n        return x + y * {i}\n    return y - x\n" for i in range(12)
    )
    vocab = {}
    return [vocab.setdefault(w, len(vocab)) for w in src.replace("(", " ( ").replace(")", " ) ").split(" ")]


any_stream = st.one_of(small_vocab, large_vocab, one_token, periodic, edited_repeats())
