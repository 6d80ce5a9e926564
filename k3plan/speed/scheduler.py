"""Continuous batching with chunked prefill: TTFT, TPOT, request latency and throughput under load.

The rule modelled is vLLM V1's (vllm-project/vllm, vllm/v1/core/sched/scheduler.py, class
Scheduler, method schedule()): each engine step has a token budget (max_num_scheduled_tokens =
--max-num-batched-tokens); "First, schedule the RUNNING requests" -- each running request gets
its remaining prompt tokens (a prefill chunk, cut to the budget left) or one decode token, in
the order they were admitted -- then "Next, schedule the WAITING requests" FCFS while budget and
max_num_seqs allow, a new prompt cut to the budget left (chunked prefill). The step that
computes a prompt's last token samples its first output token; each later step gives one token.

Two evaluations of that rule, from a step-time model T(decode seqs, prefill tokens):
    simulate(...)      a deterministic step-by-step simulation (plain Python): exact for the
                       rule, ~1 s for 32 x 500-token requests on one core -- the reference;
                       with ``prompts`` it is a serving benchmark's own run (below)
    steady_state(...)  closed form for the steady state (plan's thousands of rows)

A serving benchmark's run (``simulate(prompts=...)``) is what vLLM's and SGLang's clients do: ``prompts``
requests, ``--request-rate inf`` with ``--max-concurrency N``, so the first N are sent at once and each
later one the moment one finishes; a request's TTFT runs from its own send to its first token, so it holds
the time it waits in the engine's queue behind the prompts sent with it, not the client's wait for a slot
(kowalski-4831/vllm-torchtpu scripts/vllm/benchmarking/backend_request_func.py ``_openai_fetch``:
``st = time.perf_counter()`` as the request is posted, ``ttft = time.perf_counter() - st`` at its first
chunk, @1b219f93, copied from vllm-project/vllm's backend_request_func.py @02f0c7b); TPOT a request's
(latency - TTFT) / (OSL - 1). Every request is measured, none warms up.
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
from collections import deque
from collections.abc import Callable
from typing import Literal

from k3plan.errors import K3PlanError, require
from k3plan.structs import Frozen

RULE = (
    "vLLM V1 Scheduler.schedule() (vllm/v1/core/sched/scheduler.py): running requests first "
    "(decode token or next prefill chunk), then waiting requests FCFS, within the token budget"
)
# SGLang's rule (``prefill_first``): sgl-project/sglang python/sglang/srt/managers/scheduler.py
# Scheduler.get_next_batch_to_run: a prefill batch of the waiting requests (a chunked prompt's next chunk first)
# runs whenever one can be formed, else the running batch decodes; ServerArgs.enable_mixed_chunk = False by
# default, so a step is either prefill or decode, never both. Prompts sent together are all prefilled before
# any of them decodes, and then decode in step: a benchmark's later requests arrive together too.
PREFILL_FIRST_RULE = (
    "SGLang Scheduler.get_next_batch_to_run (python/sglang/srt/managers/scheduler.py): a prefill batch of the "
    "waiting requests whenever one forms, else decode; prefill and decode never share a step (enable_mixed_chunk "
    "off by default)"
)


# SGLang's --scheduler-recv-interval N (sgl-project/sglang@70310f05 python/sglang/srt/managers/scheduler_recv_skipper.py
# SchedulerRecvSkipper.handle): before each batch the scheduler adds the last batch's weight to a counter -- a decode
# step 1, any other (prefill) 1,000 -- and takes the waiting requests in only once it reaches N; idle, it loops at
# once (weight 1 an iteration, no step), so an arrival to an idle engine is taken in at once.
RECV_RULE = (
    "SGLang's --scheduler-recv-interval N: new requests taken in every N decode steps, at once after a prefill "
    "or when idle (scheduler_recv_skipper.py SchedulerRecvSkipper)"
)


# The random dataset's lengths with a range ratio r (``--random-range-ratio``): each request's ISL and OSL drawn
# independently and uniformly from the integers [int(L r), L] (kimbochen/bench_serving benchmark_serving.py
# sample_random_requests @406abc35, the client of InferenceX, utils/bench_serving/benchmark_serving.py @8c145e00,
# and of ROCm/ATOM's OOT benchmark). k3plan draws them as a low-discrepancy sequence (van der Corput, base 2 for the
# inputs, 3 for the outputs) instead of the client's seeded RNG: the same distribution, deterministic, no sample noise.
LENGTHS_RULE = (
    "the client's random lengths: ISL and OSL each uniform over the integers [int(L r), L] "
    "(kimbochen/bench_serving benchmark_serving.py sample_random_requests; InferenceX and ATOM's client)"
)


# The KV pool as the engines admit against it: a waiting request is taken in only while its tokens (its prompt and
# every output token it will write) fit in the tokens the pool has left, the head of the queue first and none past it
# (vLLM V1 Scheduler.schedule: "The request cannot be scheduled" when kv_cache_manager.allocate_slots fails, and the
# waiting loop breaks; SGLang PrefillAdder.add_one_req: AddReqResult.NO_TOKEN ends the prefill batch). The whole
# output is held from admission -- no preemption is modelled (vLLM allocates pages as a request grows and preempts the
# newest when they run out; SGLang reserves a decaying share of each running request's remaining output and retracts).
POOL_RULE = (
    "the KV pool: a request admitted only while its prompt and whole output fit in the tokens left, the queue's head "
    "first (vLLM allocate_slots / SGLang PrefillAdder NO_TOKEN); no preemption"
)
# SGLang's sliding-window pool (its hybrid-SWA models, DeepSeek-V4 among them), read in the sglang 0.5.15 wheel: the
# PrefillAdder admits a request only while its first chunk and a page fit in the SWA tokens free or evictable
# (managers/schedule_policy.py PrefillAdder.add_one_req, rem_swa_tokens; no SWA reserve for a running request's
# future decode), and a running request keeps the SWA of its last inserted chunk locked for its whole life -- the
# whole page-aligned prompt where it was prefilled in one chunk -- while its decode tokens are freed every 128
# steps down to a page or two (mem_cache/swa_radix_cache.py inc_lock_ref; managers/schedule_batch.py, the
# SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT / SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW switches off by default)
SWA_RULE = (
    "SGLang's sliding-window pool: a request holds its prefill chunk -- min(ISL, the token budget), in whole pages: its "
    "whole prompt where that fits one chunk, an upper bound on a longer prompt's last chunk -- and a page of decode "
    "for its life, admitted only while that fits in the SWA tokens left (sglang 0.5.15 PrefillAdder rem_swa_tokens, "
    "SWARadixCache.inc_lock_ref)"
)


def _van_der_corput(n: int, base: int) -> list[float]:
    out = [0.0] * n
    for i in range(n):
        k, f, x = i + 1, 1.0 / base, 0.0
        while k:
            x += f * (k % base)
            k //= base
            f /= base
        out[i] = x
    return out


def client_lengths(nominal: int, range_ratio: float, n: int, *, base: int) -> list[int]:
    """``n`` lengths over [int(nominal x range_ratio), nominal] (``LENGTHS_RULE``), at least 1 token each."""
    lower = max(int(nominal * range_ratio), 1)
    span = nominal - lower + 1
    return [min(lower + math.floor(x * span), nominal) for x in _van_der_corput(n, base)]


class StepCoefficients(Frozen):
    """T(d, p) = base_s + per_decode_seq_s d + per_prefill_token_s p (each from expected_time), + per_prefill_pass_s
    where the step runs prefill tokens (p > 0): a fixed time an engine's loop spends on each step that prefills
    (term prefill-pass, ``speed.serving.loop_pass_s``; 0 elsewhere)."""

    base_s: float  # a step with no sequences: weights streamed, fixed collectives
    per_decode_seq_s: float
    per_prefill_token_s: float
    source: str  # where the coefficients come from
    per_prefill_pass_s: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("base_s", "per_decode_seq_s", "per_prefill_token_s", "per_prefill_pass_s"):
            if not getattr(self, name) >= 0:  # NaN refused too, as pydantic's ge=0 did
                raise ValueError(f"{name} {getattr(self, name)}: expected >= 0")

    def __call__(self, decode_seqs, prefill_tokens):
        """T(d, p) of numbers, or of numpy arrays element-wise (plan's columns)."""
        if not (isinstance(decode_seqs, (int, float)) and isinstance(prefill_tokens, (int, float))):
            import numpy as np  # the simulation steps with numbers: numpy only for a caller's columns

            decode_seqs, prefill_tokens = np.asarray(decode_seqs), np.asarray(prefill_tokens)
        return (
            self.base_s
            + self.per_decode_seq_s * decode_seqs
            + self.per_prefill_token_s * prefill_tokens
            + self.per_prefill_pass_s * (prefill_tokens > 0)
        )


StepTime = Callable[[int, int], float]


class SchedulerResult(Frozen):
    method: Literal["simulation", "steady-state"]
    ttft_s: float
    tpot_s: float
    request_latency_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float  # input and output tokens, as the clients' total_token_throughput counts them
    output_tokens_per_s_per_user: float  # 1 / TPOT
    output_tokens_per_s_per_chip: float
    mean_decode_seqs: float
    mean_prefill_tokens: float
    mean_step_s: float
    budget_bound: bool  # prefills queue behind the token budget
    requests_measured: int
    assumptions: tuple[str, ...]
    ttft_median_s: float | None = None  # the median request's (simulation only; benchmarks publish medians)
    tpot_median_s: float | None = None


def _check(*, isl: int, osl: int, token_budget: int, concurrency, request_rate_per_s, chips: int) -> None:
    require(isl >= 1 and osl >= 1, f"ISL {isl} and OSL {osl} must be >= 1 token")
    require(token_budget >= 1, f"--max-num-batched-tokens {token_budget}: must be >= 1")
    require(chips >= 1, f"chips {chips}: must be >= 1")
    require((concurrency is None) != (request_rate_per_s is None), "give a concurrency or a request rate, not both")
    require(concurrency is None or concurrency >= 1, f"concurrency {concurrency}: must be >= 1")
    require(request_rate_per_s is None or request_rate_per_s > 0, f"request rate {request_rate_per_s}: must be > 0")
    require(
        concurrency is None or concurrency <= token_budget,
        f"concurrency {concurrency} exceeds the token budget {token_budget}: decodes alone would not fit a step",
    )


def _assumptions(
    *,
    closed: bool,
    max_num_seqs,
    prompts: int | None = None,
    prefill_first: bool = False,
    lengths: bool = False,
    pool_tokens: int | None = None,
    swa_pool_tokens: int | None = None,
) -> tuple[str, ...]:
    load = (
        f"a serving benchmark's run: {prompts} requests, the first N sent at once, each later one as one "
        "finishes; every request measured"
        if prompts is not None
        else "closed loop: a new request arrives the moment one finishes (constant concurrency)"
        if closed
        else "open loop: requests arrive evenly spaced at the given rate (deterministic, no bursts)"
    )
    return (
        PREFILL_FIRST_RULE if prefill_first else RULE,
        load,
        (LENGTHS_RULE if lengths else "every request has the same ISL and OSL")
        + "; no prefix caching, no preemption (KV fits)",
        f"max_num_seqs = {max_num_seqs}",
        *((f"{POOL_RULE}: {pool_tokens:,} tokens",) if pool_tokens is not None else ()),
        *((f"{SWA_RULE}: {swa_pool_tokens:,} tokens",) if swa_pool_tokens is not None else ()),
        "step time from the given T(decode seqs, prefill tokens) model",
    )


def simulate(
    *,
    step_time: StepTime,
    isl: int,
    osl: int,
    token_budget: int,
    concurrency: int | None = None,
    request_rate_per_s: float | None = None,
    max_num_seqs: int | None = None,
    chips: int = 1,
    warmup_requests: int | None = None,
    measure_requests: int | None = None,
    max_steps: int = 2_000_000,
    prompts: int | None = None,
    prefill_first: bool = False,
    range_ratio: float | None = None,
    recv_interval: int = 1,
    pool_tokens: int | None = None,
    swa_pool_tokens: int | None = None,
    swa_page: int = 256,
) -> SchedulerResult:
    """Step the rule; averages over `measure_requests` finished requests after `warmup_requests`. ``prompts``
    (with ``concurrency``): a serving benchmark's run instead (module docstring): that many requests, the first
    ``concurrency`` sent together, none cut short, every one measured. ``prefill_first``: SGLang's rule
    (``PREFILL_FIRST_RULE``) instead of vLLM's. ``range_ratio`` (with ``prompts``): each request's ISL and OSL
    drawn as the client draws them (``LENGTHS_RULE``); None: every request ISL and OSL exactly. ``recv_interval``
    (closed loop): the engine takes new requests in only every that many decode steps (``RECV_RULE``; 1: every
    step). ``pool_tokens``: the KV pool's tokens; a request is admitted only while its ISL + OSL fit in what the
    running requests leave (``POOL_RULE``); None: no pool limit (``max_num_seqs`` alone). ``swa_pool_tokens``:
    SGLang's sliding-window pool, in pages of ``swa_page`` tokens (``SWA_RULE``): a request holds min(ISL, the token
    budget) -- its prompt where that fits a chunk, an upper bound on a longer prompt's last chunk -- and a page from
    admission to its end; None: none."""
    _check(
        isl=isl,
        osl=osl,
        token_budget=token_budget,
        concurrency=concurrency,
        request_rate_per_s=request_rate_per_s,
        chips=chips,
    )
    closed = concurrency is not None
    require(prompts is None or (closed and prompts >= 1), "a benchmark's run needs a concurrency and prompts >= 1")
    require(recv_interval >= 1 and (recv_interval == 1 or closed), f"recv interval {recv_interval}: >= 1, closed loop")
    require(pool_tokens is None or pool_tokens >= 1, f"KV pool {pool_tokens} tokens: must be >= 1")
    require(
        range_ratio is None or (prompts is not None and 0 <= range_ratio <= 1),
        f"range ratio {range_ratio}: a benchmark's run (prompts) with 0 <= ratio <= 1",
    )
    n, lam = concurrency or 0, request_rate_per_s or 0.0  # _check: exactly one is set
    seqs = max_num_seqs or (n if closed else token_budget)
    # open loop: enough requests to fill the system (rate x a lifetime of at least OSL one-sequence steps), twice
    in_flight = n if closed else max(8, math.ceil(lam * osl * float(step_time(1, 0))))
    if prompts is not None:  # the benchmark's run: every request measured, no filler after the last
        warm, meas = 0, prompts
        total = size = prompts
    else:
        warm = warmup_requests if warmup_requests is not None else 2 * in_flight
        require(not closed or warm >= n or warmup_requests is not None, "warm-up must cover the first N")
        meas = measure_requests if measure_requests is not None else 2 * in_flight
        total = warm + meas
        size = total + 4 * in_flight  # fillers keep the load up while the measured requests finish
    # plain Python lists (numpy scalar indexing costs ~10x a list's, and fit's path stays numpy-free)
    arrival: list[float] = [0.0] * size if closed else [i / lam for i in range(size)]
    left = [isl] * size if range_ratio is None else client_lengths(isl, range_ratio, size, base=2)
    target = [osl] * size if range_ratio is None else client_lengths(osl, range_ratio, size, base=3)
    outs = [float(x) for x in target[:total]]  # each request's OSL, as the client counts its TPOT
    ins = [float(x) for x in left[:total]]  # each request's ISL, as the client counts its input tokens
    if closed and prompts is None:  # the first N cut to staggered lengths: the loop starts desynchronised (warm-up)
        target[:n] = [max(1, math.ceil(osl * k / n)) for k in range(1, n + 1)]
    need = [left[i] + target[i] for i in range(size)]  # the pool tokens a request holds while it runs (POOL_RULE)
    pool = math.inf if pool_tokens is None else pool_tokens
    require(max(need) <= pool, f"a request of {max(need):,} tokens does not fit the KV pool of {pool_tokens} tokens")
    held = 0  # the running requests' pool tokens
    swa = math.inf if swa_pool_tokens is None else swa_pool_tokens
    swa_need = [-(-min(x, token_budget) // swa_page) * swa_page + swa_page for x in left]  # SWA_RULE
    require(
        swa_pool_tokens is None or max(swa_need) <= swa,
        f"a request's first chunk of {max(swa_need):,} tokens does not fit the sliding-window pool of "
        f"{swa_pool_tokens} tokens",
    )
    swa_held = 0

    def fits(r: int) -> bool:  # POOL_RULE and SWA_RULE
        return held + need[r] <= pool and swa_held + swa_need[r] <= swa

    first = [math.nan] * size
    done = [math.nan] * size
    pending = total  # measured-or-warm-up requests not yet done
    # T(d, p) for the coefficients' own model in floats, the same arithmetic as StepCoefficients.__call__
    coef = step_time if isinstance(step_time, StepCoefficients) else None

    def step_s(d: int, p: int) -> float:
        if coef is None:
            return float(step_time(d, p))
        dt = coef.base_s + coef.per_decode_seq_s * d + coef.per_prefill_token_s * p
        return dt + coef.per_prefill_pass_s if p else dt

    # The running requests, in the order they were admitted, are the decoding ones, then the ones still prefilling:
    # a prompt's chunks go to the running prompts in that order before a new one is taken in, so prompts finish in
    # the order they came. A decoding request is held without a per-step loop: ``tick`` counts the steps in which
    # decoding requests decode, request r has made tick + off[r] tokens and ends at tick target[r] - off[r] (the
    # heap, oldest first; an entry whose tick no longer matches is stale). The rule is the one stepped request by
    # request (each figure the same float additions in the same order), in time per step of the prefills, not of
    # the batch.
    decoding: dict[int, None] = {}  # in the order they began to decode
    off: dict[int, int] = {}
    ends: list[tuple[int, int]] = []  # (the tick at which it has its last token, r)
    tick = 0
    prefilling: deque[int] = deque()
    waiting: deque[int] = deque(range(min(total, n))) if closed else deque()
    unseen: list[int] = []  # arrived, not yet taken in (recv_interval > 1: RECV_RULE)
    counter = 0  # RECV_RULE's: decode steps since the engine last took requests in
    next_id, t, steps, sum_d, sum_p, sum_t = (len(waiting) if closed else 0), 0.0, 0, 0, 0, 0.0
    while pending:
        if not closed:  # arrivals up to now join the waiting queue
            while next_id < size and arrival[next_id] <= t:
                waiting.append(next_id)
                next_id += 1
            if not decoding and not prefilling and not waiting:
                t = arrival[next_id]
                continue
        if (
            closed
            and decoding
            and not prefilling
            and len(decoding) <= token_budget
            and (not waiting or len(decoding) >= seqs or not fits(waiting[0]))
            and not unseen
        ):
            # a run of decode-only steps: every running request decoding, none admitted, each step the same d; the
            # steps before the first of them ends are stepped here at once (the same float additions in order)
            while ends[0][1] not in decoding or ends[0][0] != target[ends[0][1]] - off[ends[0][1]]:
                heapq.heappop(ends)  # stale
            skip = min(ends[0][0] - tick - 1, max_steps - steps)
            if skip > 0:
                d = len(decoding)
                dt = step_s(d, 0)
                for _ in range(skip):
                    t += dt
                    sum_t += dt
                steps, sum_d = steps + skip, sum_d + d * skip
                if recv_interval > 1:  # a poll before each step (none takes anything in): it resets at the interval
                    c = (0 if counter >= recv_interval else counter) + skip
                    counter = c if c <= recv_interval else (c - 1) % recv_interval + 1
                tick += skip
        if recv_interval > 1 and ((not decoding and not prefilling) or counter >= recv_interval):  # RECV_RULE
            waiting.extend(unseen)
            unseen.clear()
            counter = 0
        budget = token_budget
        # SGLang: a prefill step whenever a prompt is mid-chunk or one waits for a free slot; it decodes no one
        admissible = bool(waiting) and len(decoding) + len(prefilling) < seqs and fits(waiting[0])
        prefill_only = prefill_first and (bool(prefilling) or admissible)
        d = 0 if prefill_only else min(len(decoding), budget)  # RUNNING first: one decode token each, in order
        budget -= d
        chunks: list[tuple[int, int]] = []
        for r in prefilling:  # then the running prompts' next chunks
            if budget <= 0:
                break
            k = min(left[r], budget)
            chunks.append((r, k))
            budget -= k
        while (
            waiting
            and budget > 0
            and len(decoding) + len(prefilling) < seqs
            and fits(waiting[0])
            and (prefill_only or not prefill_first)
        ):  # WAITING
            r = waiting.popleft()
            prefilling.append(r)
            held += need[r]
            swa_held += swa_need[r]
            k = min(left[r], budget)
            chunks.append((r, k))
            budget -= k
        p = token_budget - d - budget  # the prefill chunks
        dt = step_s(d, p)
        t += dt
        steps, sum_d, sum_p, sum_t = steps + 1, sum_d + d, sum_p + p, sum_t + dt
        counter = counter + 1 if p == 0 else recv_interval  # a prefill step: the next iteration takes requests in
        require(steps <= max_steps, f"scheduler simulation passed {max_steps} steps: is the load sustainable?")
        finished: list[int] = []
        if d:
            if d == len(decoding):
                tick += 1
            else:  # the budget ran out: only the first d made a token this step
                for r in list(itertools.islice(decoding, d)):
                    off[r] += 1
                    heapq.heappush(ends, (target[r] - off[r], r))
            while ends and ends[0][0] <= tick:
                _, r = heapq.heappop(ends)
                if r in decoding and target[r] - off[r] == tick:
                    done[r] = t
                    finished.append(r)
                    del decoding[r], off[r]
        for r, k in chunks:
            left[r] -= k
            if left[r] == 0:  # its last chunk samples its first token
                prefilling.popleft()  # prompts finish in order: it is the first one
                first[r] = t
                if target[r] <= 1:
                    done[r] = t
                    finished.append(r)
                else:
                    decoding[r], off[r] = None, 1 - tick
                    heapq.heappush(ends, (target[r] - off[r], r))
        if not finished:
            continue
        pending -= sum(1 for r in finished if r < total)
        held -= sum(need[r] for r in finished)
        swa_held -= sum(swa_need[r] for r in finished)
        if closed:
            for _ in finished:
                if next_id < size:
                    arrival[next_id] = t
                    (waiting if recv_interval == 1 else unseen).append(next_id)
                    next_id += 1
    measured = range(warm, total)
    ttfts = [first[i] - arrival[i] for i in measured]
    lats = [done[i] - arrival[i] for i in measured]
    ttft, lat = statistics.fmean(ttfts), statistics.fmean(lats)
    if range_ratio is not None:  # the client's TPOT: each request's (latency - TTFT) / (its OSL - 1), averaged
        many = [(la - tt) / (outs[i] - 1) for i, tt, la in zip(measured, ttfts, lats) if outs[i] > 1]
        tpots = many or [sum_t / steps] * meas
        tpot = statistics.fmean(tpots)
    else:
        tpot = (lat - ttft) / (osl - 1) if osl > 1 else sum_t / steps
        tpots = [(la - tt) / (osl - 1) for tt, la in zip(ttfts, lats)] if osl > 1 else [tpot] * meas
    if prompts is not None:  # the run's own: its output (and input) tokens over its duration
        end = max(done[:total])
        out_rate = math.fsum(outs) / end
        all_rate = (math.fsum(outs) + math.fsum(ins)) / end
    elif closed:  # Little's law: N requests in flight, each OSL tokens in `lat`
        out_rate, all_rate = n * osl / lat, n * (isl + osl) / lat
    else:  # every request completes: what arrives leaves
        out_rate, all_rate = lam * osl, lam * (isl + osl)
    return SchedulerResult(
        method="simulation",
        ttft_s=ttft,
        tpot_s=tpot,
        request_latency_s=lat,
        output_tokens_per_s=out_rate,
        total_tokens_per_s=all_rate,
        output_tokens_per_s_per_user=1.0 / tpot if tpot else math.inf,
        output_tokens_per_s_per_chip=out_rate / chips,
        mean_decode_seqs=sum_d / steps,
        mean_prefill_tokens=sum_p / steps,
        mean_step_s=sum_t / steps,
        budget_bound=bool(sum_d + sum_p >= 0.999 * token_budget * steps),
        requests_measured=meas,
        assumptions=_assumptions(
            closed=closed,
            max_num_seqs=seqs,
            prompts=prompts,
            prefill_first=prefill_first,
            lengths=range_ratio is not None,
            pool_tokens=pool_tokens,
            swa_pool_tokens=swa_pool_tokens,
        ),
        ttft_median_s=statistics.median(ttfts),
        tpot_median_s=statistics.median(tpots),
    )


def steady_state(
    *,
    step: StepCoefficients,
    isl: int,
    osl: int,
    token_budget: int,
    concurrency: float | None = None,  # a DP group's share may be fractional (plan/sla.py)
    request_rate_per_s: float | None = None,
    chips: int = 1,
) -> SchedulerResult:
    """Closed form of the steady state for a linear step time (the mean of a linear T is T of the means).

    X requests finish a step; each needs S_p = ceil(ISL / (B - d)) prefill steps (the budget left
    after the decodes) and OSL - 1 decode steps; d = X (OSL - 1), p = X ISL a step on average.
      closed loop (N):  N = X (S_p + OSL - 1) (Little), X <= B / (ISL + OSL - 1) (the budget)
      open loop (lambda): X = lambda T, T = base / (1 - lambda (a (OSL - 1) + b ISL)) (a fixed point)
    TPOT = T (a request's decode steps are a sample of all steps); TTFT = S_p (base + a d) + b ISL
    (its prefill chunks ride with the mean decodes), + T/2 waiting for the step boundary in the open
    loop, + the queueing steps Little's law leaves when the budget binds (closed loop).
    """
    _check(
        isl=isl,
        osl=osl,
        token_budget=token_budget,
        concurrency=concurrency,
        request_rate_per_s=request_rate_per_s,
        chips=chips,
    )
    closed = concurrency is not None
    n, lam = concurrency or 0, request_rate_per_s or 0.0  # _check: exactly one is set
    a, b, B = step.per_decode_seq_s, step.per_prefill_token_s, token_budget
    base = step.base_s + step.per_prefill_pass_s  # every step of the mixed steady state prefills some tokens
    x_cap = B / (isl + osl - 1)
    bound = False
    if closed:
        s_p = math.ceil(isl / B)
        for _ in range(8):  # S_p depends on d, d on X, X on S_p: a few rounds settle on integers
            x = min(n / (s_p + osl - 1), x_cap)
            d = x * (osl - 1)
            s_p_next = math.ceil(isl / max(B - d, 1.0))
            if s_p_next == s_p:
                break
            s_p = s_p_next
        bound = n / (s_p + osl - 1) > x_cap
        p = x * isl
        t = float(step(d, p))
        queue_steps = n / x - (s_p + osl - 1)  # > 0 only when the budget binds (Little's law)
        ttft = s_p * (base + a * d) + b * isl + queue_steps * t
        lat = ttft + (osl - 1) * t
        rate = n * osl / lat
    else:
        denom = 1.0 - lam * (a * (osl - 1) + b * isl)
        if denom <= 0:
            raise K3PlanError(
                f"request rate {lam:g}/s is beyond what the step time sustains "
                f"(needs lambda (a (OSL-1) + b ISL) < 1, got {1 - denom:.3g})"
            )
        t = base / denom
        x = lam * t
        if x > x_cap:
            raise K3PlanError(
                f"request rate {lam:g}/s needs {x * (isl + osl - 1):.0f} tokens a step, more than the token budget {B}"
            )
        d, p = x * (osl - 1), x * isl
        s_p = math.ceil(isl / max(B - d, 1.0))
        ttft = t / 2 + s_p * (base + a * d) + b * isl
        lat = ttft + (osl - 1) * t
        rate = lam * osl
    return SchedulerResult(
        method="steady-state",
        ttft_s=ttft,
        tpot_s=t,
        request_latency_s=lat,
        output_tokens_per_s=rate,
        total_tokens_per_s=rate * (isl + osl) / osl,
        output_tokens_per_s_per_user=1.0 / t if t else math.inf,
        output_tokens_per_s_per_chip=rate / chips,
        mean_decode_seqs=d,
        mean_prefill_tokens=p,
        mean_step_s=t,
        budget_bound=bound,
        requests_measured=0,
        assumptions=(
            *_assumptions(closed=closed, max_num_seqs=concurrency or B),
            "steady state: a request's prefill steps carry the mean decode batch",
        ),
    )
