"""Pallas kernels compiled through Mosaic for a deviceless tpu7x:2x2x4 (libtpu): the TPU custom call
and its scoped VMEM read back from the compiled HLO. Runs in a fresh process (libtpu must not be
initialised inside the suite's fake-CPU jax), skipped where libtpu is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k3plan.probes.mosaic_check import custom_calls
from k3plan.validate.targets import libtpu_version

REPO = Path(__file__).resolve().parents[2]

# a custom call as the TPU compiler prints it (trimmed): the kernel may use 32 MiB of scoped VMEM
# (33,554,432 B) and the compiler says it uses 4,591,616 B
LINE = (
    '  %k = f32[16,128,128]{2,1,0} custom-call(%a), custom_call_target="tpu_custom_call", '
    'metadata={op_name="jit(f)/pallas_call"}, backend_config={"flag_configs":[],"scoped_memory_configs":'
    '[{"memory_space":"1","offset":"0","size":"33554432"}],"custom_call_config":{"body":"a}b\\"{c"},'
    '"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"4591616"}]}'
)


def test_custom_call_parsing():
    (call,) = custom_calls("ENTRY %main {\n" + LINE + "\n}")
    assert call.target == "tpu_custom_call"
    assert call.op_name == "jit(f)/pallas_call"
    assert call.scoped_memory_limit_bytes == 33_554_432
    assert call.scoped_memory_used_bytes == 4_591_616
    assert custom_calls("%x = f32[2] add(%a, %b)") == []


@pytest.mark.skipif(libtpu_version() is None, reason="libtpu is not installed: the deviceless Mosaic compile needs it")
def test_pallas_kernels_compile_for_tpu7x():
    code = (
        "import json; from k3plan.probes.mosaic_check import check_kernels; from k3plan.structs import dump; "
        "print('RESULT', json.dumps(dump(check_kernels(target='tpu7x:2x2x4'), 'python')))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    env.pop("XLA_FLAGS", None)
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=180
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    result = json.loads(lines[0][len("RESULT ") :])
    assert result["device_kind"] == "TPU7x" and result["device_count"] == 32  # 16 chips x 2 TensorCores
    assert [k["kernel"] for k in result["kernels"]] == ["hbm", "kda-decode"]
    for kernel in result["kernels"]:
        tpu = [c for c in kernel["custom_calls"] if c["target"] == "tpu_custom_call"]
        assert kernel["ok"] and len(tpu) == 1, kernel["detail"]
        assert 0 < tpu[0]["scoped_memory_used_bytes"] <= tpu[0]["scoped_memory_limit_bytes"]
    # kda-decode at 16 heads x 128 x 128 fp32: the state in and out is 16 * 128 * 128 * 4 = 1,048,576 B each
    kda = result["kernels"][1]
    assert kda["argument_bytes"] >= 1_048_576 and kda["output_bytes"] >= 1_048_576
