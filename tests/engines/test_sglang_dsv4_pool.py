"""SGLang's DeepSeek-V4 pool (k3plan.engines.sglang.dsv4_pool): one full-token count sizes the sliding-window, c4,
c128 and indexer pools and their compressor states. The engine's own log is the referee: kvcache-ai/ktransformers#1978
(SGLang's DSv4 pool on DeepSeek-V4-Flash) prints

    DSv4 memory calculation: bytes_per_full_token=15955.85, available_bytes=19.30 GB, full_token=1298688
    DSv4 memory calculation: bytes_per_full_token=15955.85, available_bytes=0.49 GB, full_token=32768
    DSv4 pool sizes: full=32768, swa=3072, c4=8192, c128=256, c4_state=192, c128_state=3072

and ktransformers#1998 SGLang's V4 defaults ('setting page_size to 256', 'Setting swa_full_tokens_ratio to 0.1').
k3plan had priced SGLang's V4-Flash pool at 3,870 B a token (its per-layer V4 layout), 4.1x too many tokens."""

from __future__ import annotations

import json
import math

import pytest

from k3plan.engines.serve import parse_serve
from k3plan.engines.sglang.dsv4_pool import (
    PAGE,
    SWA_RATIO,
    form_for_release,
    sglang_dsv4_pool,
    sglang_dsv41_pool,
    v41_form_for_release,
)
from k3plan.engines.sglang.releases import NEWEST_RELEASE
from k3plan.errors import K3PlanError
from k3plan.models.loader import load_model

GB = 1 << 30  # SGLang's "GB" is GiB (get_available_gpu_memory divides by 1 << 30)
# the pool forms a GPU command that names no release is read with (engines/sglang/releases.py NEWEST_RELEASE, 0.5.23):
# DeepSeek-V4's "0.5.21" (the c4 rings per engine page, the V4 layout's padded pages), V4.1's "0.5.23" (its ratio-1 / 2
# latents paged too, the ratio-2 layers' pending-pair ring a request slot); the budget's charge reads the same
FORM = form_for_release(NEWEST_RELEASE)
FORM41 = v41_form_for_release(NEWEST_RELEASE)


def _c2_slot(d, draft_tokens: int = 0) -> int:
    """A request slot's ratio-2 pending-pair ring in the 0.5.21-on V4.1 forms (dsv4_pool.V41_FORM_SOURCE: a ring of 2
    rows, 1 << (draft tokens + 1).bit_length() under speculative decoding, of 2 x head_dim f32 a ratio-2 KV source)."""
    ring = 1 << (draft_tokens + 1).bit_length() if draft_tokens else 2
    n2 = sum(1 for i in d.csa2.kv_source_layer_ids if d.compress_ratios[i] == 2)
    return ring * 2 * d.head_dim * 4 * n2


@pytest.fixture(scope="module")
def flash():
    return load_model("deepseek-v4-flash").spec.dsv4


@pytest.fixture(scope="module")
def flash41():
    return load_model("deepseek-v4.1-flash").spec.dsv4


def test_bytes_per_full_token_and_the_full_token_counts_are_the_log_s(flash):
    """The build ktransformers#1978 ran (its form: every ring in the per-token figure, the nextn layer counted)."""
    p = sglang_dsv4_pool(flash, form="ktransformers-1978")
    assert (SWA_RATIO, PAGE, p.page) == (0.1, 256, 256)
    assert round(p.bytes_per_full_token, 2) == 15955.85
    for available, full in ((19.30, 1_298_688), (0.49, 32_768)):
        assert int(available * GB / p.bytes_per_full_token) // p.page * p.page == full
    assert int(32_768 * 0.1) // 256 * 256 == 3072  # the logged swa pool at that full count


@pytest.fixture(scope="module")
def pro():
    return load_model("deepseek-v4-pro").spec.dsv4


