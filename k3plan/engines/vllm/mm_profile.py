"""What vLLM's profile run holds for Kimi-K2.5 / K2.6's MoonViT (KimiK25ForConditionalGeneration) beside the language
model's dummy batch, read in the 0.15.0, 0.18.0 and 0.20.0 wheels (PyPI; the dummy input's size also in 0.15.1, 0.16.0,
0.17.0 and 0.17.1).

v1/worker/gpu_model_runner.py ``GPUModelRunner.profile_run``: for a multimodal model, unless
``MultiModalConfig.skip_mm_profiling`` (--skip-mm-profiling) or the encoder budget is 0 (every modality limited to 0),
it builds ``max_mm_items_per_batch`` dummy items of the modality with the most tokens (``_get_mm_dummy_batch``: one
dummy item repeated, grouped onto the device), runs ``model.embed_multimodal`` on them and stores each output in
``self.encoder_cache``; then ``_dummy_run(max_num_tokens, is_profile=True)`` and the sampler warm-up, and only after
them ``self.encoder_cache.clear()``. ``batched_dummy_mm_inputs`` is a local of profile_run, so the dummy pixel values
stay on the device too. The encoder's own temporaries are freed before the language model runs: the profile's torch
peak is the larger of the encoder's peak and the language model's peak plus what stays live (the encoder outputs and
the dummy inputs).

The items (vllm/multimodal/encoder_budget.py MultiModalBudget 0.18.0-0.20.0, vllm/v1/worker/utils.py 0.15.0;
v1/core/encoder_cache_manager.py compute_mm_encoder_budget; config/scheduler.py: max_num_encoder_input_tokens and
encoder_cache_size = max_num_batched_tokens): budget = max(max_num_batched_tokens, T) for T tokens an item;
items = max(1, min(budget // T, max_num_seqs x max(1, min(limit, max_model_len // T)))), the limit 999 where the
command sets none (config/multimodal.py), chunked prefill on (V1's default).

The dummy item (model_executor/models/kimi_k25.py KimiK25DummyInputsBuilder.get_dummy_mm_items, MaxImageTokenMeta
3000 x 3000): one 3000 x 3000 image or one video chunk of ``temporal_merge_kernel_size`` 3000 x 3000 frames,
whichever the checkpoint's processor gives more tokens (the chunk on a tie). The processor is the checkpoint's own
(kimi_k25_vision_processing.py KimiK25VisionProcessor.get_resize_config, media_utils.py navit_resize_image /
navit_resize_video): scale = min(1, sqrt(limit / ((w // p) (h // p))), side x p / w, side x p / h), each side
int(side x scale), padded up to a multiple of merge x p; tokens = (padded h / (merge p)) x (padded w / (merge p)) a
frame, a video chunk's frames pooled into one frame's tokens (kimi_k25_vit.py tpool_patch_merger); patches =
frames x (padded h / p) x (padded w / p). The processor's floats are cast to the model dtype
(multimodal/processing/context.py InputProcessingContext._postprocess_output), bf16 here.

Each output is the projector's (kimi_k25_vit.py KimiK25MultiModalProjector, linear_2 to mm_hidden_size, set to the
text hidden size by transformers_utils/configs/kimi_k25.py KimiK25Config), T x text hidden in the model dtype, on
every rank (replicated projector; under --mm-encoder-tp-mode data the tower's outputs are all-gathered first:
model_executor/models/vision.py run_dp_sharded_mrope_vision_model).

The encoder's own peak, bounded above here: at a block's rotary step (kimi_k25_vit.py MoonViTEncoderLayer.forward ->
attention_qkvpacked -> apply_rope) the residual, norm0's output and the fused wqkv output (bf16: 2 + 2 + 6 bytes x
width a patch), q and k as float32 copies and their complex products (4 x 4 bytes x width) and their bf16 results
(2 x 2 bytes x width) are live: 30 bytes x width a patch (the rotary table, complex64 head_dim / 2 a patch, under 1% of
it, left out), every item's patches on one rank (an upper bound: under data mode the items are spread over the TP ranks, under TP
the heads are split), + the dummy inputs.

The checkpoint's media_proc_cfg (preprocessor_config.json of moonshotai/Kimi-K2.5; K2.6's is the same file): not in
k3plan's bundle; its values here as public re-implementations of that processor carry them (e.g. RTP-LLM's and
prime-rl's Kimi-K2.5 processor defaults: in_patch_limit 16384, patch_limit_on_one_side 512, in_patch_limit_each_frame
4096, temporal_merge_kernel_size 4, patch 14, merge 2). Only the in_patch_limit values decide the size at 3000 x 3000.

Not priced (None): other releases (not read), other multimodal architectures, --language-model-only, --limit-mm-per-
prompt 0 for the tower's modalities, --skip-mm-profiling (app/fit.py decides those).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from k3plan.engines.release import Release, release_text

READ: tuple[Release, Release] = ((0, 15, 0), (0, 20, 0))  # [first, last] read: the profile run and the dummy item
ARCHITECTURES = ("kimi_k25",)  # model_type; KimiK25ForConditionalGeneration
DUMMY_SIDE = 3000  # kimi_k25.py MaxImageTokenMeta width / height
MODEL_DTYPE_BYTES = 2  # bf16: the checkpoint's dtype, the processor's floats cast to it
DEFAULT_LIMIT = 999  # config/multimodal.py MultiModalConfig.get_limit_per_prompt, a modality the command sets none for
# the checkpoint's preprocessor_config.json media_proc_cfg (moonshotai/Kimi-K2.5; see the module's docstring)
MEDIA_PROC_CFG = {
    "patch_size": 14,
    "merge_kernel_size": 2,
    "in_patch_limit": 16384,
    "patch_limit_on_one_side": 512,
    "in_patch_limit_each_frame": 4096,
    "temporal_merge_kernel_size": 4,
}
SOURCE = (
    "vllm 0.15.0 / 0.18.0 / 0.20.0 wheels (PyPI): v1/worker/gpu_model_runner.py GPUModelRunner.profile_run (the "
    "encoder cache and the dummy inputs live through _dummy_run and the sampler warm-up, cleared after), "
    "_get_mm_dummy_batch; multimodal/encoder_budget.py MultiModalBudget (v1/worker/utils.py in 0.15.0); "
    "model_executor/models/kimi_k25.py KimiK25DummyInputsBuilder (3000 x 3000), kimi_k25_vit.py"
)


class MmProfile(NamedTuple):
    """The dummy batch and what it holds a GPU, bytes."""

    items: int
    tokens: int  # an item's
    patches: int  # an item's
    live: int  # encoder outputs + dummy inputs, live through the language model's dummy run and the sampler
    encoder_peak: int  # the encoder's own peak, an upper bound
    source: str


def _resize(side: int, limit: int, *, patch: int, merge: int, one_side: int) -> tuple[int, int]:
    """(tokens, patches) of one square frame of ``side`` pixels (media_utils.py navit_resize_image)."""
    cells = max(1.0, side // patch) ** 2
    scale = min(1.0, math.sqrt(limit / cells), one_side * patch / side)
    new = min(max(1, int(side * scale)), one_side * patch)
    factor = merge * patch
    padded = new + (factor - new % factor) % factor
    return (padded // factor) ** 2, (padded // patch) ** 2


def dummy_item(cfg: dict[str, int] = MEDIA_PROC_CFG) -> tuple[int, int]:
    """(tokens, patches) of the dummy item Kimi-K2.5's builder profiles with: the image or the video chunk with more
    tokens (the chunk on a tie)."""
    kw = dict(patch=cfg["patch_size"], merge=cfg["merge_kernel_size"], one_side=cfg["patch_limit_on_one_side"])
    image = _resize(DUMMY_SIDE, cfg["in_patch_limit"], **kw)
    frame = _resize(DUMMY_SIDE, cfg["in_patch_limit_each_frame"] or cfg["in_patch_limit"], **kw)
    frames = cfg["temporal_merge_kernel_size"]
    chunk = (frame[0], frame[1] * frames)  # the chunk's frames pooled into one frame's tokens
    return chunk if chunk[0] >= image[0] else image


def kimi_k25_mm_profile(
    *,
    release: Release | None,
    architecture: str,
    text_hidden: int,
    vision_width: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    max_num_seqs: int,
) -> MmProfile | None:
    """The profile run's multimodal dummy batch for a GPU (module docstring); None where not read."""
    if architecture not in ARCHITECTURES or release is None or not (READ[0] <= release <= READ[1]):
        return None
    if text_hidden <= 0 or vision_width <= 0 or max_num_batched_tokens <= 0:
        return None
    tokens, patches = dummy_item()
    budget = max(max_num_batched_tokens, tokens)
    per_prompt = max(1, min(DEFAULT_LIMIT, max_model_len // tokens))
    items = max(1, min(budget // tokens, max(1, max_num_seqs) * per_prompt))
    p = MEDIA_PROC_CFG["patch_size"]
    inputs = items * patches * 3 * p * p * MODEL_DTYPE_BYTES
    outputs = items * tokens * text_hidden * MODEL_DTYPE_BYTES
    encoder_peak = inputs + items * patches * 30 * vision_width
    return MmProfile(
        items=items,
        tokens=tokens,
        patches=patches,
        live=inputs + outputs,
        encoder_peak=encoder_peak,
        source=(
            f"vLLM {release_text(release)}'s multimodal profile for Kimi-K2.5's MoonViT: {items} dummy item(s) of "
            f"{tokens:,} tokens / {patches:,} patches (budget max({max_num_batched_tokens:,}, {tokens:,}) tokens), "
            f"their encoder outputs ({outputs:,} B, {tokens:,} x {text_hidden:,} bf16 an item) and dummy pixel values "
            f"({inputs:,} B, bf16) live through the language model's dummy run and the sampler warm-up; the encoder's "
            f"own peak, at most {encoder_peak:,} B, comes before them: {SOURCE}"
        ),
    )
