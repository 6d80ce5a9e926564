"""Hostile input to ``fit --serve`` (issue 47's "Done when": bad input gets one line and exit 2, never a traceback; a
failed fit exits 1): each crash the serve-fuzz pass found, a named regression that failed before its fix (the
traceback's head in its comment)."""

from __future__ import annotations

import pytest
from k3_testing import one_error_line

H200 = ("fit", "-H", "nvidia-h200", "-t", "8", "--serve")
VLLM = "vllm serve deepseek-ai/DeepSeek-V3 -tp 8 "
SGLANG = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 "
TPU = ("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve")
TPU_VLLM = "vllm serve moonshotai/Kimi-K2.6 --tensor-parallel-size 8 --enable-expert-parallel "
N400 = "9" * 400  # a float past 1.8e308: float(N400) is infinity
N5000 = "1" * 5000  # past Python's int-from-text limit (4,300 digits)

# -- regressions: each input crashed with the traceback named, exit 1 (read as "does not fit") --------------------

REGRESSIONS = [
    # OverflowError: cannot convert float infinity to integer (serve_values.suffix_int: int(float(number) * 10**3))
    (H200, VLLM + f"--max-num-batched-tokens {N400}k", "--max-num-batched-tokens '99999"),
    (H200, VLLM + f"--max-model-len {N400}k", "2^63 or more"),
    (H200, VLLM + f"--kv-cache-memory-bytes {N400}g", "--kv-cache-memory-bytes '99999"),
    (H200, VLLM + f"--compilation-config.max_cudagraph_capture_size={N400}k", "2^63 or more"),
    (TPU, TPU_VLLM + f"--max-model-len {N400}k", "--max-model-len '99999"),
    # was one line, but a wrong one: int('1' * 5000) raised ValueError('Exceeds the limit (4300 digits) ...'), which
    # human_readable_int read as a decimal: "decimals are not allowed with binary suffixes like Exceeds the limit ..."
    (H200, VLLM + f"--max-model-len {N5000}K", "2^63 or more"),
    # OverflowError: cannot convert float infinity to integer (engines/serve.py mm_zero_limits: int(1e309))
    (H200, VLLM + """--limit-mm-per-prompt '{"image": 1e309}'""", "--limit-mm-per-prompt"),
    (H200, VLLM + """--limit-mm-per-prompt '{"image": {"count": -1e400}}'""", "--limit-mm-per-prompt"),
    # ValueError: Exceeds the limit (4300 digits) for integer string conversion (json.loads in vllm/serve.py _value,
    # which caught only its JSONDecodeError)
    (H200, VLLM + f"--compilation-config.max_cudagraph_capture_size={N5000}", "max_cudagraph_capture_size '11111"),
    # ValueError: invalid literal for int() with base 10: '²' -- '²' passes str.isdigit(), not int() (vllm/spec.py
    # read_speculative, sglang/spec.py _int, vllm/cudagraph.py _size: now serve_values.whole_number / flag_int)
    (
        H200,
        VLLM + """--speculative-config '{"method": "mtp", "num_speculative_tokens": "²"}'""",
        "'²': expected a whole",
    ),
    (H200, VLLM + "--num-speculative-tokens ² --speculative-model deepseek-ai/DeepSeek-V3", "'²': expected a whole"),
    (H200, VLLM + """--compilation-config '{"max_cudagraph_capture_size": "²"}'""", "'²': expected a whole number"),
    (H200, VLLM + """--compilation-config '{"cudagraph_capture_sizes": [1, "²"]}'""", "'²': expected a whole"),
    (H200, SGLANG + "--speculative-algorithm EAGLE --speculative-num-steps ²", "'²': expected a whole number"),
    # OverflowError: int too large to convert to float (engines/sglang/dsv4_pool.py sglang_dsv41_pool): the DSpark
    # block read by sglang/spec.py _int without a bound
    (
        ("fit", "-H", "nvidia-gb300-nvl72", "-t", "4", "--serve"),
        "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 4 --ep-size 4 --speculative-algorithm DSPARK "
        f"--speculative-dspark-block-size {'9' * 40}",
        "expected at most 2,147,483,647",
    ),
    # were priced (exit 0), no bound: 10^26 speculative tokens, a 10^26-token CUDA graph; the flag forms
    # (--max-cudagraph-capture-size) were already bounded by flag_int
    (
        H200,
        VLLM + """--speculative-config '{"method": "mtp", "num_speculative_tokens": 10000000000000000000000000}'""",
        "expected at most 2,147,483,647",
    ),
    (
        H200,
        VLLM + """--compilation-config '{"max_cudagraph_capture_size": 10000000000000000000000000}'""",
        "expected at most 2,147,483,647",
    ),
    (
        H200,
        VLLM + """--compilation-config '{"cudagraph_capture_sizes": [10000000000000000000000000]}'""",
        "expected at most 2,147,483,647",
    ),
]


@pytest.mark.parametrize("head, command, needle", REGRESSIONS, ids=[f"{i}" for i in range(len(REGRESSIONS))])
def test_hostile_serve_input_is_one_line(cli, head, command, needle):
    line = one_error_line(cli(*head, command))
    assert needle in line, line
    assert not cli(*head, command).stdout.strip()


def test_a_suffixed_count_below_the_bound_still_reads(cli):
    """The bound is past what any flag takes: 128k and 10g still read as vLLM's human_readable_int does."""
    r = cli(*H200, VLLM.replace("-tp 8 ", "-tp 8 --max-model-len 128k --kv-cache-memory-bytes 10g"), "--json")
    assert r.exit_code in (0, 1), r.output
