"""nvidia/DeepSeek-R1-0528-FP4-v2 (NVIDIA ModelOpt NVFP4): the bundled config against the public figures, and the
InferenceX B200 commands that serve it.

Golden figures, typed from public sources (never from the code under test; models/bundled/deepseek-r1-0528-fp4-v2/
provenance.json lists them, each with where it was read):

- the Hub's parameter count for the checkpoint as a model page repeats it (llmrun.dev): 393.6B -- the safetensors
  element count, rounded to 0.1B (a U8 tensor of packed E2M1 pairs counts one an element, a byte).
- a tensor listing of the v1 checkpoint (deepseek-r1-0528-fp4): layer 0's dense MLP, NVFP4, as U8 / F8_E4M3 / F32
  tensors of shapes down_proj.weight [7168, 9216], down_proj.weight_scale [7168, 1152], gate_proj.weight
  [18432, 3584], gate_proj.weight_scale [18432, 448], weight_scale_2 and input_scale [] (the v2 model card: v2
  additionally quantizes attention's wo).
- no published total_size / shard listing of this checkpoint was found: the byte total is not tested against one.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.serve import model_of, parse_serve
from k3plan.errors import K3PlanError
from k3plan.models import load_model
from k3plan.models.formats import get_format
from k3plan.models.inventory import checkpoint_table
from k3plan.models.loader import BUNDLED_DIR

NAME = "deepseek-r1-0528-fp4-v2"
HUB_ELEMENTS_B = 393.6  # the Hub's count, in billions, one decimal
LISTING = {  # v1's layer-0 dense MLP: name -> (safetensors dtype, shape)
    "model.layers.0.mlp.down_proj.weight": ("U8", [7168, 9216]),
    "model.layers.0.mlp.down_proj.weight_scale": ("F8_E4M3", [7168, 1152]),
    "model.layers.0.mlp.down_proj.weight_scale_2": ("F32", []),
    "model.layers.0.mlp.down_proj.input_scale": ("F32", []),
    "model.layers.0.mlp.gate_proj.weight": ("U8", [18432, 3584]),
    "model.layers.0.mlp.gate_proj.weight_scale": ("F8_E4M3", [18432, 448]),
    "model.layers.0.mlp.gate_proj.weight_scale_2": ("F32", []),
    "model.layers.0.mlp.gate_proj.input_scale": ("F32", []),
}
ITEMSIZE = {"U8": 1, "F8_E4M3": 1, "F32": 4, "BF16": 2}
# InferenceX: benchmarks/single_node/fixed_seq_len/dsr1_fp4_b200_mtp.sh @843c6254 with configs/nvidia-master.yaml
# dsr1-fp4-b200-sglang-mtp search-space[0] (tests/engines/public_commands.yaml), run on its image
# lmsysorg/sglang:v0.5.16-cu130: read as 0.5.16 (fit --engine-version), whose parser takes --cuda-graph-max-bs
INFERENCEX_MTP_RELEASE = "0.5.16"
INFERENCEX_MTP = (
    "python3 -m sglang.launch_server --model-path nvidia/DeepSeek-R1-0528-FP4-V2 --host 0.0.0.0 --port 8888 "
    "--trust-remote-code --tensor-parallel-size=4 --data-parallel-size=1 --cuda-graph-max-bs 256 "
    "--max-running-requests 256 --mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 16384 "
    "--ep-size 1 --quantization modelopt_fp4 --enable-flashinfer-allreduce-fusion --scheduler-recv-interval 30 "
    "--disable-piecewise-cuda-graph --attention-backend trtllm_mla --moe-runner-backend flashinfer_trtllm "
    "--stream-interval 10 --speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-num-draft-tokens 3 "
    "--speculative-eagle-topk 1"
)
SGLANG_TP4 = (
    "python3 -m sglang.launch_server --model-path nvidia/DeepSeek-R1-0528-FP4-V2 --trust-remote-code --tp 4 "
    "--quantization modelopt_fp4 --mem-fraction-static 0.85 --chunked-prefill-size 16384 --max-running-requests 256"
)


@pytest.fixture(scope="module")
def model():
    return load_model(NAME)


def _elements(inv) -> int:
    return sum(math.prod(shape) for _, shape in checkpoint_table(inv).values())


def test_hub_element_count_rounds_to_the_published_figure(model):
    assert round(_elements(model.inventory) / 1e9, 1) == HUB_ELEMENTS_B


def test_only_the_bundled_split_gives_the_published_count(tmp_path):
    """Each of o_proj, the dense MLPs and the shared experts NVFP4 or BF16, the MTP layer BF16 or not: 16 splits, and
    only the bundled one (o_proj, dense, shared NVFP4; MTP BF16) rounds to the Hub's count."""
    raw = json.loads((BUNDLED_DIR / NAME / "config.json").read_text())
    base = raw["quantization_config"]["exclude_modules"]
    extra = {
        "o_proj": "model.layers.*.self_attn.o_proj",
        "dense": "model.layers.[012].mlp.*",
        "shared": "model.layers.*.mlp.shared_experts.*",
    }
    hits = []
    for bf16, mtp_bf16 in itertools.product(itertools.product((False, True), repeat=3), (False, True)):
        excl = [p for p in base if mtp_bf16 or p != "model.layers.61*"]
        excl += [pat for on, pat in zip(bf16, extra.values()) if on]
        raw["quantization_config"]["exclude_modules"] = excl
        path = tmp_path / f"{''.join(map(str, map(int, bf16)))}{int(mtp_bf16)}.json"
        path.write_text(json.dumps(raw))
        if round(_elements(load_model(str(path)).inventory) / 1e9, 1) == HUB_ELEMENTS_B:
            hits.append((bf16, mtp_bf16))
    assert hits == [((False, False, False), True)]