def test_each_release_s_form_is_its_own_log_s(flash, pro):
    """The form moved between releases (engines/sglang/dsv4_pool.py FORMS), each reproduced to the cent by a public
    start log (the stored code index; find_string 'bytes_per_full_token=13735.04', '=32781.44', '=7705.45'):
    a DeepSeek-V4-Pro KV study on 8 x MI355X at swa ratio 0.15, DP attention over 8 with 512 running requests (64 a
    worker), logged 'bytes_per_full_token=32781.44 available_bytes=118.93 GB full_token=3,895,296' on sglang 0.5.13
    and 'bytes_per_full_token=13735.04, available_bytes=118.93 GB, c128_state_fixed=1.01 GB, full_token=9217792' with
    'DSV4 pool sizes: full=9217792, swa=1382656, c4=2304448, c128=72014' on 0.5.15.post1; and a DeepSeek-V4-Flash log
    'bytes_per_full_token=7705.45' at ratio 0.1. The 0.5.15 form is the default (the cookbook's release)."""
    old = sglang_dsv4_pool(pro, swa_ratio=0.15, form="0.5.13")
    assert round(old.bytes_per_full_token, 2) == 32781.44 and old.fixed_bytes == 0
    assert int(118.93 * GB / old.bytes_per_full_token) // PAGE * PAGE == 3_895_296
    new = sglang_dsv4_pool(pro, swa_ratio=0.15, max_running_requests=64)
    assert round(new.bytes_per_full_token, 2) == 13735.04
    assert round(new.fixed_bytes / GB, 2) == 1.01  # 'c128_state_fixed=1.01 GB'
    full = int((118.93 * GB - new.fixed_bytes) / new.bytes_per_full_token) // PAGE * PAGE
    assert abs(full - 9_217_792) <= PAGE  # the log's available bytes are printed to 0.01 GB
    assert int(9_217_792 * 0.15) // PAGE * PAGE == 1_382_656 and 9_217_792 // 4 == 2_304_448
    assert round(sglang_dsv4_pool(flash).bytes_per_full_token, 2) == 7705.45
    assert sglang_dsv4_pool(flash).fixed_source.startswith("the c128 compressor states of 256 running requests")
    with pytest.raises(ValueError, match="expected one of"):
        sglang_dsv4_pool(flash, form="0.4")


def test_the_swa_ratio_moves_the_window_and_state_terms_only(flash):
    """Each 0.1 of --swa-full-tokens-ratio adds the windows (584 B x 44 layers) and the rings' share, and nothing
    else: the compressed and indexer terms do not scale with it."""
    lo, hi = (sglang_dsv4_pool(flash, swa_ratio=r).bytes_per_full_token for r in (0.1, 0.5))
    fixed = 2 * lo - sglang_dsv4_pool(flash, swa_ratio=0.2).bytes_per_full_token  # the ratio-free part
    assert hi == pytest.approx(fixed + 5 * (lo - fixed))
    assert 584 * 44 * 0.1 < lo - fixed  # at least the windows' share


def test_a_command_s_pool_is_the_engine_s_full_token_count(cli):
    serve = (
        "sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --mem-fraction-static 0.90 "
        "--swa-full-tokens-ratio 0.5 --context-length 131072"
    )
    r = cli("fit", "-H", "nvidia-h200", "--serve", serve, "--json")
    assert r.exit_code in (0, 1), r.output
    eng = json.loads(r.stdout)["engine"]
    p = sglang_dsv4_pool(load_model("deepseek-v4-flash").spec.dsv4, swa_ratio=0.5, form=FORM)
    assert eng["kv_pool_tokens"] == int(eng["kv_pool_bytes"] / p.bytes_per_full_token) // 256 * 256
    assert eng["block_tokens"] == 256 and "--swa-full-tokens-ratio 0.5" in eng["sources"]["kv_pool_tokens"]


@pytest.mark.parametrize("value", ["0", "1.5", "x"])
def test_a_bad_swa_ratio_is_refused_in_one_line(value):
    with pytest.raises(K3PlanError, match="expected a number in"):
        parse_serve(
            f"sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --swa-full-tokens-ratio {value}",
            platform="gpu",
        )


