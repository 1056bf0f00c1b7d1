"""String ops: SKIP_GRAM.

SKIP_GRAM splits its one string on C ``isspace`` characters the way LiteRT does (the first
character never ends a word) and lists the n-grams whose consecutive words are at most
``max_skip_size`` words apart, in LiteRT's depth-first order, joined by single spaces; with
``include_all_ngrams`` the shorter n-grams come too.
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel

__all__: list[str] = []

_SPACE = frozenset(b" \t\n\v\f\r")


def _words(s: bytes) -> list[bytes]:
    words, prev = [], 0
    for i in range(1, len(s)):
        if s[i] in _SPACE:
            if i > prev and s[prev] not in _SPACE:
                words.append(s[prev:i])
            prev = i + 1
    if len(s) > prev:
        words.append(s[prev:])
    return words


def _skip_grams(words: list[bytes], n: int, skip: int, all_ngrams: bool) -> list[bytes]:
    out: list[bytes] = []
    if len(words) < n:
        return out
    stack = [0] * n
    top = 1
    while top >= 0:
        step = top < n and stack[top] + 1 < len(words) and (top == 0 or stack[top] - stack[top - 1] <= skip)
        if step:
            stack[top] += 1
            top += 1
            if top < n:
                stack[top] = stack[top - 1]
        else:
            if top > 0 and (top <= n if all_ngrams else top == n):
                out.append(b" ".join(words[stack[i]] for i in range(top)))
            top -= 1
    return out


@register_kernel("SKIP_GRAM", dtypes=("string",), versions=range(1, 2))
def skip_gram(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects one string input and one string output")
    if ctx.outputs[0].dtype != "string":
        raise ctx.fail(f"the output must be a string tensor, got {ctx.outputs[0].dtype}")
    n = int(ctx.options.get("ngram_size", 0) or 0)
    skip = int(ctx.options.get("max_skip_size", 0) or 0)
    all_ngrams = bool(ctx.options.get("include_all_ngrams", False))
    if n < 1:
        raise ctx.fail(f"ngram_size {n} must be at least 1")

    def run(inputs):
        a = inputs[0]
        if a.dtype == np.uint8:  # a string constant arrives as its raw buffer
            from .._reader import string_values

            a = string_values(a)
        if a.size < 1:
            raise ctx.fail("the input holds no string")
        first = a.reshape(-1)[0]
        s = first.encode() if isinstance(first, str) else bytes(first)
        grams = _skip_grams(_words(s), n, skip, all_ngrams)
        out = np.empty(len(grams), dtype=object)
        out[:] = grams
        return [out]

    return Prepared([None], run)
