"""The bundled stacks hold what the engines hold (issue 18): per-device weight bytes of K3 pinned
from the tensor shapes of k3-facts.md §2, written out by hand here, on each engine's semantics;
every rule cited; engine flags as stack options; platforms and runs_on."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from k3plan.engines.registry import stack_path
from k3plan.engines.stack import list_stacks, load_stack, updated
from k3plan.errors import K3PlanError
from k3plan.hardware import load_hardware
from k3plan.setup import make_setup

BF16, F32 = 2, 4
EXPERT_BYTES = 17_547_264  # one MXFP4 expert, w1 + w2 + w3 with their E8M0 scales (k3-facts.md §2)
EXPERT_PARAMS = 33_030_144  # one expert's parameters (k3-facts.md §2)
# torchtpu-vllm holds an MXFP4 expert as fp4 codes + one fp32 scale a 32-block (its
# VllmCompressedTensorsW4ANMxfp4MoEMethod.process_weights_after_loading: e8m0_to_fp32)
TORCHTPU_EXPERT_BYTES = EXPERT_PARAMS // 2 + 4 * (EXPERT_PARAMS // 32)

# globals: embed_tokens, lm_head [163840, 7168] split over the vocabulary; norm, output AttnRes norm
# [7168] and proj [1, 7168] whole
VOCAB_TABLE = 163840 * 7168 * BF16
GLOBAL_WHOLE = 3 * 7168 * BF16
# every layer: four [7168] norms and two [1, 7168] AttnRes projections, whole
LAYER_WHOLE = 6 * 7168 * BF16
# KDA layer: q/k/v, g_proj [12288, 7168], o_proj [7168, 12288]; the q/k/v convs [12288, 1, 4] F32;
# f_b_proj [12288, 128]; dt_bias [12288] F32; b_proj [96, 7168] -- all split by heads
KDA_BY_HEADS = 5 * 12288 * 7168 * BF16 + 3 * 12288 * 4 * F32 + 12288 * 128 * BF16 + 12288 * F32 + 96 * 7168 * BF16
# f_a_proj [128, 7168] (ReplicatedLinear), A_log [128] F32 and o_norm [128] F32: whole
KDA_WHOLE = 128 * 7168 * BF16 + 128 * F32 + 128 * F32
# MLA layer: q_b [18432, 1536], kv_b [24576, 512], g_proj [12288, 7168], o_proj [7168, 12288] by heads
MLA_BY_HEADS = (18432 * 1536 + 24576 * 512 + 2 * 12288 * 7168) * BF16
# q_a [1536, 7168] + q_a_layernorm [1536], kv_a_proj_with_mqa [576, 7168] + kv_a_layernorm [512]: whole
MLA_WHOLE = (1536 * 7168 + 1536 + 576 * 7168 + 512) * BF16
# SGLang holds w_kc / w_vc, .contiguous() bf16 copies of kv_b [24576, 512], beside it (kimi_k3.py
# post_load_weights; Stack.absorbed_copies); vLLM's W_UK_T / W_UV are views of the bf16 kv_b_proj
KV_B_COPIES = 24576 * 512 * BF16
DENSE_MLP = 3 * 33792 * 7168 * BF16  # layer 1: gate/up [33792, 7168], down [7168, 33792]
ROUTER = 896 * 7168 * BF16 + 896 * F32  # gate [896, 7168] + e_score_correction_bias [896] F32
LATENT = 2 * 3584 * 7168 * BF16 + 3584 * BF16  # routed_expert_down/up + routed_expert_norm
SHARED = 3 * 6144 * 7168 * BF16  # two shared experts: gate/up [6144, 7168], down [7168, 6144]
N_KDA, N_MLA, N_MOE = 69, 24, 92


def k3_per_device(
    *,
    tp: int,
    devices: int,
    latent_split: int = 1,
    shared_split: int = 1,
    copies: bool = False,
    expert_bytes: int = EXPERT_BYTES,
) -> int:
    """Per-device bytes when heads, the dense MLP and the vocabulary split tp ways, experts over
    every device, the router whole, the latent projections and shared experts split as given;
    ``copies``: the absorbed-MLA copies of kv_b held beside it, split by heads (SGLang)."""
    return (
        2 * VOCAB_TABLE // tp
        + GLOBAL_WHOLE
        + 93 * LAYER_WHOLE
        + N_KDA * (KDA_BY_HEADS // tp + KDA_WHOLE)
        + N_MLA * (MLA_BY_HEADS // tp + MLA_WHOLE + (KV_B_COPIES // tp if copies else 0))
        + DENSE_MLP // tp
        + N_MOE * (ROUTER + LATENT // latent_split + SHARED // shared_split + 896 * expert_bytes // devices)
    )


def test_hand_constants_match_the_published_parameter_counts():
    # KDA mixer 443,740,416 params, MLA mixer 232,196,096 (k3-facts.md §2); F32 entries count 4 B
    kda_params = (
        (KDA_BY_HEADS + KDA_WHOLE - 3 * 12288 * 4 * F32 - 12288 * F32 - 256 * F32) // BF16 + 3 * 12288 * 4 + 12288 + 256
    )
    assert kda_params == 443_740_416
    assert (MLA_BY_HEADS + MLA_WHOLE) // BF16 == 232_196_096
    assert LAYER_WHOLE // BF16 == 43_008


def test_sglang_tp16_h200_deepep_replicates_latent_router_and_shared_experts():
    s = make_setup(hardware="nvidia-h200", topology="2x8", tp=16, stack="sglang")
    assert s.stack.chosen["moe_a2a_backend"] == "deepep"
    assert s.weights.weights_bytes == k3_per_device(tp=16, devices=16, copies=True)
    assert s.weights.role_bytes("mla_absorbed") == N_MLA * KV_B_COPIES // 16
    assert s.weights.role_bytes("latent_proj") == N_MOE * LATENT
    assert s.weights.role_bytes("shared_expert") == N_MOE * SHARED
    assert s.weights.role_bytes("router") == N_MOE * ROUTER


def test_sglang_tp16_h200_without_deepep_splits_the_shared_experts():
    s = make_setup(hardware="nvidia-h200", topology="2x8", tp=16, stack="sglang:moe_a2a_backend=none")
    assert s.weights.weights_bytes == k3_per_device(tp=16, devices=16, shared_split=16, copies=True)
    assert s.stack.collectives.experts == "all_reduce"
    deepep = make_setup(hardware="nvidia-h200", topology="2x8", tp=16, stack="sglang")
    # DeepEP costs each GPU 15/16 of the shared experts: 92 x 264,241,152 x 15/16 B
    assert deepep.weights.weights_bytes - s.weights.weights_bytes == N_MOE * SHARED * 15 // 16 == 22_790_799_360


def test_vllm_on_8_b300():
    s = make_setup(hardware="nvidia-b300", topology="8", tp=8, stack="vllm")
    assert s.weights.weights_bytes == k3_per_device(tp=8, devices=8, shared_split=8)
    assert s.weights.role_bytes("latent_proj") == N_MOE * LATENT  # ReplicatedLinear, whole on every GPU
    assert s.notes == ()  # the vllm stack runs on B300: no platform warning


def test_torchtpu_vllm_v7x_tp32_holds_the_latent_projections_whole():
    s = make_setup(topology="2x2x4", tp=32)  # the main job: torchtpu-vllm (the TPU default), 32 devices
    assert s.stack.name == "torchtpu-vllm"
    tt = dict(tp=32, devices=32, shared_split=32, expert_bytes=TORCHTPU_EXPERT_BYTES)
    assert s.weights.weights_bytes == k3_per_device(**tt)
    # issue 18: 2 x 4.73 GB of latent projections were split 32 ways; every device holds them whole
    split = k3_per_device(**tt, latent_split=32)
    assert s.weights.weights_bytes - split == N_MOE * (LATENT - LATENT // 32) == 9_159_163_776


def test_vllm_tpu_is_an_alias_of_torchtpu_vllm():
    # issue 34: the name vllm-tpu (tpu-inference running vLLM's model code, which it does not do for K3)
    # loads the stack that runs it; the stack's name says which
    assert make_setup(topology="2x2x4", tp=32, stack="vllm-tpu").stack.name == "torchtpu-vllm"


def test_every_rule_of_every_bundled_stack_is_cited():
    for name in list_stacks():
        st = load_stack(name)
        keys = set(st.sharding.rules) | {f"role:{r}" for r in st.sharding.role_overrides}
        assert set(st.sharding.cite) == keys, name
        for key, cite in st.sharding.cite.items():
            assert cite.holds.strip(), (name, key)
            for src in cite.sources:
                assert src.repo and src.file and src.symbol, (name, key)
                assert src.found or src.note.strip(), (name, key)  # an assumption says what it assumes
        for opt in st.options.values():
            for choice in opt.choices.values():
                for key in choice.role_overrides or {}:
                    assert f"role:{key}" in choice.cite, (name, key)
        # a padded MLA cache entry (the stack's or an option's) cites the engine code and commit it was read at
        layouts = [st.kv_cache.layout, *(c.kv_layout for o in st.options.values() for c in o.choices.values())]
        for lay in filter(None, layouts):
            assert lay.holds.strip(), name
            for src in lay.sources:
                assert src.repo and src.file and src.symbol and src.found and src.commit, (name, src)
        # the splits an engine refuses and where it puts the experts at DP > 1 cite the code read, at its commit
        sp = st.splits
        split_srcs = [sp.dp_for_tp, sp.expert_width_source] if sp is not None else []
        for src in [*filter(None, split_srcs), *(st.dp_experts.sources if st.dp_experts.tp1_over else ())]:
            assert src.repo and src.file and src.symbol and src.found and src.commit, (name, src)


def test_option_values_and_errors():
    st = load_stack("sglang")
    assert st.with_options(mem_fraction_static=0.8).reserve.fraction_of_usable_hbm == pytest.approx(0.2)
    assert load_stack("vllm:gpu_memory_utilization=0.95").reserve.fraction_of_usable_hbm == pytest.approx(0.05)
    assert (
        st.with_options(**{"mamba-scheduler-strategy": "extra_buffer"}).state.slots_per_request == 5
    )  # calculate_mamba_ratio: 3 + 2 (overlap)
    assert st.state.slots_per_request == 3  # radix cache on: 3 slots a request
    assert load_stack("vllm:kv_cache_dtype=fp8_ds_mla").kv_cache.dtype == "fp8_ds_mla"
    both = load_stack("sglang:moe_a2a_backend=none+mem_fraction_static=0.8")  # '+' joins options in comma lists
    assert both.chosen["moe_a2a_backend"] == "none" and both.reserve.fraction_of_usable_hbm == pytest.approx(0.2)
    assert both == load_stack("sglang:moe_a2a_backend=none,mem_fraction_static=0.8")
    # a choice replaces what another choice of the same option added
    back = (
        st.with_options(moe_a2a_backend="none")
        .with_options(moe_a2a_backend="deepep")
        .with_options(moe_a2a_backend="none")
    )
    assert "shared_expert" not in back.sharding.role_overrides
    with pytest.raises(K3PlanError, match="unknown option 'moe'; known: moe_a2a_backend"):
        st.with_options(moe="x")
    with pytest.raises(
        K3PlanError, match=re.escape("(--moe-a2a-backend) 'pplx': expected one of deepep, megamoe, none")
    ):
        load_stack("sglang:moe_a2a_backend=pplx")
    with pytest.raises(K3PlanError, match="expected a number in"):
        st.with_options(mem_fraction_static=1.5)
    with pytest.raises(K3PlanError, match="expected NAME:option=value"):
        load_stack("sglang:moe_a2a_backend=")


@pytest.mark.parametrize(
    "stack, yes, no",
    [
        ("vllm", ["gpu", "nvidia-b300", "nvidia-h200", "amd-mi355x"], ["tpu", "tpu-v7x", "nvidia-h100-sxm"]),
        ("vllm-tpu", ["tpu", "tpu-v7x"], ["gpu", "nvidia-gb300-nvl72", "amd-mi355x"]),
        ("tpu-inference", ["tpu", "tpu-v7x"], ["gpu", "nvidia-h200"]),
        ("sglang", ["gpu", "nvidia-h200", "amd-mi300x"], ["tpu", "tpu-v7x"]),
        ("jax-native", ["tpu", "tpu-v6e"], ["gpu", "nvidia-b200"]),
        ("dp-attention", ["tpu", "gpu", "tpu-v7x", "nvidia-h200"], []),
    ],
)
def test_runs_on(stack, yes, no):
    st = load_stack(stack)
    for hw in yes:
        assert st.runs_on(hw), (stack, hw)
    for hw in no:
        assert not st.runs_on(hw), (stack, hw)
    for hw in yes + no:  # a HardwareSpec works too
        if "-" in hw:
            assert st.runs_on(load_hardware(hw)) == (hw in yes), (stack, hw)


def _stack_file(tmp_path, name, mutate):
    data = yaml.safe_load((stack_path(name)).read_text())
    mutate(data)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d["sharding"]["cite"].pop("latent"), "rules without a citation: latent"),
        (lambda d: d["sharding"]["cite"].update(bogus=d["sharding"]["cite"]["vocab"]), "citations for no rule: bogus"),
        (lambda d: d["sharding"]["cite"]["latent"]["sources"][0].update(found=False, note=""), "must say in note"),
        (lambda d: d["options"]["moe_a2a_backend"].update(default="pplx"), "default 'pplx' is not one of"),
        (lambda d: d.update(platforms=["tpu"]), "disagrees with platforms"),
        # a dict's entry is named by its key (msgspec says only "[...]"), and a refused key too
        (
            lambda d: d["options"]["moe_a2a_backend"]["source"].update(found=False, note=""),
            "s.yaml: options.moe_a2a_backend.source: a source with found: false must say in note",
        ),
        (
            lambda d: d["options"]["mem_fraction_static"]["auto"]["gpu_classes"][0].update(cuda_graph_max_bs=-1),
            "options.mem_fraction_static.auto.gpu_classes.0.cuda_graph_max_bs: Expected `int` >= 0",
        ),
        (lambda d: d.update(on_platform={"cpu": {}}), "on_platform: key 'cpu': Invalid enum value 'cpu'"),
        (
            lambda d: d["paging"].update(align_tokenz=1),
            "unknown key 'paging.align_tokenz' (did you mean 'align_tokens'?)",
        ),
        # strict: a number written as a string is refused (pydantic's lax mode read "64" as 64)
        (lambda d: d["paging"].update(align_tokens="64"), "paging.align_tokens: Expected `int`, got `str`"),
        # was a traceback: the ratio resolution added to a string before the schema checked it
        (lambda d: d["state"].update(ratio="2"), "state.ratio: Expected `int | null`, got `str`"),
    ],
)
def test_bad_stack_citations_and_options(tmp_path, mutate, needle):
    with pytest.raises(K3PlanError, match=re.escape(needle)):
        load_stack(_stack_file(tmp_path, "sglang", mutate))


def test_sglang_derives_mem_fraction_static_from_the_gpu_and_parallel_size():
    """memory_hook.py handle_gpu_memory_settings (sgl-project/sglang@031ed82d), by hand, in MiB:
    512 + max(chunk, 2048) x 1.5 + tp x pp x 1024 / 8 + decode max_bs x 2, at least 10240 above 60 GiB,
    + 2048 (DeepEP). The prefill graph's 1536 (MLA) and 1024 (breakable + DeepEP) do not count: the
    cuda-graph cascade turns K3's prefill graph off (KDA on CUDA, tc_piecewise on HIP)."""
    st = load_stack("sglang")
    auto = st.options["mem_fraction_static"].auto
    h200, b200, mi300x = 143771, 183359, 192 * 1024  # MiB: memory.total as the driver reports it
    # H200 tp16, chunk 8192: 512 + 12288 + 2048 + 512 x 2 = 15872; + 2048 = 17920 MiB (17.5 GiB)
    assert auto.reserved_mib(gpu_mib=h200, tp=16, pp=1, chunk=8192, deepep=True, cuda=True) == 17920
    # (143771 - 17920) / 143771 = 0.87536
    assert auto.fraction(gpu_bytes=h200 * 2**20, tp=16, pp=1, chunk=8192, deepep=True, cuda=True) == 0.875
    # H200 tp2 (cuda_graph_max_bs 256 at tp < 4), no DeepEP: 512 + 12288 + 256 + 512 = 13568
    assert auto.reserved_mib(gpu_mib=h200, tp=2, pp=1, chunk=8192, deepep=False, cuda=True) == 13568
    # the 10 GiB floor: a 2048-token chunk on an H200 at tp1: 512 + 3072 + 128 + 512 = 4224 -> 10240
    assert auto.reserved_mib(gpu_mib=h200, tp=1, pp=1, chunk=2048, deepep=False, cuda=True) == 10240
    # ... and DeepEP's 2048 lands on top of the floor
    assert auto.reserved_mib(gpu_mib=h200, tp=1, pp=1, chunk=2048, deepep=True, cuda=True) == 12288
    # B200 tp8 x pp2 at its default chunk 16384 (chunk None): 512 + 24576 + 2048 + 1024 = 28160; + 2048 = 30208
    assert auto.reserved_mib(gpu_mib=b200, tp=8, pp=2, chunk=None, deepep=True, cuda=True) == 30208
    # (183359 - 30208) / 183359 = 0.83525
    assert auto.fraction(gpu_bytes=b200 * 2**20, tp=8, pp=2, chunk=16384, deepep=True, cuda=True) == 0.835
    # MI300X (192 GiB: the B200/MI300 class, max_bs 512) tp8, chunk 8192: 512 + 12288 + 1024 + 1024 = 14848;
    # + 2048 = 16896; (196608 - 16896) / 196608 = 0.91406
    assert auto.reserved_mib(gpu_mib=mi300x, tp=8, pp=1, chunk=8192, deepep=True, cuda=False) == 16896
    assert auto.fraction(gpu_bytes=mi300x * 2**20, tp=8, pp=1, chunk=8192, deepep=True, cuda=False) == 0.914
    # the prefill terms, where a model's prefill graph is captured (not K3's): + 1536 (MLA), + 1024 (DeepEP, CUDA)
    on = updated(auto, prefill_graph=True)
    assert on.reserved_mib(gpu_mib=h200, tp=16, pp=1, chunk=8192, deepep=True, cuda=True) == 17920 + 1536 + 1024
    assert on.reserved_mib(gpu_mib=mi300x, tp=8, pp=1, chunk=8192, deepep=True, cuda=False) == 16896 + 1536
    # the stack runs with it at its default; an explicit value pins the reserve
    assert st.reserve_fraction(usable_bytes=h200 * 2**20, tp=16, pp=1, chunk=8192, vendor="nvidia") == pytest.approx(
        0.125
    )
    # moe_a2a_backend=none: no DeepEP buffers, 15872 MiB: (143771 - 15872) / 143771 = 0.88960 -> 0.890
    none = load_stack("sglang:moe_a2a_backend=none")
    assert none.reserve_fraction(usable_bytes=h200 * 2**20, tp=16, pp=1, chunk=8192, vendor="nvidia") == pytest.approx(
        0.11
    )
    pinned = st.with_options(mem_fraction_static=0.8)
    assert pinned.reserve_fraction(usable_bytes=h200 * 2**20, tp=16, pp=1, chunk=8192, vendor="nvidia") == (
        pytest.approx(0.2)
    )