def test_the_inferencex_sglang_v4_nightly_reads(cli):
    """SemiAnalysisAI/InferenceX benchmarks/single_node/fixed_seq_len/dsv4_fp4_b300_sglang.sh @843c6254 at
    concurrency 1: every flag and variable read (they were refused: --swa-full-tokens-ratio, the FlashInfer
    autotune switch, PYTHONNOUSERSITE), as its image runs it: lmsysorg/sglang:nightly-dev-cu13-20260624-b2c8f7a2
    (configs/nvidia-master.yaml dsv4-fp4-b300-sglang) precedes 0.5.14 (tests/engines/public_commands.yaml)."""
    serve = (
        "PYTHONNOUSERSITE=1 sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --served-model-name "
        "deepseek-ai/DeepSeek-V4-Pro --host 0.0.0.0 --port 8888 --trust-remote-code --tp 8 --max-running-requests 8 "
        "--mem-fraction-static 0.90 --swa-full-tokens-ratio 0.5 --moe-runner-backend flashinfer_mxfp4 "
        "--chunked-prefill-size 8192 --disable-flashinfer-autotune"
    )
    r = cli("fit", "-H", "nvidia-b300", "--serve", serve, "--engine-version", "0.5.14")
    assert r.exit_code == 0 and r.output.startswith("STARTS"), r.output[:300]


def test_serve_without_a_topology_runs_on_the_command_s_devices(cli):
    """InferenceX's V4-Pro H200 SGLang line (TP 8; tests/engines/cases/sglang-inferencex-2128-*): without -t the
    command's 8 GPUs are the machine, and the engine's verdict follows (here a fraction below the weights: it does not
    start), where fit used to stop at 'no standard topology leaves room' looking for a machine whose weights fit."""
    r = cli(
        "fit",
        "-H",
        "nvidia-h200",
        "--serve",
        "sglang serve --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --trust-remote-code --mem-fraction-static 0.75",
    )
    assert r.exit_code == 1 and r.output.startswith("WON'T START"), r.output[:300]
    assert "nvidia-h200 8 (8 chips" in " ".join(r.output.split())


def test_the_sequences_line_names_sglang_s_full_token_accounting(cli):
    serve = "sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --mem-fraction-static 0.90 --context-length 131072"
    text = " ".join(cli("fit", "-H", "nvidia-h200", "--serve", serve).output.split())
    assert "compressor rings at its own bytes a full token (engines/sglang/dsv4_pool.py)" in text
    assert "KDA state in whole layer groups" not in text


def test_a_variable_that_sizes_buffers_k3plan_does_not_price_is_refused_with_what_it_does():
    # the MegaMoE buffer's cap is priced for SGLang 0.5.15 on an SM100 GPU only (engines/sglang/mega_moe.py): read as
    # the newest release (no --engine-version) it is refused with why
    with pytest.raises(K3PlanError, match="the MegaMoE buffer's size is not priced by k3plan at SGLang 0.5.23"):
        parse_serve(
            "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK=8320 sglang serve --model-path "
            "deepseek-ai/DeepSeek-V4-Pro --tp 8 --moe-a2a-backend megamoe",
            platform="gpu",
            device_name="nvidia-b200",
        )


def test_vllm_s_nvfp4_record_is_not_sglang_s():
    with pytest.raises(K3PlanError, match="is vLLM's DeepSeek-V4.1 record, not SGLang's"):
        parse_serve(
            "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 8 --kv-cache-dtype nvfp4_ds_mla",
            platform="gpu",
        )


