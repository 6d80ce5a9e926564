"""--flashinfer-mxfp4-moe-precision, as SGLang reads it (engines/sglang/serve.py fi_mxfp4_precision, server_flags.py
CHOICES): "fp8" is a choice from 0.5.19 (sglang 0.5.19 wheel, server_args.py ServerArgs.flashinfer_mxfp4_moe_precision:
Literal["default", "bf16", "fp8"]; 0.5.18: ["default", "bf16"]); on SM 90 it takes FlashInfer's Humming W4A8 path,
whose weights keep the W4A16 path's interleaved shapes (flashinfer-python 0.7.2.post1 wheel, fused_moe/prepare.py
preprocess_moe_weights_for_sm90_mixed_gemm_humming) beside FP32 residual scales of a few KiB: listed as ignored, the
pricing that of the command without it. Elsewhere it stays refused."""

from __future__ import annotations

import pytest

from k3plan.engines.release import parse_release
from k3plan.engines.serve import parse_serve
from k3plan.errors import K3PlanError

FLASH = (
    "sglang serve --trust-remote-code --model-path deepseek-ai/DeepSeek-V4-Flash-0731 --tp 4 "
    "--moe-runner-backend flashinfer_mxfp4 --speculative-algorithm DSPARK"
)
FLAG = "--flashinfer-mxfp4-moe-precision"


def _read(cmd: str, release: str, device: str):
    return parse_serve(cmd, platform="gpu", release=parse_release(release), device_name=device)


def test_fp8_on_hopper_is_read_and_priced_as_without_it():
    plain = _read(FLASH, "0.5.19", "nvidia-h200")
    given = _read(f"{FLASH} {FLAG} fp8", "0.5.19", "nvidia-h200")
    assert FLAG in given.ignored and FLAG not in plain.ignored
    assert given.stack_options == plain.stack_options and given.moe_backend == plain.moe_backend
    pro = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --moe-runner-backend flashinfer_mxfp4"
    assert FLAG in _read(f"{pro} {FLAG} default", "0.5.15", "nvidia-b200").ignored


@pytest.mark.parametrize(
    ("value", "release", "device", "what"),
    [
        ("fp8", "0.5.18", "nvidia-h200", "invalid choice: 'fp8' \\(choose from default, bf16\\)"),
        ("fp8", "0.5.19", "nvidia-b200", "at fp8 activations on nvidia-b200 is not priced"),
        ("bf16", "0.5.19", "nvidia-h200", "at bf16 activations on nvidia-h200 is not priced"),
    ],
)
def test_other_values_are_refused(value, release, device, what):
    with pytest.raises(K3PlanError, match=what):
        _read(f"{FLASH} {FLAG} {value}", release, device)
