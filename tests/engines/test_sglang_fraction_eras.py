"""SGLang's default --mem-fraction-static and --chunked-prefill-size before 0.5.3, by release (engines/sglang/
fraction_eras.py), read in the sglang wheels (PyPI), sglang/srt/server_args.py ServerArgs.__post_init__:

- 0.4.2.post4-0.4.5: a table by tp_size (0.79 at >= 16, 0.81 >= 8, 0.85 >= 4, 0.87 >= 2, else 0.88);
- 0.4.6.post2-0.4.6.post5: the table by tp_size x pp_size on a GPU of <= 81,920 MiB, else 0.88, and above 96 GiB
  min(f + 48 GiB x (1 - f) / gpu, (gpu - 18 GiB) / gpu); 0.4.7: 0.79 on a CUDA GPU above 180,000 MiB;
- 0.4.8-0.5.2: round((gpu - reserved) / gpu, 3), reserved (9.5 + P / 2) GiB below 90 GiB, (12 + P / 2) GiB below
  160 GiB, 32 GiB above, + 4 GiB under DP attention.

The logged fractions: sgl-project/sglang#7847 (SGLang 0.4.9 on MI300X, TP 16 / DP 16 with DP attention) prints the
0.812 pool its profile gives (tests/engines/cases/sglang-7847-r1-mi300x-tp16-dp16-ep.yaml)."""

from __future__ import annotations

import json

import pytest

from k3plan.engines.sglang.fraction_eras import era_chunk, era_fraction
from k3plan.engines.stack import load_stack
from k3plan.hardware import load_hardware

H100, H200, MI300X, B200 = 81559, 143771, 196608, 183359  # memory.total in MiB (k3plan's hardware)


@pytest.mark.parametrize(
    ("release", "gpu", "tp", "dp_attention", "cuda", "want"),
    [
        ((0, 4, 3), H100, 16, False, True, 0.79),  # the table by tp_size
        ((0, 4, 3), MI300X, 8, False, False, 0.81),  # no GPU term before 0.4.6
        ((0, 4, 6), H100, 16, True, True, 0.79),  # 0.4.6.post2: <= 81,920 MiB, tp x pp >= 16
        # 0.4.6.post2 above 96 GiB: min(0.88 + 49,152 x 0.12 / 143,771, (143,771 - 18,432) / 143,771)
        ((0, 4, 6), H200, 8, False, True, (H200 - 18432) / H200),
        ((0, 4, 7), B200, 8, False, True, 0.79),  # 0.4.7: a CUDA GPU above 180,000 MiB
        ((0, 4, 7), MI300X, 8, False, False, (MI300X - 18432) / MI300X),  # not on ROCm
        ((0, 4, 9), MI300X, 16, True, False, 0.812),  # (192 - 32 - 4) / 192 = 0.8125, rounded to 3 places
        ((0, 4, 9), H100, 8, False, True, round((H100 - 13.5 * 1024) / H100, 3)),  # 9.5 + 8 / 2 GiB
        ((0, 5, 2), H200, 16, True, True, round((H200 - 24 * 1024) / H200, 3)),  # 12 + 16 / 2 + 4 GiB
    ],
)
def test_the_release_s_default_fraction(release, gpu, tp, dp_attention, cuda, want):
    got = era_fraction(release, gpu_mib=gpu, tp_size=tp, pp=1, dp_attention=dp_attention, cuda=cuda)
    assert got is not None and got[0] == pytest.approx(want, abs=1e-12)


def test_from_0_5_3_the_stack_s_derivation_holds():
    assert era_fraction((0, 5, 3), gpu_mib=H100, tp_size=8, pp=1, dp_attention=False, cuda=True) is None
    assert era_chunk((0, 5, 3), gpu_mib=MI300X) is None


@pytest.mark.parametrize(
    ("release", "gpu", "want"),
    [((0, 4, 6), MI300X, 8192), ((0, 4, 7), MI300X, 16384), ((0, 4, 7), H200, 8192), ((0, 4, 9), MI300X, 16384)],
)
def test_the_release_s_default_chunk(release, gpu, want):
    got = era_chunk(release, gpu_mib=gpu)
    assert got is not None and got[0] == want


def test_the_stack_s_reserve_follows_the_release():
    """The budget's reserve and the engine's start check read one fraction (Stack.release_fraction), for fit's ints
    and for columns alike."""
    import numpy as np

    hw = load_hardware("amd-mi300x")
    st = load_stack("dp-attention:moe_a2a_backend=none").bind(hw).with_engine_release((0, 4, 9))
    kw = {"usable_bytes": hw.usable_bytes_per_device, "pp": 1, "chunk": None, "vendor": hw.vendor}
    assert st.reserve_fraction(tp=1, dp=16, **kw) == pytest.approx(1 - 0.812)
    cols = st.reserve_fraction(tp=np.array([1, 1]), dp=np.array([16, 8]), **kw)
    assert list(cols) == pytest.approx([1 - 0.812, 1 - round((MI300X - 36 * 1024) / MI300X, 3)])
    # the newest release: the stack's own derivation
    assert load_stack("dp-attention:moe_a2a_backend=none").bind(hw).reserve_fraction(tp=1, dp=16, **kw) != (
        pytest.approx(1 - 0.812)
    )


def test_fit_says_the_release_s_fraction(cli):
    serve = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8"
    r = cli("fit", "-H", "nvidia-h100-sxm", "-t", "8", "--serve", serve, "--engine-version", "0.4.3", "--json")
    d = json.loads(r.stdout)
    assert any(
        c.startswith("mem_fraction_static 0.81: SGLang 0.4.3's default") for c in d["engine"]["serve"]["caveats"]
    )
    assert "int(0.81 x " in d["engine"]["sources"]["kv_pool"]


def test_deepep_s_reserve_follows_the_release():
    """DeepEP's 2 GiB on top of the floor from 0.5.15 (engines/sglang/releases.py DEEPEP_RESERVE_FROM: the 0.5.15
    wheel's _handle_gpu_memory_settings adds it, the 0.5.12-0.5.14 wheels' do not)."""
    hw = load_hardware("nvidia-h200")
    kw = {"usable_bytes": hw.usable_bytes_per_device, "tp": 8, "pp": 1, "chunk": None, "vendor": hw.vendor}
    st = load_stack("sglang:moe_a2a_backend=deepep").bind(hw)
    old, new = (1 - st.with_engine_release(r).reserve_fraction(**kw) for r in ((0, 5, 14), (0, 5, 15)))
    mib = hw.usable_bytes_per_device / 2**20
    assert round(old - new, 3) == pytest.approx(round(2048 / mib, 3), abs=0.0015)
    plain = load_stack("sglang:moe_a2a_backend=none").bind(hw).with_engine_release((0, 5, 14))
    assert 1 - plain.reserve_fraction(**kw) == old
