"""PlanRow: the typed plan row dumps to the dict rows' JSON (keys, order, absent extensions) and
spells its split, fit flags and setup options once."""

from k3plan.budget.result import PerDevice
from k3plan.plan.rows import PER_DEVICE, CostRow, PlanRow
from k3plan.structs import dump

KEYS = [
    "rank",
    "hardware",
    "topology",
    "chips",
    "devices",
    "tp",
    "ep",
    "dp",
    "pp",
    "stack",
    "kv_dtype",
    "kv_dtype_override",
    "chunk_tokens",
    "free_gib_per_device",
    "weights_gib_per_device",
    "max_sequences",
    "tpot_ms",
    "tokens_per_s_per_chip",
    "binding",
    "cost_usd_per_hour",
    "per_device",
    "temp_evidence",
    "temp_unverified",
    "layout_notes",
]  # the dict row's keys, in its order (plan --json before issue 10)


def _row(pp: int = 1) -> PlanRow:
    return PlanRow(
        rank=1,
        hardware="nvidia-h200",
        topology="2x8",
        chips=16,
        devices=16,
        tp=8,
        ep=8,
        dp=1,
        pp=pp,
        stack="sglang",
        kv_dtype="fp8_ds_mla",
        kv_dtype_override=None,
        chunk_tokens=8192,
        free_gib_per_device=1.5,
        weights_gib_per_device=60.25,
        max_sequences=3,
        tpot_ms=40.0,
        tokens_per_s_per_chip=2.5,
        binding="memory",
        cost_usd_per_hour=None,
        per_device=PerDevice(**{k: i for i, k in enumerate(PER_DEVICE)}),
        temp_evidence="analytic",
        temp_unverified=True,
        layout_notes=[],
    )


def test_json_keys_order_and_absent_extensions():
    r = _row()
    d = dump(r)
    assert list(d) == KEYS  # sla / cost / expected_* absent until a pass sets them
    assert list(d["per_device"]) == list(PER_DEVICE) and d["per_device"]["sequences"] == 9
    cost = CostRow(
        usd_per_chip_hour=None,
        price_origin="none",
        usd_per_hour=None,
        usd_per_million_output_tokens=None,
        usd_per_million_input_tokens=None,
        note="no price",
    )
    e = r.extended(cost=cost).extended(expected_tpot_ms=None, expected_source=None)
    d = dump(e)
    assert list(d) == KEYS + ["cost", "expected_tpot_ms", "expected_source"]
    assert d["expected_tpot_ms"] is None and d["cost"]["note"] == "no price"  # set to None: present, null


def test_split_and_fit_flags_name_pp_only_above_one():
    assert _row().split_text == "TP8 EP8 DP1" and _row(2).split_text == "TP8 EP8 DP1 PP2"
    assert _row().fit_args() == "-H nvidia-h200 -t 2x8 --tp 8 --ep 8 --dp 1 --stack sglang --kv-dtype fp8_ds_mla"
    assert _row(2).fit_command(context=4096, batch=2) == (
        "k3plan fit -H nvidia-h200 -t 2x8 --tp 8 --ep 8 --dp 1 --pp 2 --stack sglang --kv-dtype fp8_ds_mla "
        "--context 4096 --batch 2 --chunk 8192"
    )
    opts = _row(2).setup_options("kimi-k3")
    assert (opts["pp"], opts["kv_dtype"], opts["topology"]) == (2, None, "2x8")  # the stack's own KV dtype
