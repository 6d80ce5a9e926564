"""vLLM's LLM class as tpu-inference's public runs start it, read as the ``vllm serve`` flags it takes: its own
offline script (``python examples/offline_inference.py --model MODEL ...``) and lm_eval's vllm backend (``lm_eval
--model vllm --model_args pretrained=MODEL,k=v,...``). Both build ``vllm.LLM(**kwargs)``, vLLM's
UsageContext.LLM_CLASS, whose engine-argument defaults differ from the OpenAI server's (tpu_inference/serve.py
_default_chunk reads which); the script adds its own defaults and environment (OFFLINE_SOURCE)."""

from __future__ import annotations

from dataclasses import dataclass, field

from k3plan.engines.engine import VLLM_COMMAND
from k3plan.errors import K3PlanError

# examples/offline_inference.py (vllm-project/tpu-inference@0998d381): create_parser builds vLLM's own parser
# (EngineArgs.add_cli_args: the same spellings as vllm serve) with parser.set_defaults(max_model_len=1024) (and a
# default model, Llama-3.2-1B-Instruct, not one k3plan prices), adds --max-tokens / --temperature / --top-p / --top-k,
# --use-chat-template and --chat-template-kwargs (sampling and prompt rendering: main pops them before LLM(**args)),
# and its __main__ runs os.environ.setdefault('SKIP_JAX_PRECOMPILE', '1') before the engine starts
OFFLINE_SOURCE = (
    "vllm-project/tpu-inference@0998d381 examples/offline_inference.py (create_parser: EngineArgs.add_cli_args, "
    "set_defaults(max_model_len=1024); main: LLM(**args); __main__: os.environ.setdefault('SKIP_JAX_PRECOMPILE', '1'))"
)
OFFLINE_SCRIPT = "offline_inference.py"
OFFLINE_MODULE = "examples.offline_inference"
OFFLINE_MAX_MODEL_LEN = "1024"  # parser.set_defaults(max_model_len=1024)
OFFLINE_ENV = {"SKIP_JAX_PRECOMPILE": "1"}  # os.environ.setdefault: a value the command sets wins
# the script's own flags (popped before LLM(**args)): name -> values taken (0 a switch, 1 a value)
OFFLINE_OWN = {
    "--max-tokens": 1,
    "--temperature": 1,
    "--top-p": 1,
    "--top-k": 1,
    "--use-chat-template": 0,
    "--chat-template-kwargs": 1,
}

# lm_eval's vllm backend (lm-eval 0.4.11 wheel (PyPI), lm_eval/models/vllm_causallms.py VLLM.__init__): model_args
# become LLM(**self.model_args), 'model': pretrained, max_model_len from max_model_len or max_length, max_num_seqs from
# max_num_seqs or max_batch_size (which lm_eval's --max_batch_size also sets: evaluator.py simple_evaluate's
# additional_config), seed 1234 and gpu_memory_utilization 0.9 by default (vLLM's own 0.9), every other key passed
# through as an EngineArgs field; model_args parsed as key=value pairs split at commas (lm_eval/utils.py
# simple_parse_args_string, handle_arg_string: true / false as booleans)
LM_EVAL_SOURCE = (
    "lm-eval 0.4.11 wheel (PyPI) lm_eval/models/vllm_causallms.py VLLM.__init__ (self.model_args -> LLM(**...)), "
    "lm_eval/utils.py simple_parse_args_string, lm_eval/evaluator.py simple_evaluate (batch_size / max_batch_size / "
    "device into the backend)"
)
# model_args keys lm_eval's backend consumes itself (generation length, request batching, prompt rendering, the
# tokenizer's BOS, truncation): nothing the engine holds. swap_space: vLLM's CPU swap space in host memory
LM_EVAL_OWN_KEYS = frozenset(
    {"batch_size", "max_gen_toks", "add_bos_token", "prefix_token_id", "enable_thinking", "chat_template_args"}
    | {"think_end_token", "truncation_side", "device", "swap_space", "max_lora_rank"}
)
# lm_eval's own command-line flags (lm_eval/_cli/run.py): the tasks, their shots and limits, logging, caching and
# output: none changes what the engine holds. Name -> values taken (0 a switch, 1 a value, -1 one or more)
LM_EVAL_FLAGS = {
    "--tasks": -1,
    "--num_fewshot": 1,
    "--batch_size": 1,
    "--device": 1,
    "--output_path": 1,
    "--limit": 1,
    "--samples": 1,
    "--use_cache": 1,
    "--cache_requests": 1,
    "--check_integrity": 0,
    "--write_out": 0,
    "--log_samples": 0,
    "--system_instruction": 1,
    "--apply_chat_template": 2,  # nargs="?": a template name or nothing
    "--fewshot_as_multiturn": 0,
    "--show_config": 0,
    "--include_path": 1,
    "--gen_kwargs": -1,
    "--verbosity": 1,
    "--wandb_args": 1,
    "--wandb_config_args": 1,
    "--hf_hub_log_args": 1,
    "--predict_only": 0,
    "--seed": 1,
    "--trust_remote_code": 0,
    "--confirm_run_unsafe_code": 0,
    "--metadata": 1,
}


