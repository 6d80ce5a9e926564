"""vLLM's online FP8 of a checkpoint stored unquantized (k3plan.engines.vllm.online_quant) and the tensor an MLA layer
allocates in the profile run (k3plan.engines.vllm.mla_workspace), read in the vLLM 0.11.0-0.34.0 wheels (PyPI): online
FP8 priced 0.20.0-0.30.x (the 0.20.0-0.30.0 wheels), refused in vLLM's words from 0.31.0."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.vllm.mla_workspace import profile_mla_allocation, workspace_rows
from k3plan.units import GiB

KL = "vllm serve moonshotai/Kimi-Linear-48B-A3B-Instruct --trust-remote-code --quantization fp8 --kv-cache-dtype fp8"
KL_512K = f"{KL} --max-model-len 524288 --gpu-memory-utilization 0.95 --enable-prefix-caching --enforce-eager"
# moonshotai/Kimi-Linear-48B-A3B-Instruct's config.json: MLA heads, qk_nope_head_dim, v_head_dim
HEADS, NOPE, V = 32, 128, 128


def _fit(cli, command: str, *extra: str):
    return cli("fit", "-H", "nvidia-h200", "-t", "1", *extra, "--serve", command, "--json")


def test_online_fp8_is_priced_where_read(cli):
    """0.20.0: the Linears and experts as fp8 with a per-tensor scale, the embedding, LM head, norms and router as
    stored. The runbook's 'Model loading took 46.66 GiB' for this checkpoint (tests/engines/cases/
    vllm-mirothinker-kimi-linear-h200-tp1-fp8-512k.yaml) within 3%; the BF16 bytes were 91.50 GiB."""
    r = _fit(cli, KL_512K, "--engine-version", "0.20.0")
    assert r.exit_code in (0, 1), r.output
    d = json.loads(r.stdout)
    roles = d["weights_by_role"]
    bf16 = _fit(cli, KL_512K.replace(" --quantization fp8", ""), "--engine-version", "0.20.0")
    before = json.loads(bf16.stdout)["weights_by_role"]
    for role in ("embed", "lm_head", "norm", "router"):  # not LinearBase / quant_config=None: as stored
        assert roles[role] == before[role], role
    # a bf16 routed expert matrix becomes 1 B a value + one f32 scale an expert (Fp8OnlineMoEMethod)
    assert roles["expert"] == before["expert"] // 2 + 4 * 256 * 3 * 26
    assert "mla_absorbed" in roles  # kv_b_proj fp8: decode's W_UK_T / W_UV dequantized to bf16 beside it
    assert d["engine"]["weights_bytes"] == pytest.approx(46.66 * GiB, rel=0.03)
    assert "quantization=fp8" in d["engine"]["serve"]["stack"]


@pytest.mark.parametrize(
    ("release", "why"),
    [
        ("0.33.0", "no longer supports online quantization"),  # vLLM's own ValueError (0.31.0 on)
        ("0.31.0", "no longer supports online quantization"),
        ("0.18.0", "stored unquantized"),  # before the meta-device loader: not read
        ("0.19.1", "stored unquantized"),
    ],
)
def test_online_fp8_is_refused_where_not_read_or_gone(cli, release, why):
    r = _fit(cli, KL_512K, "--engine-version", release)
    assert r.exit_code == 2 and why in r.output and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("release", ["0.23.0", "0.24.0", "0.25.0", "0.27.0", "0.28.0", "0.30.0"])
def test_online_fp8_layout_holds_to_030(cli, release):
    """0.24.0-0.30.x hold what 0.20.0-0.23.x hold (engines/vllm/online_quant.py ONLINE_FP8_SOURCES): the vllm 0.24.0
    wheel's Fp8PerTensorOnlineLinearMethod (online/fp8.py) and Fp8OnlineMoEMethod (fp8.py), 0.25.0-0.30.0's
    Fp8PerTensorOnlineLinearMethod / Fp8PerTensorOnlineMoEMethod: fp8 weights, one f32 scale a tensor / an expert;
    the embedding, LM head, norms and router as stored."""
    r = _fit(cli, KL_512K, "--engine-version", release)
    assert r.exit_code in (0, 1), r.output
    roles = json.loads(r.stdout)["weights_by_role"]
    before = json.loads(_fit(cli, KL_512K.replace(" --quantization fp8", ""), "--engine-version", release).stdout)
    for role in ("embed", "lm_head", "norm", "router"):
        assert roles[role] == before["weights_by_role"][role], role
    assert roles["expert"] == before["weights_by_role"]["expert"] // 2 + 4 * 256 * 3 * 26


def test_online_fp8_sources_cover_the_read_range():
    from k3plan.engines.vllm.online_quant import ONLINE_FP8_GONE_FROM, ONLINE_FP8_READ, ONLINE_FP8_SOURCES

    firsts = [first for first, _ in ONLINE_FP8_SOURCES]
    assert firsts == sorted(firsts) and firsts[0] == ONLINE_FP8_READ[0]
    assert ONLINE_FP8_READ[1] == ONLINE_FP8_GONE_FROM == (0, 31, 0)  # read up to vLLM's own refusal
    assert all("wheel" in src for _, src in ONLINE_FP8_SOURCES)


def test_online_fp8_default_reading_is_vllm_refusal(cli):
    r = _fit(cli, KL_512K)
    assert r.exit_code == 2 and "no longer supports online quantization" in r.output, r.output


def test_mla_profile_rows_by_release():
    """determine_chunked_prefill_workspace_size: the max_num_seqs x block_size floor to 0.27.x; rounded to whole
    blocks from 0.28.0 (align_mla_chunked_context_workspace_size)."""
    kw = dict(max_model_len=524_288, max_num_seqs=1024, block_size=3776)
    assert workspace_rows(release=(0, 20, 0), **kw) == 1024 * 3776
    assert workspace_rows(release=(0, 27, 0), **kw) == 1024 * 3776
    assert workspace_rows(release=(0, 28, 0), **kw) == 18 * 3776  # 65,536 rounded up to whole 3,776-token blocks
    # a plain MLA model at block 64: 64 x 1024 rows either way
    kw64 = dict(max_model_len=131_072, max_num_seqs=1024, block_size=64)
    assert workspace_rows(release=(0, 20, 0), **kw64) == workspace_rows(release=(0, 28, 0), **kw64) == 65_536


def test_mla_profile_allocation_is_the_runbook_59_gib():
    """The public Kimi-Linear log's CUDA-graph profiling OOM asks 59.00 GiB (tests/engines/cases/
    vllm-mirothinker-kimi-linear-h200-tp1-fp8-1m-graphs-oom.yaml): 1,024 x 3,776 rows x 32 heads x 256 x 2 B, at
    512K and at 1M alike."""
    for length in (524_288, 1_048_576):
        got = profile_mla_allocation(
            release=(0, 20, 0),
            max_model_len=length,
            max_num_seqs=1024,
            block_size=3776,
            local_heads=HEADS,
            qk_nope_head_dim=NOPE,
            v_head_dim=V,
            act_bytes=2,
        )
        assert got is not None and got[0] == 59 * GiB
    assert profile_mla_allocation(
        release=(0, 10, 2), max_model_len=1, max_num_seqs=1, block_size=16, local_heads=1, qk_nope_head_dim=1,
        v_head_dim=1, act_bytes=2,
    ) is None  # fmt: skip


def test_mla_profile_allocation_enters_the_activation(cli):
    """The 512K start: the profile's activation holds the 59.00 GiB in place of the budget's 10 GiB context term."""
    d = json.loads(_fit(cli, KL_512K, "--engine-version", "0.20.0").stdout)
    terms = d["temp"]["prefill_terms"]
    want = d["temp"]["prefill_bytes"] - terms["MLA up-projected K/V over the context"] + 59 * GiB
    assert d["engine"]["activation_bytes"] == max(want, d["temp"]["decode_bytes"])
    assert "profile run allocates 3,866,624 rows" in d["engine"]["sources"]["activation"]


def test_graph_profiling_asks_the_mla_tensor_again(cli):
    """With graphs on, 0.20.0's PIECEWISE warm-up allocates the 59.00 GiB again while the profile run's segment stays
    split by the minimal KV cache: weights + 2 x 59.00 GiB exceed the H200's 139.80 GiB (the runbook's 1M start died
    there); eager (the 512K working configuration) profiles no graphs and starts."""
    graphs = _fit(cli, KL_512K.replace(" --enforce-eager", ""), "--engine-version", "0.20.0")
    g = json.loads(graphs.stdout)["engine"]
    assert g["starts"] is False and "CUDA graph profiling" in g["message"], g["message"]
    assert "profile_cudagraph_memory" in g["raised_at"]
    eager = json.loads(_fit(cli, KL_512K, "--engine-version", "0.20.0").stdout)["engine"]
    assert eager["starts"] is True
