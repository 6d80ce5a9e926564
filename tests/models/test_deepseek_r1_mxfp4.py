"""amd/DeepSeek-R1-0528-MXFP4-Preview and amd/DeepSeek-R1-0528-MXFP4 (AMD Quark OCP MXFP4): the bundled config against
the public figures, and the InferenceX MI355X commands that serve them.

Golden figures, typed from public sources (never from the code under test; models/bundled/deepseek-r1-0528-mxfp4/
provenance.json lists them, each with where it was read):

- a public inventory of a MI355X cluster lists models/DeepSeek-R1-0528-MXFP4-Preview at "377 GB", the unit and the
  command not stated (a du-style figure; the same table's amd/Kimi-K2.5-MXFP4 "523 GB" reads as GiB): within 1% of the
  bundle with its BF16 MTP layer in GiB, or without it in GB -- and of no bundle with MXFP4 attention or an MXFP4 MTP
  layer under either reading. No index total_size or shard listing of either checkpoint was found.
- the model cards' quantization: w_mxfp4_a_mxfp4, group_size 32, exclude_layers "*self_attn* *mlp.gate.* *lm_head".
- the tensors SGLang creates for it (sglang 0.5.12 / 0.5.15 wheels, quark/schemes/quark_w4a4_mxfp4.py): weight uint8
  [out, in/2], weight_scale uint8 [out, in/32].
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.serve import model_of, parse_serve
from k3plan.errors import K3PlanError
from k3plan.models import load_model
from k3plan.models.formats import get_format
from k3plan.models.loader import BUNDLED_DIR
from k3plan.units import GiB

NAME = "deepseek-r1-0528-mxfp4"
LISTED_SIZE = 377  # the cluster inventory's "377 GB", unit not stated
# InferenceX: benchmarks/single_node/fixed_seq_len/dsr1_fp4_mi355x.sh @843c6254 with configs/amd-master.yaml
# dsr1-fp4-mi355x-sglang search-space[0] / [1] (tests/engines/public_commands.yaml)
INFERENCEX = (
    "python3 -m sglang.launch_server --model-path=amd/DeepSeek-R1-0528-MXFP4-Preview --trust-remote-code "
    "--host=0.0.0.0 --port=8888 --tensor-parallel-size={tp} --chunked-prefill-size={chunk} --mem-fraction-static=0.8 "
    "--disable-radix-cache --num-continuous-decode-steps=4 --max-prefill-tokens={chunk} --cuda-graph-max-bs=128 "
    "--attention-backend aiter --kv-cache-dtype fp8_e4m3"
)
# dsr1_fp4_mi355x_mtp.sh @843c6254 with dsr1-fp4-mi355x-sglang-mtp search-space[0] (tp 8, ep 1, conc 64)
INFERENCEX_MTP = (
    "python3 -m sglang.launch_server --model-path=amd/DeepSeek-R1-0528-MXFP4 --trust-remote-code --host=0.0.0.0 "
    "--port=8888 --tensor-parallel-size=8 --ep-size 1 --chunked-prefill-size=32768 --mem-fraction-static=0.8 "
    "--disable-radix-cache --num-continuous-decode-steps=4 --max-prefill-tokens=32768 --cuda-graph-max-bs=128 "
    "--attention-backend aiter --kv-cache-dtype fp8_e4m3 --speculative-algorithm EAGLE --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
)
SGLANG_TP8 = "python3 -m sglang.launch_server --model-path amd/DeepSeek-R1-0528-MXFP4-Preview --tp 8"


@pytest.fixture(scope="module")
def model():
    return load_model(NAME)


def _totals(inv) -> tuple[int, int]:
    """(bytes with the MTP layer, bytes without it)."""
    total = sum(t.nbytes for t in inv.tensors)
    return total, total - sum(t.nbytes for t in inv.of_kind("mtp"))


def _near(nbytes: int) -> bool:
    """Within 1% of the listing's 377 read as GiB or as GB."""
    return any(abs(nbytes / unit - LISTED_SIZE) <= 0.01 * LISTED_SIZE for unit in (GiB, 10**9))


def test_the_size_listing_holds_attention_bf16_and_no_mxfp4_mtp(tmp_path, model):
    """The bundle is within 1% of the listing under one of its readings (with the BF16 MTP layer in GiB: 375.37; without
    it in GB: 376.13); the card's exclusions with attention MXFP4, or with the MTP layer MXFP4, are not under either."""
    with_mtp, without_mtp = _totals(model.inventory)
    assert _near(with_mtp) and _near(without_mtp)
    raw = json.loads((BUNDLED_DIR / NAME / "config.json").read_text())
    base = raw["quantization_config"]["exclude"]
    for i, drop in enumerate(("*self_attn*", "model.layers.61*")):
        raw["quantization_config"]["exclude"] = [p for p in base if p != drop]
        path = tmp_path / f"split{i}.json"
        path.write_text(json.dumps(raw))
        other_with, other_without = _totals(load_model(str(path)).inventory)
        assert not _near(other_with), drop
        if drop == "*self_attn*":
            assert not _near(other_without)


def test_one_expert_in_mxfp4(model):
    """A routed expert's gate_proj [2048, 7168]: U8 [2048, 3584] + a U8 E8M0 scale [2048, 224] under Quark's names."""
    t = model.inventory.get("model.layers.3.mlp.experts.{e}.gate_proj")
    assert t.fmt == "quark_mxfp4" and t.shape == (256, 2048, 7168)
    one = 2048 * 3584 + 2048 * 224
    assert get_format("quark_mxfp4").nbytes((2048, 7168)) == one == 7_798_784
    assert t.nbytes == 256 * one
    parts = [(n, d, s) for n, d, s in t.checkpoint_tensors() if n.startswith("model.layers.3.mlp.experts.0.")]
    assert parts == [
        ("model.layers.3.mlp.experts.0.gate_proj.weight", "U8", (2048, 3584)),
        ("model.layers.3.mlp.experts.0.gate_proj.weight_scale", "U8", (2048, 224)),
    ]