def test_v41_s_bytes_a_full_token_and_sliding_window_pool_are_its_start_log_s(flash41):
    """SGLang's DeepSeek-V4.1 pool (sglang_dsv41_pool, V41_SOURCE): the KV sources' latents and fp4 index keys over their
    ratios, a full token; the sliding-window pool apart. A public V4.1-Flash start with DSpark (one draft layer)
    logs 'DSV4 memory calculation: bytes_per_full_token=1670.75, available_bytes=8.84 GB, ..., swa_fixed=0.30 GB,
    full_token=5491200' for 'DSV4 SWA sizing: mode=cap, swa_tokens=13312'."""
    # DSpark verifies the checkpoint's block + 1 = 6 draft tokens a step (V41_SPEC_SOURCE)
    spec = sglang_dsv41_pool(flash41, chunk=1024, max_running_requests=4, draft_layers=1, draft_tokens=6)
    assert round(spec.bytes_per_full_token, 2) == 1670.75 and round(spec.bytes_per_swa_token) == 23_944
    # the cap: (128 + 128 x 6 + 256 + 2 x 6 + the radix cache's 4 x (128 + 256)) x 4 + 2 x 1,024 + 256 = 13,104 tokens,
    # in whole 256-token pages: the logged swa_tokens
    assert spec.fixed_bytes == int(13_312 * spec.bytes_per_swa_token)
    assert spec.swa_tokens_per_request == 128 + 128 * 6 + 256 + 12 + 4 * 384
    swa_fixed = spec.fixed_bytes
    assert round(swa_fixed / GB, 2) == 0.30
    # without the draft tokens' terms the cap is 11,520 tokens, 1,792 short of the log
    assert sglang_dsv41_pool(flash41, chunk=1024, max_running_requests=4, draft_layers=1).fixed_bytes == int(
        11_520 * spec.bytes_per_swa_token
    )
    # full_token from the logged available bytes, printed to 0.01 GiB: within that rounding of the log's 5,491,200
    lo, hi = ((8.84 + e) * GB - swa_fixed for e in (-0.005, 0.005))
    assert int(lo / spec.bytes_per_full_token) <= 5_491_200 <= int(hi / spec.bytes_per_full_token)
    plain = sglang_dsv41_pool(flash41, chunk=8192, max_running_requests=256)
    assert plain.bytes_per_full_token == (584 + 68) / 2 * 3 + (584 + 68)  # layers 2, 8, 14 at ratio 2; 20 at 1
    # cap mode at SGLang's V4 defaults: (128 + 128 + 2 x 256 + 4 x (128 + 256)) x 256 + 2 x 8,192 + 256 tokens
    assert plain.fixed_bytes == 606_464 * 584 * 40 and plain.swa_tokens_per_request == 2_304
    ratio = sglang_dsv41_pool(flash41, chunk=8192, max_running_requests=256, swa_ratio=0.1)
    assert ratio.fixed_bytes == 0 and ratio.bytes_per_full_token == plain.bytes_per_full_token + 0.1 * 584 * 40


def test_v41_on_sglang_starts_on_its_own_pool_and_the_budget_charges_a_request_as_it_does(cli, flash41):
    """--serve: the start check takes the sliding-window pool first and divides the rest by SGLang's bytes a full
    token; without --serve the budget charges a request the same bytes a full token and its share of that pool."""
    r = cli("fit", "-H", "nvidia-b200", "--serve", "sglang serve --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 4",
            "--json")  # fmt: skip
    eng = json.loads(r.stdout)["engine"]
    pool = sglang_dsv41_pool(flash41, chunk=16384, max_running_requests=256, form=FORM41)
    assert "cap mode" in eng["sources"]["kv_pool_tokens"] and "V4.1 pool accounting was not read" not in r.output
    assert eng["kv_pool_tokens"] == int(eng["kv_pool_bytes"] / pool.bytes_per_full_token) // 256 * 256
    assert "max_running_requests=256" in eng["message"]
    f = json.loads(cli("fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-b200", "-t", "4", "-s", "sglang",
                       "--json").stdout)  # fmt: skip
    per = f["per_device"]
    layers = len(flash41.compress_ratios)
    assert per["kv_bytes_per_token"] // layers == math.ceil(pool.bytes_per_full_token / layers)
    # one sequence's share of the window pool, at 0.5.23's paged window bytes (the V4 layout's 584 B a token in
    # 256-token pages padded to 576-B rows: 585 B; sglang 0.5.23 wheel, pool_configurator.py _get_bytes_per_swa_token
    # over kernels/ops/attention/dsv4/kv_layout.py KVLayout.page_bytes; 584 before 0.5.21), and its slot's ratio-2 ring
    assert pool.bytes_per_swa_token == 585 * layers
    assert per["state_bytes"] == pool.swa_tokens_per_request * 585 * layers + _c2_slot(flash41)


