"""Issue 10 item 4: the rendering of tables in one place. k3plan.tables builds every terminal
table (one box style and its compact variant, the title on the left, one missing-value mark, the
ASCII fallback); no other module constructs rich.table.Table or picks a rich box."""

import ast
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import k3plan
from k3plan.tables import BOX, COMPACT_BOX, MISSING, Column, Row, build_table, cell, figure

ROOT = Path(k3plan.__file__).parent
HOME = "tables.py"


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks (an import there builds nothing)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _table_builders(root: Path = ROOT):
    """(module, what) for every construction of a rich Table, import of rich.table at run time, or
    import of rich.box outside k3plan/tables.py."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == HOME:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                names = {a.name for a in node.names}
                if mod in ("rich.table", "rich.box") or (mod == "rich" and names & {"table", "box"}):
                    yield rel, f"from {mod} import {', '.join(sorted(names))}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in ("rich.table", "rich.box"):
                        yield rel, f"import {a.name}"
            elif isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name == "Table":
                    yield rel, f"{ast.unparse(f)}(...) at line {node.lineno}"


def test_the_scanner_finds_a_table_built_elsewhere(tmp_path):
    (tmp_path / "tables.py").write_text("from rich.table import Table\nt = Table()\n")
    (tmp_path / "a.py").write_text("from rich.table import Table\nt = Table(title='x')\n")
    (tmp_path / "b.py").write_text("import rich.table\nfrom rich import box\nt = rich.table.Table(box=box.ASCII)\n")
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rich.table import Table\n"
    )
    assert sorted(_table_builders(tmp_path)) == [
        ("a.py", "Table(...) at line 2"),
        ("a.py", "from rich.table import Table"),
        ("b.py", "from rich import box"),
        ("b.py", "import rich.table"),
        ("b.py", "rich.table.Table(...) at line 3"),
    ]


def test_no_module_but_k3plan_tables_builds_a_table():
    found = sorted(_table_builders())
    assert not found, found


def _render(table, *, width: int = 80, **console) -> str:
    con = Console(width=width, highlight=False, emoji=False, color_system=None, **console)
    with con.capture() as cap:
        con.print(table)
    return cap.get()


def _ascii_render(table, width: int = 80) -> str:
    """What an ASCII-only stream (PYTHONIOENCODING=ascii, a latin-1 pipe) receives."""
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    con = Console(file=stream, width=width, color_system=None)
    assert con.encoding == "ascii" and con.options.ascii_only
    con.print(table)
    stream.flush()
    return stream.buffer.getvalue().decode("ascii")


COLUMNS = (Column("term"), figure("GiB"), Column("source", overflow="fold", max_width=12, no_wrap=False))
ROWS = [("weights", "55.80", "inventory"), ("KV cache", "1.25", "kv x context x batch")]


def test_columns_carry_header_justification_and_widths_to_rich():
    t = build_table(COLUMNS, ROWS, title="per device")
    assert [c.header for c in t.columns] == ["term", "GiB", "source"]
    assert [c.justify for c in t.columns] == ["left", "right", "left"]
    assert t.columns[2].overflow == "fold" and t.columns[2].max_width == 12
    assert Column("x").justify == "left" and figure("x").justify == "right"
    assert figure("x", no_wrap=True, min_width=7) == Column("x", "right", no_wrap=True, min_width=7)


def test_column_and_row_are_immutable_values():
    c = Column("GiB", "right", max_width=9)
    with pytest.raises(AttributeError, match="immutable"):
        c.header = "MiB"  # type: ignore[misc]
    assert c == figure("GiB", max_width=9) and hash(c) == hash(figure("GiB", max_width=9))
    assert c != figure("GiB") and c != Column("GiB", max_width=9)
    assert repr(c) == (
        "Column(header='GiB', justify='right', no_wrap=False, overflow='ellipsis', min_width=None, max_width=9)"
    )
    r = Row(["a", "b"], style="bold")
    assert r.cells == ("a", "b") and r == Row(("a", "b"), "bold") and r != Row(("a", "b"))
    with pytest.raises(AttributeError):
        r.style = None  # type: ignore[misc]


def test_the_house_style_title_left_heavy_head_bold_header():
    t = build_table(COLUMNS, ROWS, title="per device")
    assert (t.title_justify, t.header_style, t.box, t.show_edge) == ("left", "bold", BOX, True)
    text = _render(t)
    lines = text.splitlines()
    assert lines[0].startswith("per device")  # the title on the left, not centred
    assert lines[1].startswith("┏━") and "┃ term" in lines[2] and lines[3].startswith("┡━")
    # the figure column is right-justified: "1.25" ends where "55.80" ends
    weights, kv = (next(x for x in lines if x.startswith(f"│ {n}")) for n in ("weights", "KV cache"))
    assert weights.index("55.80") + len("55.80") == kv.index("1.25") + len("1.25")
    assert "kv x context" in text and "x batch" in text  # folded within max_width 12, never cut


def test_rows_rules_and_styles():
    rows = [Row(ROWS[0], end_section=True), Row(ROWS[1], style="bold green")]
    t = build_table(COLUMNS, rows)
    assert [r.end_section for r in t.rows] == [True, False]
    assert [r.style for r in t.rows] == [None, "bold green"]
    lines = _render(t).splitlines()
    rule = [i for i, x in enumerate(lines) if x.startswith("├")]
    weights = next(i for i, x in enumerate(lines) if "weights" in x)
    assert rule == [weights + 1]  # one rule, under the row that ends its section


def test_a_row_with_the_wrong_number_of_cells_is_refused_naming_the_table():
    with pytest.raises(ValueError, match=r"'per device': a row of 2 cell\(s\) under 3 column\(s\)"):
        build_table(COLUMNS, [("weights", "55.80")], title="per device")
    with pytest.raises(ValueError, match="a row of 4 cell"):
        build_table(COLUMNS, [Row(("a", "b", "c", "d"))])


def test_no_rows_is_a_header_only_table():
    t = build_table(COLUMNS, [])
    assert t.row_count == 0 and "term" in _render(t)


def test_the_compact_variant_has_no_vertical_rules_and_fits_its_width():
    t = build_table(COLUMNS, ROWS, compact=True)
    assert t.box is COMPACT_BOX and not t.show_edge
    text = _render(t)
    assert "│" not in text and "┃" not in text and "─" in text
    widest = max(len(x) for x in text.splitlines())
    boxed = max(len(x) for x in _render(build_table(COLUMNS, ROWS)).splitlines())
    assert widest < boxed  # the point of it: narrower than the boxed table of the same cells


def test_ascii_fallback_house_box_is_rich_ascii_grid():
    text = _ascii_render(build_table(COLUMNS, ROWS, title="per device"))
    assert text.isascii()
    lines = text.splitlines()
    assert lines[1].startswith("+--") and lines[2].startswith("| term") and lines[3].startswith("|--")
    assert "| weights" in text and "55.80 |" in text


def test_ascii_fallback_compact_box_stays_compact():
    # rich's own fallback swaps every box for the full ASCII grid: the compact list grew '|' and '+--+'
    text = _ascii_render(build_table(COLUMNS, ROWS, compact=True))
    assert text.isascii() and "|" not in text and "+" not in text
    header, rule = text.splitlines()[:2]
    assert "term" in header and set(rule.strip()) == {"-"}


def test_legacy_windows_gets_the_square_box():
    text = _render(build_table(COLUMNS, ROWS), legacy_windows=True)
    assert "┌" in text and "┏" not in text


def test_the_missing_mark_and_cell_format():
    assert MISSING == "-"
    assert cell(None) == MISSING and cell(None, ".2f", "n/a") == "n/a"
    assert cell(1234.567) == "1,234.6" and cell(0.5, ".2f") == "0.50" and cell(3, ",") == "3"


def test_hardware_list_on_an_ascii_terminal_is_compact_ascii():
    env = {**os.environ, "PYTHONPATH": str(ROOT.parent), "PYTHONIOENCODING": "ascii", "COLUMNS": "120"}
    code = "from k3plan.cli.app import main; main()"
    r = subprocess.run([sys.executable, "-c", code, "hardware", "list"], capture_output=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-500:]
    out = r.stdout.decode("ascii")  # every byte ASCII
    assert "tpu-v7x" in out and "|" not in out and "+--" not in out
    assert any(set(x.strip()) == {"-"} for x in out.splitlines())  # the header rule, in '-'


def _wide_table():
    name = "nvidia-gb200-nvl72"
    return build_table([Column("hardware"), figure("price $/hour")], [[name, "72.64"]] * 2, title="t")


def test_print_whole_widens_a_pipe_to_the_table():
    """Piped output (not a terminal) is never cut: a 30-column console prints the table at its natural width."""
    from k3plan.tables import print_whole

    out = io.StringIO()
    console = Console(file=out, width=30, force_terminal=False)
    print_whole(console, _wide_table())
    text = out.getvalue()
    assert text.count("nvidia-gb200-nvl72") == 2 and text.count("72.64") == 2
    assert "\u2026" not in text
    assert console.width == 30  # restored


def test_print_whole_keeps_a_terminal_width():
    """A terminal keeps its width: the same table on a 30-column terminal is shrunk, as rich does."""
    from k3plan.tables import print_whole

    out = io.StringIO()
    console = Console(file=out, width=30, force_terminal=True, color_system=None)
    print_whole(console, _wide_table())
    assert max(len(line) for line in out.getvalue().splitlines()) <= 30


def test_plan_ranking_piped_names_every_machine_whole(cli):
    """plan's ranking with its optional kv and chunk columns, piped: every hardware name and every figure
    whole (at a fixed 140 columns rich cut them to 'nvidia-gb20...', '72.6...')."""
    r = cli(
        "plan", "-H", "nvidia-gb200-nvl72,nvidia-h200", "--max-chips", "16",
        "--kv-dtypes", "bf16,fp8_ds_mla", "--chunks", "4096,8192",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = [line for line in r.stdout.splitlines() if line.startswith("\u2502")]
    assert rows and all("\u2026" not in line for line in rows)
    assert all(("nvidia-gb200-nvl72" in line) or ("nvidia-h200 " in line) for line in rows)
