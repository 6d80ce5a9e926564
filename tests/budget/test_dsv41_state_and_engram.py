"""DeepSeek-V4.1-Flash's state and Engram tier, and fit's answer for it on v7x, B200, H200.

Golden figures from public sources (not from the code under test):

- 899ms/ai-infra-book calculations/results/v41-flash-n8192-b1.md and research/deepseek-v41-flash/README.md
  (@7d095c36ee957bfa27890da881b1820c9a053c6b): CSA2's global KV (main + index) 890 B a token = (3/2 + 1) x
  (288 + 68); 7,290,880 B at N = 8,192, B = 1; the window 40 x min(N, 128) x 528 B (FlashMLA README @07a10898:
  SWA 528 B, main 288 B).
- Unjuno/DeepSeeker-V4.1 docs (engram access analysis): Engram's table payload 12,672 B a token
  (2 layers x 24 rows x 264 B); SGLang's docs: the tables "about 189 GiB together".
- vLLM vllm/config/engram.py EngramConfig.cpu_offload default True; SGLang's --engram-config placement gpu by
  default, rows split across the TP group.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.models import load_model
from k3plan.step import dsv4_cache, dsv4_ops


@pytest.fixture(scope="module")
def spec():
    return load_model("deepseek-v4.1-flash").spec


def test_csa2_kv_bytes_a_token_and_at_8k(spec):
    assert dsv4_cache.kv_bytes_per_token(spec) == 890
    assert dsv4_cache.classical_bytes(spec, 8192) == 7_290_880
    assert dsv4_cache.v41_main_entry_bytes(spec.dsv4) == 288
    assert dsv4_cache.v41_index_bytes(spec.dsv4) == 68
    # odd lengths: each source floors its own blocks (3 ratio-2 sources, 1 ratio-1)
    assert dsv4_cache.classical_bytes(spec, 8193) - dsv4_cache.classical_bytes(spec, 8192) == 356


def test_window_state(spec):
    assert dsv4_cache.state_bytes(spec) == 40 * 128 * 528


def test_decode_read_reads_sources_not_layers(spec):
    r = dsv4_cache.decode_read(spec, 131_072)
    # 38 layers with a ratio each read top-512 entries of their source and their window; 2 the window alone
    assert r.csa_bytes == 38 * (512 * 288 + 128 * 528)
    assert r.window_bytes == 2 * 128 * 528
    # first-round indexers on the 4 sources score every key; the 4 later ones the 2,048 x 8 candidates
    assert r.indexer_bytes == (3 * 65_536 + 131_072 + 4 * 16_384) * 68


def test_decode_and_prefill_ops_build(spec):
    ops = dsv4_ops.decode_ops(spec, seqs=4, context=65_536, tp=8)
    names = {o.name for o in ops}
    assert {"dsv4.csa2_attention_r2", "dsv4.csa2_attention_r1", "dsv4.csa2_indexer_candidates"} <= names
    assert dsv4_ops.prefill_ops(spec, chunk=8192, context=65_536, tp=8)
    c, s = dsv4_ops.attention_flops_per_token(spec, 1_000_000)
    assert s > 0 and c > 0


def test_engram_tier_per_engine(spec):
    inv = load_model("deepseek-v4.1-flash").inventory
    assert dsv4_cache.engram_bytes_per_token(spec) == 12_672
    host = dsv4_cache.engram_tier(spec, inv, "vllm", tp=8, devices_per_host=8, hosts=1)
    hbm = dsv4_cache.engram_tier(spec, inv, "sglang", tp=8, devices_per_host=8, hosts=1)
    assert host is not None and hbm is not None
    assert host.placement == "host" and hbm.placement == "hbm"
    assert host.table_bytes == (384_006_168 + 384_016_682) * 264
    assert round(host.table_bytes / 2**30) == 189 and host.host_bytes_per_host == host.table_bytes
    assert host.hbm_bytes_per_device == host.projection_bytes == 315_043_840
    assert hbm.hbm_bytes_per_device == hbm.projection_bytes + -(-hbm.table_bytes // 8)


@pytest.mark.parametrize(
    "args",
    [["-H", "tpu-v7x", "-t", "2x2x2"], ["-H", "nvidia-b200", "-t", "8"], ["-H", "nvidia-h200", "-t", "8"]],
    ids=["v7x", "b200", "h200"],
)
def test_fit_answers_on_v7x_b200_h200(args):
    out = CliRunner().invoke(app, ["fit", "-m", "deepseek-v4.1-flash", *args])
    # issue 50: no calibration or temp model speaks for V4.1's temporaries here: FITS IF (exit 3), never plain FITS
    assert out.exit_code == 3 and out.output.startswith("FITS IF temporaries <="), out.output
    text = " ".join(out.output.replace("│", " ").split())  # the table's words, whatever line they wrap to
    assert "Engram tables 202,758,032,400 B in host memory" in text
    assert "12,672 B of rows" in text
    if args[1] == "tpu-v7x":  # the release's formats a token
        assert "890.00 B a token" in text
    else:  # vLLM's CUDA planner: its records of the GPU's family (528 B on SM100), its blocks (step/dsv4_cache.engine_charge)
        record = 528 if args[1] == "nvidia-b200" else 584
        assert "engine: vllm's own charge" in text and f"KV-source records of {record} B" in text
    # the projections are Engram's, counted with the weights, not a speculative-decoding draft's
    js = CliRunner().invoke(app, ["fit", "-m", "deepseek-v4.1-flash", *args, "--json"])
    weights = json.loads(js.output)["provenance"]["weights"]
    assert weights.endswith("; + Engram 315,043,840 B a device (its projections; the tables in host memory)")
    assert "draft" not in weights


def test_fit_advises_offloading_engram_before_chips():
    out = CliRunner().invoke(app, ["fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-h200", "-t", "2", "-s", "sglang"])
    assert out.exit_code == 1
    text = " ".join(out.output.split())
    assert "Engram tables 202,758,032,400 B in HBM" in text
    assert "advice: offload Engram before buying chips" in text
    # the switch SGLang's code reads (its parser has no --engram-config: engines/sglang/server_flags.py)
    advice = text.split("advice: offload Engram before buying chips")[1].split("warning:")[0].split("note:")[0]
    assert "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1" in advice and "--engram-config" not in advice


def test_csa2_terms_share_vllm_s_v41_slot_plan(spec):
    """vllm-project/vllm-ascend vllm_ascend/core/deepseek_v41.py @0dcdd80d plan_cache_slots refuses any other plan:
    'KV source layers 2, 8, 14, 20', 'state source layers 2, 8, 14', 'exactly 40 ordered SWA resources'
    (swa[slot_idx::len(full)] on each slot) and 'exactly three ordered draft layers'."""
    d = spec.dsv4
    slots = dsv4_cache.csa2_engine_slots(d, draft_layers=spec.mtp_layers)  # num_nextn_predict_layers: 3 blocks
    assert [s.source for s in slots] == [2, 8, 14, 20]
    assert [s.state for s in slots] == [2, 8, 14, None]
    assert sorted(w for s in slots for w in s.windows) == list(range(40))
    assert slots[1].windows == tuple(range(1, 40, 4))
    assert [s.draft for s in slots] == [0, 1, 2, None]
    assert dsv4_cache.V41_ENGINE_LAYOUT.commit.startswith("0dcdd80d")