def test_the_budget_prices_sglang_s_full_token_as_its_start_check_does(cli, flash):
    """One accounting: k3plan's budget for DeepSeek-V4 on SGLang, without --serve, charges a token SGLang's bytes a full
    token (the windows and c4 rings inside it: step/dsv4_cache.engine_charge), in its 256-token pages, and a
    sequence its slot's c128 ring apart (0.5.15 preallocates one a running request). Before, the budget priced the
    per-layer records (3,870 B a token + 15.4 MB of state a sequence) and held 166 sequences at 131,072 tokens on 4
    H200 where SGLang's pool then held 40.18."""
    p = sglang_dsv4_pool(flash, form=FORM)
    # the serve command below runs no a2a backend (SGLang's default), whose FP4 experts keep E8M0 scales: the budget
    # prices the same stack (the sglang stack's own default is DeepEP, engines/sglang/stack.yaml moe_a2a_backend)
    r = cli(
        "fit", "-m", "deepseek-v4-flash", "-H", "nvidia-h200", "-t", "4", "-s", "sglang:moe_a2a_backend=none", "--json"
    )
    out = json.loads(r.stdout)
    dev = out["per_device"]
    layers = len(flash.compress_ratios)
    assert dev["kv_bytes_per_token"] // layers == math.ceil(p.bytes_per_full_token / layers)
    ring = 128 * 2 * flash.head_dim * 4 * flash.compress_ratios.count(128)  # 128 rows of 2 x 512 f32, 20 layers
    assert dev["state_bytes_per_sequence"] == ring == 10_485_760
    assert out["provenance"]["kv"].startswith("engine: sglang's own charge")
    serve = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --context-length 131072"
    engine = json.loads(cli("fit", "-H", "nvidia-h200", "--serve", serve, "--json").stdout)["engine"]
    # whole sequences against the engine's fraction, the room after the budget's temporaries against its static pool
    assert 0.95 * engine["max_concurrency"] <= out["capacity"]["max_sequences"] <= 1.05 * engine["max_concurrency"]


def test_v41_under_dspark_the_budget_charges_the_draft_tokens_cap_terms(cli, flash41):
    """fit --spec-tokens 5 on SGLang (6 tokens verified a step, DSpark's width for V4.1-Flash's block of 5): a request's
    share of the sliding-window pool holds the eviction interval a draft token and the next decode's 2 x 6 tokens, at
    the per-token figures inflated by one draft layer (V41_SPEC_SOURCE); before, the budget fell back to the model's
    own formats and said the accounting was unread."""
    args = ("fit", "-m", "deepseek-v4.1-flash", "-H", "nvidia-b200", "-t", "4", "-s", "sglang", "--json")
    spec = json.loads(cli(*args, "--spec-tokens", "5", "--acceptance", "0.7").stdout)
    plain = json.loads(cli(*args).stdout)
    pool = sglang_dsv41_pool(flash41, chunk=spec["workload"]["prefill_chunk_tokens"], max_running_requests=1,
                             draft_layers=1, draft_tokens=6, form=FORM41)  # fmt: skip
    assert pool.swa_tokens_per_request == 128 + 128 * 6 + 256 + 2 * 6 + 4 * (128 + 256)
    assert spec["per_device"]["state_bytes"] == int(pool.swa_tokens_per_request * pool.bytes_per_swa_token) + _c2_slot(
        flash41, 6
    )
    assert "not read" not in " ".join(spec.get("warnings", []))
    assert spec["capacity"]["max_sequences"] < plain["capacity"]["max_sequences"]


