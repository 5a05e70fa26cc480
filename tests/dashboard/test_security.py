"""The dashboard under hostile input (AppTest, no browser): names that are Markdown or HTML render as
text, the allow-list holds for every file an ingest or a build reads, special files and unresolvable
paths are refused with an error, and no hostile path or upload kills a page."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from synthetic_runs import write_run_log

from dashboard.safe_text import md_code, md_failure, md_lines, md_text
from moeproxy.store import Store

HOSTILE_NAMES = [
    "![b](http://localhost:9/beacon.png)",
    "<img src=http://localhost:9/x.png onerror=alert(1)>",
    "[click](javascript:alert(1))",
    ":red[red] :material/home: $x^2$ **bold** `code`",
    "``a`` b`",
    "line\n\n![x](http://localhost:9/after-a-blank-line.png)",
    "# heading | table | \\ backslash",
    "x" * 5000,
]
_MD = MarkdownIt("commonmark")  # raw HTML on: nothing may come through as a tag


def rendered_tags(markdown: str) -> list[str]:
    """Tags other than paragraph/emphasis/code that ``markdown`` renders to (an image, link, HTML)."""
    html = _MD.render(markdown)
    return [t for t in re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", html)
            if t not in ("p", "strong", "em", "code", "br", "ul", "ol", "li", "h3")]  # h3: the verdict banner


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_safe_text_renders_names_exactly_and_inert(name):
    flat = name.replace("\n", " ")
    for markdown in (md_text(name, limit=10_000), md_code(name, limit=10_000), md_lines([name, name], limit=10_000),
                     f"**{md_code(name, limit=10_000)}** :green-badge[ok]"):
        assert rendered_tags(markdown) == [], (name, markdown, _MD.render(markdown))
    text = re.sub(r"<[^>]+>", "", _MD.render(md_text(name, limit=10_000))).strip()
    import html

    assert html.unescape(text) == flat
    assert md_failure(RecursionError("maximum recursion depth exceeded")) == md_text(
        "RecursionError: maximum recursion depth exceeded")


def markdown_values(at) -> list[str]:
    """Every string the page hands to Streamlit's Markdown renderer."""
    values = []
    for kind in ("markdown", "caption", "success", "error", "warning", "info", "title", "subheader", "header"):
        values += [str(e.value) for e in at.get(kind)]
    for kind in ("checkbox", "button", "text_input", "selectbox", "multiselect", "metric"):
        values += [str(e.label) for e in at.get(kind)]
    return values


def assert_inert(at) -> None:
    assert not at.exception, at.exception
    for value in markdown_values(at):
        assert rendered_tags(value) == [], value


def test_hostile_run_and_metric_names_render_as_text_on_every_page(app, app_env):
    store = Store(app_env / "runs.duckdb")
    from moeproxy.ingest import ingest_paths

    log = app_env / "hostile.jsonl"
    log.write_text("\n".join(json.dumps({"step": s, "loss": 1.0 / s, HOSTILE_NAMES[0]: float("nan") if s == 3 else s,
                                         HOSTILE_NAMES[1]: 1.0}) for s in range(1, 40)) + "\n")
    for i, name in enumerate(HOSTILE_NAMES[:4]):
        ingest_paths(store, [write_run_log(app_env / f"r{i}.jsonl", steps=40 + i, fault_step=None)], run=name)
    ingest_paths(store, [log], run="hostile-metrics")
    app.run()
    assert_inert(app)
    assert HOSTILE_NAMES[0] in {t.value for t in app.text}  # the run's name "at a glance", as text
    for page in ("triage", "compare", "report"):
        app.switch_page(f"app_pages/{page}.py").run()
        assert_inert(app)
    app.switch_page("app_pages/triage.py").run()
    app.selectbox(key="triage_run").set_value("hostile-metrics").run()
    app.multiselect(key="triage_metrics:hostile-metrics").select(HOSTILE_NAMES[0]).select(HOSTILE_NAMES[1]).run()
    assert_inert(app)
    assert any(md_code(HOSTILE_NAMES[0]) in c.value for c in app.caption)  # its NaN marker, named as typed
    specs = [json.loads(el.proto.spec) for el in app.get("plotly_chart")]
    plotly_texts = json.dumps([[t.get("name") for t in spec["data"]] + [spec["layout"].get("title")]
                               + [a.get("text") for a in spec["layout"].get("annotations", [])] for spec in specs])
    assert "&lt;img" in plotly_texts and "<img" not in plotly_texts  # plotly's pseudo-HTML gets entities
    app.switch_page("app_pages/runs.py").run()
    app.selectbox(key="delete_run").set_value(HOSTILE_NAMES[0]).run()
    assert_inert(app)  # the confirmation checkbox's label quotes the name


def ingest_path(app, path: str, run: str = "") -> str:
    app.text_input(key="ingest_path").set_value(path)
    app.text_input(key="ingest_run").set_value(run)
    started = time.monotonic()
    app.button(key="ingest_path_button").click().run(timeout=30)
    assert time.monotonic() - started < 30
    assert_inert(app)
    errors = [e.value for e in app.error]
    return errors[0] if errors else ""


