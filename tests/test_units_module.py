"""Issue 10 items 3 and 6: units live in k3plan/units.py alone, memory prints in GiB, and a token
count prints exact (131,072) or, on a plot axis, in thousands with K = 1,000 said on the axis."""

import ast
from pathlib import Path

import pytest

import k3plan
from k3plan.units import TOKENS_K_AXIS, GiB, fmt_gib_sig, fmt_tokens, tokens_k, tokens_k_axis

ROOT = Path(k3plan.__file__).parent
# 1 << 30 that is no byte unit: a bound on token counts (a billion tokens is a typo, not a plan)
NOT_A_UNIT = {
    ("budget/fit.py", "MAX_TOKENS = 1 << 30"),
    # vLLM's human_readable_int suffixes as the engine defines them (engines/vllm/serve.py cites arg_utils.py)
    ("engines/vllm/serve.py", 'n = int(number) * {"K": 2**10, "M": 2**20, "G": 2**30}[suffix]'),
}


def _gib_literals():
    """(module, source line) of every 2**30, 2.0**30, 1 << 30 or 1073741824 outside k3plan/units.py."""
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "units.py":
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            hit = False
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.left, ast.Constant)
                and isinstance(node.right, ast.Constant)
            ):
                a, b = node.left.value, node.right.value
                hit = (isinstance(node.op, ast.Pow) and a == 2 and b == 30) or (
                    isinstance(node.op, ast.LShift) and a == 1 and b == 30
                )
            elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
                hit = node.value == 2**30
            if hit:
                yield rel, lines[node.lineno - 1].split("#")[0].strip()


def test_the_scanner_finds_a_gib_literal(tmp_path, monkeypatch):
    # the check can fail: a module that writes GIB = 2**30 is found
    (tmp_path / "units.py").write_text("GiB = 2**30\n")
    (tmp_path / "other.py").write_text("GIB = 2**30\nx = 5 / (1 << 30)\ny = 1073741824\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert sorted(_gib_literals()) == [
        ("other.py", "GIB = 2**30"),
        ("other.py", "x = 5 / (1 << 30)"),
        ("other.py", "y = 1073741824"),
    ]


def test_only_the_units_module_writes_2_to_the_30():
    assert set(_gib_literals()) <= NOT_A_UNIT, sorted(set(_gib_literals()) - NOT_A_UNIT)


def test_token_counts_print_exact():
    assert fmt_tokens(131072) == "131,072"
    assert fmt_tokens(1048576) == "1,048,576"
    assert fmt_tokens(316224) == "316,224"


def test_a_token_axis_is_in_thousands_and_says_k_is_1000():
    # the example: the table says 344,064 and the plot said 336 (344,064 / 1,024): now 344.064
    assert tokens_k(344064) == pytest.approx(344.064)
    assert tokens_k(2**20) == pytest.approx(1048.576)
    assert "K = 1,000" in TOKENS_K_AXIS
    assert tokens_k_axis("longest context") == "longest context, thousand tokens (K = 1,000)"


@pytest.mark.parametrize(
    "n, text",
    [
        (68 * 2**20, "0.0664 GiB"),  # 68 / 1024 = 0.06640625
        (12_939_428, "0.0121 GiB"),  # 12,939,428 / 1,073,741,824 = 0.012051
        (3 * 2**30, "3.00 GiB"),
        (0, "0.00 GiB"),
        (1536 * 2**30, "1,536.00 GiB"),
    ],
)
def test_small_memory_figures_keep_three_significant_digits_in_gib(n, text):
    assert fmt_gib_sig(n) == text
    assert GiB == 1_073_741_824


def test_a_size_is_whole_bytes_never_rounded_to_zero():
    """parse_bytes('0.5') was 0 (--draft-bytes 0.5 became n-gram drafting); a size with a unit still rounds."""
    import pytest

    from k3plan.errors import K3PlanError
    from k3plan.units import parse_bytes

    assert parse_bytes("1.5KiB") == 1536 and parse_bytes("30GB") == 30 * 10**9 and parse_bytes("0") == 0
    assert parse_bytes("0.0015KB") == 2  # 1.5 B with a unit: the nearest byte
    for bad in ("0.5", "1.5B", 0.5, "1e-12GB"):
        with pytest.raises(K3PlanError):
            parse_bytes(bad)