def test_nvfp4_tensors_match_the_public_listing(model):
    table = checkpoint_table(model.inventory)
    for name, (dtype, shape) in LISTING.items():
        assert table[name] == (dtype, shape), name
    fmt = get_format("nvfp4")
    for proj, shape in (("down_proj", (7168, 18432)), ("gate_proj", (18432, 7168))):
        listed = sum(ITEMSIZE[d] * math.prod(s) for n, (d, s) in LISTING.items() if f".{proj}." in n)
        assert fmt.nbytes(shape) == listed


def test_one_expert_in_nvfp4(model):
    """A routed expert's gate_proj [2048, 7168]: U8 [2048, 3584] + F8_E4M3 [2048, 448] + two F32 scalars."""
    t = model.inventory.get("model.layers.3.mlp.experts.{e}.gate_proj")
    assert t.fmt == "nvfp4" and t.shape == (256, 2048, 7168)
    one = 2048 * 3584 + 2048 * 448 + 4 + 4
    assert get_format("nvfp4").nbytes((2048, 7168)) == one == 8_257_544
    assert t.nbytes == 256 * one
    parts = [(n, d, s) for n, d, s in t.checkpoint_tensors() if n.startswith("model.layers.3.mlp.experts.0.")]
    assert parts == [
        ("model.layers.3.mlp.experts.0.gate_proj.weight", "U8", (2048, 3584)),
        ("model.layers.3.mlp.experts.0.gate_proj.weight_scale", "F8_E4M3", (2048, 448)),
        ("model.layers.3.mlp.experts.0.gate_proj.weight_scale_2", "F32", ()),
        ("model.layers.3.mlp.experts.0.gate_proj.input_scale", "F32", ()),
    ]


def test_what_stays_bf16(model):
    """The model card's v2: wo (o_proj) NVFP4, the rest of attention BF16; the MTP layer BF16 whole; lm_head BF16."""
    fmt = {t.name.removesuffix(".weight"): t.fmt for t in model.inventory.tensors}
    assert fmt["model.layers.7.self_attn.o_proj"] == "nvfp4"
    for p in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"):
        assert fmt[f"model.layers.7.self_attn.{p}"] == "bf16"
    assert fmt["model.layers.0.mlp.up_proj"] == fmt["model.layers.7.mlp.shared_experts.down_proj"] == "nvfp4"
    assert fmt["lm_head"] == fmt["model.layers.7.mlp.gate"] == "bf16"
    assert {t.fmt for t in model.inventory.of_kind("mtp")} <= {"bf16", "f32"}


@pytest.mark.parametrize("repo", ["nvidia/DeepSeek-R1-0528-FP4-V2", "nvidia/DeepSeek-R1-0528-FP4-v2"])
def test_the_id_resolves_to_its_bundle(repo):
    assert model_of(repo) == NAME


@pytest.mark.parametrize("quant", ["modelopt_fp4", "modelopt"])
@pytest.mark.parametrize(
    "launch", ["vllm serve nvidia/DeepSeek-R1-0528-FP4-V2 -tp 8", SGLANG_TP4.split(" --quantization")[0]]
)
def test_modelopt_flags_read_for_the_nvfp4_checkpoint_only(quant, launch):
    q = parse_serve(f"{launch} --quantization {quant}", platform="gpu", device_gib=179.0, device_name="nvidia-b200")
    assert q.model == NAME
    other = launch.replace("nvidia/DeepSeek-R1-0528-FP4-V2", "deepseek-ai/DeepSeek-R1-0528")
    with pytest.raises(K3PlanError, match="not a ModelOpt NVFP4 checkpoint"):
        parse_serve(f"{other} --quantization {quant}", platform="gpu", device_gib=179.0, device_name="nvidia-b200")


