"""Hostile input to ``fit --serve`` (issue 47's "Done when": bad input gets one line and exit 2, never a traceback; a
failed fit exits 1): each crash the serve-fuzz pass found, a named regression that failed before its fix (the
traceback's head in its comment)."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
    # RecursionError: maximum recursion depth exceeded while decoding a JSON object (json.loads in
    # serve_values.json_object, vllm/spec.py read_speculative, serve.py mm_zero_limits, vllm/serve.py _value)
    (H200, VLLM + "--compilation-config '" + '{"a":' * 5000 + "1" + "}" * 5000 + "'", "nests brackets more than 64"),
    (H200, VLLM + "--speculative-config " + "[" * 5000 + "]" * 5000, "nests brackets more than 64"),
    (H200, VLLM + "--compilation-config.a=" + "[" * 5000 + "]" * 5000, "nests brackets more than 64"),
    (H200, VLLM + "--limit-mm-per-prompt '" + '{"a":' * 5000 + "1" + "}" * 5000 + "'", "nests brackets more than 64"),
    # were two lines: a Unicode line separator (\u2028, \u2029, NEL \x85) in a flag echoed raw in the error (Python's
    # splitlines and many terminals break there); C1 controls (CSI \x9b) passed too (_split refused C0 only)
    (H200, VLLM + "--bogus\u2028flag 1", "control character ('\\u2028'"),
    (H200, VLLM + "--\u2029", "control character ('\\u2029'"),
    (H200, VLLM + "--quantization fp8\x85", "control character ('\\x85'"),
    (H200, VLLM + "--host \x9b31m", "control character ('\\x9b'"),
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
    # were priced: a negative DeepEP buffer (exit 0, -5 MiB a GPU) and a 10^26 MiB one (exit 1), all2all_buffers.py
    # _env_int taking any int()
    (
        H200,
        "VLLM_DEEPEP_BUFFER_SIZE_MB=-5 vllm serve deepseek-ai/DeepSeek-V3 -tp 1 -dp 8 --enable-expert-parallel "
        "--all2all-backend deepep_high_throughput",
        "VLLM_DEEPEP_BUFFER_SIZE_MB='-5': expected a whole number from 0",
    ),
    (
        H200,
        f"VLLM_DEEPEP_BUFFER_SIZE_MB={10**26} vllm serve deepseek-ai/DeepSeek-V3 -tp 1 -dp 8 --enable-expert-parallel "
        "--all2all-backend deepep_high_throughput",
        "to 2,147,483,647",
    ),
    # were priced (exit 0): a value the engine's parser refuses ('invalid int value') on a flag another flag made moot,
    # listed as ignored unread (SGLang's decode-graph max beside the list; vLLM's DBO thresholds without DBO)
    (
        H200,
        SGLANG + "--cuda-graph-max-bs-decode -0.1 --cuda-graph-bs-decode 1 2 4",
        "--cuda-graph-max-bs-decode '-0.1'",
    ),
    (H200, VLLM + "--dbo-decode-token-threshold nan", "--dbo-decode-token-threshold 'nan': expected a whole number"),
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


# -- the property: any mutation of a logged case's command is read (exit 0 / 1, or fit's 3) or refused in one line ------

CASES = sorted((Path(__file__).resolve().parents[1] / "engines" / "cases").glob("*.yaml"))


def _case(path: Path) -> tuple[str, str, str, str | None]:
    case = yaml.safe_load(path.read_text())
    version = str(case["engine_version"]) if "engine_version" in case else None
    return case["hardware"], str(case["topology"]), " ".join(case["serve"].split()), version


# fmt: off
# values no flag may take as written: the text a hostile or careless user types where a count or a fraction goes
VALUES = [
    "0", "-1", "-8", "1.5", "8.0", "1e309", "1e30", "inf", "-inf", "nan", "0x10", "1_000", str(2**40), str(10**30),
    str(2**63), "", " ", "abc", "1k", "1K", "1.5K", "-0", "+8", "²", "٣", "1e-309", "5e-324", "-0.1", "0.0", "true",
    "null", "[]", "{}", "'", '"', "\\", "--", "-", "1,2", "9" * 400, "9" * 400 + "k", "1" * 5000, "1" * 5000 + "K",
]
# JSON a config flag may be handed: truncated, the wrong type, nested nulls, numbers past a float or an int64
JSON = [
    "{", '{"method":', "null", "[]", "1", '"x"', '{"num_speculative_tokens": null}', '{"num_speculative_tokens": "3"}',
    '{"num_speculative_tokens": 1e309}', '{"num_speculative_tokens": "²"}',
    '{"method": "mtp", "num_speculative_tokens": 99999999999999999999999}', '{"method": null}', '{"method": ["mtp"]}',
    '{"a": {"b": null}}', '{"level": NaN}', '{"cudagraph_capture_sizes": [1, null]}',
    '{"cudagraph_capture_sizes": [1e309]}', '{"cudagraph_mode": null}', '{"max_cudagraph_capture_size": -1}',
    '{"max_cudagraph_capture_size": "' + "1" * 5000 + '"}', '{"max_position_embeddings": 1e400}',
    '{"num_hidden_layers": 0}', '{"quantization_config": null}', '{"": 1}', '{"image": 1e309}',
    '{"sharding": {"sharding_strategy": null}}', '{"sharding": {"sharding_strategy": {"tensor_parallelism": 1e309}}}',
    "{'method': 'mtp'}", '{"a": 1' + "0" * 5000 + "}", '{"a":' * 3000 + "1" + "}" * 3000, "[" * 3000 + "]" * 3000,
]
JSON_FLAGS = [
    "--speculative-config", "--compilation-config", "--additional-config", "--hf-overrides", "--kv-transfer-config",
    "--attention-config", "--eplb-config", "--limit-mm-per-prompt", "--engram-config", "--json-model-override-args",
    "--compilation-config.max_cudagraph_capture_size", "--speculative-config.num_speculative_tokens", "-O",
]
COUNT_FLAGS = [
    "--tensor-parallel-size", "-tp", "--tp", "--max-model-len", "--gpu-memory-utilization", "--block-size",
    "--max-num-seqs", "--max-num-batched-tokens", "--pipeline-parallel-size", "--data-parallel-size", "--dp",
    "--ep-size", "--mem-fraction-static", "--context-length", "--page-size", "--max-running-requests",
    "--chunked-prefill-size", "--kv-cache-dtype", "--kv-cache-memory-bytes", "--num-gpu-blocks-override",
    "--max-total-tokens", "--cuda-graph-max-bs-decode", "--max-cudagraph-capture-size", "--cudagraph-capture-sizes",
    "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-algorithm",
    "--speculative-dspark-block-size", "--num-speculative-tokens", "--cpu-offload-gb", "--dtype", "--quantization",
    "--swa-full-tokens-ratio", "--mamba-full-memory-ratio", "--decode-context-parallel-size", "--ubatch-size",
]
ENV = [
    "VAR= ", "X=1 ", "export X=1 && ", "env -u FOO ", "env ", "VLLM_USE_V1=0 ", "CUDA_VISIBLE_DEVICES= ", "=1 ",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 ", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=nan ", "NEW_MODEL_DESIGN=² ", "X='a b' ",
    'X="unterminated ', "nohup ", "sudo ", "; ", "# ",
]
ENGINES = [
    "vllm serve", "python -m vllm.entrypoints.openai.api_server --model", "python3 -m sglang.launch_server --model-path",
    "sglang serve --model-path", "trtllm-serve", "lmdeploy serve api_server", "vllm", "vllm serve serve", "VLLM SERVE",
    "python3 -m sglang.launch_server", "python3", "", " ", "lm_eval --model vllm --model_args pretrained=",
    "python3 examples/offline_inference.py --model", "vllm bench serve --model",
]
MODELS = [
    "moonshotai/kimi-k3", "moonshotai/Kimi-K3/", "/models/Kimi-K3", "./Kimi-K3", "~/Kimi-K3", "moonshotai//Kimi-K3",
    "moonshotai/Kimi-K3-AWQ", "deepseek-ai/DeepSeek-V3.1", "deepseek-ai", "/", ".", "kimi-k3", "moonshotai/Kimi\u2014K3",
    "moonshotai/Kimi-K3\u200b", "/dev/null", "hf://moonshotai/Kimi-K3", "moonshotai/Kimi-Linear-48B-A3B-Instruct",
]
VERSIONS = ["0.x", "v0.28.0", "99.0.0", " ", "0", "0.0.0", "nan", "0.28.0rc1", "0.28.0.post1", "latest", "0..1", "٠.٢٨.٠"]
TOPOLOGIES = ["0", "-1", "3", "1", "2", "16", "64", "99999999999", "2x4", "2x2x4", "0x8", "nan", "1.5", "x", "1e309"]
INSERTS = [
    "'", '"', "`", "\\", "\\ ", "\x00", "\x1b", "\t", "\n", "\u202e", "\ufeff", "\u00a0", "\u2014", "\u2028", "\x85",
    "\x9b", "=", " -- ",
]
DASHES = ["\u2014", "\u2013", "\u2212", "\uff0d"]
# fmt: on


def _tokens(cmd: str) -> list[str]:
    try:
        return shlex.split(cmd)
    except ValueError:
        return cmd.split()


@st.composite
def mutated(draw) -> list[str]:
    """fit's arguments: a logged case's command with one to three mutations."""
    hw, topo, cmd, version = _case(draw(st.sampled_from(CASES)))
    for _ in range(draw(st.integers(1, 3))):
        toks = _tokens(cmd) or ["vllm"]
        flags = [i for i, t in enumerate(toks) if t.startswith("-") and len(t) > 1] or [len(toks) - 1]
        op = draw(st.sampled_from(["value", "insert", "json", "char", "dash", "empty", "repeat", "env", "engine",
                                   "model", "topology", "version", "drop", "truncate"]))  # fmt: skip
        i = draw(st.sampled_from(flags))
        if op == "value":  # a flag's value replaced (or given to a switch)
            name = toks[i].split("=")[0]
            toks[i : i + 2 if i + 1 < len(toks) and not toks[i + 1].startswith("-") else i + 1] = [
                name,
                draw(st.sampled_from(VALUES)),
            ]
        elif op == "insert":
            toks += [draw(st.sampled_from(COUNT_FLAGS)), draw(st.sampled_from(VALUES))]
        elif op == "json":
            toks += [draw(st.sampled_from(JSON_FLAGS)), draw(st.sampled_from(JSON))]
        elif op == "dash":
            toks[i] = draw(st.sampled_from(DASHES)) + toks[i].lstrip("-")
        elif op == "empty":  # --flag= with nothing after it
            toks[i] = toks[i].split("=")[0] + "="
        elif op == "repeat":  # the flag again with a conflicting value
            toks += [toks[i].split("=")[0], draw(st.sampled_from(VALUES + ["1", "4", "8", "0.5"]))]
        elif op == "drop":
            del toks[i]
        elif op == "model":
            where = next((n for n, t in enumerate(toks) if "/" in t and not t.startswith("-")), 0)
            toks[where] = draw(st.sampled_from(MODELS))
        cmd = shlex.join(toks)
        if op == "char":  # a quote, backslash, control or unicode character anywhere in the text
            at = draw(st.integers(0, len(cmd)))
            cmd = cmd[:at] + draw(st.sampled_from(INSERTS)) + cmd[at:]
        elif op == "env":
            cmd = draw(st.sampled_from(ENV)) + cmd
        elif op == "engine":
            cmd = draw(st.sampled_from(ENGINES)) + " " + " ".join(cmd.split()[draw(st.integers(1, 3)) :])
        elif op == "truncate":
            cmd = cmd[: draw(st.integers(0, len(cmd)))]
        elif op == "topology":
            topo = draw(st.sampled_from(TOPOLOGIES))
        elif op == "version":
            version = draw(st.sampled_from(VERSIONS))
    args = ["fit", "-H", hw, "-t", topo, "--serve", cmd]
    return (
        args
        + (["--engine-version", version] if version is not None else [])
        + (["--json"] if draw(st.booleans()) else [])
    )


def _finite(node) -> bool:
    if isinstance(node, float):
        return math.isfinite(node)
    if isinstance(node, dict):
        return all(_finite(v) for v in node.values())
    if isinstance(node, list):
        return all(_finite(v) for v in node)
    return True


def _no_constants(name: str):
    raise ValueError(f"{name} in --json output")


def check_read_or_refused(r, args: list[str]) -> None:
    """An answer (0 starts, 1 won't start, 3 fit's unverified temp) or bad input (2) in one line; never a traceback."""
    where = repr(args)[:3000]
    assert r.exception is None or isinstance(r.exception, SystemExit), (type(r.exception).__name__, r.exception, where)
    assert r.exit_code in (0, 1, 2, 3), (r.exit_code, where)
    out = r.output.strip()
    assert "Traceback" not in out, (out[-2000:], where)
    if r.exit_code == 2:
        assert len(out.splitlines()) == 1 and out.startswith("error: "), (out[:2000], where)
    elif "--json" in args and r.exit_code in (0, 1):
        d = json.loads(r.stdout, parse_constant=_no_constants)
        assert _finite(d), where


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated())
def test_any_mutated_logged_command_is_read_or_refused_in_one_line(cli, args):
    check_read_or_refused(cli(*args), args)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated())
def test_many_mutated_logged_commands_are_read_or_refused_in_one_line(cli, args):
    """The same property over 1,500 mutations (minutes: the slow run, tests/conftest.py SLOW_TESTS)."""
    check_read_or_refused(cli(*args), args)


def test_a_config_64_levels_deep_reaches_its_reader(cli):
    """The nesting bound is the one every JSON / YAML reader of k3plan keeps (safeparse.MAX_DEPTH): at 64 levels the
    flag's own reader answers (--speculative-config: its keys), at 65 the split refuses it."""
    deep = lambda n: "--speculative-config '" + '{"a":' * n + "1" + "}" * n + "'"  # noqa: E731
    line = one_error_line(cli(*H200, VLLM + deep(64)))
    assert "--speculative-config key 'a'" in line, line
    assert "more than 64 deep" in one_error_line(cli(*H200, VLLM + deep(65)))
