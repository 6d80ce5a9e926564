"""--json never writes NaN or Infinity (Python's json does, JSON has neither): a model with no MLA layer (all KDA)
has no attention/linear crossover, which roofline wrote as `"crossover_tokens": Infinity`, and fit and roofline
stopped with a pydantic traceback (the advice's KV bytes a token had to be positive; such a model has none)."""

from __future__ import annotations

import json
import math

from k3_testing import tiny_kimi_raw

from k3plan.cli.common import to_jsonable


def refuse(constant: str):
    raise AssertionError(f"{constant} in a --json output")


def test_non_finite_floats_are_null():
    assert to_jsonable({"a": math.inf, "b": [-math.inf, math.nan, 1.5]}) == {"a": None, "b": [None, None, 1.5]}


def test_a_model_with_no_mla_layer(cli, tmp_path):
    raw = tiny_kimi_raw()
    raw["text_config"]["linear_attn_config"].update(kda_layers=[1, 2, 3, 4], full_attn_layers=[])
    config = tmp_path / "config.json"
    config.write_text(json.dumps(raw))
    base = ("-m", config, "-H", "nvidia-h200", "-t", "1")
    for command in ("fit", "roofline"):
        r = cli(command, *base, "--json")
        assert r.exit_code in ((0, 3) if command == "fit" else (0,)), (
            r.output
        )  # 3: fits on the analytic temp's lower bound (issue 50)
        d = json.loads(r.stdout, parse_constant=refuse)
        assert (
            d["fits"]
            and (d["per_device"] if command == "fit" else d["decode"]["bytes_per_device"])[
                "kv_bytes" if command == "fit" else "kv"
            ]
            == 0
        )
        assert "Traceback" not in cli(command, *base).output
    assert d["long_context"]["crossover_tokens"] is None
    text = " ".join(cli("roofline", *base, "--verbose").stdout.split())
    assert "attention FLOPs never overtake the linear part (no MLA layer)" in text
