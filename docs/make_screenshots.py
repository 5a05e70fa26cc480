"""Screenshots of every dashboard page at 1440x900 for the README's tour (docs/screenshots/).

    python docs/make_screenshots.py            # needs Debian's chromium (make chromium) and playwright

Two stores: the bundled demo (data/demo: real public logs and the repro pairs), and a store of real
public logs from tests/fixtures/real (the labelled sets, verbatim) ingested and diagnosed here. A page
is shot as a user first sees it (the first 900 pixels) and, for Triage, once more scrolled to the chart.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "dashboard")]

from dashboard_server import app_env, browser_page, dashboard_server, wait_for_app  # noqa: E402

OUT = REPO / "docs" / "screenshots"
REAL = [  # (run, file under tests/fixtures/real): a few clear failures and healthy runs of other frameworks
    ("megatron-bloom-176b-loss-spike", "shared/002_bloom-176b-lm-loss-spike.log"),
    ("trl-grpo-entropy-collapse", "shared/025_trl-grpo-qwen25vl-mcq-entropy-collapse.log"),
    ("grpo-reward-collapse-to-zero", "shared/119_cs336-grpo-offpolicy-naive-olmo2-1b-gsm8k-reward-collapse-to-zero.jsonl"),
    ("webui-lora-grad-norm-inf", "shared/125_textgen-webui-lora-llama3.2-1b-grad-norm-inf-every-step-flat-loss.log"),
    ("torchtune-finetune-healthy", "shared/008_torchtune-full-finetune-healthy.log"),
    ("megatron-moe64-healthy", "shared/101_megatron-moe64-top1-healthy-gradnorm-blip.log"),
]


def real_store(tmp: Path) -> Path:
    from moeproxy.diagnose.record import ingest_and_diagnose
    from moeproxy.store import Store

    db = tmp / "real.duckdb"
    store = Store(db)
    for run, file in REAL:
        ingest_and_diagnose(store, [REPO / "tests" / "fixtures" / "real" / file], run=run)
    return db


def shoot(db: Path, tmp: Path, prefix: str, pages: list[tuple[str, str]]) -> None:
    no_demo = tmp / "no-demo"
    no_demo.mkdir(exist_ok=True)
    extra = {"MOEPROXY_JOBS": str(tmp / "jobs"), "MOEPROXY_ALLOWED_ROOTS": f"{tmp}:{REPO / 'data'}"}
    if prefix != "demo":
        extra["MOEPROXY_DEMO_DIR"] = str(no_demo)
    with dashboard_server(db, tmp, app_env(**extra)) as url, browser_page(1440, 900) as page:
        for name, path in pages:
            page.goto(f"{url}/{path}")
            wait_for_app(page)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(OUT / f"{prefix}-{name}.png"))
            if name.startswith("triage"):
                # the chart's top at the top of the view, less the app's fixed header: the onset labels
                # in the strip above the panels stay in sight (not under the header)
                page.evaluate("""() => {
                    const chart = document.querySelector('.st-key-triage_chart');
                    chart.scrollIntoView({block: 'start'});
                    const pane = document.querySelector('[data-testid="stMain"]');
                    for (const box of [pane, document.scrollingElement]) { if (box) box.scrollBy(0, -110); }
                }""")
                page.wait_for_timeout(800)
                page.screenshot(path=str(OUT / f"{prefix}-{name}-chart.png"))
            print(f"{prefix}-{name}.png")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="moeproxy-shots-") as tmp:
        tmp = Path(tmp)
        demo = tmp / "demo"
        demo.mkdir()
        shoot(demo / "runs.duckdb", demo, "demo", [
            ("runs", ""), ("triage", "triage?run=real-verl-grpo-entropy-blowup"),
            ("compare", "compare"), ("proxy", "proxy"), ("report", "report")])
        real = tmp / "real"
        real.mkdir()
        shoot(real_store(real), real, "real", [
            ("runs", ""), ("triage", "triage?run=grpo-reward-collapse-to-zero"),
            ("triage-megatron", "triage?run=megatron-bloom-176b-loss-spike"),
            ("compare", "compare"), ("report", "report?run=webui-lora-grad-norm-inf")])


if __name__ == "__main__":
    main()
