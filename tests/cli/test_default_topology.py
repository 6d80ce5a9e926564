"""Without --topology, fit (and roofline) take the smallest standard topology where the WORKLOAD fits,
not only the weights: K3 on tpu-v7x (vllm-tpu) at 786,432 tokens does not fit 2x2x4 nor 2x4x4 (their weights
do), so the default moves up to the next topology whose weights leave room, 4x4x4, and says why. (At 1M no
standard topology fits since vllm-tpu stores tpu-inference's 640-value MLA entry: test_fit_cli.test_defaults.)"""

from __future__ import annotations

import json

from k3plan.app.setup import MAX_DEFAULT_TOPOLOGY_TRIES
from k3plan.plan.defaults import default_topologies
from k3plan.plan.defaults import make_default_setup as make_setup

LONG = ("--context", "786432")


def _fit(cli, *args):
    r = cli("fit", *args, "--json")
    return r, json.loads(r.stdout)


def test_default_moves_past_a_topology_whose_weights_fit_but_the_workload_does_not(cli):
    s = make_setup()  # the weights-only screen: the smallest candidate
    candidates = [t.text for t in default_topologies(s.hardware, s.model, s.stack, None, None, None)]
    assert candidates[0] == s.topology.text
    r0, first = _fit(cli, "-t", candidates[0], *LONG)
    assert r0.exit_code == 1 and not first["fits"] and first["weights_fit"]  # the reason the default must move
    r, got = _fit(cli, *LONG)
    assert r.exit_code == 0 and got["fits"]
    chosen = got["hardware"]["topology"]
    assert chosen in candidates[1:MAX_DEFAULT_TOPOLOGY_TRIES]
    # every smaller candidate was tried and named as not fitting
    note = next(n for n in got["notes"] if n.startswith(f"topology {chosen}: default"))
    for smaller in candidates[: candidates.index(chosen)]:
        assert smaller in note
    # the chosen one is what an explicit --topology gives, term for term
    _, explicit = _fit(cli, "-t", chosen, *LONG)
    assert explicit["per_device"] == got["per_device"]


def test_default_stays_when_the_workload_fits_the_smallest(cli):
    s = make_setup()
    r, got = _fit(cli, "--context", "4096")
    assert r.exit_code == 0 and got["hardware"]["topology"] == s.topology.text
    assert any("whose weights and reserve leave room" in n for n in got["notes"])


def test_roofline_takes_the_topology_fit_takes(cli):
    _, f = _fit(cli)
    r = cli("roofline", "--json")
    assert r.exit_code == 0, r.output
    assert f"topology {f['hardware']['topology']}: default" in r.stdout


def test_the_default_tp_divides_the_vocabulary_too(cli):
    # GB200 NVL72, 72 GPUs, vLLM (tp: all): 96 heads allow tp 24, but the TP-split vocabulary (163,840 =
    # 2^15 x 5) does not divide by 24, so the default split fell back to replicating the embedding and the
    # LM head and fit said DOES NOT FIT of a rack that holds K3 at tp 8 (72 = 8 x 9; 96 / 8, 163,840 / 8)
    import json

    res = cli("fit", "-H", "nvidia-gb200-nvl72", "-t", "72", "--stack", "vllm", "--json")
    assert res.exit_code in (0, 3), res.stdout[-500:]  # 3: fits on the analytic temp's lower bound (issue 50)
    d = json.loads(res.stdout)
    assert (d["parallel"]["tp"], d["parallel"]["dp"]) == (8, 9)
    assert d["replicated"] == [] and d["fits"]
    assert any("divides the attention heads and the vocabulary" in n for n in d["notes"])
