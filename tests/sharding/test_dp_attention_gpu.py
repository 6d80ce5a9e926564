"""dp-attention on a GPU is priced as the engine its launch starts: SGLang --enable-dp-attention (k3plan/engines/dp_attention
Engine.launcher_on). Its state pool, paging, reserve, KV pool and absorbed-MLA copies were vLLM's (1 state slot a
request, hybrid 64-token pages, gpu_memory_utilization 0.9, no copies) while the launch file ran SGLang; the stack's
``on_platform: gpu`` rule now takes those sections and SGLang's flags from sglang.yaml (Stack.bind). On TPU the
stack stays tpu-inference's, byte for byte."""

from __future__ import annotations

import json

import pytest

from k3plan.budget.fit import Workload, fit
from k3plan.engines.stack import Stack, load_stack
from k3plan.hardware import load_hardware
from k3plan.models import load_model
from k3plan.plan.deployment import launch_for
from k3plan.plan.evaluate import evaluate
from k3plan.plan.rows import PER_DEVICE, row
from k3plan.plan.space import build_space
from k3plan.roofline.bounds import Efficiency
from k3plan.setup import make_setup
from k3plan.structs import dump

H200_MIB = 143771  # nvidia-h200.yaml usable HBM: nvidia-smi memory.total 143771MiB
MIB = 2**20


def test_sglang_s_dp_attention_reserve_by_hand():
    """memory_hook.py handle_gpu_memory_settings for H200 at --tp-size 16 (tp 1 x dp 16), --dp-size 16, a 8,192-token
    chunk flag, DeepEP: 512 + 8192 x 1.5 + 16 x 1 / 8 x 1024 + reserve_for_graph_mb (decode max_bs 512: 512 x 2,
    DP attention 512 x 16 x 3 and, max_bs above 300, 512 x 16 x 1.5) = 52,736 MiB, above the 10 GiB floor, + DeepEP's
    2,048 = 54,784 MiB; round((143771 - 54784) / 143771, 3) = 0.619 (last session's estimate: ~0.62)."""
    auto = load_stack("sglang").options["mem_fraction_static"].auto
    assert auto is not None
    reserved = 512 + 8192 * 1.5 + 16 * 1024 / 8 + (512 * 2 + 512 * 16 * 3 + 512 * 16 * 1.5) + 2048
    assert reserved == 54784
    kw = dict(gpu_mib=H200_MIB, tp=16, pp=1, chunk=8192, deepep=True, cuda=True)
    assert auto.reserved_mib(**kw, dp_attention_dp=16) == reserved
    assert auto.reserved_mib(**kw) == 17920  # no DP attention: the sglang stack's, unchanged
    assert (
        auto.fraction(gpu_bytes=H200_MIB * MIB, tp=16, pp=1, chunk=8192, deepep=True, cuda=True, dp_attention_dp=16)
        == 0.619
    )


def test_dp_attention_on_h200_prices_sglang_s_pools_and_reserve(cli):
    """fit H200 2x8 tp 1 dp 16, 32,768 tokens x 8, a 512-token chunk a DP group (the flag SGLang is given: 512 x 16 =
    8,192, test above). Before: 1 state slot a request, hybrid pages of 5,696 tokens, a 10% reserve, no W_UK / W_UV.
    After, by hand (K3: 69 KDA layers of 96 heads x 128, conv kernel 4; 24 MLA layers, kv_lora 512 + rope 64,
    kv_b_proj [96 x (128 + 128), 512] bf16); one sequence a device (8 over 16 DP groups)."""
    r = cli(
        "fit",
        "-m",
        "kimi-k3",
        "-H",
        "nvidia-h200",
        "-t",
        "2x8",
        "--tp",
        "1",
        "--dp",
        "16",
        "--stack",
        "dp-attention",
        "--context",
        "32768",
        "--batch",
        "8",
        "--chunk",
        "512",
        "--json",
    )
    assert r.exit_code in (0, 1), r.output
    j = json.loads(r.stdout)
    d, layout = j["per_device"], j["cache_layout"]
    slot = 69 * (96 * 128 * 128 * 4 + 3 * 96 * 128 * (4 - 1) * 2)  # recurrent f32 + q/k/v conv windows bf16
    assert layout["state_slots_per_sequence"] == 3  # SGLang's radix cache on: 3 slots a running request
    assert d["state_bytes"] == 3 * slot == 1_348_116_480
    assert layout["paging"] == "separate" and layout["block_tokens"] == 1
    assert d["kv_bytes"] == 32768 * 24 * (512 + 64) * 2 == 905_969_664
    assert j["weights_by_role"]["mla_absorbed"] == 24 * 96 * (128 + 128) * 512 * 2 == 603_979_776
    # static_fraction: the temporaries run out of the reserve, so reserve + temp is the engine's 1 - 0.619
    assert d["temp_bytes"] < d["reserve_bytes"]
    assert d["reserve_bytes"] + d["temp_bytes"] == int(round(1 - 0.619, 12) * H200_MIB * MIB)
    assert "mem_fraction_static 0.619" in j["provenance"]["reserve"]
    assert "tp_size 16 (tp 1 x dp 16)" in j["provenance"]["reserve"]