def test_fit_plan_and_launch_use_the_derived_reserve(cli):
    import json

    f = cli("fit", "-H", "nvidia-h200", "-t", "2x8", "--tp", "16", "--stack", "sglang", "--context", "8192",
            "--batch", "4", "--chunk", "8192", "--json")  # fmt: skip
    d = json.loads(f.stdout)
    usable = 143771 * 2**20
    # SGLang runs the temporaries out of the reserve (kv_pool static_fraction): what they leave of 12.5%
    assert d["per_device"]["reserve_bytes"] == int(0.125 * usable) - d["per_device"]["temp_bytes"]
    assert "mem_fraction_static 0.875" in d["provenance"]["reserve"]


@pytest.mark.parametrize("name", list_stacks())
def test_every_stack_names_its_tp_edge_collectives(name):
    """step.ops.tp_edge_ops counts the embedding's and the dense MLP's all-reduce and the logits gather
    over TP for every stack: it holds only while every stack splits the vocabulary and the dense MLP
    over TP, and each stack says how its logits leave the vocabulary split, citing engine code."""
    s = load_stack(name)
    vocab = s.sharding.rules_for("embed")["vocab"]
    assert vocab == s.sharding.rules_for("lm_head")["vocab"]
    if vocab == "ep":  # tpu-inference's MLP_TENSOR: every device; the stack says those collectives are not counted
        assert name == "tpu-inference" and "not counted" in s.logits.holds and "not counted" in s.description
    else:
        assert vocab == "tp"
    assert s.sharding.rules_for("dense_mlp")["mlp"] == "tp"
    assert s.logits.gather in ("all_gather", "partitioned_argmax") and s.logits.sources
    # the engines that run the sampler in JAX on split logits partition the argmax; vLLM-GPU and SGLang gather
    want = "partitioned_argmax" if name in ("tpu-inference", "jax-native") else "all_gather"
    assert s.logits.gather == want