def test_what_stays_bf16(model):
    """The cards' exclude_layers: every attention Linear, the router and lm_head BF16; the dense MLPs, the shared and
    the routed experts MXFP4; the MTP layer as the bundle lists it (BF16, its format not settled)."""
    fmt = {t.name.removesuffix(".weight"): t.fmt for t in model.inventory.tensors}
    for p in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
        assert fmt[f"model.layers.7.self_attn.{p}"] == "bf16", p
    assert fmt["model.layers.0.mlp.up_proj"] == fmt["model.layers.7.mlp.shared_experts.down_proj"] == "quark_mxfp4"
    assert fmt["lm_head"] == fmt["model.layers.7.mlp.gate"] == "bf16"
    assert {t.fmt for t in model.inventory.of_kind("mtp")} <= {"bf16", "f32"}


@pytest.mark.parametrize(
    "key",
    [
        {"layer_quant_config": {"*.mlp.*": {"weight": {"dtype": "fp8_e4m3"}}}},
        {"global_quant_config": {"weight": {"dtype": "int4", "qscheme": "per_group", "group_size": 32}}},
    ],
)
def test_a_quark_scheme_not_modelled_is_refused(tmp_path, key):
    raw = json.loads((BUNDLED_DIR / NAME / "config.json").read_text())
    raw["quantization_config"].update(key)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(K3PlanError, match="quantization_config"):
        load_model(str(path))


@pytest.mark.parametrize(
    "repo",
    ["amd/DeepSeek-R1-0528-MXFP4-Preview", "amd/deepseek-r1-0528-mxfp4-preview", "amd/DeepSeek-R1-0528-MXFP4"],
)
def test_the_ids_resolve_to_the_bundle(repo):
    assert model_of(repo) == NAME


def test_quark_read_for_the_quark_checkpoint_only():
    q = parse_serve(SGLANG_TP8 + " --quantization quark", platform="gpu", device_gib=288.0, device_name="amd-mi355x")
    assert q.model == NAME
    with pytest.raises(K3PlanError, match="load as quark only"):
        parse_serve(SGLANG_TP8 + " --quantization fp8", platform="gpu", device_gib=288.0, device_name="amd-mi355x")
    other = SGLANG_TP8.replace("amd/DeepSeek-R1-0528-MXFP4-Preview", "deepseek-ai/DeepSeek-R1-0528")
    with pytest.raises(K3PlanError, match="not a Quark checkpoint"):
        parse_serve(other + " --quantization quark", platform="gpu", device_gib=288.0, device_name="amd-mi355x")


@pytest.mark.parametrize("hardware", ["amd-mi300x", "amd-mi325x", "nvidia-b200"])
def test_a_gpu_without_amd_fp4_is_refused(hardware):
    with pytest.raises(K3PlanError, match="no AMD FP4 units"):
        parse_serve(SGLANG_TP8, platform="gpu", device_gib=180.0, device_name=hardware)


def test_vllm_is_refused():
    with pytest.raises(
        K3PlanError,
        match="under vllm: what the engine holds after loading it was not read; k3plan prices it under dp-attention, sglang",
    ):
        parse_serve(
            "vllm serve amd/DeepSeek-R1-0528-MXFP4 -tp 8", platform="gpu", device_gib=288.0, device_name="amd-mi355x"
        )


@pytest.mark.parametrize("version", [None, "0.5.12", "0.5.15"])
def test_the_mtp_draft_is_refused(version):
    """The nightly's image (lmsysorg/sglang:v0.5.12-rocm700-mi35x) and the releases after it: the draft is refused.
    Without a release the command is read as 0.5.23 (engines/sglang/releases.py NEWEST_RELEASE), whose parser refuses
    the nightly's --cuda-graph-max-bs as ambiguous before any flag is priced (sglang 0.5.23 wheel: no such option,
    arg_groups/fields/exec_.py has -decode and -prefill), so it is read there in 0.5.23's spelling."""
    command = INFERENCEX_MTP
    if version is None:
        verbatim = CliRunner().invoke(app, ["fit", "-H", "amd-mi355x", "-t", "8", "--serve", command])
        assert verbatim.exit_code == 2 and "ambiguous option: --cuda-graph-max-bs" in verbatim.output
        assert "read as sglang 0.5.23" in verbatim.output
        command = command.replace("--cuda-graph-max-bs=", "--cuda-graph-max-bs-decode=")
    args = ["fit", "-H", "amd-mi355x", "-t", "8", "--serve", command]
    out = CliRunner().invoke(app, args + (["--engine-version", version] if version else []))
    assert out.exit_code == 2
    assert "speculative" in out.output


@pytest.mark.parametrize(("tp", "chunk"), [(4, 196608), (8, 32768)])
def test_the_inferencex_mi355x_commands_are_priced(model, tp, chunk):
    cmd = INFERENCEX.format(tp=tp, chunk=chunk)
    out = CliRunner().invoke(
        app, ["fit", "-H", "amd-mi355x", "-t", str(tp), "--serve", cmd, "--engine-version", "0.5.12", "--json"]
    )
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["model"]["name"] == NAME and d["fits"]
    w = d["per_device"]["weights_bytes"]
    rep = d["per_device"]["replicated_weights_bytes"]
    sharded = model.inventory.checkpoint_bytes - rep
    assert sharded // tp <= w - rep  # a TP share of the rest, plus SGLang's absorbed MLA copies
    assert any("w_kc / w_vc" in c for c in d["engine"]["serve"]["caveats"])