def _without_bind(monkeypatch):
    monkeypatch.setattr(Stack, "bind", lambda self, hw: self, raising=False)


@pytest.mark.parametrize(
    "args",
    [
        ("-t", "2x2x4", "--tp", "32", "--stack", "dp-attention"),
        (
            "-t",
            "2x2x4",
            "--tp",
            "32",
            "--stack",
            "dp-attention",
            "--calibration",
            "k3-tpu7x-2x2x4-tp32-dp-attention-compiled.yaml",
        ),
    ],
)
def test_dp_attention_on_tpu_is_byte_identical_to_the_stack_as_written(cli, monkeypatch, args):
    """On TPU dp-attention is tpu-inference's attention DP: no on_platform rule applies, its fit JSON is the one
    the stack as written gives (what it gave before the rule existed), with its shipped calibration too."""
    bound = cli("fit", *args, "--json")
    _without_bind(monkeypatch)
    raw = cli("fit", *args, "--json")
    assert bound.exit_code == raw.exit_code and bound.stdout == raw.stdout
    j = json.loads(bound.stdout)
    assert j["cache_layout"].get("state_slots_per_sequence", 1) == 1 and j["cache_layout"]["paging"] == "hybrid"
    assert "mla_absorbed" not in j["weights_by_role"]
    assert load_stack("dp-attention").bind(load_hardware("tpu-v7x")) is load_stack("dp-attention")


def test_the_gpu_binding_takes_sglang_yaml_s_sections_and_flags():
    """Each quantity written once: the bound stack's sections are sglang.yaml's, not copies; its options are
    SGLang's flags (a2a backend, MoE runner, mem_fraction_static, scheduler strategy, radix cache); on TPU none of them."""
    gpu = load_stack("dp-attention").bind(load_hardware("nvidia-h200"))
    sg = load_stack("sglang")
    for section in ("state", "paging", "reserve", "kv_pool", "absorbed_copies", "dp_attention_chunk"):
        assert getattr(gpu, section) == getattr(sg, section), section
    assert list(gpu.options) == [
        "moe_a2a_backend",
        "moe_runner_backend",
        "mem_fraction_static",
        "mamba_scheduler_strategy",
        "disable_radix_cache",
    ]
    assert gpu.label == "dp-attention" and gpu.collectives.experts == "all_to_all"
    assert gpu.sharding.rules == load_stack("dp-attention").sharding.rules
    tpu, g = load_stack("dp-attention").bindings()
    assert (tpu.platforms, g.platforms) == (("tpu",), ("gpu",)) and not tpu.options


def test_an_sglang_flag_given_to_dp_attention_applies_on_gpus_only(cli):
    """--stack dp-attention:mem_fraction_static=0.85 pins SGLang's fraction on a GPU (reserve 15%); on a TPU the
    flag is not tpu-inference's: one line, exit 2."""
    st = load_stack("dp-attention:mem_fraction_static=0.85")
    gpu = st.bind(load_hardware("nvidia-h200"))
    assert gpu.reserve_fraction(usable_bytes=H200_MIB * MIB, tp=1, pp=1, chunk=512, vendor="nvidia", dp=16) == 0.15
    assert gpu.label == st.label == "dp-attention:mem_fraction_static=0.85"
    assert [b.bound for b in st.bindings()] == ["gpu"]
    r = cli("fit", "-t", "2x2x4", "--tp", "32", "--stack", "dp-attention:mem_fraction_static=0.85")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "mem_fraction_static" in r.output and "tpu-v7x" in r.output
    sp = build_space(
        hardware=[load_hardware("tpu-v7x"), load_hardware("nvidia-h200")],
        stacks=[st],
        kv_dtypes=[None],
        chunks=[2048],
        max_chips=16,
        stacks_given=True,
    )
    assert {sp.hardware[int(h)].name for h in set(sp.cols.hw.tolist())} == {"nvidia-h200"}
    (why,) = sp.skipped.values()
    assert why.startswith("stack dp-attention:mem_fraction_static=0.85: option(s) mem_fraction_static apply on gpu")


