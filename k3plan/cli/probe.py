"""`k3plan probe`: measure on the target what the model cannot know (jax imported only on run)."""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from k3plan.cli.common import JsonOpt, console, err_console, print_json, with_options
from k3plan.cli.lists import items, names, whole_numbers
from k3plan.errors import K3PlanError, require
from k3plan.units import DEFAULT_CONTEXT_TOKENS, DEFAULT_PREFILL_CHUNK_TOKENS


class ProbeGroup(TyperGroup):
    """An unknown probe is the user's error: one line, exit 2 (K3Group prints it)."""

    def resolve_command(self, ctx, args):
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            from k3plan.probes.registry import PROBES

            raise K3PlanError(f"unknown probe {args[0]!r}; expected one of {', '.join(PROBES)}")
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=ProbeGroup,
    no_args_is_help=True,
    help="""Microbenchmarks on whatever JAX backend is present; each run writes a ProbeRecord (JSON).

\b
Examples:
  k3plan probe a2a --bytes 64,1792,16KiB --mode chained      per-call all-to-all latency
  k3plan probe hbm --impl pallas                              Pallas streaming kernel vs XLA copy
  k3plan probe kda-decode --heads 8 --head-dim 64             Pallas decode step vs jnp reference
  k3plan probe step                                           a scaled K3 decode step: measured vs expected
  k3plan probe matmul --from-plan -t 2x2x4 --tp 32            the (M, N, K) K3's matmul ops have at that split
  k3plan probe gmm --kernel ext/gmm_v2.py                      an engine's grouped-matmul kernel at K3's expert shapes
  k3plan probe kda-engine --kernel ext/kda_chunk.py --decode-kernel ext/kda_decode_engine.py   an engine's KDA kernels
  k3plan probe attnres --kernel ext/attention_residual.py     an engine's Attention Residual kernel, K = 1..8
  k3plan probe moe-glue --kernel ext/moe_glue_engine.py       the MoE's routing/permute/combine glue at decode
  k3plan probe mla-engine --kernel ext/mla_v2_kernel.py       an engine's MLA kernel at its default blocks
  k3plan probe a2a --distributed --coordinator 10.0.0.2:8476 --num-processes 4 --process-id 0
On CPU, 8 fake devices are used (--cpu-devices) and records are labelled "correctness only";
the default sweep is then a quick one, and the run stops after 40 s unless --timeout says otherwise.
A progress bar over the sweep points (sizes x modes) shows on a terminal.
""",
)

TimeoutOpt = Annotated[
    Optional[float],
    typer.Option(
        "--timeout",
        help="Stop after this many seconds (checked between compiles and timed calls, so within one sweep point). Default: none on TPU/GPU, 40 s on CPU.",
    ),
]
# issue 36: a user folder by default, not the shipped records (k3plan/evidence/probes; other commands add --probes DIR)
USER_OUT = Path("k3plan-probes")
OutOpt = Annotated[
    Path,
    typer.Option(
        "--out", help="Folder for the records (default ./k3plan-probes); other commands read them with --probes DIR."
    ),
]
HardwareOpt = Annotated[
    Optional[str],
    typer.Option("--hardware", help="Spec for the expectation (default: the one matching the device kind)."),
]
RepeatsOpt = Annotated[int, typer.Option("--repeats", help="Timed samples per point.")]
WarmupOpt = Annotated[int, typer.Option("--warmup", help="Untimed calls before sampling.")]
CpuDevOpt = Annotated[
    Optional[int], typer.Option("--cpu-devices", help="Fake CPU devices (default 8 unless XLA_FLAGS sets it).")
]
NoWriteOpt = Annotated[bool, typer.Option("--no-write", help="Do not write record files.")]
DistOpt = Annotated[bool, typer.Option("--distributed", help="Initialise jax.distributed (multi-host).")]
CoordOpt = Annotated[
    Optional[str], typer.Option("--coordinator", help="HOST:PORT of process 0 (or JAX_COORDINATOR_ADDRESS).")
]
NProcOpt = Annotated[Optional[int], typer.Option("--num-processes", help="Process count (or JAX_NUM_PROCESSES).")]
PidOpt = Annotated[Optional[int], typer.Option("--process-id", help="This process (or JAX_PROCESS_ID).")]


MAX_CPU_DEVICES = 512  # fake CPU devices share the host: more is a typo (--cpu-devices 100000 never started)


def _common(
    timeout=None,
    out=USER_OUT,
    hardware=None,
    repeats=5,
    warmup=1,
    cpu_devices=None,
    no_write=False,
    distributed=False,
    coordinator=None,
    num_processes=None,
    process_id=None,
):
    from k3plan.probes.env import resolve_distributed
    from k3plan.probes.runner import RunSettings

    require(timeout is None or timeout > 0, f"--timeout {timeout}: expected seconds > 0")
    require(repeats >= 1 and warmup >= 0, "--repeats must be >= 1 and --warmup >= 0")
    require(
        cpu_devices is None or 1 <= cpu_devices <= MAX_CPU_DEVICES,
        f"--cpu-devices {cpu_devices}: expected 1 to {MAX_CPU_DEVICES} fake CPU devices",
    )
    dist = resolve_distributed(
        enabled=distributed, coordinator=coordinator, num_processes=num_processes, process_id=process_id
    )
    return RunSettings(
        timeout_s=timeout,
        hardware=hardware,
        warmup=warmup,
        repeats=repeats,
        out_dir=out,
        write=not no_write,
        cpu_devices=cpu_devices,
        distributed=dist,
    )


_PROBE_OPTIONS = (
    ("timeout", TimeoutOpt, None),
    ("out", OutOpt, USER_OUT),
    ("hardware", HardwareOpt, None),
    ("repeats", RepeatsOpt, 5),
    ("warmup", WarmupOpt, 1),
    ("cpu_devices", CpuDevOpt, None),
    ("no_write", NoWriteOpt, False),
    ("distributed", DistOpt, False),
    ("coordinator", CoordOpt, None),
    ("num_processes", NProcOpt, None),
    ("process_id", PidOpt, None),
    ("json_out", JsonOpt, False),
)


