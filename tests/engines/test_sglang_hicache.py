"""SGLang's HiCache on the GPU (engines/sglang/hicache.py): nothing priced -- the host pool is pinned host memory and
the controller's only GPU memory is moved KV at run time; in 0.4.3.post3-0.4.6.post2 its threads leave every other
rank's CUDA context on GPU 0 after the pool is sized (sglang wheels' managers/cache_controller.py, fixed by
sgl-project/sglang#5778 in 0.4.6.post3), which --serve names as a caveat without pricing it (a driver's size)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from k3plan.cli.app import app
from k3plan.engines.sglang.hicache import hicache_gpu0_caveat

# sgl-project/sglang#5372's command (tests/engines/cases/sglang-5372-r1-h20-tp8-hicache-mfs095-oom.yaml), shortened
R1_HICACHE = (
    "python -m sglang.launch_server --mem-fraction-static 0.95 --tp-size 8 --trust-remote-code --context-length 65536 "
    "--quantization fp8 --model-path deepseek-ai/DeepSeek-R1 --enable-hierarchical-cache --hicache-ratio 2"
)


def _caveat(**kw):
    args = dict(on=True, release=(0, 4, 5), post=0, tp=8, platform="gpu")
    return hicache_gpu0_caveat(**{**args, **kw})


def test_the_window_is_0_4_3_post3_to_0_4_6_post2():
    assert _caveat() is not None and "up to 7 at --tp-size 8" in _caveat()
    assert _caveat(release=(0, 4, 3), post=3) is not None  # the first release that builds HiRadixCache
    assert _caveat(release=(0, 4, 3), post=2) is None  # the flag and the controller, no HiRadixCache
    assert _caveat(release=(0, 4, 6), post=2) is not None
    assert _caveat(release=(0, 4, 6), post=3) is None  # torch.cuda.set_stream (sgl-project/sglang#5778)
    assert _caveat(release=(0, 5, 23)) is None and _caveat(release=None) is None


def test_only_with_hicache_more_than_one_rank_on_a_gpu():
    assert _caveat(on=False) is None
    assert _caveat(tp=1) is None  # the one rank's GPU is GPU 0
    assert _caveat(platform="tpu") is None


def _engine(cmd: str, version: str) -> dict:
    res = CliRunner().invoke(
        app, ["fit", "-H", "nvidia-h20", "-t", "8", "--serve", cmd, "--engine-version", version, "--json"]
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["engine"]


def test_serve_names_it_and_prices_nothing():
    with_it = _engine(R1_HICACHE, "0.4.5")
    without = _engine(R1_HICACHE.replace(" --enable-hierarchical-cache --hicache-ratio 2", ""), "0.4.5")
    assert any(c.startswith("--enable-hierarchical-cache:") for c in with_it["serve"]["caveats"])
    assert not any(c.startswith("--enable-hierarchical-cache:") for c in without["serve"]["caveats"])
    assert with_it["kv_pool_bytes"] == without["kv_pool_bytes"] and with_it["starts"] == without["starts"]
    fixed = _engine(R1_HICACHE, "0.4.6.post3")
    assert not any(c.startswith("--enable-hierarchical-cache:") for c in fixed["serve"]["caveats"])
