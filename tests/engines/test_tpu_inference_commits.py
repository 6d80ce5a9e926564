"""fit --engine-version <commit> for tpu-inference (engines/tpu_inference/commits.py): a main commit placed by the shipped
table of main's first-parent history (main_history.txt, benchmarks/tpu_inference_main_history.py from a git mirror of
vllm-project/tpu-inference at b8692ff0), each rule gated at the commit that changed it compared by position, and the
release gates reading every release as before."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from k3plan.engines.release import split_commit
from k3plan.engines.tpu_inference import commits
from k3plan.engines.tpu_inference.commits import Gate, history, holds
from k3plan.engines.tpu_inference.dsv4_smem import CSA_PAGE, HCA_OWN_PAGE, smem_refusal
from k3plan.engines.tpu_inference.serve import INT4_ENV_READ, INT4_F32_SCALES, INT4_F32_SCALES_END, MLA_CHECK

GATES = {
    "mla_check": MLA_CHECK,
    "int4_from": INT4_F32_SCALES,
    "int4_until": INT4_F32_SCALES_END,
    "int4_env": INT4_ENV_READ,
    "smem_hca_own": HCA_OWN_PAGE,
    "smem_csa": CSA_PAGE,
}
MIRROR = Path("/work/.mirror/vllm-project+tpu-inference/repo")
# the nightly MMLU command of tests/engines/cases/tpu-inference-dsv4-flash-v7x8-mmlu-nightly-3310-smem-oom.yaml
NIGHTLY = {"max_model_len": 9216, "max_num_seqs": 64, "dp": 8, "block": 1024, "options": {}}


def test_the_table_is_small_and_names_the_mirror_s_head():
    """2,958 commits from v0.11.1's cut (f2620559) through main b8692ff0, in about 30 KB."""
    h = history()
    assert commits.TABLE.stat().st_size < 40_000
    assert h.head.startswith("b8692ff0") and h.shas[-1] == "b8692ff0" and h.shas[0] == "f2620559"
    assert len(set(h.shas)) == len(h.shas) == 2958
    assert [r for _, r in h.cuts][:2] == [(0, 11, 1), (0, 12, 0)] and h.cuts[-1][1] == (0, 27, 0)


def test_a_commit_is_placed_with_the_release_it_follows():
    """8ead48e6 (#3310, 2026-07-31) follows v0.26.0's cut from main (7bad4320, git merge-base v0.26.0 main) and precedes
    #3319 (55054439) and v0.27.0's cut (a5596b27); a full sha and a 7-hex prefix find it too."""
    c = commits.commit_of("8ead48e6")
    assert c is not None and c.follows == (0, 26, 0) and c.cut == "7bad4320" and c.date == "2026-07-31"
    later = commits.commit_of("55054439")
    assert later is not None and c.position < later.position < commits.commit_of("a5596b27").position  # type: ignore[union-attr]
    assert commits.commit_of("8ead48e6d0000000000000000000000000000000") == c  # the table keeps 8 hex
    assert commits.commit_of("8ead48e") == c
    assert commits.commit_of("a5596b27").follows == (0, 27, 0)  # type: ignore[union-attr]  # the cut itself


def test_an_unknown_commit_is_not_placed():
    for sha in ("deadbeef", "0000000", "ffffffff"):
        assert commits.commit_of(sha) is None


def test_a_branch_commit_k3plan_names_is_placed_at_its_branch_point():
    """bc1aa6a1 (branch cuiq-k3-mla-nodp, 2026-08-01) branched from main at 812ff44a and precedes the KDA head split
    (ad1af3ab, branch cuiq-k3-shapes); e65bd14c (cuiq-k3-attempt12) holds it (git merge-base --is-ancestor)."""
    c = commits.commit_of("bc1aa6a1f8ed473a6047b858134004fafdff38e4")
    base = commits.commit_of("812ff44a")
    assert c is not None and base is not None and c.base == "812ff44a" and c.position == base.position
    split = Gate(None, "ad1af3ab")
    assert holds(split, None, c) is False
    assert holds(split, None, commits.commit_of("e65bd14c")) is True
    assert holds(split, None, commits.commit_of("ad1af3ab")) is True
    assert holds(split, (0, 27, 0), None) is None and holds(split, None, commits.commit_of("b8692ff0")) is False


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("8ead48e6", (None, "8ead48e6")),
        ("tpu-inference@8EAD48E6", ("tpu-inference", "8ead48e6")),
        ("0.27.0", None),
        ("latest", None),
        ("11", None),
    ],
)
def test_a_commit_is_told_from_a_release_number(text, named):
    assert split_commit(text) == named