def test_bf16_compressor_states_reproduce_a_logged_v4_flash_pool(flash):
    """SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 makes every compressor-state element 2 B (sglang 0.5.19 wheel,
    model_executor/pool_configurator.py _get_dsv4_compress_state_dtype_sizes; engines/sglang/serve.py
    STATE_DTYPE_SOURCE). Pqlet/compare-kvcache-mem-dsv4@b98e31df SGLANG_EXPERIMENT/manual_logs.txt (V4-Flash, TP 8,
    64 running requests, bf16 states): 'bytes_per_full_token=7033.45, available_bytes=45.26 GB,
    c128_state_fixed=0.33 GB, full_token=6859008' (tests/engines/cases/sglang-pqlet-dsv4-flash-h100-tp8-1m-mfs085)."""
    pool = sglang_dsv4_pool(flash, max_running_requests=64, form=form_for_release((0, 5, 19)), state_bytes=2)
    assert round(pool.bytes_per_full_token, 2) == 7033.45
    assert round(pool.fixed_bytes / GB, 2) == 0.33
    full = int((45.26 * GB - pool.fixed_bytes) / pool.bytes_per_full_token) // PAGE * PAGE
    assert abs(full - 6_859_008) <= 2 * PAGE  # the available bytes are printed to 0.01 GB
    q = parse_serve(
        "SGLANG_DSV4_COMPRESS_STATE_DTYPE=BF16 sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8",
        platform="gpu",
    )
    assert q.dsv4_state_bytes == 2
    # no such variable before 0.5.14 (engines/sglang/serve.py STATE_DTYPE_FROM): the states stay f32
    q = parse_serve(
        "SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8",
        platform="gpu",
        release=(0, 5, 13),
    )
    assert q.dsv4_state_bytes == 4
    with pytest.raises(K3PlanError, match="SGLang refuses it") as err:
        parse_serve(
            "SGLANG_DSV4_COMPRESS_STATE_DTYPE=fp16 sglang serve --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8",
            platform="gpu",
        )
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("path", ["deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4.1-Flash"])
def test_the_table_row_charges_the_command_s_swa_ratio_as_its_start_check_does(cli, path):
    """A command's --swa-full-tokens-ratio reaches the budget's charge a request (Stack.engine_swa_ratio through
    step/dsv4_cache.engine_charge), as SGLang's start check reads it (V4: the window and c4 rings in each full token
    at the ratio; V4.1: ratio mode, the window in each full token and no cap pool apart). Until session 51 the table
    row charged SGLang's default 0.1 (V4.1: cap mode) whatever the command set: V4-Flash on 8 B200 at 0.5 held 152
    sequences in the row where the check's pool held 52.29."""
    base = f"python3 -m sglang.launch_server --model-path {path} --tp 8 --context-length 131072"
    out = {}
    for ratio in (None, 0.5):
        serve = base + ("" if ratio is None else f" --swa-full-tokens-ratio {ratio}")
        out[ratio] = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", serve, "--json").stdout)
    for got in out.values():  # the row's sequences within 5% of the check's, at either ratio
        conc, held = got["engine"]["max_concurrency"], got["capacity"]["max_sequences"]
        assert 0.95 * conc <= held <= 1.05 * conc, (conc, held)
    assert out[0.5]["per_device"]["kv_bytes_per_token"] > out[None]["per_device"]["kv_bytes_per_token"]
    d = load_model(path.split("/")[1].lower()).spec.dsv4
    if d.csa2 is None:  # V4: the row's bytes a token are the pool's at the ratio, spread over the layers
        p = sglang_dsv4_pool(d, form=FORM, swa_ratio=0.5)
        layers = len(d.compress_ratios)
        assert out[0.5]["per_device"]["kv_bytes_per_token"] // layers == math.ceil(p.bytes_per_full_token / layers)


