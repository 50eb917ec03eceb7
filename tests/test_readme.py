"""The README's user snippet runs as printed (MARWIL on the shipped mixed episodes)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_snippet() -> str:
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## Use it from your own RLlib code", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_readme_snippet_runs_as_printed():
    code = readme_snippet()
    assert "offline_graph.configure(config)" in code and "prelearner_class=GraphOfflinePreLearner" in code
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    loss = float(lines[-2])
    assert loss == loss and abs(loss) < 1e6  # a finite policy loss
    report = eval(lines[-1])  # the printed data_report dict
    assert report["episodes_read"] == report["episodes_used"] + report["episodes_rejected"]
    assert report["episodes_used"] > 0 and report["rejected_by_reason"] == {}
