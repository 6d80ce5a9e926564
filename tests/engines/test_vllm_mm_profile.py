"""vLLM's multimodal profile for Kimi-K2.5 / K2.6's MoonViT (k3plan.engines.vllm.mm_profile): the dummy item's size
from the checkpoint's processor at 3000 x 3000, the items the encoder budget allows, and what stays live beside the
language model's dummy run, read in the vLLM 0.15.0, 0.18.0 and 0.20.0 wheels (PyPI)."""

from __future__ import annotations

import json
import subprocess
import sys

from k3plan.engines.vllm.mm_profile import MEDIA_PROC_CFG, dummy_item, kimi_k25_mm_profile

# models/bundled/kimi-k2.6/config.json: text_config.hidden_size, vision_config.vt_hidden_size
TEXT, WIDTH = 7168, 1152


def _profile(release=(0, 18, 0), *, arch="kimi_k25", mnbt=8192, ctx=8192, seqs=1):
    return kimi_k25_mm_profile(
        release=release,
        architecture=arch,
        text_hidden=TEXT,
        vision_width=WIDTH,
        max_num_batched_tokens=mnbt,
        max_model_len=ctx,
        max_num_seqs=seqs,
    )


def test_the_dummy_image_at_3000_pixels():
    """navit_resize_image(3000, 3000, 14, 2, 16384, 512): scale sqrt(16384 / 214^2) = 128 / 214, each side int(3000 x
    scale) = 1,794 px, padded to 1,820 (a multiple of 28): 65 x 65 = 4,225 tokens, 130 x 130 = 16,900 patches. The video
    chunk (4 frames at 4,096 patches each): 897 px padded to 924, 33 x 33 = 1,089 tokens, fewer: the image is used."""
    assert dummy_item() == (4225, 16900)
    # were each frame allowed the image's 16,384 patches the chunk would tie at 4,225 tokens and win, 4 frames of patches
    same = {**MEDIA_PROC_CFG, "in_patch_limit_each_frame": MEDIA_PROC_CFG["in_patch_limit"]}
    assert dummy_item(same) == (4225, 4 * 16900)


def test_one_item_at_8192_batched_tokens_and_what_stays_live():
    """budget max(8,192, 4,225) // 4,225 = 1 item: its projector output 4,225 x 7,168 bf16 and its 16,900 x 3 x 14 x 14
    bf16 pixel values stay live through the dummy run; the encoder's rotary step holds 30 B x 1,152 a patch."""
    got = _profile()
    assert got is not None
    assert (got.items, got.tokens, got.patches) == (1, 4225, 16900)
    assert got.live == 4225 * TEXT * 2 + 16900 * 3 * 14 * 14 * 2 == 80_444_000
    assert got.encoder_peak == 16900 * 3 * 14 * 14 * 2 + 16900 * 30 * WIDTH


def test_items_follow_the_budget_and_the_requests():
    """16,384 batched tokens: 3 items (16,384 // 4,225); a 4,096-token budget still profiles one (the budget is raised
    to the item's 4,225); max_num_seqs 1 at a context under one item's tokens caps the items at 1 a prompt."""
    assert _profile(mnbt=16384, seqs=64).items == 3
    assert _profile(mnbt=4096).items == 1
    assert _profile(mnbt=16384, ctx=4096, seqs=1).items == 1
    assert _profile(mnbt=16384, ctx=8192, seqs=2).items == 2


def test_only_the_releases_and_model_read():
    assert _profile((0, 15, 0)) is not None and _profile((0, 20, 0)) is not None
    assert _profile((0, 14, 1)) is None  # before Kimi-K2.5's model file
    assert _profile((0, 21, 0)) is None  # not read
    assert _profile(None) is None
    assert _profile(arch="kimi_k3") is None


def _engine(serve: str, version: str = "0.18.0") -> dict:
    cmd = [sys.executable, "-m", "k3plan", "fit", "-H", "nvidia-h200", "-t", "8", "--engine-version", version]
    out = subprocess.run([*cmd, "--serve", serve, "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["engine"]


def test_fit_adds_the_live_bytes_unless_the_tower_is_off_or_skipped():
    """The kamra H200 TP8 command (tests/engines/cases/vllm-kamra-kimi-k2.5-h200-tp8-8k): the activation carries the
    80,444,000 B; --language-model-only, --skip-mm-profiling and --limit-mm-per-prompt 0 take them out."""
    base = (
        "vllm serve moonshotai/Kimi-K2.5 --max-model-len 8192 --trust-remote-code --tensor-parallel-size 8 "
        "--gpu-memory-utilization 0.92 --mm-encoder-tp-mode data"
    )
    on = _engine(base)
    assert "multimodal profile for Kimi-K2.5" in json.dumps(on)
    skipped = _engine(base + " --skip-mm-profiling")
    assert on["activation_bytes"] - skipped["activation_bytes"] == 80_444_000
    assert "multimodal profile" not in json.dumps(skipped)
    lm_only = _engine(base + " --language-model-only")
    assert "multimodal profile" not in json.dumps(lm_only)