@dataclass
class LlmCommand:
    """One LLM-class command read as vllm serve's tokens: which (OFFLINE or LM_EVAL), the flags for vLLM's parser,
    the environment the script adds, and what was listed as changing nothing."""

    kind: str
    argv: list[str]
    env: dict[str, str]
    ignored: list[str] = field(default_factory=list)


OFFLINE = "offline_inference.py"
LM_EVAL = "lm_eval"


def _is_offline(argv: list[str]) -> int:
    """How many leading tokens name the offline script (python [-u] path/offline_inference.py, python -m
    examples.offline_inference); 0 where it is not."""
    if not argv or not argv[0].rsplit("/", 1)[-1].startswith("python"):
        return 0
    i = 1
    while i < len(argv) and argv[i] in ("-u", "-B", "-O"):
        i += 1
    if i + 1 < len(argv) and argv[i] == "-m" and argv[i + 1] == OFFLINE_MODULE:
        return i + 2
    if i < len(argv) and argv[i].rsplit("/", 1)[-1] == OFFLINE_SCRIPT:
        return i + 1
    return 0


def _is_lm_eval(argv: list[str]) -> int:
    """How many leading tokens start lm_eval (lm_eval, lm-eval, python -m lm_eval, each with an optional run)."""
    i = 0
    if argv and argv[0] in ("lm_eval", "lm-eval"):
        i = 1
    elif len(argv) > 2 and argv[0].rsplit("/", 1)[-1].startswith("python") and argv[1:3] == ["-m", "lm_eval"]:
        i = 3
    else:
        return 0
    if i < len(argv) and argv[i] == "run":  # lm-eval 0.4.10's subcommand (lm_eval/_cli/harness.py)
        i += 1
    return i


def _split_model_args(raw: str) -> list[tuple[str, str]]:
    """lm_eval's key=value,key=value (simple_parse_args_string), a comma inside {...} / [...] kept with its value."""
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in raw:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    pairs = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise K3PlanError(
                f"--serve: lm_eval --model_args {part!r}: expected key=value pairs (pretrained=MODEL,...)"
            )
        pairs.append((key.strip(), value.strip()))
    return pairs