def test_plan_row_and_launch_equal_fit_for_a_dp_attention_gpu_point():
    """plan's row for H200 4x8 tp 8 dp 4 ep 32 dp-attention (chunk 2,048 a DP group) is fit's JSON term by term;
    the launch starts SGLang with the chunk flag SGLang divides by dp_size (2,048 x 4), the fraction fit priced and
    the state pool at SGLang's 3 slots a request (ceil(16 / 4) x 3 x dp 4 = 48)."""
    import numpy as np

    hw = load_hardware("nvidia-h200")
    sp = build_space(
        hardware=[hw, load_hardware("tpu-v7x")],
        stacks=[load_stack("dp-attention")],
        kv_dtypes=[None],
        chunks=[2048],
        max_chips=32,
        stacks_given=True,
    )
    m = load_model("kimi-k3")
    cols = evaluate(space=sp, model=m, context=32768, batch=16, eff=Efficiency()).cols
    topo = np.array([t.text for t in sp.topologies])[cols.topo]
    hit = np.flatnonzero((cols.hw == 0) & (topo == "4x8") & (cols.tp == 8) & (cols.dp == 4) & (cols.ep == 32))
    assert hit.size == 1
    r = row(space=sp, cols=cols, i=int(hit[0]), rank=1)
    setup = make_setup(hardware="nvidia-h200", topology="4x8", tp=8, ep=32, dp=4, stack="dp-attention")
    f = fit(setup, Workload(context_tokens=32768, batch=16, prefill_chunk_tokens=2048))
    j = dump(f)
    for k in PER_DEVICE:
        assert getattr(r.per_device, k) == j["per_device"][k], k
    assert j["cache_layout"]["state_slots_per_sequence"] == 3
    stack = next(s for s in sp.stacks if s.runs_on(hw))
    launch = launch_for(
        pick=r,
        hw=hw,
        stack=stack,
        topology=sp.topologies[int(cols.topo[hit[0]])],
        model=m,
        context=32768,
        max_num_seqs=16,
    )
    assert launch.config is not None, launch.error
    cmd = launch.text or ""
    assert "sglang.launch_server" in cmd and " --enable-dp-attention " in cmd
    assert " --chunked-prefill-size 8192 " in cmd and " --max-mamba-cache-size 48 " in cmd
    fraction = 1 - setup.stack.reserve_fraction(
        usable_bytes=hw.usable_bytes_per_device, tp=8, pp=1, chunk=2048, vendor="nvidia", dp=4
    )
    assert f" --mem-fraction-static {fraction:g} " in cmd


def test_the_derived_reserve_over_columns_equals_it_point_by_point():
    """Stack.reserve_fraction over numpy columns (plan's evaluate: one call a machine) is the scalar value (fit)
    of each point to the bit: tp below and above 4 (the small-tp graph batch), pp, chunks either side of the
    activation floor, DP attention's dp and its chunk flag x dp, a fraction driven to <= 0 (the whole device)."""
    import itertools

    import numpy as np

    for name in ("sglang", "dp-attention"):
        st = load_stack(name).bind(load_hardware("nvidia-h200"))
        for hw_name in ("nvidia-h200", "nvidia-b200", "amd-mi300x"):
            hw = load_hardware(hw_name)
            pts = list(itertools.product((1, 2, 4, 8, 16), (1, 2), (1024, 2048, 8192, 65536), (1, 2, 4, 16)))
            tp, pp, chunk, dp = (np.array(col, dtype=np.int64) for col in zip(*pts))
            kw = dict(usable_bytes=hw.usable_bytes_per_device, vendor=hw.vendor)
            cols = st.reserve_fraction(tp=tp, pp=pp, chunk=chunk, dp=dp, **kw)
            one = [st.reserve_fraction(tp=a, pp=b, chunk=c, dp=d, **kw) for a, b, c, d in pts]
            assert all(type(x) is float for x in one)
            assert cols.tolist() == one, (name, hw_name)
            assert max(one) == 1.0 or name == "sglang"