def with_probe_options(fn):
    """Give a probe subcommand the options every probe shares (timeout, out, hardware, repeats, warmup,
    cpu devices, no-write, the distributed four, --json) after its own, declared once here: ``fn`` takes
    ``launch`` -- launch(run, params) checks the params, builds the RunSettings and runs the probe --
    plus its own options (as cli/common.py's with_setup_options does for the planning commands)."""

    def build(c: dict):
        json_out = c.pop("json_out")

        def launch(run, params) -> None:
            params.check()
            _execute(_common(**c), partial(run, params=params), json_out)

        return launch

    return with_options(fn, takes="launch", options=_PROBE_OPTIONS, build=build)


_PLAN_OPTIONS = (
    (
        "from_plan",
        Annotated[
            bool,
            typer.Option(
                "--from-plan",
                help="Sweep the shapes the step's ops have on one device at the split the options below give "
                "(decode at --batch, prefill at --chunk) instead of fixed sizes; scaled down on CPU (the record says by how much).",
            ),
        ],
        False,
    ),
    ("model", Annotated[str, typer.Option("--model", "-m", help="--from-plan: the model.")], "kimi-k3"),
    (
        "plan_hardware",
        Annotated[str, typer.Option("--plan-hardware", help="--from-plan: the hardware planned for.")],
        "tpu-v7x",
    ),
    ("topology", Annotated[Optional[str], typer.Option("--topology", "-t", help="--from-plan: chip grid.")], None),
    ("tp", Annotated[Optional[int], typer.Option("--tp", help="--from-plan: tensor parallel size.")], None),
    (
        "plan_ep",
        Annotated[
            Optional[int], typer.Option("--plan-ep", help="--from-plan: expert parallel size (the plan's --ep).")
        ],
        None,
    ),
    ("dp", Annotated[Optional[int], typer.Option("--dp", help="--from-plan: data parallel groups.")], None),
    ("stack", Annotated[Optional[str], typer.Option("--stack", "-s", help="--from-plan: serving stack.")], None),
    ("batch", Annotated[int, typer.Option("--batch", "-b", help="--from-plan: decode sequences.")], 1),
    (
        "context",
        Annotated[int, typer.Option("--context", "-c", help="--from-plan: context tokens.")],
        DEFAULT_CONTEXT_TOKENS,
    ),
    (
        "chunk",
        Annotated[int, typer.Option("--chunk", help="--from-plan: prefill chunk tokens.")],
        DEFAULT_PREFILL_CHUNK_TOKENS,
    ),
)


def with_plan_options(fn):
    """Give a probe the --from-plan options: ``fn`` takes ``plan`` (probes.op_shapes.PlanShapes, or
    None without --from-plan) plus its own options."""

    def build(o: dict):
        stray = [n for n, _, default in _PLAN_OPTIONS if n != "from_plan" and o[n] != default]
        require(
            o["from_plan"] or not stray,
            f"--{stray[0].replace('_', '-') if stray else ''}: a --from-plan option; add --from-plan or leave it out",
        )
        if not o.pop("from_plan"):
            return None
        from k3plan.app.setup import setup_from
        from k3plan.probes.op_shapes import plan_shapes

        batch, context, chunk = o.pop("batch"), o.pop("context"), o.pop("chunk")
        setup = setup_from(hardware=o.pop("plan_hardware"), ep=o.pop("plan_ep"), **o)
        return plan_shapes(setup, batch=batch, context=context, chunk=min(chunk, context))

    return with_options(fn, takes="plan", options=_PLAN_OPTIONS, build=build)


