"""SGLang's Marlin MXFP4 MoE method keeps the fp32 scale Parameters it allocated beside the E8M0 ones Marlin reads
(engines/sglang/stack.yaml option moe_runner_backend; read in the 0.5.12 and 0.5.15 wheels): a GPU holds them, no
kernel reads them. InferenceX's V4-Pro log on 8 H200 at --moe-runner-backend marlin (125.65 GiB a GPU,
tests/engines/cases/sglang-inferencex-2128-dsv4-pro-h200-tp8.yaml) is the referee."""

from __future__ import annotations

import json

import pytest

from k3plan.app.setup import setup_from
from k3plan.engines.serve import parse_serve
from k3plan.models.formats import get_format
from k3plan.roofline.bounds import weight_sums

V4_FLASH = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --trust-remote-code"


def test_the_kept_fp32_scales_are_held_and_not_read():
    """Per 32 inputs of a row: 16 B of codes and 1 B of E8M0 read, 4 B of fp32 held beside them."""
    f, mx = get_format("mxfp4_e8m0_f32kept"), get_format("mxfp4")
    shape = (256, 4096, 7168)  # [experts, out, in]
    assert f.nbytes(shape) == mx.nbytes(shape) + 4 * 256 * 4096 * 7168 // 32
    assert f.read_nbytes(shape) == mx.nbytes(shape) == mx.read_nbytes(shape)


def _setup(runner: str):
    stack = "sglang:moe_a2a_backend=none" + (f",moe_runner_backend={runner}" if runner else "")
    return setup_from(model="deepseek-v4-flash", hardware="nvidia-h200", topology="4", tp=4, ep=4, dp=1, stack=stack)


def test_a_gpu_holds_the_marlin_copies_and_the_step_streams_the_same_bytes():
    """marlin against flashinfer_mxfp4 (auto's runner on Hopper): the routed experts a GPU grow by exactly the fp32
    copies, what a decode step streams does not move (roofline's weight sums read what kernels read)."""
    marlin, fi, auto = _setup("marlin"), _setup("flashinfer_mxfp4"), _setup("")
    experts = [t for t in marlin.model.inventory.text if t.role == "expert"]
    kept = sum(t.params for t in experts) // 32 * 4 // 4  # fp32 a 32-block, the experts split over 4 GPUs
    w_m, w_f = marlin.weights, fi.weights
    assert w_m.role_bytes("expert") - w_f.role_bytes("expert") == pytest.approx(kept, rel=1e-6)
    assert w_f.role_bytes("expert") == auto.weights.role_bytes("expert")
    assert weight_sums(marlin).expert_bytes == weight_sums(fi).expert_bytes
    assert [g.bytes for g in marlin.weight_groups] == [g.bytes for g in fi.weight_groups]


def test_serve_reads_the_runner_and_names_the_ones_it_does_not_price():
    q = parse_serve(
        V4_FLASH + " --moe-runner-backend marlin", platform="gpu", device_gib=140.0, device_name="nvidia-h200"
    )
    assert q.stack_options["moe_runner_backend"] == "marlin" and list(q.stack_options)[-1] == "moe_runner_backend"
    q = parse_serve(
        V4_FLASH + " --moe-runner-backend triton", platform="gpu", device_gib=140.0, device_name="nvidia-h200"
    )
    assert "moe_runner_backend" not in q.stack_options
    assert any(c.startswith("--moe-runner-backend triton") for c in q.caveats)


def test_the_inferencex_marlin_log_is_reproduced(cli):
    """125.65 GiB logged; the weights above --mem-fraction-static 0.88's share, so SGLang stops (WON'T START). Read as
    0.5.15, the release the logged case is pinned at (its deepseek-v4-hopper image is no release's: the case says why)."""
    serve = (
        "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --trust-remote-code --moe-runner-backend marlin "
        "--chunked-prefill-size 4096 --mem-fraction-static 0.88 --max-running-requests 8"
    )
    r = cli("fit", "-H", "nvidia-h200", "--serve", serve, "--engine-version", "0.5.15", "--json")
    eng = json.loads(r.stdout)["engine"]
    assert r.exit_code == 1 and not eng["starts"]
    assert eng["weights_bytes"] / 2**30 == pytest.approx(125.65, rel=0.03)
