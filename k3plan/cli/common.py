"""What every command shares: consoles, option types, JSON output.

Options are declared once here as Annotated aliases so that `fit`, `roofline`, `plan`, `curve`,
`check`, `validate` and `report` spell them identically.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from k3plan.units import DEFAULT_CONTEXT_TOKENS as DEFAULT_CONTEXT_TOKENS  # re-exported: every command's default
from k3plan.units import DEFAULT_PREFILL_CHUNK_TOKENS

if TYPE_CHECKING:
    pass


# Piped or captured output (CI logs, `| less`) gets 140 columns rather than rich's 80, so that the
# wide tables (plan, fit sources) stay readable; a terminal uses its own width.
# emoji=False: a message naming "mod:x:" must not print an emoji for ":x:"
# The consoles are built on first use (module __getattr__): a command printing JSON never imports rich.
if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    err_console: Console


def _build_console(name: str) -> Console:
    """Build ``console`` (stdout) or ``err_console`` (stderr) for this process (a terminal's width and
    colours are read here), once."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """rich exits 1 here; k3plan's one handler (cli.app.K3Group.invoke) exits 141, as for a plain write."""
            self.quiet = True
            raise BrokenPipeError

    if name == "console":
        built: Console = _Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else 140)
    else:
        built = Console(stderr=True, highlight=False, emoji=False)
    globals()[name] = built
    return built


def __getattr__(name: str) -> Any:
    if name in ("console", "err_console"):
        return _build_console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
ModelOpt = Annotated[
    str,
    typer.Option("--model", "-m", help="Bundled model name, a config.json path, or a folder holding one."),
]


def to_jsonable(obj: Any) -> Any:
    """k3plan's Structs, dataclasses, numpy scalars, paths -> plain JSON types."""
    from k3plan.structs import Frozen, dump

    if isinstance(obj, Frozen):
        return to_jsonable(dump(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):  # JSON has no NaN or Infinity (RFC 8259)
        return None
    return obj


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n")


# The options of every planning command (fit, roofline, curve, check, report, validate).
HardwareOpt = Annotated[
    str, typer.Option("--hardware", "-H", help="Bundled hardware name (k3plan hardware list) or a spec YAML path.")
]
TopologyOpt = Annotated[
    Optional[str],
    typer.Option(
        "--topology",
        "-t",
        help="Chip grid (TPU '2x2x4', multi-slice '2*2x2x4') or GPUs ('8', '2x8'). Default: the smallest standard topology whose weights and reserve leave room.",
    ),
]
TpOpt = Annotated[
    Optional[int],
    typer.Option(
        "--tp",
        help="Tensor parallel size (attention heads, dense widths). Default: from the stack (torchtpu-vllm: all devices / dp).",
    ),
]
EpOpt = Annotated[
    Optional[int], typer.Option("--ep", help="Expert parallel size: the TP group or all devices (default).")
]
DpOpt = Annotated[
    Optional[int],
    typer.Option("--dp", help="Data parallel groups (attention replicas; sequences split across them). Default 1."),
]
PpOpt = Annotated[
    Optional[int],
    typer.Option(
        "--pp",
        help="Pipeline stages: the decoder layers split over PP stages as the stack's engine splits them "
        "(the embedding on the first, the LM head on the last); tp x dp is then a stage's split. Default 1.",
    ),
]
StackOpt = Annotated[
    Optional[str],
    typer.Option(
        "--stack",
        "-s",
        help="Serving stack: torchtpu-vllm, tpu-inference, vllm, sglang, jax-native, dp-attention, or a stack YAML path "
        "(NAME:option=value sets engine options). Default: the hardware's (torchtpu-vllm on TPU, vllm on the "
        "GPUs of vLLM's K3 recipe, else sglang), named in the output.",
    ),
]
KvDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--kv-dtype",
        help="Override the stack's KV-cache dtype: bf16, fp8 (1 B a value), fp8_ds_mla (656 B a token a layer), fp32.",
    ),
]
EngramOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engram",
        help="Where DeepSeek-V4.1's Engram n-gram tables live: hbm (rows split over the TP group, counted with the "
        "weights) or host (host memory, rows fed over the host-to-HBM link). Default: the engine's (vLLM: host, "
        "SGLang: hbm), named in the output.",
    ),
]
ShardspecsOpt = Annotated[
    Optional[str],
    typer.Option("--shardspecs", help="Your own ShardSpecs: FILE.yaml (tensor-name regex -> spec) or module:function."),
]