@contextmanager
def _sweep_bar():
    """-> (progress(text), plan(total)): a rich bar over sweep points on a terminal (each
    progress() call starts a point), a spinner line otherwise (rich prints nothing when piped)."""
    if not err_console.is_terminal:
        with err_console.status("starting jax ...") as status:
            yield (lambda text: status.update(text)), (lambda total: None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("starting jax ...", total=None)
        started = [0]

        def progress(text: str) -> None:
            bar.update(task, description=text, completed=started[0])
            started[0] += 1

        yield progress, (lambda total: bar.update(task, total=total))
        bar.update(task, completed=started[0])


def _execute(settings, run, json_out: bool) -> None:
    from k3plan.probes.render import render
    from k3plan.probes.runner import run_probe

    with _sweep_bar() as (progress, plan):
        result = run_probe(settings=settings, run=run, progress=progress, plan=plan)
    if result.process_index != 0:
        return
    paths: list[Path | None] = list(result.paths) or [None] * len(result.records)  # no store: nothing written
    if json_out:
        print_json(list(result.records))  # Structs: print_json dumps them
        for p in result.paths:
            err_console.print(f"wrote {p}")
    else:
        for record, path in zip(result.records, paths):
            render(console, record, path)
    if result.paths:  # issue 36: how to use what was written
        folder = Path(result.paths[0]).parent
        flag = f"--probes {folder}" + (
            " --allow-cpu-probes" if any(r.device_kind.lower() == "cpu" for r in result.records) else ""
        )
        (err_console if json_out else console).print(
            f"use these records: {flag} (e.g. k3plan roofline {flag}; k3plan plan --rank-by expected {flag})",
            highlight=False,
            soft_wrap=True,
        )
    bad = [r for r in result.records if not r.ok or r.verified is False]
    if bad:
        for r in bad:
            err_console.print(
                f"[bold red]probe {r.probe} {r.mode or ''}:[/] "
                + (r.error or "; ".join(c.detail or "" for c in r.verification if not c.ok)),
                soft_wrap=True,
            )
        raise typer.Exit(1)


def _ints(text: str, *, what: str, minimum: int = 1) -> tuple[int, ...]:
    return tuple(whole_numbers(what, text, minimum=minimum, example="8,64"))


def _sizes(text: str, *, what: str) -> tuple[int, ...]:
    from k3plan.units import parse_bytes

    values = tuple(parse_bytes(t, what=what) for t in items(what, text))
    require(all(v > 0 for v in values), f"{what} {text!r}: every size must be > 0")
    return values


def _names(text: str, *, what: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(names(what, text, allowed=allowed))


def _collective(name: str, op: str):
    @with_probe_options
    def command(
        launch,
        bytes_: Annotated[
            Optional[str],
            typer.Option(
                "--bytes",
                help="Message sizes a device, e.g. 64,1792,16KiB. Default: 64,1792,16384,262144 on TPU/GPU; 64,1792 on CPU.",
            ),
        ] = None,
        mode: Annotated[str, typer.Option("--mode", help="chained, unchained or both.")] = "both",
        iters: Annotated[
            Optional[str], typer.Option("--iters", help="Chained: two N for the marginal cost. Default: 10,100.")
        ] = None,
        unchained_iters: Annotated[
            Optional[str],
            typer.Option("--unchained-iters", help="Unchained N sweep. Default: 1,10,100,1000 on TPU/GPU; 1,4 on CPU."),
        ] = None,
        axis_size: Annotated[
            Optional[int], typer.Option("--axis-size", help="Mesh axis size (default: all devices).")
        ] = None,
        dtype: Annotated[str, typer.Option("--dtype")] = "float32",
    ) -> None:
        from k3plan.probes.collectives.probe import CollectiveParams, run

        modes = (
            ("chained", "unchained")
            if mode == "both"
            else _names(mode, what="--mode", allowed=("chained", "unchained"))
        )
        params = CollectiveParams(
            op=op,
            sizes_bytes=_sizes(bytes_, what="--bytes") if bytes_ is not None else None,
            modes=modes,
            chained_n=_ints(iters, what="--iters") if iters is not None else None,
            unchained_n=_ints(unchained_iters, what="--unchained-iters") if unchained_iters is not None else None,
            axis_size=axis_size,
            dtype=_dtype(dtype),
        )
        launch(run, params)

    command.__doc__ = f"""Per-call {op} latency, chained and unchained, baseline subtracted, HLO-verified.

    Chained: a fori_loop of N dependent calls (per call = marginal cost between two N). Unchained: N
    independent calls in one program (overlap shows only at large N). Mesh: all devices or --axis-size.
    The default sweep is sized to the backend: the full one on TPU/GPU, a quick one on CPU (a CPU
    run checks correctness and measures nothing a planner uses; the record says so).

    \b
    Example: k3plan probe {name} --bytes 64,1792 --mode chained --timeout 120
    """
    return command


def _dtype(name: str) -> str:
    allowed = ("float32", "bfloat16", "float16")
    require(name in allowed, f"--dtype {name!r}: expected one of {', '.join(allowed)}")
    return name


for _name, _op in (("a2a", "all-to-all"), ("allreduce", "all-reduce"), ("allgather", "all-gather")):
    app.command(_name)(_collective(_name, _op))


@app.command("hbm")
@with_probe_options
def hbm(
    launch,
    size: Annotated[
        Optional[str],
        typer.Option(
            "--size", help="Array sizes, e.g. 64MiB,1GiB. Default: 64MiB,256MiB,1GiB on TPU/GPU; 16MiB,64MiB on CPU."
        ),
    ] = None,
    op: Annotated[str, typer.Option("--op", help="copy, reduce or both.")] = "both",
    impl: Annotated[
        str, typer.Option("--impl", help="xla, or pallas (a pipelined streaming kernel; interpret mode on CPU).")
    ] = "xla",
    dtype: Annotated[str, typer.Option("--dtype")] = "float32",
    block_rows: Annotated[int, typer.Option("--block-rows", help="Pallas tile rows (x 1024 columns).")] = 512,
) -> None:
    """Achieved HBM bandwidth a device on large copies (read + write) and reductions (read).

    \b
    Examples:
      k3plan probe hbm --size 1GiB
      k3plan probe hbm --impl pallas --op copy      Pallas stream vs what XLA's copy achieves
    """
    from k3plan.probes.hbm.probe import HbmParams, run

    ops = ("copy", "reduce") if op == "both" else _names(op, what="--op", allowed=("copy", "reduce"))
    params = HbmParams(
        sizes_bytes=_sizes(size, what="--size") if size is not None else None,
        ops=ops,
        impl=impl,
        dtype=_dtype(dtype),
        block_rows=block_rows,
    )
    launch(run, params)


@app.command("matmul")
@with_probe_options
@with_plan_options
def matmul(
    launch,
    plan,
    size: Annotated[
        Optional[str],
        typer.Option("--size", help="Square sizes M=N=K. Default: 1024,4096,8192 on TPU/GPU; 256,1024 on CPU."),
    ] = None,
    dtype: Annotated[
        str, typer.Option("--dtype", help="bfloat16, float32, float16, float8_e4m3fn, float8_e5m2, int8.")
    ] = "bfloat16,float32",
) -> None:
    """Achieved dense FLOP/s a device by dtype (fp32 accumulation).

    \b
    Example: k3plan probe matmul --dtype bfloat16,float8_e4m3fn --size 8192
    Example: k3plan probe matmul --from-plan -t 2x2x4 --tp 32 --batch 1 --chunk 8192   (K3's own shapes)
    """
    from k3plan.probes.matmul import DTYPES, MatmulParams, run

    require(plan is None or size is None, "--size and --from-plan: give one (--from-plan sweeps the step's shapes)")
    params = MatmulParams(
        sizes=_ints(size, what="--size", minimum=8) if size is not None else None,
        dtypes=_names(dtype, what="--dtype", allowed=DTYPES),
        plan=plan,
    )
    launch(run, params)


@app.command("kda")
@with_probe_options
def kda(
    launch,
    seq_lens: Annotated[
        Optional[str],
        typer.Option(
            "--seq-lens",
            help="Sequence lengths (multiples of --chunk). Default: 1024,4096,16384 on TPU/GPU; 128,512 on CPU.",
        ),
    ] = None,
    heads: Annotated[
        Optional[int], typer.Option("--heads", help="KDA heads. Default: 96 (K3's) on TPU/GPU; 4 on CPU.")
    ] = None,
    head_dim: Annotated[int, typer.Option("--head-dim", help="Head dim (K3: 128).")] = 128,
    batch: Annotated[int, typer.Option("--batch")] = 1,
    chunk: Annotated[int, typer.Option("--chunk", help="Chunk size of the chunked path.")] = 64,
    path: Annotated[str, typer.Option("--path", help="chunked, recurrent or both.")] = "both",
    impl: Annotated[
        str,
        typer.Option(
            "--impl",
            help="auto (tokamax if installed, else reference), tokamax, reference, or validate (k3plan validate's own "
            "chunked form, the graph probe step times).",
        ),
    ] = "auto",
) -> None:
    """KDA per-token cost vs sequence length at K3 head shapes, chunked and recurrent paths.

    Uses tokamax's kimi_delta_attention when installed (the record says which implementation ran),
    else the project's JAX reference of the gated delta rule. The default sweep is sized to the
    backend: K3's heads and lengths on TPU/GPU, a quick one on CPU (the record says so).

    \b
    Example (CPU-sized): k3plan probe kda --heads 8 --head-dim 64 --seq-lens 256,1024
    """
    from k3plan.probes.kda.probe import KdaParams, run

    paths = (
        ("chunked", "recurrent") if path == "both" else _names(path, what="--path", allowed=("chunked", "recurrent"))
    )
    params = KdaParams(
        seq_lens=_ints(seq_lens, what="--seq-lens") if seq_lens is not None else None,
        batch=batch,
        heads=heads,
        head_dim=head_dim,
        chunk=chunk,
        paths=paths,
        impl=impl,
    )
    launch(run, params)


@app.command("kda-decode")
@with_probe_options
def kda_decode(
    launch,
    heads: Annotated[int, typer.Option("--heads", help="KDA heads (K3: 96).")] = 96,
    head_dim: Annotated[int, typer.Option("--head-dim", help="Head dim (K3: 128).")] = 128,
    heads_per_block: Annotated[int, typer.Option("--heads-per-block", help="Heads per Pallas grid step.")] = 8,
    impl: Annotated[
        str, typer.Option("--impl", help="pallas (native, else interpret, else reference) or reference.")
    ] = "pallas",
    target: Annotated[
        Optional[str],
        typer.Option(
            "--target",
            help="A TPU topology (tpu7x:2x2x4, v6e:4x4): compile the kernel through Mosaic for it, deviceless "
            "(libtpu), and print what the compiler made of it (JSON) instead of running it here.",
        ),
    ] = None,
) -> None:
    """Pallas single-step KDA decode (fp32 state in and out, no chunk padding) vs the jnp reference.

    On a TPU or GPU: timed in a loop of dependent steps and checked against the jnp step at HIGHEST
    precision. With --target: the compile-only Mosaic check (probes/mosaic_check.py) for that TPU.

    \b
    Example: k3plan probe kda-decode --heads 96 --head-dim 128
    Example: k3plan probe kda-decode --target tpu7x:2x2x4      (compiled for v7x, not run; needs libtpu)
    """
    from k3plan.probes.kda_decode.probe import KdaDecodeParams, run

    params = KdaDecodeParams(heads=heads, head_dim=head_dim, heads_per_block=heads_per_block, impl=impl)
    if target is not None:
        _mosaic(target, params)
        return
    launch(run, params)


def _mosaic(target: str, params) -> None:
    """`probe kda-decode --target <tpu>`: the deviceless Mosaic compile of the kernel at these shapes."""
    from k3plan.validate.targets import parse_target, prepare

    params.check()
    tgt = parse_target(target)
    require(tgt.platform == "tpu" and not tgt.local, f"--target {target}: expected a TPU topology such as tpu7x:2x2x4")
    prepare(tgt, devices=1)  # libtpu present and quiet, before jax is imported
    from k3plan.probes.mosaic_check import check_kernels

    result = check_kernels(
        target=tgt.name,
        kernels=("kda-decode",),
        heads=params.heads,
        head_dim=params.head_dim,
        heads_per_block=params.heads_per_block,
    )
    print_json(result)
    if not all(k.ok for k in result.kernels):
        raise typer.Exit(1)


@app.command("ragged-dot")
@with_probe_options
@with_plan_options
def ragged_dot(
    launch,
    plan,
    tokens: Annotated[str, typer.Option("--tokens", help="Tokens routed per step.")] = "1,64,1024",
    experts: Annotated[int, typer.Option("--experts", help="Routed experts (K3: 896).")] = 896,
    top_k: Annotated[int, typer.Option("--top-k", help="Experts a token (K3: 16).")] = 16,
    d_in: Annotated[
        Optional[int],
        typer.Option("--d-in", help="Expert input width. Default: K3's latent 3584 on TPU/GPU; scaled down on CPU."),
    ] = None,
    d_out: Annotated[
        Optional[int],
        typer.Option("--d-out", help="Expert output width. Default: K3's 3072 on TPU/GPU; scaled down on CPU."),
    ] = None,
    ep: Annotated[int, typer.Option("--ep", help="Expert parallelism: this device holds experts/ep.")] = 32,
    dtype: Annotated[str, typer.Option("--dtype")] = "bfloat16",
) -> None:
    """jax.lax.ragged_dot grouped matmul at K3 expert shapes with real top-k routing sparsity.

    The default sweep is sized to the backend: K3's expert widths on TPU/GPU; on CPU a quick one
    with the widths divided by a power of two (routing kept; the record names the factor).

    \b
    Example (CPU-sized): k3plan probe ragged-dot --experts 64 --top-k 4 --d-in 256 --d-out 192 --ep 4
    Example: k3plan probe ragged-dot --from-plan -t 2x2x4 --tp 32 --batch 1 --chunk 8192   (K3's own shapes)
    """
    from k3plan.probes.ragged_dot import RaggedDotParams, run

    params = RaggedDotParams(
        tokens=_ints(tokens, what="--tokens"),
        experts=experts,
        top_k=top_k,
        d_in=d_in,
        d_out=d_out,
        ep=ep,
        dtype=dtype,
        plan=plan,
    )
    launch(run, params)


@app.command("gmm")
@with_probe_options
def gmm(
    launch,
    kernel: Annotated[
        Path,
        typer.Option(
            "--kernel",
            help="A Python file defining gmm_v2 with the engine kernel's call signature (e.g. a local copy of "
            "vllm-torchtpu's kernels/megablox/gmm_v2.py; never part of k3plan). Its SOURCE and LOCAL_EDITS, if "
            "defined, go into the record.",
        ),
    ],
    points: Annotated[
        str,
        typer.Option("--points", help="ROWSxGROUPS: routed rows over that many touched local experts."),
    ] = "256x28,16x2,64x28,1024x28",
    weights: Annotated[
        str, typer.Option("--weights", help="Weight formats: float4_e2m1fn, int4, bfloat16 (the control).")
    ] = "float4_e2m1fn,bfloat16",
    proj: Annotated[str, typer.Option("--proj", help="w13 (gate+up fused, silu), w2, or both.")] = "w13,w2",
    stand_in: Annotated[
        str, typer.Option("--stand-in", help="int4 (tried where fp4 does not compile, labelled) or none.")
    ] = "int4",
    experts: Annotated[int, typer.Option("--experts", help="Local experts a device (K3 at EP 32: 28).")] = 28,
    d_in: Annotated[int, typer.Option("--d-in", help="Expert input width (K3's latent: 3584).")] = 3584,
    intermediate: Annotated[int, typer.Option("--intermediate", help="Expert intermediate (K3: 3072).")] = 3072,
) -> None:
    """An engine's grouped-matmul kernel (gmm_v2) at K3's routed-expert shapes: seconds a call, bytes, FLOPs.

    The kernel is imported from --kernel at run time and called as the engine's gmm_wrapper calls it
    (MXFP4: float4_e2m1fn weights, experts x K x N, with fp32 block-32 scales, experts x K/32 x 1 x N); bf16
    weights in the same run are the control. Each point is timed as N dependent calls in one program. Where
    the compiler refuses fp4 (Mosaic on TPU v5e), int4 weights with the same scales stand in, labelled.

    \b
    Examples:
      k3plan probe gmm --kernel ext/gmm_v2.py                          K3's shapes: w13 and w2, fp4 and bf16
      k3plan probe gmm --kernel ext/gmm_v2.py --points 256x28 --proj w13 --weights float4_e2m1fn
      k3plan probe gmm --kernel tests/probes/gmm_standin.py --experts 4 --d-in 128 --intermediate 128 --points 8x2
    """
    from k3plan.probes.gmm import GmmParams, run

    pts = []
    for item in items("--points", points):
        rows, sep, groups = item.lower().partition("x")
        require(
            sep == "x" and rows.isdigit() and groups.isdigit(), f"--points {item!r}: expected ROWSxGROUPS, e.g. 256x28"
        )
        pts.append((int(rows), int(groups)))
    params = GmmParams(
        kernel=kernel,
        points=tuple(pts),
        weights=_names(weights, what="--weights", allowed=("float4_e2m1fn", "int4", "bfloat16")),
        projections=_names(proj, what="--proj", allowed=("w13", "w2")),
        stand_in=None if stand_in == "none" else stand_in,
        experts=experts,
        d_in=d_in,
        intermediate=intermediate,
    )
    launch(run, params)


def _pairs(text: str, *, what: str, example: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in items(what, text):
        a, sep, b = item.lower().partition("x")
        require(sep == "x" and a.isdigit() and b.isdigit(), f"{what} {item!r}: expected AxB, e.g. {example}")
        out.append((int(a), int(b)))
    return tuple(out)


@app.command("kda-engine")
@with_probe_options
def kda_engine(
    launch,
    kernel: Annotated[
        Optional[Path],
        typer.Option(
            "--kernel",
            help="A Python file defining chunk_kda with the engine kernel's call signature (e.g. a local copy of "
            "vllm-torchtpu's kernels/kimi_k3/chunk_kda.py; never part of k3plan). Its SOURCE, LOCAL_EDITS and "
            "DEPENDENCIES, if defined, go into the record.",
        ),
    ] = None,
    decode_kernel: Annotated[
        Optional[Path],
        typer.Option(
            "--decode-kernel",
            help="A Python file defining decode_kda with the engine kernel's call signature (kernels/kimi_k3/"
            "decode_kda.py); the same file as --kernel if it defines both.",
        ),
    ] = None,
    prefill: Annotated[
        str,
        typer.Option("--prefill", help="TOKENSxHEADS: one sequence of that many tokens, that many KDA heads."),
    ] = "512x3,2048x3,8192x3,512x6,512x12",
    decode: Annotated[
        str,
        typer.Option("--decode", help="ROWSxHEADS: the decode call's request rows (the engine pads to 16), heads."),
    ] = "16x3,1x3",
    decode_real: Annotated[
        int, typer.Option("--decode-real", help="Real sequences among a decode call's rows; the rest are padding.")
    ] = 1,
    head_dim: Annotated[int, typer.Option("--head-dim", help="KDA head dim (K3: 128).")] = 128,
    lower_bound: Annotated[
        str, typer.Option("--lower-bound", help="The gate's lower bound (K3: -5.0), or none (softplus gate).")
    ] = "-5.0",
) -> None:
    """An engine's own KDA kernels (chunked prefill, fused decode) at K3's per-device shapes: seconds a call.

    The kernels are imported from --kernel / --decode-kernel at run time and called as the engine's Kimi KDA
    op calls them (bf16 activations, f32 state, the raw gate activated in the kernel with K3's lower bound).
    Each point is timed as N dependent calls in one program (a prefill call continues from the last one's
    final state); bytes, FLOPs and the spec's ceiling are in the record, a point faster than it is refused.

    \b
    Examples:
      k3plan probe kda-engine --kernel ext/kda_chunk.py --decode-kernel ext/kda_decode_engine.py   K3 at TP 32
      k3plan probe kda-engine --kernel ext/kda_chunk.py --prefill 512x3,512x6 --head-dim 128
      k3plan probe kda-engine --kernel tests/probes/kda_engine_standin.py --decode-kernel tests/probes/kda_engine_standin.py --prefill 64x2 --decode 4x2 --head-dim 16
    """
    from k3plan.probes.kda_engine import KdaEngineParams, run

    lb: Optional[float] = None
    if lower_bound.strip().lower() != "none":
        try:
            lb = float(lower_bound)
        except ValueError:
            require(False, f"--lower-bound {lower_bound!r}: expected a negative number or none")
    params = KdaEngineParams(
        kernel=kernel,
        decode_kernel=decode_kernel,
        prefill=_pairs(prefill, what="--prefill", example="512x3"),
        decode=_pairs(decode, what="--decode", example="16x3"),
        decode_real=decode_real,
        head_dim=head_dim,
        lower_bound=lb,
    )
    launch(run, params)


@app.command("attnres")
@with_probe_options
def attnres(
    launch,
    kernel: Annotated[
        Optional[Path],
        typer.Option(
            "--kernel",
            help="A Python file defining attention_residual with the engine kernel's call signature (e.g. a local "
            "copy of vllm-torchtpu's kernels/kimi_k3/attention_residual.py; never part of k3plan). Its SOURCE, "
            "LOCAL_EDITS and DEPENDENCIES, if defined, go into the record.",
        ),
    ] = None,
    tokens: Annotated[
        str, typer.Option("--tokens", help="Rows a call (multiples of 16): decode's 16 padded rows, a prefill chunk.")
    ] = "16,512",
    blocks: Annotated[
        str, typer.Option("--blocks", help="Saved blocks K in the history (K3's calls see 1..8).")
    ] = "1,2,3,4,5,6,7,8",
    hidden: Annotated[int, typer.Option("--hidden", help="Hidden width (K3: 7168, replicated over TP).")] = 7168,
    layers: Annotated[int, typer.Option("--layers", help="Decoder layers, for the per-step sum (K3: 93).")] = 93,
    block_size: Annotated[
        int, typer.Option("--block-size", help="attn_res_block_size, for the per-step sum (K3: 12).")
    ] = 12,
) -> None:
    """An engine's own Attention Residual kernel at K3's per-device shapes: seconds a call, and a forward's sum.

    The kernel is imported from --kernel at run time and called as the engine's AttentionResidual.forward calls
    it (prefix [T, hidden] bf16, history [T, K, hidden] bf16, the folded weight [hidden] f32). Each point is
    timed as N dependent calls in one program (the output the next call's prefix); bytes, FLOPs and the spec's
    ceiling are in the record, a point faster than it is refused. The record's params.per_step sums a forward's
    calls (93 layers: 92 + 93 + 1, K from the block schedule) for each T.

    \b
    Examples:
      k3plan probe attnres --kernel ext/attention_residual.py                      K3 at TP 32: T 16, 512; K 1..8
      k3plan probe attnres --kernel ext/attention_residual.py --tokens 16 --blocks 1,8
      k3plan probe attnres --kernel tests/probes/attnres_standin.py --tokens 16,32 --blocks 1,2 --hidden 256 --layers 3 --block-size 2
    """
    from k3plan.probes.attnres_engine import AttnResParams, run

    params = AttnResParams(
        kernel=kernel,
        tokens=_ints(tokens, what="--tokens"),
        blocks=_ints(blocks, what="--blocks"),
        hidden=hidden,
        layers=layers,
        block_size=block_size,
    )
    launch(run, params)


@app.command("mla-engine")
@with_probe_options
def mla_engine(
    launch,
    kernel: Annotated[
        Optional[Path],
        typer.Option(
            "--kernel",
            help="A Python file defining mla_ragged_paged_attention with the engine kernel's call signature (e.g. a "
            "local copy of vllm-torchtpu's kernels/mla/v2/kernel.py; never part of k3plan). Its folder is on the "
            "import path while it loads; its SOURCE, LOCAL_EDITS and DEPENDENCIES go into the record.",
        ),
    ] = None,
    tokens: Annotated[int, typer.Option("--tokens", help="A prefill chunk's rows (the nightly's 512).")] = 512,
    contexts: Annotated[
        str, typer.Option("--contexts", help="kv_len at a chunk (its end in the prompt), one point each.")
    ] = "512,2048,4608,8192",
    blocks: Annotated[
        str,
        typer.Option(
            "--blocks",
            help="QUERIESxPAGES a mixed-pass block (the engine's default with no tuned entry: 16x1).",
        ),
    ] = "16x1",
    decode_contexts: Annotated[
        str, typer.Option("--decode-contexts", help="kv_len of a decode step's one real row ('none': no decode point).")
    ] = "8192",
    decode_rows: Annotated[int, typer.Option("--decode-rows", help="Decode's padded rows (the nightly's 16).")] = 16,
    decode_blocks: Annotated[
        str, typer.Option("--decode-blocks", help="QUERIESxPAGES a decode block (the engine's default: 1x3).")
    ] = "1x3",
    heads: Annotated[int, typer.Option("--heads", help="MLA heads a device (K3 at TP 32: 96 / 32 = 3).")] = 3,
    lkv: Annotated[int, typer.Option("--lkv", help="kv_lora_rank (K3: 512).")] = 512,
    rope: Annotated[int, typer.Option("--rope", help="Cached rope dims (K3: 64).")] = 64,
    page: Annotated[
        int, typer.Option("--page", help="Tokens a cache page (the plugin's default KV block: 16; --block-size).")
    ] = 16,
    max_len: Annotated[int, typer.Option("--max-len", help="max_model_len: pages a sequence's table holds.")] = 9216,
) -> None:
    """An engine's own MLA ragged paged attention kernel at K3's per-device shapes and block sizes.

    The kernel is imported from --kernel at run time and called as the engine calls it for one request: a
    prefill chunk is the mixed pass over --tokens rows at each --contexts kv_len, a decode step the decode pass
    over --decode-rows rows with one real. Each point is timed as N dependent calls in one program; bytes,
    FLOPs and the spec's ceiling are in the record, a point faster than it is refused; the real rows' output is
    checked against a float64 numpy attention.

    \b
    Examples:
      k3plan probe mla-engine --kernel ext/mla_v2_kernel.py                       the nightly's default blocks and pages
      k3plan probe mla-engine --kernel ext/mla_v2_kernel.py --page 192 --blocks 16x1,512x8 --contexts 4608,8192
      k3plan probe mla-engine --kernel tests/probes/mla_standin.py --tokens 32 --contexts 32,64 --page 16 --max-len 128 --decode-contexts 64
    """
    from k3plan.probes.mla_engine import MlaParams, run

    decode_block = _pairs(decode_blocks, what="--decode-blocks", example="1x3")
    require(len(decode_block) == 1, f"--decode-blocks {decode_blocks!r}: one QUERIESxPAGES, e.g. 1x3")
    params = MlaParams(
        kernel=kernel,
        tokens=tokens,
        contexts=_ints(contexts, what="--contexts"),
        blocks=_pairs(blocks, what="--blocks", example="16x1,512x8"),
        decode_rows=decode_rows,
        decode_contexts=()
        if decode_contexts.strip().lower() == "none"
        else _ints(decode_contexts, what="--decode-contexts"),
        decode_blocks=decode_block[0],
        heads=heads,
        lkv=lkv,
        rope=rope,
        page=page,
        max_len=max_len,
    )
    launch(run, params)


@app.command("moe-glue")
@with_probe_options
def moe_glue(
    launch,
    kernel: Annotated[
        Optional[Path],
        typer.Option(
            "--kernel",
            help="A Python file defining moe_glue (e.g. a local copy of vllm-torchtpu's layers/core/fused_moe_gmm.py "
            "glue with its two gmm_v2 calls taken out; never part of k3plan). Its SOURCE and LOCAL_EDITS go into "
            "the record.",
        ),
    ] = None,
    tokens: Annotated[str, typer.Option("--tokens", help="Token rows a call (decode pads to 16).")] = "16",
    experts: Annotated[int, typer.Option("--experts", help="Routed experts (K3: 896).")] = 896,
    topk: Annotated[int, typer.Option("--topk", help="Experts a token (K3: 16).")] = 16,
    ep: Annotated[int, typer.Option("--ep", help="Expert-parallel ranks (K3 at TP 32: 32, so 28 local).")] = 32,
    hidden: Annotated[int, typer.Option("--hidden", help="Width the experts see (K3's latent MoE: 3584).")] = 3584,
    threshold: Annotated[
        int, typer.Option("--threshold", help="The engine's one-hot permute threshold in routed rows (auto: 511).")
    ] = 511,
) -> None:
    """The XLA glue around an engine's two routed-expert matmuls at decode: seconds a call (issue 38).

    The glue is imported from --kernel at run time: the EP remap, the routing sort, the one-hot permute and the
    one-hot combine of the engine's fused MoE, the branch it takes when tokens x topk routed rows are at most its
    one-hot threshold; the grouped matmuls themselves are probe gmm's. Each point is timed as N dependent calls
    in one program; bytes, FLOPs and the spec's ceiling are in the record, a point faster than it is refused.

    \b
    Examples:
      k3plan probe moe-glue --kernel ext/moe_glue_engine.py                     K3 at TP/EP 32: 16 rows, top-16 of 896
      k3plan probe moe-glue --kernel ext/moe_glue_engine.py --tokens 16,32
      k3plan probe moe-glue --kernel tests/probes/moe_glue_standin.py --hidden 256 --experts 64 --topk 4 --ep 4
    """
    from k3plan.probes.moe_glue import MoeGlueParams, run

    params = MoeGlueParams(
        kernel=kernel,
        tokens=_ints(tokens, what="--tokens"),
        experts=experts,
        topk=topk,
        ep=ep,
        hidden=hidden,
        threshold=threshold,
    )
    launch(run, params)


@app.command("dsv4-ops")
@with_probe_options
def dsv4_ops(
    launch,
    model: Annotated[str, typer.Option("--model", "-m", help="A bundled DeepSeek-V4 model (CSA/HCA).")] = (
        "deepseek-v4-flash"
    ),
    decode_rows: Annotated[str, typer.Option("--decode-rows", help="Sequences a decode step (a DP group).")] = "256",
    prefill_rows: Annotated[str, typer.Option("--prefill-rows", help="Tokens a prefill chunk.")] = "1024",
    context: Annotated[int, typer.Option("--context", help="Tokens of context a sequence.")] = 8192,
    ops: Annotated[
        Optional[str],
        typer.Option("--ops", help="Comma-separated ops (default: all of k3plan's V4 attention-side ops)."),
    ] = None,
) -> None:
    """DeepSeek-V4's attention-side ops of one layer as jnp references, timed at a DP group's per-device shapes.

    The lightning indexer with its top-k, CSA's row gather of the top-k compressed entries and its attention, HCA,
    the window, the compressors and mHC -- each an op of k3plan's V4 op list at TP 1, its ceiling k3plan's own for
    that op (issue 46). Each point is timed as N dependent calls in one program; a point faster than its ceiling
    is refused.

    \b
    Examples:
      k3plan probe dsv4-ops                                      V4 Flash: 256 decode rows, a 1024-token chunk, 8k
      k3plan probe dsv4-ops -m deepseek-v4-pro --decode-rows 64
    """
    from k3plan.probes.dsv4_ops import OPS, Dsv4Params, run

    params = Dsv4Params(
        model=model,
        decode_rows=_ints(decode_rows, what="--decode-rows"),
        prefill_rows=_ints(prefill_rows, what="--prefill-rows"),
        context=context,
        ops=tuple(o.strip() for o in ops.split(",") if o.strip()) if ops else OPS,
    )
    launch(run, params)


@app.command("step")
@with_probe_options
def step(
    launch,
    batch: Annotated[int, typer.Option("--batch", help="Sequences in the decode step.")] = 2,
    context: Annotated[int, typer.Option("--context", help="Tokens each sequence attends to.")] = 256,
    topology: Annotated[
        Optional[str],
        typer.Option(
            "--topology",
            "-t",
            help="Chips the step is laid out on. Default: 2x2x1 of tpu-v7x (toy width); one chip of the device's spec (k3 width).",
        ),
    ] = None,
    tp: Annotated[
        Optional[int], typer.Option("--tp", help="Tensor parallel size. Default: 8 (toy width), 1 (k3 width).")
    ] = None,
    width: Annotated[
        str,
        typer.Option(
            "--width",
            help="toy: 2 layers at toy widths (CPU-sized); k3: K3's hidden/latent/head widths, layers and experts cut "
            "to fit one chip; auto: toy on CPU, k3 on an accelerator.",
        ),
    ] = "auto",
    stage: Annotated[str, typer.Option("--stage", help="decode, prefill or both.")] = "decode",
    prefill_tokens: Annotated[int, typer.Option("--prefill-tokens", help="Tokens of the prefill step.")] = 1024,
    layers: Annotated[Optional[int], typer.Option("--layers", help="k3 width: layers (default 4).")] = None,
    experts: Annotated[Optional[int], typer.Option("--experts", help="k3 width: routed experts (default 32).")] = None,
    no_sub_probes: Annotated[
        bool,
        typer.Option("--no-sub-probes", help="Skip the efficiency records of this run (every op then at its ceiling)."),
    ] = False,
    records: Annotated[
        Optional[Path],
        typer.Option(
            "--records",
            help="Take the efficiency records (this device kind's, ok) from this folder instead of measuring them in "
            "this run.",
        ),
    ] = None,
    stack: Annotated[
        Optional[str], typer.Option("--stack", "-s", help="k3 width: the serving stack (default: the hardware's).")
    ] = None,
    expert_format: Annotated[
        str,
        typer.Option(
            "--expert-format",
            help="k3 width: bf16 (the routed experts in bf16, plain ragged_dots) or runtime (the stack's own format "
            "and validate's form of it, e.g. MXFP4 dequantized in XLA).",
        ),
    ] = "bf16",
    grid: Annotated[
        Optional[str],
        typer.Option(
            "--grid",
            help="k3 width: points of one model on the same drawn weights, e.g. decode:1x2048,decode:64x32768,"
            "prefill:8192 (decode:BATCHxCONTEXT, prefill:TOKENS); a point the chip refuses (out of memory) is a "
            "record too. Overrides --batch/--context/--prefill-tokens/--stage.",
        ),
    ] = None,
) -> None:
    """A scaled K3 step timed end to end with real arrays, beside its expected time.

    The expected time is the step's op list (the one `roofline` uses) against efficiency records
    measured in the same run (matmul, hbm, allreduce at the sizes its ops have; at --width k3 also
    ragged-dot, kda and kda-decode; written beside the step's record); measured vs expected, the
    compiler's memory_analysis and (TPU/GPU) the profiler's per-op device time are in the record. On
    CPU the fake devices share the host's cores: the run checks the machinery, not a calibration.

    \b
    Examples:
      k3plan probe step                                  8 fake CPU devices, batch 2 at 256 tokens
      k3plan probe step --topology 1x1x1 --tp 2 --cpu-devices 2 --no-write
      k3plan probe step --width k3 --stage both --batch 16 --context 8192 --prefill-tokens 1024   (one TPU chip)
      k3plan probe step --width k3 --layers 2 --expert-format runtime --records reports/probes \\
          --grid decode:1x2048,decode:64x32768,prefill:8192                                 (one TPU chip, a grid)
    """
    from k3plan.probes.step.probe import StepParams, parse_grid, run

    points = parse_grid(grid) if grid is not None else ()
    stages = ("decode", "prefill") if stage == "both" else _names(stage, what="--stage", allowed=("decode", "prefill"))
    if points:
        stages = tuple(st for st in ("decode", "prefill") if any(p[0] == st for p in points))
    params = StepParams(
        batch=batch,
        context=context,
        topology=topology,
        tp=tp,
        sub_probes=not no_sub_probes,
        width=width,
        stages=stages,
        prefill_tokens=prefill_tokens,
        layers=layers,
        experts=experts,
        records=records,
        stack=stack,
        expert_format=expert_format,
        grid=points,
    )
    params.check()  # bad input (an absurd --batch) before jax starts
    launch(run, params)
