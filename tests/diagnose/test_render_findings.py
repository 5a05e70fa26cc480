"""One findings row model, rendered three ways (terminal text, Markdown, HTML) from one module:
the same rows in the same order, each escaped for its markup."""

from __future__ import annotations

import numpy as np

from moeproxy.diagnose import diagnose_series
from moeproxy.diagnose.render import ROW_FIELDS, finding_rows, findings_html, findings_markdown, render_text


def _result():
    n = 80
    rng = np.random.default_rng(2)
    loss = 2.0 - 0.01 * np.arange(n) + rng.normal(0, 0.01, n)
    loss[60:] = np.nan
    grad = 0.5 + rng.normal(0, 0.02, n)
    grad[30] = 90.0  # a spike that comes back: a warning beside the critical finding
    return diagnose_series({"loss": loss, "grad_norm": grad})


def test_every_renderer_shows_the_same_rows_in_the_same_order():
    result = _result()
    rows = finding_rows(result)
    assert len(rows) >= 2 and all(set(r) == set(ROW_FIELDS) for r in rows)
    text = render_text(result)
    md = findings_markdown(result, text=str, code=lambda v: f"`{v}`")
    page = findings_html(result)
    assert len(md) == len(rows) == page.count("<li")
    for i, row in enumerate(rows):
        assert f"[{row['rule']}]" in text
        assert md[i].startswith(f"- **{row['category']}** ({row['severity']}) at step {row['onset_step']}")
        assert f"[{row['rule']}]" in page
    positions = [text.index(f"[{r['rule']}]") for r in rows]
    assert positions == sorted(positions)


def test_each_markup_escapes_what_a_log_can_put_in_a_metric_name():
    result = {"verdict": "divergence", "onset_step": 3, "detector_version": "x",
              "findings": [{"category": "divergence", "onset_step": 3, "severity": "critical",
                            "metric": "<script>loss</script>", "rule": "sustained_rise", "evidence": "a *b* <i>"}]}
    page = findings_html(result)
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;i&gt;" in page
    md = findings_markdown(result, text=lambda v: str(v).replace("*", "\\*"), code=lambda v: f"`{v}`")
    assert md == ["- **divergence** (critical) at step 3 on `<script>loss</script>` \\[sustained_rise\\]: a \\*b\\* <i>"]
    assert finding_rows(None) == [] and "Not diagnosed" in findings_html(None)
