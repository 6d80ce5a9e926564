"""A tiny document model rendered twice: Markdown (images linked) and one self-contained HTML
file (images base64-embedded). Blocks: ("h1".."h3", text), ("p", text), ("ul", [items]),
("table", headers, rows), ("img", path, alt). Text may use **bold** and `code`."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

Block = tuple[Any, ...]

CSS = (
    "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0;font-size:0.85em}th,td{border:1px solid #ccc;padding:3px 7px}"
    "th{background:#f3f3f3}td.n{text-align:right}img{max-width:100%}code{background:#f3f3f3;padding:0 3px}"
    "h2{border-bottom:1px solid #ddd;margin-top:2em}"
)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block], *, base: Path) -> str:
    out: list[str] = []
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + b[1])
        elif kind == "p":
            out.append(b[1])
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in b[1]))
        elif kind == "table":
            headers, rows = b[1], b[2]
            out.append(
                "\n".join(
                    ["| " + " | ".join(map(_md_cell, headers)) + " |", "|" + "|".join("---" for _ in headers) + "|"]
                    + ["| " + " | ".join(map(_md_cell, r)) + " |" for r in rows]
                )
            )
        elif kind == "img":
            out.append(f"![{b[2]}]({Path(b[1]).resolve().relative_to(base.resolve()).as_posix()})")
    return "\n\n".join(out) + "\n"


def _inline(text: str) -> str:
    t = html.escape(str(text))
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def _is_num(cell: str) -> bool:
    return bool(re.fullmatch(r"[-+$]?[0-9][0-9,.]*\s*[%A-Za-z/]*", str(cell).strip()))


def to_html(blocks: list[Block], *, title: str) -> str:
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body>"
    ]
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{_inline(b[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{_inline(b[1])}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in b[1])
            body = "".join(
                "<tr>" + "".join(f"<td{' class=n' if _is_num(c) else ''}>{_inline(c)}</td>" for c in r) + "</tr>"
                for r in b[2]
            )
            out.append(f"<table><tr>{head}</tr>{body}</table>")
        elif kind == "img":
            path = Path(b[1])
            mime = "image/svg+xml" if path.suffix.lower() == ".svg" else "image/png"
            data = base64.b64encode(path.read_bytes()).decode()
            out.append(f"<p><img alt='{html.escape(b[2])}' src='data:{mime};base64,{data}'></p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
