"""AppTest (in-process, no browser) for every dashboard page over a store holding the synthetic demo runs."""

from __future__ import annotations

import json

from synthetic_runs import write_grid, write_run_log

from moeproxy.diagnose import CATEGORIES
from moeproxy.store import Store


def plotly_specs(at) -> dict:
    return {el.proto.id: json.loads(el.proto.spec) for el in at.get("plotly_chart")}


def plotly_array(value) -> list:
    """A trace's array as numbers: plotly writes numpy arrays as ``{"dtype", "bdata"}`` (base64)."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return list(value)


def test_first_start_loads_the_demo_runs(app, app_env):
    runs = Store(app_env / "runs.duckdb").runs()
    assert runs["run"].tolist() == ["demo-full", "demo-proxy"]
    assert runs.set_index("run").loc["demo-proxy", "proxy_of"] == "demo-full"
    assert runs["verdict"].notna().all()
    badges = [m.value for m in app.markdown if "-badge[" in m.value]
    assert len(badges) == 2 and all(b.split("[")[1].rstrip("]") in CATEGORIES for b in badges)  # each run's verdict
    assert {"demo-full", "demo-proxy"} <= {t.value for t in app.text}  # run names as text, never Markdown
    assert any("loaded demo runs" in c.value for c in app.sidebar.caption)



def test_the_runs_table_shows_no_none_cells(app, app_env):
    from moeproxy.ingest import ingest_paths

    ingest_paths(Store(app_env / "runs.duckdb"), [write_run_log(app_env / "plain.jsonl", steps=50, fault_step=None)],
                 run="never-diagnosed")  # no verdict, no onset, no proxy
    app.run()
    table = app.dataframe[0].value
    assert not table.isna().any().any(), table
    row = table.set_index("run").loc["never-diagnosed"]
    assert (row["verdict"], row["onset_step"], row["proxy_of"]) == ("not diagnosed", "", "")


def test_runs_page_ingests_from_an_allowed_path_and_refuses_others(app, app_env):
    log = write_run_log(app_env / "logs" / "extra.jsonl", steps=120, fault_step=None)
    app.text_input(key="ingest_path").set_value(str(log))
    app.text_input(key="ingest_run").set_value("extra")
    app.button(key="ingest_path_button").click().run()
    assert not app.exception
    assert any("run \\'extra\\'" in s.value for s in app.success), [e.value for e in app.error]  # escaped
    assert Store(app_env / "runs.duckdb").findings("extra") is not None  # diagnosed on ingest

    app.text_input(key="ingest_path").set_value("/etc/passwd")
    app.button(key="ingest_path_button").click().run()
    assert any("outside the allowed roots" in e.value for e in app.error)


def test_runs_page_upload_link_and_delete(app, app_env):
    content = write_run_log(app_env / "up.jsonl", steps=80, fault_step=None).read_bytes()
    app.file_uploader(key="upload").upload("uploaded.jsonl", content, "application/json")
    app.run()
    app.button(key="upload_button").click().run()
    assert not app.exception
    store = Store(app_env / "runs.duckdb")
    assert "uploaded" in store.runs()["run"].tolist()

    app.selectbox(key="link_proxy").set_value("uploaded")
    app.run()
    app.selectbox(key="link_full").set_value("demo-full")
    app.button(key="link_button").click().run()
    row = store.runs().set_index("run").loc["uploaded"]
    assert row["role"] == "proxy" and row["proxy_of"] == "demo-full"

    app.selectbox(key="delete_run").set_value("uploaded")
    app.run()
    app.checkbox(key="delete_confirm").check().run()
    app.button(key="delete_button").click().run()
    assert "uploaded" not in store.runs()["run"].tolist()


def test_triage_page_panels_findings_search_and_smoothing(app):
    app.switch_page("app_pages/triage.py").run()
    assert not app.exception
    spec = plotly_specs(app)
    triage = next(s for s in spec.values() if any(t.get("name") == "grad_norm" for t in s["data"]))
    names = {t.get("name") for t in triage["data"]}
    assert {"grad_norm", "loss", "routing_entropy", "grad_norm +inf", "loss NaN"} <= names
    assert triage["layout"]["yaxis"]["type"] == "log"
    # the onset marker: the routing collapse injected at step 300, dated at the first record that
    # visibly left the baseline (LABELS.md), within a record or two of the injection
    marks = [a.get("text", "") for a in triage["layout"]["annotations"]]
    assert any(f"@ {step}" in m for m in marks for step in (300, 301, 302)), marks
    banner = " ".join(m.value for m in app.markdown[:4])  # the answer comes first, before any control
    assert "badge[" in banner and "from step" in banner and "confidence" in banner
    findings_text = " ".join(m.value for m in app.markdown)
    assert "fell from" in findings_text  # evidence sentences listed

    app.multiselect(key="triage_metrics:demo-full").select("reward_mean")
    app.slider(key="triage_smoothing").set_value(0.9)
    app.run()
    assert not app.exception
    names = {t.get("name") for s in plotly_specs(app).values() for t in s["data"]}
    assert "reward_mean" in names and any("EMA 0.9" in (n or "") for n in names)


def test_triage_zoom_state_requeries_the_range(app):
    app.switch_page("app_pages/triage.py").run()
    app.session_state["zoom:demo-full"] = (290, 330)
    app.run()
    assert not app.exception
    spec = next(s for s in plotly_specs(app).values() if any(t.get("name") == "grad_norm" for t in s["data"]))
    assert "steps 290 - 330" in " ".join(c.value for c in app.caption)
    grad = next(t for t in spec["data"] if t.get("name") == "grad_norm")
    xs = plotly_array(grad["x"])
    assert xs and 290 <= min(xs) and max(xs) <= 330  # the selected range, re-queried
    app.button(key="triage_reset_zoom").click().run()
    assert "zoom:demo-full" not in app.session_state


def test_compare_page_overlays_and_shows_the_fidelity_card(app, app_env):
    from moeproxy.ingest import ingest_paths

    for i in range(2):  # two more runs to overlay
        ingest_paths(Store(app_env / "runs.duckdb"), [write_run_log(app_env / f"more{i}.jsonl", steps=200,
                                                                    fault_step=None, seed=20 + i)], run=f"more-{i}")
    app.switch_page("app_pages/compare.py").run()
    assert not app.exception
    assert app.selectbox(key="compare_proxy").value == "demo-proxy"
    assert app.selectbox(key="compare_full").value == "demo-full"
    labels = [m.label for m in app.metric]
    assert "verdict match" in labels and "onset delta (steps)" in labels
    assert next(m.value for m in app.metric if m.label == "onset delta (steps)").startswith("+")
    app.radio(key="compare_align").set_value("fraction").run()
    assert not app.exception
    spec = next(iter(plotly_specs(app).values()))
    xs = [x for t in spec["data"] if isinstance(t.get("x"), list) for x in t["x"]]
    assert spec["layout"]["xaxis"]["title"]["text"] == "fraction of run"
    assert not xs or max(xs) <= 1.0
    # more runs on one overlay, each its own colour
    others = ["more-0", "more-1"]
    app.multiselect(key="compare_more_runs").set_value(others).run()
    assert not app.exception
    spec = next(iter(plotly_specs(app).values()))
    lines = {t["name"]: t["line"]["color"] for t in spec["data"] if t.get("mode") == "lines" and "line" in t}
    assert set(others) <= set(lines) and len({lines[n] for n in ["demo-full", "demo-proxy", *others]}) == 4


def test_compare_says_how_to_get_a_grid_and_names_a_bad_one(app, app_env, monkeypatch):
    monkeypatch.delenv("MOEPROXY_GRID", raising=False)
    app.switch_page("app_pages/compare.py").run()
    assert not app.exception
    assert any("moeproxy dashboard --grid" in c.value for c in app.caption)
    bad = write_grid(app_env / "bad.json", [{"scenario": "healthy"}])
    monkeypatch.setenv("MOEPROXY_GRID", str(bad))
    app.run()
    assert not app.exception
    warnings = [w.value.replace("\\", "") for w in app.warning]  # shown as text: Markdown escaped
    assert any("bad.json: row 1: no kind" in w for w in warnings), warnings
    monkeypatch.setenv("MOEPROXY_GRID", str(write_grid(app_env / "results.json")))
    app.run()
    assert not app.exception and not app.warning
    tables = [h.value for h in app.get("html") if "fidelity-grid" in h.value]
    assert len(tables) == 1 and "cluster 1/4" in tables[0] and 'class="match-some"' in tables[0]


def test_compare_follows_the_proxy_link_when_the_proxy_changes(app, app_env):
    from moeproxy.ingest import ingest_paths

    store = Store(app_env / "runs.duckdb")
    for steps, name, role, of in ((40, "second-full", "full", None), (41, "second-proxy", "proxy", "second-full")):
        log = write_run_log(app_env / f"{name}.jsonl", steps=steps, fault_step=None)
        ingest_paths(store, [log], run=name, role=role, proxy_of=of)
    app.switch_page("app_pages/compare.py").run()
    assert app.selectbox(key="compare_full").value == "demo-full"
    app.selectbox(key="compare_proxy").set_value("second-proxy").run()
    assert not app.exception
    assert app.selectbox(key="compare_full").value == "second-full"
    app.selectbox(key="compare_full").set_value("demo-full").run()  # a hand-picked full run stays
    assert app.selectbox(key="compare_full").value == "demo-full"
    assert not app.exception


def test_proxy_page_plans_and_cancels_a_build(app):
    app.switch_page("app_pages/proxy.py").run()
    assert not app.exception, app.exception
    assert any("Builds run on" in m.value for m in app.markdown)
    assert [m.label for m in app.metric][:1] == ["Accelerators"]
    plan = app.dataframe[0].value.set_index("")  # the bundled tiny model, in human units
    assert plan.loc["parameters (total)", "full"] == "635 K" and plan.loc["weights on disk", "full"] == "2.42 MiB"
    app.button(key="start_build").click().run()
    assert not app.exception
    text = " ".join(m.value for m in app.markdown)
    assert "Job " in text and ("`queued`" in text or "`running`" in text or "`succeeded`" in text)
    if "cancel_job" in [b.key for b in app.button]:
        app.button(key="cancel_job").click().run()
        assert "`cancelled`" in " ".join(m.value for m in app.markdown)


def test_proxy_page_refuses_a_checkpoint_outside_the_roots(app):
    app.switch_page("app_pages/proxy.py").run()
    app.text_input(key="proxy_ckpt").set_value("/usr").run()
    assert any("outside the allowed roots" in e.value for e in app.error)


def test_report_page_offers_the_html(app):
    app.switch_page("app_pages/report.py").run()
    assert not app.exception
    assert app.selectbox(key="report_proxy:demo-full").value == "demo-proxy"
    assert any("moeproxy report demo-full --proxy demo-proxy" in c.value for c in app.caption)
    # the proxy follows the run: a run with no proxy of its own gets none, and no recipe
    app.selectbox(key="report_run").set_value("demo-proxy").run()
    assert not app.exception
    assert not [s for s in app.selectbox if s.key.startswith(("report_proxy", "report_recipe"))]
    assert any("moeproxy report demo-proxy -o" in c.value for c in app.caption)
    assert any("No proxy run is linked" in c.value for c in app.caption)


def test_report_page_takes_the_dashboards_grid(app, app_env, monkeypatch):
    monkeypatch.setenv("MOEPROXY_GRID", str(write_grid(app_env / "grid" / "results.json")))
    app.switch_page("app_pages/report.py").run()
    assert not app.exception and not app.warning
    assert any("--grid" in c.value and "results.json -o" in c.value for c in app.caption)
    monkeypatch.setenv("MOEPROXY_GRID", str(write_grid(app_env / "bad.json", [])))
    app.run()
    assert not app.exception and not app.error  # the report is still offered, without the grid
    assert any("left out of the report" in w.value for w in app.warning)
    assert not any("--grid" in c.value for c in app.caption)


def test_proxy_page_plans_a_config_only_directory_but_offers_no_build(app, app_env):
    import shutil

    from moeproxy.repro.tiny_moe import DEFAULT_CHECKPOINT

    config_only = app_env / "config-only"
    config_only.mkdir()
    shutil.copy(DEFAULT_CHECKPOINT / "config.json", config_only / "config.json")
    app.switch_page("app_pages/proxy.py").run()
    app.text_input(key="proxy_ckpt").set_value(str(config_only)).run()
    assert not app.exception, app.exception
    assert [m.label for m in app.metric][:1] == ["Accelerators"]  # the plan, from the config
    assert app.button(key="start_build").disabled
    assert any("no weights" in c.value for c in app.caption)
