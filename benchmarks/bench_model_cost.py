"""What one typed result class costs a fresh process, measured against fit's import floor (issue 12).

    python3 benchmarks/bench_model_cost.py [--runs 5] [--classes 40] [--callgrind]

fit's path builds ~85 pydantic model classes that it needs (its specs, its result and their nested
models; the 13 it does not need are deferred), and the goal "fit within 1.3x its import floor"
leaves ~0.3 of the floor for everything fit adds. This script measures, in fresh processes that
first import the floor (numpy, yaml, typer, rich.console, pydantic.BaseModel), the cost of defining
``--classes`` classes shaped like k3plan's results (7 fields: str, ints, optional ints, a float, an
optional str) in each of the ways Python offers, as a ratio to the floor:

  pydantic, constrained  NonNegativeInt / PositiveInt / Field(gt=0) fields (how k3plan writes them)
  pydantic, plain        the same fields as int / float
  pydantic, deferred     constrained, defer_build=True (the schema waits for the first validation)
  dataclass              @dataclass(frozen=True), the same plain fields
  __slots__ class        a hand-written class (no generated code): the floor of "a typed record"
  msgspec.Struct         frozen, kw_only, forbid_unknown_fields, constraints as Meta (checked where
                         msgspec.convert / decode validates, not in __init__); the import of msgspec
                         is in its first class

Each is one process of ``--classes`` definitions minus one of a single definition (so the first
class's one-off costs are split out and printed apart), divided by the count: the cost a class.
``--callgrind`` counts instructions with valgrind instead of timing (load-independent; slow).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import CHILD_CWD, CHILD_ENV, one  # benchmarks/timing.py

FLOOR = "import numpy, yaml, typer, rich.console; from pydantic import BaseModel\n"
HEAD = FLOOR + (
    "import dataclasses, sys\n"
    "from pydantic import ConfigDict, Field, NonNegativeInt, PositiveInt\n"
    "n = int(sys.argv[1])\n"
)
FIELDS_CONSTRAINED = (
    "    topology: str\n    devices: PositiveInt\n    weights_bytes: NonNegativeInt\n"
    "    kv_bytes: NonNegativeInt | None = None\n    state_bytes: NonNegativeInt | None = None\n"
    "    temp_s: float = Field(default=1.0, gt=0)\n    name: str | None = None\n"
)
FIELDS_PLAIN = (
    "    topology: str\n    devices: int\n    weights_bytes: int\n    kv_bytes: int | None = None\n"
    "    state_bytes: int | None = None\n    temp_s: float = 1.0\n    name: str | None = None\n"
)
SLOTS = (
    "class C{i}:\n"
    "    __slots__ = ('topology', 'devices', 'weights_bytes', 'kv_bytes', 'state_bytes', 'temp_s', 'name')\n\n"
    "    def __init__(self, topology, devices, weights_bytes, kv_bytes=None, state_bytes=None, temp_s=1.0, name=None):\n"
    "        self.topology, self.devices, self.weights_bytes = topology, devices, weights_bytes\n"
    "        self.kv_bytes, self.state_bytes, self.temp_s, self.name = kv_bytes, state_bytes, temp_s, name\n"
)
KINDS = {
    "pydantic, constrained": "class C{i}(BaseModel):\n    model_config = ConfigDict(frozen=True, extra='forbid')\n"
    + FIELDS_CONSTRAINED,
    "pydantic, plain": "class C{i}(BaseModel):\n    model_config = ConfigDict(frozen=True, extra='forbid')\n"
    + FIELDS_PLAIN,
    "pydantic, deferred": "class C{i}(BaseModel):\n"
    "    model_config = ConfigDict(frozen=True, extra='forbid', defer_build=True)\n" + FIELDS_CONSTRAINED,
    "dataclass": "@dataclasses.dataclass(frozen=True)\nclass C{i}:\n" + FIELDS_PLAIN,
    "__slots__ class": SLOTS,
    "msgspec.Struct": "import msgspec\nfrom typing import Annotated\n"
    "class C{i}(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):\n"
    "    topology: str\n    devices: Annotated[int, msgspec.Meta(gt=0)]\n"
    "    weights_bytes: Annotated[int, msgspec.Meta(ge=0)]\n"
    "    kv_bytes: Annotated[int, msgspec.Meta(ge=0)] | None = None\n"
    "    state_bytes: Annotated[int, msgspec.Meta(ge=0)] | None = None\n"
    "    temp_s: Annotated[float, msgspec.Meta(gt=0)] = 1.0\n    name: str | None = None\n",
}


def script(body: str, folder: Path, name: str) -> Path:
    """A module defining C0 .. C{n-1} (source written out, so each class compiles as a module's would)."""
    src = HEAD + "SRC = " + repr(body) + "\nfor i in range(n):\n    exec(SRC.format(i=i))\n"
    path = folder / f"{name}.py"
    path.write_text(src)
    return path


def instructions(args: list[str]) -> float:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
        capture_output=True, text=True, env=CHILD_ENV, check=True, cwd=CHILD_CWD,
    ).stderr
    line = next(x for x in out.splitlines() if "refs:" in x)
    return float(line.split()[-1].replace(",", ""))


def cost(args: list[str], runs: int, callgrind: bool) -> float:
    if callgrind:
        return instructions(args)
    one([sys.executable, *args])  # warm-up
    return statistics.median(one([sys.executable, *args])[1] for _ in range(runs))  # CPU seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--classes", type=int, default=40)
    ap.add_argument("--callgrind", action="store_true", help="count instructions (valgrind) instead of CPU time")
    args = ap.parse_args()
    unit = "G instr" if args.callgrind else "CPU s"
    scale = 1e9 if args.callgrind else 1.0
    with tempfile.TemporaryDirectory() as tmp:
        floor = cost(["-c", FLOOR], args.runs, args.callgrind)
        print(f"floor (numpy, yaml, typer, rich.console, pydantic.BaseModel): {floor / scale:.3f} {unit}")
        print(f"{'class kind':24} {'first class':>12} {'a class more':>13} {'85 classes / floor':>19}")
        for kind, body in KINDS.items():
            path = str(script(body, Path(tmp), kind.replace(" ", "_").replace(",", "")))
            c1 = cost([path, "1"], args.runs, args.callgrind)
            cn = cost([path, str(args.classes)], args.runs, args.callgrind)
            each = (cn - c1) / (args.classes - 1)
            print(f"{kind:24} {(c1 - floor) / floor:11.1%} {each / floor:12.2%} {(c1 - floor + 84 * each) / floor:18.0%}")
    print("(first class: its one-off cost beyond the floor; a class more: each further definition; the last")
    print(" column: 85 classes as fit needs them, as a share of the floor -- the 1.3x goal leaves 30% for all of fit)")


if __name__ == "__main__":
    main()