def test_every_gate_s_commit_sits_between_its_release_s_cuts():
    """A gate's commit is on main after the cut of the release before its release and at or before its release's cut
    (git merge-base --is-ancestor in the mirror), save #2649 (efec1212), which main merged after v0.21.0's cut and the
    v0.21.0 tag carries as the cherry-pick 4486ec9a: a commit reads main's code, a release its tag's."""
    h = history()
    cut = {release: at for at, release in h.cuts}
    for name, gate in GATES.items():
        assert gate.commit is not None
        at = gate.position()
        release_cut = Gate(gate.release).position()
        before = max(p for p in cut.values() if p < release_cut)
        assert before < at, name
        if name == "int4_env":
            assert release_cut < at < Gate((0, 22, 0)).position()
        else:
            assert at <= release_cut, name


def test_release_gates_read_every_release_as_before():
    """With a release number (no commit) each gate compares releases exactly as the code did before commits."""
    for gate in GATES.values():
        for release in [(0, 18, 0), (0, 19, 0), (0, 20, 0), (0, 21, 0), (0, 22, 0), (0, 26, 0), (0, 27, 0), (0, 31, 0)]:
            assert holds(gate, release, None) is (release >= gate.release)
        assert holds(gate, None, None) is None


def test_a_release_s_cut_commit_reads_as_the_release_at_every_gate():
    """Each tagged release's cut on main agrees with the release number at every gate (the cherry-picked #2649 aside)."""
    h = history()
    for at, release in h.cuts:
        c = commits.commit_of(h.shas[at])
        assert c is not None and c.follows == release
        for name, gate in GATES.items():
            if name == "int4_env" and release == (0, 21, 0):
                assert holds(gate, release, None) and not holds(gate, None, c)
                continue
            assert holds(gate, None, c) is holds(gate, release, None), (name, release)


def test_the_3310_nightly_overflows_smem_at_its_commit_only():
    """At 8ead48e6 HCA's own 2-token state page: 64 x 4,608 x 4 = 1,179,648 B, the engine's figure (786e8753's message);
    at 55054439 (#3319) and v0.27.0 CSA's 64 x 576 table fits; before #3310 (7bad4320, v0.26.0) no check."""
    refused = smem_refusal(release=(0, 26, 0), commit=commits.commit_of("8ead48e6"), **NIGHTLY)  # type: ignore[arg-type]
    assert refused is not None and "Allocation (size=1179648) would exceed memory (size=1048576)" in refused[0]
    assert "8ead48e6" in refused[1]
    for sha in ("55054439", "b8692ff0", "7bad4320", "786e8753"):  # 786e8753: the branch fix, per-token pages
        c = commits.commit_of(sha)
        assert smem_refusal(release=c.follows if c else None, commit=c, **NIGHTLY) is None  # type: ignore[arg-type]


def test_fit_names_the_commit_and_refuses_an_unknown_one_in_a_line(cli):
    serve = (
        "NEW_MODEL_DESIGN=1 MODEL_IMPL_TYPE=vllm vllm serve deepseek-ai/DeepSeek-V4-Flash --max-model-len 9216 "
        "--max-num-seqs 64 --max-num-batched-tokens 512 --tensor-parallel-size 8 --gpu-memory-utilization 0.4 "
        "--kv-cache-dtype=fp8 --enable-expert-parallel --trust-remote-code "
        """--additional_config '{"sharding": {"sharding_strategy": {"enable_dp_attention": true}}}'"""
    )
    r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", serve, "--engine-version", "tpu-inference@8ead48e6")
    said = " ".join(r.output.split())
    assert r.exit_code == 1 and "size=1179648" in said and "following 0.26.0's cut from main at 7bad4320" in said
    for bad in ("deadbeef", "sglang@8ead48e6"):
        r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x1", "--serve", serve, "--engine-version", bad)
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    r = cli(
        "fit",
        "-H",
        "nvidia-h200",
        "-t",
        "8",
        "--serve",
        "vllm serve moonshotai/Kimi-K2-Thinking --tensor-parallel-size 8",
        "--engine-version",
        "8ead48e6",
    )
    assert r.exit_code == 2 and "a commit of tpu-inference, but the command runs vllm" in r.output, r.output


