"""`k3plan server`: the warm servers that answer new questions without a fresh start (k3plan.warm)."""

from __future__ import annotations

import typer
from pydantic import BaseModel, ConfigDict, ValidationError

from k3plan import warm
from k3plan.cli.common import JsonOpt, console, print_json

app = typer.Typer(
    help=f"""The warm servers: list them, or stop them.

A run of fit, plan, curve, roofline, check, report, models or hardware that no server answered starts one in the background for the next, one an interpreter, import path and environment. It imports what that run imported and answers later runs by forking a worker onto their own stdin, stdout and stderr: the same bytes as a fresh process, without the imports (benchmarks/README.md has the times).

It stops after K3PLAN_SERVER_IDLE seconds (default {warm.IDLE_S:.0f}) without a question, and steps aside when k3plan or a module it imported changes. K3PLAN_NO_SERVER=1 neither uses nor starts one.

\b
Examples:
  k3plan server                 the servers running (same as `server status`)
  k3plan server status --json
  k3plan server stop            stop them all
""",
    invoke_without_command=True,
    no_args_is_help=False,
)


class ServerStatus(BaseModel):
    """What a server says of itself (k3plan.warm_server.Server.status)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pid: int
    socket: str
    python: str
    k3plan: str
    modules: int
    started: str
    served: int
    running: int
    workers_cpu_s: float
    stale: bool
    idle_s: float
    stops_after_idle_s: float


def _statuses(op: str) -> list[ServerStatus]:
    where = warm.folder()
    if where is None or not where.is_dir():
        return []
    found = []
    for path in sorted(where.glob("*.sock")):
        reply = warm.control(path, op)
        try:
            found.append(ServerStatus.model_validate(reply))
        except ValidationError:  # none answered, or not a k3plan server's reply
            continue
    return found


def _show(rows: list[ServerStatus], json_out: bool, verb: str) -> None:
    if json_out:
        print_json([r.model_dump() for r in rows])
        return
    if not rows:
        off = f" ({warm.NO_SERVER_ENV}=1: none is used or started)" if not warm.allowed() else ""
        console.print(f"no warm k3plan server {'is' if verb == 'running' else 'was'} running{off}")
        return
    from k3plan.report.tables import Column, build_table, figure, print_whole

    columns = [figure("pid"), Column("started"), figure("served"), figure("running"), figure("idle s")]
    columns += [figure("stops after idle s"), figure("modules"), Column("k3plan since"), Column("python")]
    cells = [
        (str(r.pid), r.started, str(r.served), str(r.running), f"{r.idle_s:.0f}", f"{r.stops_after_idle_s:.0f}")
        + (str(r.modules), "changed: steps aside" if r.stale else "unchanged", r.python)
        for r in rows
    ]
    print_whole(console, build_table(columns, cells, title=f"warm k3plan servers {verb}"))


@app.callback()
def _default(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """The warm servers running (same as `server status`)."""
    if ctx.invoked_subcommand is None:
        _show(_statuses("status"), json_out, "running")


@app.command("status")
def status(json_out: JsonOpt = False) -> None:
    """The warm servers running: pid, when started, questions served, workers running, idle seconds.

    \b
    Examples:
      k3plan server status
      k3plan server status --json
    """
    _show(_statuses("status"), json_out, "running")


@app.command("stop")
def stop(json_out: JsonOpt = False) -> None:
    """Stop every warm server of this user's (each finishes the questions it is answering first).

    \b
    Examples:
      k3plan server stop
    """
    _show(_statuses("stop"), json_out, "stopped")
