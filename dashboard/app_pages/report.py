"""Report: export a self-contained HTML post-mortem of a run (and its proxy, and the fidelity grid
the dashboard was started with: ``--grid`` / ``$MOEPROXY_GRID``)."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from dashboard import queries
from dashboard.safe_text import md_code, md_failure

st.title("Report")
db = queries.db_path()
version = queries.data_version()
table = queries.runs(db, version)
run = queries.selected_run(table, key="report_run")
if run is None:
    st.info("No runs yet: ingest one on the Runs page.")
    st.stop()
# the proxy follows the run: only the runs linked as its proxies are offered (keyed by the run, so a
# choice made for one run never carries over to another), none when it has none
linked = [p for p in table.loc[table["proxy_of"] == run, "run"].tolist() if p != run]
if linked:
    proxy = st.selectbox("Proxy run", ["(none)"] + linked, index=1, key=f"report_proxy:{run}")
    proxy = None if proxy == "(none)" else proxy
else:
    proxy = None
    st.caption("No proxy run is linked to this run (link one on the Runs page); the report covers the run alone.")
recipe_path = None
if proxy is not None:
    from moeproxy import jobs

    built = [j for j in jobs.list_jobs(jobs.jobs_root(db)) if j.get("state") == "succeeded"
             and jobs.build_report_path(j["job_dir"]).exists()]
    labels = {f"job {j['job_id']} ({(j.get('spec') or {}).get('params', {}).get('src', '?')})":
              str(jobs.build_report_path(j["job_dir"])) for j in built}
    choice = st.selectbox("Proxy recipe", ["(next to the proxy run's logs, if any)"] + list(labels),
                          key=f"report_recipe:{proxy}", help="The proxy_report.json of a finished build job")
    recipe_path = labels.get(choice)


@st.cache_data(ttl=600, max_entries=8, show_spinner="Rendering the report ...")
def report_html(db: str, version: int, run: str, proxy: str | None, recipe_path: str | None,
                grid: tuple[str, int] | None = None) -> str:
    import json

    from moeproxy.report import render_report

    recipe = json.loads(Path(recipe_path).read_text()) if recipe_path else None
    rows = None
    if grid is not None:
        from moeproxy.fidelity_grid import load_grid

        rows = load_grid(grid[0])
    return render_report(queries.store(), run, proxy, proxy_report=recipe, grid=rows)


grid = None
if os.environ.get("MOEPROXY_GRID"):
    from moeproxy.fidelity_grid import load_grid

    grid_file = os.environ["MOEPROXY_GRID"]
    try:  # a grid that cannot be read leaves it out of the report, with a warning
        load_grid(grid_file)
        grid = (grid_file, Path(grid_file).stat().st_mtime_ns)
    except Exception as exc:
        st.warning(f"The fidelity grid is left out of the report: {md_failure(exc)}")
try:
    document = report_html(db, version, run, proxy, recipe_path, grid)
except Exception as exc:  # a bad recipe file or store content: one error line, not a dead page
    st.error(md_failure(exc))
    st.stop()
st.download_button("Download HTML report", document, file_name=f"{run}-postmortem.html", mime="text/html",
                   key="report_download", type="primary")
st.caption(f"{len(document) / 1e6:.1f} MB, self-contained (plotly.js inlined). Same from a shell: "
           + md_code(f"moeproxy report {run}{' --proxy ' + proxy if proxy else ''}"
                     f"{' --grid ' + grid[0] if grid else ''} -o {run}.html"))
if st.toggle("Preview the report here", key="report_preview"):
    import streamlit.components.v1 as components

    components.html(document, height=1400, scrolling=True)