@pytest.mark.skipif(not MIRROR.is_dir() or shutil.which("git") is None, reason="no tpu-inference git mirror here")
def test_the_table_is_the_mirror_s_history(tmp_path):
    """benchmarks/tpu_inference_main_history.py at the table's head writes the shipped table again (its branch lines:
    each shipped one as written)."""
    head = history().head
    if subprocess.run(["git", f"--git-dir={MIRROR}", "cat-file", "-e", head], capture_output=True).returncode:
        pytest.skip("the mirror lacks the table's head")
    out = tmp_path / "main_history.txt"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "tpu_inference_main_history.py"
    subprocess.run(
        ["python3", str(script), "--git-dir", str(MIRROR), "--ref", head, "--out", str(out)],
        check=True,
        capture_output=True,
    )
    written, shipped = out.read_text().splitlines(), commits.TABLE.read_text().splitlines()
    # main's history and its cuts line for line; the branch lines shipped each as the mirror places it (a commit
    # named since in k3plan's files adds a line when the table is written again)
    assert [w for w in written[2:] if not w.startswith("branch")] == [
        w for w in shipped[2:] if not w.startswith("branch")
    ]
    assert {w for w in shipped if w.startswith("branch")} <= {w for w in written if w.startswith("branch")}


def test_the_kimi_linear_no_dp_build_replicates_its_kda_weights(cli):
    """tests/engines/cases/tpu-inference-kimi-linear-v7x32-nodp-blocks2048-warmup-oom.yaml at bc1aa6a1: every KDA
    parameter P() (kimi_k3.py KimiDeltaAttention @bc1aa6a1), 4.32 GiB a device as the engine logged (bf76f7c3's
    message: 'the weights are only 4.32 GB/device'); at e65bd14c (after ad1af3ab) split by heads, 2.91 GiB."""
    import json

    from k3plan.units import GiB

    serve = (
        "MODEL_IMPL_TYPE=flax_nnx NEW_MODEL_DESIGN=1 TPU_INFERENCE_UNSAFE_MLA_WITHOUT_DP_ATTENTION=1 vllm serve "
        "moonshotai/Kimi-Linear-48B-A3B-Instruct --tensor-parallel-size 32 --trust-remote-code --max-model-len 2048 "
        "--max-num-seqs 32 --max-num-batched-tokens 2048 --num-gpu-blocks-override 2048 --no-async-scheduling "
        """--additional-config '{"sharding":{"sharding_strategy":{"enable_dp_attention":false,"tensor_parallelism":8,"""
        """"expert_parallelism":4}}}'"""
    )
    got = {}
    for version in ("bc1aa6a1", "e65bd14c"):
        r = cli("fit", "-H", "tpu-v7x", "-t", "2x2x4", "--serve", serve, "--engine-version", version, "--json")
        got[version] = json.loads(r.stdout)["engine"]["weights_bytes"] / GiB
    assert abs(got["bc1aa6a1"] - 4.32) / 4.32 < 0.01 and abs(got["e65bd14c"] - 2.91) < 0.01


def test_the_replicated_kda_specs_gather_the_state_in_the_compiled_step():
    """reports/compile/tpu-inference-kimi-linear-nodp-kda/records.json (benchmarks/tpu_inference_kda_compile.py --no-dp
    8 on tpu7x:2x2x4, 2,048 state slots): at bc1aa6a1 (the core's specs P(data, None, ...)) one KDA layer's temporaries
    exceed its whole, ungathered pool (2,048 x 2,170,880 B); at e65bd14c (the specs split by heads) they stay under
    it. Evidence for the case's gap; no term is priced from it."""
    import json

    path = Path(__file__).resolve().parents[2] / "reports/compile/tpu-inference-kimi-linear-nodp-kda/records.json"
    recs = {(r["src_commit"][:8], r["point"]["layers"]): r for r in json.loads(path.read_text())}
    whole_pool = 2048 * (32 * 128 * 128 * 4 + 3 * 3 * 4096 * 2)
    assert whole_pool == 2048 * 2_170_880
    assert recs[("bc1aa6a1", 1)]["temp_bytes"] > whole_pool > recs[("e65bd14c", 1)]["temp_bytes"]
    temps = [recs[("bc1aa6a1", n)]["temp_bytes"] for n in (1, 2, 4, 20)]
    assert temps == sorted(temps)
