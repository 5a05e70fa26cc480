"""Adding a log format or a detector is adding one module: proved on a copy of the package (in the
test's temporary directory) by dropping a new module into the folder and nothing else, then using it
from a fresh interpreter."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "moeproxy"

NEW_FORMAT = '''
from moeproxy.ingest.registry import LogFormat, ParsedLog, register
from moeproxy.ingest.table import LogTable


def sniff(src):
    return 0.9 if src.head_text.startswith("#pairs") else 0.0


def parse(src):
    table = LogTable()
    for lineno, line in src.lines():
        if line.startswith("#") or not line.strip():
            continue
        step, loss = line.split()
        table.add_dict(int(step), {"loss": float(loss)})
    return ParsedLog(src.path, "pairs", "unknown", src.sha256, table.columns())


register(LogFormat("pairs", "step and loss pairs", sniff, parse, top_score=0.9, priority=65))
'''

NEW_DETECTOR = '''
from moeproxy.diagnose.config import thresholds
from moeproxy.diagnose.registry import register_detector
from moeproxy.diagnose.rules import declare
from moeproxy.diagnose.taxonomy import CRITICAL, DIVERGENCE, Finding

thresholds(loss_ceiling=(1000.0, "a loss above this has left any sane range"))
RULES = declare(DIVERGENCE, {"loss_above_ceiling": "the loss above a fixed ceiling"},
                thresholds={"loss_above_ceiling": ("loss_ceiling",)})


@register_detector("ceiling", "loss above a fixed ceiling")
def detect(run, cfg):
    s = run.get("loss")
    if s is None or not (s > cfg.loss_ceiling).any():
        return []
    step = int(s.index[(s > cfg.loss_ceiling).to_numpy().argmax()])
    return [Finding(DIVERGENCE, step, CRITICAL, "loss", "loss_above_ceiling", "over the ceiling")]
'''

CHECK = '''
import sys
from moeproxy.ingest import FORMATS, parse_file
from moeproxy.diagnose import DETECTORS, DiagnoseConfig, diagnose_frame

parsed = parse_file(sys.argv[1])
assert parsed.format == "pairs", parsed.format
names = list(FORMATS)
assert names.index("csv") < names.index("pairs") < names.index("text"), names  # its priority places it
assert "ceiling" in DETECTORS
assert DiagnoseConfig().loss_ceiling == 1000.0 and DiagnoseConfig(loss_ceiling=5).loss_ceiling == 5
result = diagnose_frame(parsed.frame, detectors=["ceiling"])
assert [f["rule"] for f in result["findings"]] == ["loss_above_ceiling"], result["findings"]
print("ok")
'''


def test_a_new_format_module_and_a_new_detector_module_are_all_it_takes(tmp_path):
    copy = tmp_path / "moeproxy"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "ingest" / "formats" / "pairs.py").write_text(textwrap.dedent(NEW_FORMAT))
    (copy / "diagnose" / "detectors" / "ceiling.py").write_text(textwrap.dedent(NEW_DETECTOR))
    log = tmp_path / "run.txt"
    log.write_text("#pairs\n" + "".join(f"{s} {v}\n" for s, v in [(1, 2.0), (2, 1.9), (3, 5000.0), (4, 6000.0)]))
    out = subprocess.run([sys.executable, "-c", CHECK, str(log)], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"


def test_the_folders_list_no_module_by_name():
    """The two packages import what is in their folder; neither names a module."""
    for init in (PACKAGE / "ingest" / "formats" / "__init__.py", PACKAGE / "diagnose" / "detectors" / "__init__.py"):
        text = init.read_text()
        assert "pkgutil.iter_modules(__path__)" in text
        modules = [p.stem for p in init.parent.glob("*.py") if p.stem != "__init__"]
        assert len(modules) >= 8
        assert not [m for m in modules if m in text.replace("iter_modules", "")], init