def test_vllm_reserve_and_kv_dtype_defaults_cite_the_engine_code_read():
    # every vLLM fit prints the reserve's source: it said "not found or not read ... not read this session"
    # of vllm/config/cache.py, which the index holds (CacheConfig.gpu_memory_utilization Field(default=0.9))
    from k3plan.engines.stack import load_stack

    opts = load_stack("vllm").options
    for name in ("gpu_memory_utilization", "kv_cache_dtype"):
        src = opts[name].source
        assert src.found and src.commit and src.file == "vllm/config/cache.py", name
        assert "not read" not in src.text()
    assert "default=0.9" in opts["gpu_memory_utilization"].source.symbol


def test_sglang_reserve_given_at_its_default_value_is_pinned(cli):
    """--mem-fraction-static 0.88 given explicitly is what SGLang runs (handle_gpu_memory_settings derives the
    fraction only when the flag is absent): priced as 12% and written 0.88, not the derived 0.875 on H200 tp16."""
    import json

    h200 = 143771 * 2**20
    pinned = load_stack("sglang:mem_fraction_static=0.88")
    assert pinned.reserve_auto(vendor="nvidia") is None
    assert pinned.reserve_fraction(usable_bytes=h200, tp=16, pp=1, chunk=8192, vendor="nvidia") == pytest.approx(0.12)
    assert pinned.label == "sglang:mem_fraction_static=0.88" and load_stack("sglang").label == "sglang"
    # an option without a derivation given at its default is still the bundled stack
    assert load_stack("sglang:moe_a2a_backend=deepep").label == "sglang"
    f = cli("fit", "-H", "nvidia-h200", "-t", "2x8", "--tp", "16", "--stack", "sglang:mem_fraction_static=0.88",
            "--json")  # fmt: skip
    d = json.loads(f.stdout)
    assert d["stack"] == "sglang:mem_fraction_static=0.88" and "0.875" not in d["provenance"]["reserve"]
    p = cli("plan", "-H", "nvidia-h200", "--stacks", "sglang:mem_fraction_static=0.88", "--context", "131072")
    assert "--mem-fraction-static 0.88 " in p.stdout and "0.875" not in p.stdout


