"""validate on a deepseek_v3-family model (DeepSeek-V3, Kimi K2) scaled down: the abstract MoE takes the
family's names (mlp.gate, mlp.experts.{e}.gate_proj/down_proj/up_proj) and its FP8 block experts, whose
scale arrays sort before the weights in a pytree. Before: a KeyError traceback ('block_sparse_moe.gate.weight'),
then a shape error from reading the scale's width as the latent's; the notes named K3's MXFP4 and AttnRes."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.models.loader import BUNDLED_DIR


def _tiny_deepseek(tmp_path) -> str:
    raw = json.loads((BUNDLED_DIR / "deepseek-v3" / "config.json").read_text())
    raw.update(
        hidden_size=256,
        num_hidden_layers=2,
        first_k_dense_replace=1,
        num_attention_heads=8,
        num_key_value_heads=8,
        n_routed_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        intermediate_size=512,
        vocab_size=1024,
        q_lora_rank=64,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=32,
        n_group=1,
        topk_group=1,
        num_nextn_predict_layers=0,
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_validate_compiles_a_deepseek_family_model(tmp_path):
    r = CliRunner().invoke(
        app,
        [
            "validate",
            "--model",
            _tiny_deepseek(tmp_path),
            "-t",
            "2x2x1",
            "--tp",
            "8",
            "--stage",
            "decode",
            "--context",
            "128",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    (res,) = out["results"]
    assert res["stage"] == "decode" and res["unexplained_bytes"] == 0
    # every collective of the compiled step is one the op list has: the FP8 block scales' expansion once
    # left the 64-wide shared expert's [128, 256] repeat sharded before its slice to [64, 256], and XLA
    # resharded the slice (2 collective-permutes a tensor, 6 a step: unexplained)
    coll = res["collectives"]
    assert coll["ok"] and all(r["unexplained_calls"] == 0 for r in coll["rows"]), coll["findings"]
    assert "collective-permute" not in {r["kind"] for r in coll["rows"]}
    notes = " | ".join(out["notes"])
    assert "routed experts: fp8_block dequantized" in notes
    assert "MXFP4" not in notes and "AttnRes" not in notes and "NoPE" not in notes
    assert "grouped top-k routing as one group" in notes


def test_k3_notes_still_name_mxfp4_and_attnres(tiny_setup):
    from k3plan.validate.run import model_notes

    notes = " | ".join(model_notes(tiny_setup))
    assert "routed experts: MXFP4" in notes and "dequantized" in notes  # MXFP4_F32SCALE on torchtpu-vllm
    assert "AttnRes simplified" in notes and "MLA NoPE" in notes


def test_fp8_block_scales_equal_the_repeat_and_slice():
    """The scale expansion read at the weight's indices equals the blocks repeated 128 x 128 and cut to
    the weight (out and in not whole blocks, with a leading expert dim)."""
    import jax.numpy as jnp
    import numpy as np

    from k3plan.validate.quant import fp8_block_scales

    scale = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2) + 0.25  # [experts, ceil(300/128), ceil(200/128)]
    want = np.repeat(np.repeat(scale, 128, axis=-2), 128, axis=-1)[..., :300, :200]
    assert np.array_equal(np.asarray(fp8_block_scales(jnp.asarray(scale), (2, 300, 200))), want)


def test_validate_compiles_a_kimi_k26_shaped_model(tmp_path):
    """Kimi-K2.6's layout scaled down: text_config under KimiK25ForConditionalGeneration, INT4 group-32 experts
    (int32 words + bf16 scales, dequantized in the forward), the vision tower counted apart and not compiled."""
    raw = json.loads((BUNDLED_DIR / "kimi-k2.6" / "config.json").read_text())
    raw["text_config"].update(
        hidden_size=256,
        num_hidden_layers=2,
        first_k_dense_replace=1,
        num_attention_heads=8,
        num_key_value_heads=8,
        n_routed_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        intermediate_size=512,
        vocab_size=1024,
        q_lora_rank=64,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=32,
    )
    (tmp_path / "config.json").write_text(json.dumps(raw))
    r = CliRunner().invoke(
        app,
        [
            "validate",
            "--model",
            str(tmp_path / "config.json"),
            "-t",
            "2x2x1",
            "--tp",
            "8",
            "--stage",
            "decode",
            "--context",
            "128",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)["results"]
    assert res["stage"] == "decode" and res["unexplained_bytes"] == 0
