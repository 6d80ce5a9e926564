"""Folded tensor-name sets expand back to exactly the names they stand for."""

from k3plan.check.names import FoldedGroup, describe, fold, ranges, unfold


def test_fold_unfold_roundtrip_and_describe():
    names = {f"m.layers.{i}.q.weight": 10 for i in (0, 1, 2, 5)} | {"m.lm_head.weight": 7}
    folded = fold(names)
    assert folded["m.layers.*.q.weight"] == FoldedGroup(layers="0-2,5", count=4, bytes=40)
    assert unfold(folded) == set(names)
    assert ranges([3]) == "3" and ranges([]) == ""
    assert describe(["m.layers.3.q.weight", "m.layers.7.q.weight", "m.lm_head.weight"]) == [
        ("m.lm_head.weight", ["m.lm_head.weight"]),
        ("m.layers.{3,7}.q.weight", ["m.layers.3.q.weight", "m.layers.7.q.weight"]),
    ]