# Speculative decoding (issue 14), declared once for fit and roofline.
SpecTokensOpt = Annotated[
    Optional[int],
    typer.Option("--spec-tokens", help="Speculative decoding: draft tokens a verify step (needs --acceptance)."),
]
AcceptanceOpt = Annotated[
    Optional[str],
    typer.Option(
        "--acceptance", help="Acceptance rate of a drafted token, or one rate a position: 0.8 or 0.8,0.6,0.4."
    ),
]
DraftBytesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--draft-bytes",
        help="An external draft model's size (e.g. 30GB; 0 for n-gram drafting); default the model's MTP head (K3 has none).",
    ),
]
DraftKvOpt = Annotated[
    Optional[int],
    typer.Option(
        "--draft-kv-bytes-per-token",
        help="The external draft model's KV cache a token, whole model (e.g. 2 x layers x kv_heads x head_dim x 2 B); "
        "given, not derived: the output says so. Default: the MTP head's, derived (K3 has none).",
    ),
]
# Prefix cache (issue 14), declared once for fit and roofline: k3plan.tiers.prefix.
PrefixHitOpt = Annotated[
    Optional[float],
    typer.Option(
        "--prefix-hit",
        help="Prefix-cache hit rate, a fraction of the prompt (--context) in [0, 1]: prints TTFT with and without it.",
    ),
]
PrefixTierOpt = Annotated[
    str,
    typer.Option(
        "--prefix-tier",
        help="Where the cached prefix comes from: hbm (the engine's prefix cache, no load), host, ssd or remote "
        "(the hardware spec's memory_tiers; the load time is added).",
    ),
]


def tokens(value: Any) -> int:
    """A token count as people write it: 131072, 128k, 1M (k3plan.tokencount; issue 36); typer's parser."""
    if isinstance(value, int):
        return value
    from k3plan.tokencount import UNIT_RULE, parse_tokens

    try:
        return parse_tokens(str(value))
    except ValueError as err:
        raise typer.BadParameter(f"{err}; expected e.g. 131072, 128k or 1M ({UNIT_RULE})") from None


TOKENS = tokens
TOKENS_HELP = "131072, 128k or 1M (k = 1,024 tokens, as model cards count contexts)."
ContextOpt = Annotated[
    int,
    typer.Option(
        "--context", "-c", parser=TOKENS, metavar="TOKENS", help="Context length a sequence, in tokens: " + TOKENS_HELP
    ),
]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", help="Concurrent sequences.")]
ChunkOpt = Annotated[
    Optional[int],
    typer.Option(
        "--chunk",
        parser=TOKENS,
        metavar="TOKENS",
        help=f"Prefill chunk in tokens (default {DEFAULT_PREFILL_CHUNK_TOKENS:,}, vLLM's max_num_batched_tokens); 32k = 32,768.",
    ),
]
ProbesOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--probes",
        help="Folder of probe records (k3plan probe's ./k3plan-probes): ADDED to the records k3plan ships "
        "(k3plan/evidence/probes), never replacing them; with it, the newest record of the hardware's device kind "
        "(yours or shipped) sets HBM bandwidth and collective latency. The output names every record used.",
    ),
]
AllowCpuProbesOpt = Annotated[
    bool,
    typer.Option(
        "--allow-cpu-probes", help="Apply records measured on the CPU backend to an accelerator (never by default)."
    ),
]
CalibrationOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--calibration",
        help="Measured temporaries: a YAML from `k3plan validate --save-calibration` or a real slice, or a shipped "
        "calibration's name (k3-tpu7x-2x2x4-tp32-jax-native-measured.yaml; an unknown name lists them).",
    ),
]


_SETUP_OPTIONS = (
    ("model", ModelOpt, "kimi-k3"),
    ("hardware", HardwareOpt, "tpu-v7x"),
    ("topology", TopologyOpt, None),
    ("tp", TpOpt, None),
    ("ep", EpOpt, None),
    ("dp", DpOpt, None),
    ("pp", PpOpt, None),
    ("stack", StackOpt, None),
    ("kv_dtype", KvDtypeOpt, None),
    ("shardspecs", ShardspecsOpt, None),
    ("engram", EngramOpt, None),
)


def with_options(fn, *, takes: str, options, build, shared_first: bool = False):
    """Compose a command from its own options and a shared set declared once: ``options`` is
    (name, annotation, default) triples; ``fn`` takes ``takes`` -- ``build({name: value})`` of the
    shared options' values -- plus its own options, and typer sees them all (keyword-only; the shared
    ones first if ``shared_first``, else after ``fn``'s own)."""
    import functools
    import inspect

    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(fn, eval_str=True).parameters.values()
        if p.name != takes
    ]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, annotation, default in options
    ]

    @functools.wraps(fn)
    def wrapper(**kwargs):
        values = {name: kwargs.pop(name) for name, _, _ in options}
        return fn(**{takes: build(values)}, **kwargs)

    params = shared + own if shared_first else own + shared
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must read the composed signature, not fn's
    return wrapper


def with_setup_options(fn):
    """Give a command the options every planning command shares (model, hardware, topology, tp,
    ep, dp, stack, kv dtype, shardspecs) without repeating them: ``fn`` takes ``setup_options``
    (a dict for ``k3plan.app.setup.setup_from``) plus its own options, and typer sees them all."""
    return with_options(fn, takes="setup_options", options=_SETUP_OPTIONS, build=lambda v: v, shared_first=True)