def test_a_v4_command_s_page_size_is_sglang_s_256(cli):
    """SGLang writes page_size 256 over a DeepSeek-V4 command's --page-size on a GPU (serve.V4_PAGE_SOURCE: 0.5.13's
    deepseek_v4_hook, 0.5.15-0.5.22's model override, applied last writer wins), so 128 or 64 reads as no --page-size:
    listed as not read, the pool and the row unchanged (64 ended in a ZeroDivisionError until session 51)."""
    base = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --context-length 131072"
    plain = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", base, "--json").stdout)
    for page in ("128", "64"):
        got = json.loads(
            cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", f"{base} --page-size {page}", "--json").stdout
        )
        assert got["engine"]["max_concurrency"] == plain["engine"]["max_concurrency"]
        assert got["capacity"]["max_sequences"] == plain["capacity"]["max_sequences"]
        assert got["per_device"]["kv_bytes_per_token"] == plain["per_device"]["kv_bytes_per_token"]
        said = got["engine"]["serve"]
        assert f"--page-size {page}" in said["ignored"]
        assert any(c.startswith(f"--page-size {page}: not read: SGLang sets page_size 256") for c in said["caveats"])


def test_the_table_row_charges_the_command_s_compressor_state_dtype_as_its_start_check_does(cli, flash):
    """SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 reaches the budget's charge a request (Stack.engine_state_bytes through
    step/dsv4_cache.engine_charge), as SGLang's start check reads it (engines/sglang/serve.py STATE_DTYPE_SOURCE): the
    rings in a full token and the slot's c128 ring at 2 B an element. Until session 51 the row charged f32 states
    whatever the command set: V4-Flash on 8 B200 with bf16 states held 152 sequences in the row (f32's figure) where the
    check's pool held 155.2 (now 160)."""
    base = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --context-length 131072"
    out = {}
    for env in ("", "SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 "):
        out[env] = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", env + base, "--json").stdout)
    for got in out.values():  # the row's sequences within 5% of the check's, f32 or bf16
        conc, held = got["engine"]["max_concurrency"], got["capacity"]["max_sequences"]
        assert 0.95 * conc <= held <= 1.05 * conc, (conc, held)
    bf16 = out["SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 "]
    assert bf16["capacity"]["max_sequences"] > out[""]["capacity"]["max_sequences"]
    p = sglang_dsv4_pool(flash, form=FORM, state_bytes=2)
    layers = len(flash.compress_ratios)
    assert bf16["per_device"]["kv_bytes_per_token"] // layers == math.ceil(p.bytes_per_full_token / layers)
    # the slot's c128 ring: 128 rows of 2 x 512 bf16, 20 layers -- half the f32 ring
    assert bf16["per_device"]["state_bytes_per_sequence"] == 128 * 2 * flash.head_dim * 2 * 20 == 5_242_880