def _lm_eval(rest: list[str]) -> LlmCommand:
    """lm_eval's command: --model vllm, its model_args as vLLM flags (LM_EVAL_SOURCE), its own flags listed."""
    model, model_args, ignored = None, [], []
    max_batch = None
    i = 0
    while i < len(rest):
        tok = rest[i]
        name, eq, val = tok.partition("=")
        takes = -1 if name in ("--model_args", "-a") else (1 if name == "--model" else LM_EVAL_FLAGS.get(name))
        if name == "--max_batch_size":
            takes = 1
        if takes is None:
            raise K3PlanError(
                f"--serve: lm_eval flag {tok!r} is not one k3plan reads or knows to be harmless; remove it"
            )
        values: list[str] = []
        if eq:
            values, i = [val], i + 1
        else:
            j = i + 1
            while j < len(rest) and not rest[j].startswith("-") and (takes == -1 or j - i <= 1) and takes != 0:
                j += 1
            values, i = rest[i + 1 : j], j
        if name == "--model":
            model = values[0] if values else ""
        elif name in ("--model_args", "-a"):
            model_args += values
        elif name == "--max_batch_size":
            max_batch = values[0] if values else None
        else:
            ignored.append(f"lm_eval {name}")
    if model != VLLM_COMMAND:
        raise K3PlanError(
            f"--serve: lm_eval --model {model or '(none)'}: k3plan reads lm_eval's vllm backend only (--model vllm)"
        )
    pairs = [kv for raw in model_args for kv in _split_model_args(raw)]
    keys = dict(pairs)
    if not keys.get("pretrained"):
        raise K3PlanError("--serve: lm_eval --model_args without pretrained=MODEL: the checkpoint the backend loads")
    if "max_length" in keys and "max_model_len" in keys:
        raise K3PlanError("--serve: lm_eval --model_args max_length and max_model_len: the backend asserts one only")
    if "max_batch_size" in keys:
        max_batch = keys["max_batch_size"]
    argv = [VLLM_COMMAND, "serve", keys["pretrained"]]
    for key, value in pairs:
        if key == "pretrained":
            continue
        if key in LM_EVAL_OWN_KEYS or key == "max_batch_size":
            ignored.append(f"lm_eval model_args {key}")
            continue
        if key == "lora_local_path":
            raise K3PlanError(
                "--serve: lm_eval model_args lora_local_path: a LoRA adapter (enable_lora) is not priced by k3plan; remove it"
            )
        if key == "data_parallel_size":
            if value.strip() not in ("1", ""):
                raise K3PlanError(
                    f"--serve: lm_eval model_args data_parallel_size={value}: lm_eval's own replicas of the engine "
                    "(vllm_causallms.py) are not read; price one replica (data_parallel_size=1)"
                )
            ignored.append("lm_eval model_args data_parallel_size=1")
            continue
        flag = "--" + ("max_model_len" if key == "max_length" else key).replace("_", "-")
        if value.lower() == "true":
            argv.append(flag)
        elif value.lower() == "false":
            argv.append(f"{flag}=false")
        else:
            argv += [flag, value]
    if max_batch is not None and "max_num_seqs" not in keys:
        argv += ["--max-num-seqs", max_batch]
    return LlmCommand(kind=LM_EVAL, argv=argv, env={}, ignored=ignored)


def _offline(rest: list[str]) -> LlmCommand:
    """The offline script: vLLM's flags as given, its own (OFFLINE_OWN) listed, its defaults (OFFLINE_SOURCE) added."""
    argv, ignored = [VLLM_COMMAND, "serve"], []
    i = 0
    while i < len(rest):
        name = rest[i].partition("=")[0]
        takes = OFFLINE_OWN.get(name)
        if takes is None:
            argv.append(rest[i])
            i += 1
            continue
        ignored.append(f"{OFFLINE_SCRIPT} {name}")
        i += 1 if "=" in rest[i] or takes == 0 else 2
    if not any(t == "--model" or t.startswith("--model=") for t in argv):
        raise K3PlanError(
            f"--serve: {OFFLINE_SCRIPT} without --model: its default (meta-llama/Llama-3.2-1B-Instruct, "
            f"{OFFLINE_SOURCE}) is not a checkpoint k3plan prices; give --model"
        )
    if not any(t == "--max-model-len" or t.startswith("--max-model-len=") for t in argv):
        argv += ["--max-model-len", OFFLINE_MAX_MODEL_LEN]
    return LlmCommand(kind=OFFLINE, argv=argv, env=dict(OFFLINE_ENV), ignored=ignored)


def translate(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str], LlmCommand | None]:
    """An LLM-class command (the offline script, lm_eval's vllm backend) as vllm serve's tokens and the environment
    the engine sees; any other command as it is, with None."""
    n = _is_offline(argv)
    if n:
        cmd = _offline(argv[n:])
        return cmd.argv, {**cmd.env, **env}, cmd
    n = _is_lm_eval(argv)
    if n:
        cmd = _lm_eval(argv[n:])
        return cmd.argv, env, cmd
    return argv, env, None