def test_symlinks_inside_an_allowed_directory_cannot_lead_out(app, app_env, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    secret = write_run_log(outside / "secret.jsonl", steps=30, fault_step=None)  # a valid log: only the roots stop it
    logs = app_env / "linked"
    write_run_log(logs / "ok.jsonl", steps=30, fault_step=None)
    (logs / "secret.jsonl").symlink_to(secret)
    before = Store(app_env / "runs.duckdb").runs()["run"].tolist()
    error = ingest_path(app, str(logs), "linked")
    assert "lead outside the allowed roots" in error and "secret" in error
    assert Store(app_env / "runs.duckdb").runs()["run"].tolist() == before

    (logs / "secret.jsonl").unlink()  # the same directory without the link is ingested
    assert ingest_path(app, str(logs), "linked") == ""
    assert "linked" in Store(app_env / "runs.duckdb").runs()["run"].tolist()


def test_hostile_server_paths_give_errors_not_dead_pages(app, app_env):
    os.mkfifo(app_env / "pipe.log")
    os.symlink(app_env / "loop-b", app_env / "loop-a")
    os.symlink(app_env / "loop-a", app_env / "loop-b")
    (app_env / "fifo-dir").mkdir()
    os.mkfifo(app_env / "fifo-dir" / "train.log")
    write_run_log(app_env / "fifo-dir" / "real.jsonl", steps=30, fault_step=None)
    cases = {
        str(app_env / "pipe.log"): "not regular files",
        str(app_env / "loop-a"): "cannot be resolved",
        str(app_env / "nul\0byte.log"): "NUL byte",
        str(app_env / ("x" * 5000)): "cannot be resolved",
        str(app_env / "../../../etc/passwd"): "outside the allowed roots",
        str(app_env / "missing.log"): "no such file",
    }
    for path, expected in cases.items():
        assert expected in ingest_path(app, path), path
    error = ingest_path(app, str(app_env / "fifo-dir"), "fifo-dir")  # refused up front, the FIFO named
    assert "not regular files" in error and "train" in error

    app.switch_page("app_pages/proxy.py").run()
    for path, expected in list(cases.items())[1:4]:  # loop, NUL, too long
        app.text_input(key="proxy_ckpt").set_value(path).run()
        assert_inert(app)
        assert any(expected in e.value for e in app.error), (path, [e.value for e in app.error])


UPLOADS = {
    "..": b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.9}\n',
    "../../escape.jsonl": b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.8}\n',
    "x" * 5000 + ".jsonl": b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.7}\n',
    "nested.jsonl": b'{"step": 1, "loss": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
    "big-step.log": b"{'step': 1" + b"0" * 500 + b", 'loss': 1.0}\n",
    "huge.log": b"step=1 loss=1" + b"0" * 400 + b"\nstep=2 loss=2.0\n",
    "binary.bin": bytes(range(256)) * 64,
}


def test_hostile_uploads_give_a_message_never_an_exception(app, app_env, own_tempdir):
    """Names that are paths (``..``, ``../../x``) or too long for the file system, and contents that
    make a parser recurse or overflow: each upload ends in a success or an error line, and nothing is
    written outside the upload's temporary folder."""
    import tempfile

    tmp_root = Path(tempfile.gettempdir())
    assert tmp_root == own_tempdir  # this test's own temporary directory: nothing else writes there
    before = sorted(os.listdir(tmp_root))
    for name, content in UPLOADS.items():
        app.file_uploader(key="upload").upload(name, content, "application/octet-stream")
        app.run()
        app.button(key="upload_button").click().run(timeout=30)
        assert_inert(app)
        assert app.success or app.error, name[:40]
    assert sorted(os.listdir(tmp_root)) == before


def test_dashboard_builds_carry_the_allowed_roots(app, app_env, monkeypatch):
    """A build job started from the Proxy page checks every file it reads against the roots."""
    from moeproxy import jobs
    from moeproxy.allowed_paths import allowed_roots

    launched = []
    monkeypatch.setattr(jobs, "launch", lambda root, kind, params, device: launched.append(params) or "0" * 12)
    app.switch_page("app_pages/proxy.py").run()
    app.button(key="start_build").click().run()
    assert_inert(app)
    assert launched and [Path(r) for r in launched[0]["allowed_roots"]] == allowed_roots()
    params = jobs.BuildJobParams.model_validate(launched[0])
    assert params.allowed_roots == allowed_roots()


def test_job_params_outside_the_roots_are_refused(app_env):
    from moeproxy import jobs

    with pytest.raises(Exception, match="outside the allowed roots"):
        jobs.BuildJobParams.model_validate({"src": str(Path(__file__).resolve().parents[2] / "data" / "tiny-moe"),
                                            "keep_ratio": 0.5, "allowed_roots": [str(app_env)]})