def test_sglang_mem_fraction_default_off_a_gpu_is_sglang_jax():
    """Off an NVIDIA/AMD GPU the sglang stack prices --mem-fraction-static 0.88: SGLang's TPU engine's default
    (sgl-project/sglang-jax python/sgl_jax/srt/server_args.py ServerArgs.__post_init__: 0.88 off CPU), not
    memory_hook.py @031ed82d's 0.95, which applies only where get_device_memory_capacity reads no memory
    (gpu_mem None: neither CUDA nor HIP nor hpu/npu/cpu/xpu/musa). Before, the figure cited 'an older
    server_args fallback'."""
    st = load_stack("sglang")
    opt = st.options["mem_fraction_static"]
    assert opt.default == 0.88
    assert "sgl-project/sglang-jax" in opt.source.note and "00f0fbf5" in opt.source.note
    assert st.reserve_auto(vendor="google") is None and st.reserve_auto(vendor="nvidia") is opt.auto
    assert st.reserve_fraction(usable_bytes=96 * 2**30, tp=32, pp=1, chunk=8192, vendor="google") == pytest.approx(0.12)
    assert "sglang-jax" in st.reserve.source  # what fit prints as the reserve's provenance on a TPU


@pytest.mark.parametrize(
    "args, kind",
    [
        (["-H", "tpu-v7x", "-t", "2x2x4", "--stack", "sglang"], "TPU"),
        (["-H", "nvidia-h200", "-t", "8", "-m", "deepseek-v3", "--stack", "torchtpu-vllm"], "GPU"),
    ],
)
def test_an_engine_priced_on_the_other_kind_of_machine_says_so(cli, args, kind):
    """A GPU engine on a TPU (or a TPU plugin on a GPU) cannot start there: the answer warns, in fit's JSON too."""
    d = json.loads(cli("fit", *args, "--json").stdout)
    assert any(f"not on a {kind}: these are its engine's rules applied to" in w for w in d["warnings"])
    same = json.loads(cli("fit", "-H", "tpu-v7x", "-t", "2x2x4", "--json").stdout)
    assert not any("these are its engine's rules applied to" in w for w in same["warnings"])


@pytest.mark.parametrize("name", ["torchtpu-vllm", "tpu-inference", "dp-attention"])
def test_tpu_engines_default_utilization_is_the_pinned_vllm_s(name):
    """The TPU engines read vLLM's CacheConfig default, which their pinned vLLM makes 0.92 (torchtpu-vllm: v0.29.0 in
    its pyproject; tpu-inference @811f8e20: vLLM main 272abd5f); neither platform sets another. Was 0.9 (10%)."""
    from k3plan.engines.stack import load_stack

    s = load_stack(name)
    assert s.reserve.fraction_of_usable_hbm == pytest.approx(0.08)
    if name != "dp-attention":  # its TPU side is tpu-inference's; on a GPU SGLang's derived fraction replaces it
        opt = s.options["gpu_memory_utilization"]
        assert float(opt.default) == 0.92 and opt.source.commit and "0.92" in opt.source.text()
