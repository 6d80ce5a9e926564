"""Writing records: one JSON file a record, named so that two runs never overwrite each other."""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timezone
from pathlib import Path

from k3plan.errors import K3PlanError
from k3plan.evidence.probe_record import ProbeRecord
from k3plan.io_safe import write_new_text
from k3plan.structs import dump

DEFAULT_DIR = Path("k3plan-probes")  # a user folder (issue 36); records to ship: --out k3plan/evidence/probes


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def record_filename(record: ProbeRecord) -> str:
    """<probe>[-<mode>]-<device kind>-<UTC timestamp>-<6 hex>.json"""
    stamp = re.sub(r"[^0-9TZ]", "", record.date) or "nodate"
    parts = [record.probe] + ([record.mode] if record.mode else []) + [record.device_kind, stamp]
    return "-".join(slug(p) if p != stamp else p for p in parts) + f"-{uuid.uuid4().hex[:6]}.json"


def write_record(*, record: ProbeRecord, out_dir: Path) -> Path:
    """Write `record` under `out_dir` (created if needed); never replaces an existing file."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise K3PlanError(f"--out {out_dir}: cannot create the folder ({err.strerror})") from None
    for _ in range(5):
        path = out_dir / record_filename(record)
        try:
            return write_new_text(path, json.dumps(dump(record), indent=2) + "\n", label="--out")
        except FileExistsError:
            continue
        except OSError as err:
            raise K3PlanError(f"--out {out_dir}: cannot write {path.name} ({err.strerror})") from None
    raise K3PlanError(f"--out {out_dir}: could not find a free file name")