@pytest.mark.parametrize("hardware", ["nvidia-h200", "amd-mi355x"])
def test_a_gpu_without_nvidia_fp4_is_refused(hardware):
    with pytest.raises(K3PlanError, match="Marlin W4A16"):
        parse_serve(
            "vllm serve nvidia/DeepSeek-R1-0528-FP4-V2 -tp 8", platform="gpu", device_gib=140.0, device_name=hardware
        )


@pytest.mark.parametrize(("cmd", "release"), [(SGLANG_TP4, None), (INFERENCEX_MTP, INFERENCEX_MTP_RELEASE)])
def test_the_b200_commands_are_priced(model, cmd, release):
    at = ["--engine-version", release] if release else []
    out = CliRunner().invoke(app, ["fit", "-H", "nvidia-b200", "-t", "4", "--serve", cmd, "--json", *at])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["model"]["name"] == NAME and d["fits"]
    w = d["per_device"]["weights_bytes"]
    rep = d["per_device"]["replicated_weights_bytes"]
    sharded = model.inventory.checkpoint_bytes - rep
    assert sharded // 4 <= w - rep  # a quarter of the rest, plus SGLang's absorbed MLA copies


@pytest.mark.parametrize(
    ("extra", "caveat"),
    [
        ("", False),  # auto on SM100 with no a2a backend: flashinfer_trtllm, the scales aliased
        (" --moe-runner-backend flashinfer_trtllm", False),
        (" --moe-a2a-backend deepep", True),
        (" --moe-runner-backend flashinfer_cutlass", True),
    ],
)
def test_sglang_says_when_its_runner_keeps_a_second_copy_of_the_scales(extra, caveat):
    q = parse_serve(
        "python3 -m sglang.launch_server --model-path nvidia/DeepSeek-R1-0528-FP4-v2 --tp 8" + extra,
        platform="gpu",
        device_gib=179.0,
        device_name="nvidia-b200",
    )
    assert any("swizzled copy" in c for c in q.caveats) is caveat


@pytest.mark.parametrize("launch", ["vllm serve nvidia/DeepSeek-R1-0528-FP4-V2 -tp 8", SGLANG_TP4])
@pytest.mark.parametrize(
    ("kv", "got"), [("", "fp8"), (" --kv-cache-dtype auto", "fp8"), (" --kv-cache-dtype bf16", "bf16")]
)
def test_kv_auto_is_the_checkpoint_s_fp8(launch, kv, got):
    """Both engines turn --kv-cache-dtype auto into fp8 for a ModelOpt checkpoint whose kv_cache_quant_algo is FP8
    (vLLM's resolve_kv_cache_dtype_string, SGLang's ModelRunner.configure_kv_cache_dtype); a dtype written wins."""
    q = parse_serve(launch + kv, platform="gpu", device_gib=179.0, device_name="nvidia-b200")
    assert q.kv_dtype == got
    assert any("kv_cache_quant_algo FP8" in c for c in q.caveats) is (got == "fp8")
    other = parse_serve(
        launch.split(" --quantization")[0].replace("nvidia/DeepSeek-R1-0528-FP4-V2", "deepseek-ai/DeepSeek-R1-0528")
        + kv,
        platform="gpu",
        device_gib=179.0,
        device_name="nvidia-b200",
    )
    assert other.kv_dtype == (None if got == "fp8" else got)  # the fp8 checkpoint ships no KV scheme: its own bf16


def test_plain_fit_and_plan_hold_the_same_rule_as_serve():
    """engines/fp4_paths.py is one rule for fit --serve, plain fit and plan: a GPU without NVIDIA FP4 is refused in
    fit (exit 2, one line) and left out of plan's search with a note, as an engine whose held bytes were not read."""
    r = CliRunner()
    out = r.invoke(app, ["fit", "-m", NAME, "-H", "nvidia-h200", "-t", "8"])
    assert out.exit_code == 2 and "no NVIDIA FP4 units" in out.output and "Traceback" not in out.output
    ok = r.invoke(app, ["fit", "-m", NAME, "-H", "nvidia-b200", "-t", "8", "--json"])
    assert ok.exit_code in (0, 3), ok.output
    args = ["plan", "-m", NAME, "-H", "nvidia-b200,nvidia-h200", "--stacks", "vllm,torchtpu-vllm", "--json"]
    plan = json.loads(r.invoke(app, args).output)
    notes = [a for a in plan["assumptions"] if "not searched" in a]
    assert len(notes) == 2 and "on nvidia-h200 (" in notes[0] and "under torchtpu-vllm (" in notes[1]
    assert {row["hardware"] for row in plan["ranked"]} == {"nvidia-b200"}
    assert {row["stack"] for row in plan["ranked"]} == {"vllm"}
    only_h200 = r.invoke(app, ["plan", "-m", NAME, "-H", "nvidia-h200"])
    assert only_h200.exit_code == 2 and "no NVIDIA FP4 units" in only_h200.output


