"""Token counts as people write them: ``131072``, ``128k``, ``1M`` (issue 36).

k = 1,024 tokens and M = 1,048,576, as model cards count contexts (a "128k" context is 131,072 tokens,
"1M" is 1,048,576). Ground layer: the CLI's option type (k3plan.cli.common.TOKENS) and its
comma lists (k3plan.cli.lists.whole_numbers) read every token count through ``parse_tokens``.
"""

from __future__ import annotations

import re

UNIT_RULE = "k = 1,024 tokens, M = 1,048,576, as model cards count contexts: 128k = 131,072"
SUFFIXES = {"": 1, "k": 1024, "m": 1024 * 1024}
_TOKENS = re.compile(r"^\s*(-?[0-9][0-9_]*(?:\.[0-9]+)?)\s*([kKmM]?)\s*$")


def parse_tokens(text: str) -> int:
    """``text`` as a whole number of tokens: digits, optionally with a k or M suffix (``UNIT_RULE``);
    a fraction is allowed only with a suffix and only where it lands on a whole token (1.5k = 1,536).
    A negative number passes through, for the caller's range check to name (``--context -5: expected ...``).
    Raises ValueError (with the reason) on anything else; the caller names the flag."""
    m = _TOKENS.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a token count")
    number, suffix = m[1], m[2].lower()
    scale = SUFFIXES[suffix]
    if "." in number:
        if not suffix:
            raise ValueError(f"{text!r} is not a whole number of tokens")
        whole, _, frac = number.lstrip("-").partition(".")
        num = int(whole.replace("_", "") + frac) * scale * (-1 if number.startswith("-") else 1)
        den = 10 ** len(frac)
        if num % den:
            raise ValueError(f"{text!r} is not a whole number of tokens ({num / den:,.1f})")
        return num // den
    return int(number.replace("_", "")) * scale