@pytest.mark.parametrize("release", ["0.5.21", "0.5.23"])
def test_v41_s_pending_pair_stays_f32_under_the_compressor_state_dtype(cli, flash41, release):
    """SGLANG_DSV4_COMPRESS_STATE_DTYPE sizes SGLang's c4 and c128 compressor states only; DeepSeek-V4.1's layers have
    ratios 0 / 1 / 2, and its ratio-2 pending-pair ring is float32 whatever the variable says, allocated so and sized
    so (sglang 0.5.21-0.5.23 wheels: deepseek_v4_memory_pool.py _make_pair_state_pool dtype=torch.float32,
    pool_configurator.py _get_c2_state_fixed_bytes torch.float32.itemsize; dsv4_pool.V41_PAIR_DTYPE_SOURCE). So a V4.1
    command with bf16 states starts with the pool, the fixed pair state and the row of the same command without it."""
    assert set(flash41.compress_ratios) == {0, 1, 2}
    base = "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 8 --language-model-only"
    out = {}
    for env in ("", "SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 "):
        r = cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", env + base, "--engine-version", release, "--json")
        assert r.exit_code == 0, r.output
        out[env] = json.loads(r.stdout)
    f32, bf16 = out[""], out["SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 "]
    assert parse_serve("SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 " + base, platform="gpu").dsv4_state_bytes == 2
    for key in ("kv_pool_bytes", "kv_pool_tokens", "max_concurrency"):
        assert bf16["engine"][key] == f32["engine"][key]
    assert bf16["per_device"] == f32["per_device"] and bf16["capacity"] == f32["capacity"]
    # the pair state, the pool's fixed bytes in ratio mode: _get_c2_state_fixed_bytes at 256 requests, ring 2 --
    # ceil((257 x 2 + 2 + 1) / 2) x 2 = 518 rows of 2 x head_dim float32 a ratio-2 KV source
    pool = sglang_dsv41_pool(
        flash41, chunk=16384, max_running_requests=256, swa_ratio=0.1, form=v41_form_for_release((0, 5, 21))
    )
    n2 = sum(1 for i in flash41.csa2.kv_source_layer_ids if flash41.compress_ratios[i] == 2)
    assert pool.fixed_bytes == 518 * 2 * flash41.head_dim * 4 * n2 and "pending-pair state" in pool.fixed_source


def test_the_table_row_charges_the_command_s_draft_as_its_start_check_does(cli, flash):
    """A command's speculative decoding reaches the budget's charge a request: its draft tokens set the budget stack's
    verify width (Stack.for_spec_decode from SglangDraft.num_draft_tokens), which step/dsv4_cache.engine_charge hands
    dsv4_request_charge, so V4's row charges the draft's layer (x (T + 1) / T) and the 16 / 256-row rings, as the
    check's pool reads any draft (sglang_dsv4_pool's ``speculative``; engines/sglang/spec.py DSV4_SPEC_SOURCE), and
    V4.1's its DSpark layer and cap terms. Until session 51 the row charged no draft: V4-Flash on 8 B200 under EAGLE
    (3 steps, 4 draft tokens) held 152 sequences in the row where the check's pool held 127.35 (now 134, the check
    preallocating the c128 rings of its default 256 running requests where the row charges a running request's: at
    --max-running-requests 128 below, 135 against 130.65); V4.1-Flash under DSpark 372 against 350.73 (now 351)."""
    eagle = (" --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1"
             " --speculative-num-draft-tokens 4")  # fmt: skip
    cases = {
        "v4": "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --context-length "
        "131072 --max-running-requests 128",
        "v41": "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4.1-Flash --tp 8 --context-length "
        "131072 --language-model-only",
    }
    drafts = {"v4": eagle, "v41": " --speculative-algorithm DSPARK"}
    out = {}
    for key, base in cases.items():
        for draft in ("", drafts[key]):
            serve = base + draft
            out[key, draft] = json.loads(cli("fit", "-H", "nvidia-b200", "-t", "8", "--serve", serve, "--json").stdout)
        for draft in ("", drafts[key]):  # the row's sequences within 5% of the check's, with and without the draft
            conc, held = out[key, draft]["engine"]["max_concurrency"], out[key, draft]["capacity"]["max_sequences"]
            assert 0.95 * conc <= held <= 1.05 * conc, (key, draft, conc, held)
        assert out[key, drafts[key]]["capacity"]["max_sequences"] < out[key, ""]["capacity"]["max_sequences"]
    dev = out["v4", eagle]["per_device"]
    p = sglang_dsv4_pool(flash, form=FORM, speculative=True)
    layers = len(flash.compress_ratios)
    assert dev["kv_bytes_per_token"] // layers == math.ceil(p.bytes_per_full_token / layers)
    # the slot's c128 ring under speculative decoding: 256 rows of 2 x 512 f32, 20 layers
    assert dev["state_bytes_per_sequence"] == 256 * 2 * flash.head_dim * 4 * 20 == 20_971_520