def test_plain_fit_and_plan_default_to_the_checkpoint_s_fp8_kv():
    """Without --serve or --kv-dtype the GPU engines' default (auto) is the checkpoint's fp8 KV, as under --serve
    (Stack.for_model, Engine.checkpoint_kv_auto); --kv-dtype bf16 still prices the model's own; a TPU stack, whose
    engine keeps the model's dtype, is not changed (and an FP4 checkpoint is not priced there at all)."""
    r = CliRunner()
    fp8 = json.loads(r.invoke(app, ["fit", "-m", NAME, "-H", "nvidia-b200", "-t", "8", "--json"]).output)
    bf16 = json.loads(
        r.invoke(app, ["fit", "-m", NAME, "-H", "nvidia-b200", "-t", "8", "--kv-dtype", "bf16", "--json"]).output
    )
    assert fp8["per_device"]["kv_bytes_per_token"] * 2 == bf16["per_device"]["kv_bytes_per_token"]
    assert any("kv_cache_quant_algo FP8" in n for n in fp8["notes"])
    assert not any("kv_cache_quant_algo FP8" in n for n in bf16["notes"])
    plan = json.loads(r.invoke(app, ["plan", "-m", NAME, "-H", "nvidia-b200", "--json"]).output)
    assert {row["kv_dtype"] for row in plan["ranked"]} == {"fp8"}


@pytest.mark.parametrize(("release", "got"), [("0.13.0", None), ("0.14.0", "fp8"), ("0.31.0", "fp8")])
def test_vllm_resolves_kv_auto_from_the_checkpoint_from_0140(release, got):
    """vLLM resolves --kv-cache-dtype auto from a ModelOpt kv_cache_quant_algo from 0.14.0 (the 0.14.0 wheel's
    EngineArgs.create_engine_config builds CacheConfig with resolve_kv_cache_dtype_string's value); the 0.13.0 wheel's
    passes auto as given, the model's own dtype. The serve reader and the stack (Stack.checkpoint_kv) read one rule."""
    from k3plan.setup import make_setup

    q = parse_serve(
        "vllm serve nvidia/DeepSeek-R1-0528-FP4-V2 -tp 8",
        platform="gpu",
        device_gib=179.0,
        device_name="nvidia-b200",
        release=tuple(int(x) for x in release.split(".")),
    )
    assert q.kv_dtype == got
    at = tuple(int(x) for x in release.split("."))
    setup = make_setup(model=NAME, hardware="nvidia-b200", topology="8", tp=8, stack="vllm", engine_release=at)
    assert setup.stack.kv_cache.dtype == (got or "bf16")


@pytest.mark.parametrize(
    ("release", "got"), [("0.5.1", None), ("0.5.2", None), ("0.5.3", "fp8"), ("0.5.15", "fp8"), ("0.5.23", "fp8")]
)
@pytest.mark.parametrize("dp", [False, True])
def test_sglang_resolves_kv_auto_from_the_checkpoint_from_053(release, got, dp):
    """SGLang resolves --kv-cache-dtype auto from a ModelOpt kv_cache_quant_algo from 0.5.3 (the 0.5.3 wheel's
    ModelRunner.init_memory_pool reads self.model.quant_config.kv_cache_quant_algo; the 0.5.1 and 0.5.2 wheels' keep
    the model's dtype: engines/sglang/releases.py CHECKPOINT_KV_AT), on its plain and DP-attention stacks alike."""
    at = tuple(int(x) for x in release.split("."))
    q = parse_serve(
        "sglang serve --model-path nvidia/DeepSeek-R1-0528-FP4-V2 --tp 8"
        + (" --dp 8 --enable-dp-attention" if dp else ""),
        platform="gpu",
        device_gib=179.0,
        device_name="nvidia-b200",
        release=at,
    )
    assert q.stack.split(":")[0] == ("dp-attention" if dp else "sglang")
    assert q.kv_dtype == got
    from k3plan.setup import make_setup

    stack = "dp-attention" if dp else "sglang"
    setup = make_setup(model=NAME, hardware="nvidia-b200", topology="8", tp=8, stack=stack, engine_release=at)
    assert setup.stack.kv_cache.dtype == (got or "bf16")
