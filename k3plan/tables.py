"""Every terminal table k3plan prints is built here (issue 10 item 4): one box style, one header style,
one title placement, one missing-value mark and the ASCII fallback, decided once.

A caller describes its columns (``Column``) and hands over rows of already formatted cells; it never
constructs ``rich.table.Table`` itself (tests/report/test_tables.py checks that). The house
style is rich's heavy-headed box with the title on the left; ``compact=True`` is the one variant, for
the lists meant to fit an 80-column terminal (``hardware list``, probe records): a rule under the
header and no vertical rules.

ASCII fallback: where the console's encoding cannot show box-drawing characters (PYTHONIOENCODING=ascii,
a latin-1 pipe), rich asks the box for a substitute at render time; each house box names its own
ASCII twin (rich's default swaps every box for its full ASCII grid, which drew the compact lists'
blank edges as ``|`` and ``+--+``). Symbols inside the cells (x, -, ...) are the output streams' job:
k3plan.cli.app.ensure_encodable_output. jax-, numpy- and pandas-free: fit imports this.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, Optional, Union

from rich import box as rich_box
from rich.table import Table

if TYPE_CHECKING:  # names for annotations only: nothing here is built when fit imports this module
    from rich.console import Console, ConsoleOptions, RenderableType

    Justify = Literal["left", "right", "center"]
    Overflow = Literal["fold", "crop", "ellipsis"]

MISSING = "-"  # the cell of a figure that does not exist (no price, no compiled number, not computed)
TITLE_JUSTIFY: Justify = "left"
HEADER_STYLE = "bold"


class HouseBox(rich_box.Box):
    """A rich Box that names what replaces it on an ASCII-only console and on a legacy Windows one."""

    def __init__(self, box: str, *, ascii_twin: rich_box.Box, legacy_twin: Optional[rich_box.Box] = None):
        super().__init__(box)
        self.ascii_twin = ascii_twin
        self.legacy_twin = legacy_twin

    def substitute(self, options: ConsoleOptions, safe: bool = True) -> rich_box.Box:
        if options.ascii_only:
            return self.ascii_twin
        if safe and options.legacy_windows and self.legacy_twin is not None:
            return self.legacy_twin
        return self


# The house box: rich's HEAVY_HEAD; ASCII: rich's ASCII grid; legacy Windows: SQUARE (what rich itself
# substitutes for HEAVY_HEAD there).
BOX = HouseBox(
    str(rich_box.HEAVY_HEAD),
    ascii_twin=rich_box.ASCII,
    legacy_twin=rich_box.SQUARE,
)
# The compact box: rich's SIMPLE_HEAD (a rule under the header, no vertical rules); ASCII: the same in '-'.
COMPACT_BOX = HouseBox(
    str(rich_box.SIMPLE_HEAD),
    ascii_twin=rich_box.Box(str(rich_box.SIMPLE_HEAD).replace("\u2500", "-"), ascii=True),
)


class _Value:
    """Immutable, compared and shown by its fields (``__slots__``). Not a dataclass or NamedTuple:
    fit imports this module, and those cost ~1M instructions a class to create at import."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, *values: object) -> None:
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: cannot set {name}")

    def _fields(self) -> tuple:
        return tuple(getattr(self, n) for n in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"


class Column(_Value):
    """One column: its header and how its cells sit. Figures are right-justified, words left."""

    __slots__ = ("header", "justify", "no_wrap", "overflow", "min_width", "max_width")
    header: str
    justify: Justify
    no_wrap: bool
    overflow: Overflow
    min_width: Optional[int]
    max_width: Optional[int]

    def __init__(
        self,
        header: str,
        justify: Justify = "left",
        *,
        no_wrap: bool = False,
        overflow: Overflow = "ellipsis",
        min_width: Optional[int] = None,
        max_width: Optional[int] = None,
    ) -> None:
        super().__init__(header, justify, no_wrap, overflow, min_width, max_width)


def figure(header: str, **kw) -> Column:
    """A column of numbers: right-justified."""
    return Column(header, "right", **kw)


class Row(_Value):
    """A row with more than cells: a style for the whole row (the recommended pick) or a rule under it.
    A plain sequence of cells is a row too."""

    __slots__ = ("cells", "style", "end_section")
    cells: Sequence[Optional[RenderableType]]  # None: an empty cell, as rich takes it
    style: Optional[str]
    end_section: bool

    def __init__(
        self, cells: Sequence[Optional[RenderableType]], style: Optional[str] = None, end_section: bool = False
    ) -> None:
        super().__init__(tuple(cells), style, end_section)


def cell(value: Optional[float], spec: str = ",.1f", missing: str = MISSING) -> str:
    """``value`` in the format ``spec``, or the missing mark for None."""
    return missing if value is None else format(value, spec)


def build_table(
    columns: Sequence[Column],
    rows: Iterable[Union[Row, Sequence[Optional[RenderableType]]]] = (),
    *,
    title: Optional[str] = None,
    caption: Optional[str] = None,
    compact: bool = False,
) -> Table:
    """The rich Table of ``rows`` under ``columns`` in the house style. Every row has one cell a
    column (rich would silently add a column or pad the row: a caller's mistake, raised here)."""
    table = Table(
        title=title,
        caption=caption,
        title_justify=TITLE_JUSTIFY,
        caption_justify=TITLE_JUSTIFY,
        header_style=HEADER_STYLE,
        box=COMPACT_BOX if compact else BOX,
        show_edge=not compact,
        collapse_padding=compact,
        safe_box=True,
    )
    for c in columns:
        table.add_column(
            c.header,
            justify=c.justify,
            no_wrap=c.no_wrap,
            overflow=c.overflow,
            min_width=c.min_width,
            max_width=c.max_width,
        )
    for row in rows:
        r = row if isinstance(row, Row) else Row(cells=row)
        if len(r.cells) != len(columns):
            raise ValueError(
                f"table {title or ''!r}: a row of {len(r.cells)} cell(s) under {len(columns)} column(s): "
                f"{[str(x) for x in r.cells]}"
            )
        table.add_row(*r.cells, style=r.style, end_section=r.end_section)
    return table


def layout_grid(*, padding: tuple[int, int] = (0, 2)) -> Table:
    """A borderless grid for laying text out in columns (a headline block), not a table of figures: rich's
    Table.grid, built here so that no other module constructs a rich Table."""
    return Table.grid(padding=padding)


def print_whole(console: Console, table: Table) -> None:
    """Print ``table`` uncut where the output is not a terminal (a pipe, a log, CI): the console widens
    to the table's natural width for it, since rich otherwise shrinks the widest columns to the console's
    fixed width and cuts their cells ("nvidia-gb20..." named two machines, "72.6..." a price). A terminal
    keeps its own width: there a table wider than the window is shrunk as rich does."""
    from rich.measure import Measurement

    need = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if console.is_terminal or need <= console.width:
        console.print(table)
        return
    width = console.width
    console.width = need
    try:
        console.print(table)
    finally:
        console.width = width
