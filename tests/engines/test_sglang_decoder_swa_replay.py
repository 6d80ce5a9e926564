"""DeepSeek-V4.1's --enable-decoder-swa-bounded-replay (engines/sglang/serve.py decoder_swa_replay, read in the sglang
0.5.21-0.5.23 wheels): read and priced as without it on V4.1 (the KV pool is unchanged), refused where SGLang refuses
it (DP attention, a prefill CUDA graph the command locks on, a DeepSeek-V4 config without kv_source_layer_ids), the
cookbook's verified H200 cell (tests/engines/cases/sglang-cookbook-dsv41-flash-h200-tp8-ep8-swa-replay.yaml) starts."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from k3plan.cli.app import app

BASE = "sglang serve --trust-remote-code --tp 8 --mem-fraction-static 0.8 --cuda-graph-max-bs-decode 64"
V41 = "--model-path deepseek-ai/DeepSeek-V4.1-Flash"
FLAG = "--enable-decoder-swa-bounded-replay"


def _fit(serve: str):
    return CliRunner().invoke(
        app, ["fit", "-H", "nvidia-h200", "-t", "8", "--serve", serve, "--engine-version", "0.5.21", "--json"]
    )


def test_v41_reads_it_and_prices_the_pool_as_without_it():
    on, off = _fit(f"{BASE} {V41} {FLAG}"), _fit(f"{BASE} {V41}")
    assert on.exit_code == 0 and off.exit_code == 0, on.output
    a, b = json.loads(on.stdout)["engine"], json.loads(off.stdout)["engine"]
    assert a["kv_pool_bytes"] == b["kv_pool_bytes"] and a["weights_bytes"] == b["weights_bytes"]


def test_refused_where_sglang_refuses_it():
    for extra, said in (
        ("--dp 8 --enable-dp-attention", "cannot be combined with DP attention yet"),
        ("--cuda-graph-backend-prefill breakable", "cannot be combined with the prefill CUDA graph yet"),
    ):
        r = _fit(f"{BASE} {V41} {FLAG} {extra}")
        assert r.exit_code == 2 and said in r.output, r.output
    r = _fit(f"{BASE} {V41} {FLAG} --cuda-graph-backend-prefill disabled")
    assert r.exit_code == 0, r.output
    r = _fit(f"{BASE} --model-path deepseek-ai/DeepSeek-V4-Flash {FLAG}")
    assert r.exit_code == 2 and "kv_source_layer_ids" in r.output, r.output
