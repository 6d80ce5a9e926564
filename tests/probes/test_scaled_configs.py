"""The probes' scaled K3 configs are written under one temporary folder a process, removed when it ends: a fresh
mkdtemp a call left a folder in /tmp for every test and probe that asked (9,000+ after a day of test runs)."""

from __future__ import annotations

import json


def test_every_config_goes_under_the_process_s_one_folder_and_reads_back():
    from k3plan.probes.step import scaled

    a, b = scaled.scaled_config_path(), scaled.k3_width_config_path()
    assert a != b and a.parents[2] == b.parents[2]
    assert scaled._FOLDER is not None and str(a.parents[2]) == scaled._FOLDER.name
    assert b.parent.name == "k3-width-4l-32e"  # the model's name a calibration is matched by
    assert json.loads(a.read_text()) == scaled.scaled_k3_raw()
