"""benchmarks/gpu_offload.py, the GPU check of offload, runs end to end on CPU (`--device cpu`): the
next session lent a GPU runs it as one command, so it must not rot where no GPU is."""

import json
import subprocess
import sys

from _dist import ROOT


def test_the_gpu_offload_check_runs_its_steps_on_cpu(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_offload.py"), "--device", "cpu",
                          "--json", str(tmp_path / "o.json")], capture_output=True, text=True, cwd=tmp_path,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads((tmp_path / "o.json").read_text())
    assert report["host_link_bandwidth"] > 0 and report["memory_actions"]
    rows = {row["check"]: row for row in report["rows"]}
    late = next(row for name, row in rows.items() if name.startswith("offload: late fetches"))
    assert late["ok"] is True  # every offloaded tensor was back before the backward that needed it
    assert not [name for name, row in rows.items() if row["ok"] is False]
