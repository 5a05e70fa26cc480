"""Runs: every run with role, framework, size and verdict; ingest, link a proxy to its full run, delete."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import queries
from dashboard.safe_text import md_code, md_failure, md_lines, verdict_badge
from moeproxy.contracts import ROLES

UPLOAD_LIMIT_MB = 256
TABLE_ROWS, ROW_PX = 25, 35  # Streamlit's row height
UPLOAD_NAME_LIMIT = 200


def upload_file_name(name: str) -> str:
    """A safe single file name for an upload: the last path component, no NUL or control characters,
    at most 200 characters (suffix kept), never ``.``, ``..`` or empty."""
    base = "".join(c for c in str(name).replace("\\", "/").split("/")[-1] if c.isprintable())
    if base.strip(". ") == "":
        return "upload.log"
    if len(base) > UPLOAD_NAME_LIMIT:
        stem, dot, suffix = base.rpartition(".")
        base = (stem[:UPLOAD_NAME_LIMIT - len(suffix) - 1] + "." + suffix) if dot and len(suffix) < 20 \
            else base[:UPLOAD_NAME_LIMIT]
    return base


def ingest_and_diagnose(paths: list[Path], run: str | None, role: str, proxy_of: str | None) -> list[str]:
    """Ingest, then diagnose and save findings for every run that received data; returns summary lines."""
    from moeproxy.diagnose import record

    summaries, results = record.ingest_and_diagnose(queries.store(), paths, run=run or None, role=role,
                                                     proxy_of=proxy_of or None)
    # the data is in; a failed diagnosis can be retried from Triage
    return [s.line() for s in summaries] + [f"{name}: not diagnosed ({why})" for name, why in results.items()
                                            if isinstance(why, str)]


GLANCE_LIMIT = 40  # runs drawn as sparklines (the first ones of the table)


@st.cache_data(ttl=600, max_entries=16, show_spinner=False)
def sparklines(db: str, version: int, runs: tuple[str, ...]) -> dict:
    """run -> {"loss": SVG or None, "grad_norm": ...} (numbers only, safe whatever the run's name)."""
    from moeproxy.sparklines import run_sparklines
    from moeproxy.store import Store

    return run_sparklines(Store(db), list(runs))


def show_glance(db: str, version: int, table) -> None:
    """Each run's verdict beside its loss and grad-norm sparklines: which runs to open."""
    from moeproxy.sparklines import SPARK_METRICS

    glance = table.head(GLANCE_LIMIT)
    st.subheader("At a glance")
    if len(table) > GLANCE_LIMIT:
        st.caption(f"the first {GLANCE_LIMIT} of {len(table)} runs")
    drawn = sparklines(db, version, tuple(glance["run"]))
    widths = [3, 2, 2, 2]
    for column, title in zip(st.columns(widths), ("run", "verdict", "loss", "grad norm")):
        column.caption(title)
    for i, r in enumerate(glance.itertuples()):
        with st.container(key=f"glance_{i}"):
            cells = st.columns(widths, vertical_alignment="center")
            cells[0].text(r.run)  # a user's name: text, never Markdown
            cells[1].markdown(verdict_badge(r.verdict if isinstance(r.verdict, str) else None))
            for cell, metric in zip(cells[2:], SPARK_METRICS):
                svg = drawn.get(r.run, {}).get(metric)
                if svg:
                    cell.image(svg)
                else:
                    cell.caption(f"no {metric}")


st.title("Runs")
if st.session_state.get("ingest_message"):
    st.success(md_lines(st.session_state.pop("ingest_message")))
db = queries.db_path()
version = queries.data_version()
table = queries.runs(db, version)

if table.empty:
    st.info("No runs yet. Ingest a log below, or from a shell: `moeproxy ingest PATH --run NAME`.")
else:
    verdicts = sorted({v if isinstance(v, str) else "not diagnosed" for v in table["verdict"]})
    every_tag = sorted({t for tags in table["tags"] for t in tags})
    f1, f2, f3 = st.columns([2, 2, 2])
    wanted_verdicts = f1.multiselect("Verdict", verdicts, key="runs_verdicts", placeholder="every verdict")
    wanted_tags = f2.multiselect("Tags", every_tag, key="runs_tags", placeholder="every tag",
                                 disabled=not every_tag)
    name_part = f3.text_input("Run name contains", key="runs_name")
    shown = table[["run", "role", "proxy_of", "framework", "steps", "nonfinite", "verdict", "onset_step",
                   "tags"]].copy()
    shown["verdict"] = shown["verdict"].fillna("not diagnosed")
    shown["proxy_of"] = shown["proxy_of"].fillna("")
    shown["onset_step"] = [str(int(v)) if pd.notna(v) else "" for v in shown["onset_step"]]  # no "None" cells
    live = queries.live_runs(db)
    shown.insert(1, "live", ["live" if r in live else "" for r in shown["run"]])
    if wanted_verdicts:
        shown = shown[shown["verdict"].isin(wanted_verdicts)]
    if wanted_tags:
        shown = shown[[bool(set(wanted_tags) & set(t)) for t in shown["tags"]]]
    if name_part:
        shown = shown[shown["run"].str.contains(name_part, regex=False)]
    st.caption(f"{len(shown)} of {len(table)} runs · click a row to open it in Triage")
    # every run in view up to TABLE_ROWS (the default shows ten and scrolls the rest)
    picked = st.dataframe(
        shown, hide_index=True, width="stretch", key="runs_table", on_select="rerun", selection_mode="single-row",
        height=min(max(len(shown), 1), TABLE_ROWS) * ROW_PX + ROW_PX + 3,
        # widths that fit the page at 1440 px (the grid scrolls sideways past that; the full name is
        # in the cell's tooltip)
        column_config={"run": st.column_config.TextColumn("run", width=190),
                       "live": st.column_config.TextColumn("watch", width=55, help="live: a `moeproxy watch` "
                                                           "stored rows of this run in the last minute"),
                       "role": st.column_config.TextColumn("role", width=55),
                       "proxy_of": st.column_config.TextColumn("proxy of", width=130),
                       "framework": st.column_config.TextColumn("framework", width=80),
                       "steps": st.column_config.NumberColumn("steps", width=60),
                       "nonfinite": st.column_config.NumberColumn("non-finite", width=75),
                       "verdict": st.column_config.TextColumn("verdict", width=130),
                       "onset_step": st.column_config.TextColumn("onset", width=65),
                       "tags": st.column_config.ListColumn("tags", width=90)})
    rows = (picked or {}).get("selection", {}).get("rows", []) if picked else []
    if rows:
        chosen = str(shown.iloc[rows[0]]["run"])
        st.session_state["run"] = chosen
        st.switch_page("app_pages/triage.py", query_params={"run": chosen})
    show_glance(db, version, table)

st.subheader("Ingest logs")
path_tab, upload_tab = st.tabs(["From a path on this server", "Upload a file"])
names = table["run"].tolist()
with path_tab, st.form("ingest_path_form"):
    server_path = st.text_input("Log file or directory (inside the allowed roots)", key="ingest_path")
    c1, c2, c3 = st.columns(3)
    run_name = c1.text_input("Run name (default: file name)", key="ingest_run")
    role = c2.selectbox("Role", ROLES, index=ROLES.index("other"), key="ingest_role")
    proxy_of = c3.selectbox("Proxy of", [""] + names, key="ingest_proxy_of")
    if st.form_submit_button("Ingest", key="ingest_path_button"):
        from moeproxy.allowed_paths import readable_files_inside_roots

        try:  # every file the ingest would read is checked first: inside the roots, regular
            path = readable_files_inside_roots(server_path, "ingest path")
            st.session_state["ingest_message"] = ingest_and_diagnose([path], run_name, role, proxy_of)
        except Exception as exc:  # a hostile file must not kill the page; the store is unchanged
            st.error(md_failure(exc))
        else:
            st.rerun()
with upload_tab:
    upload = st.file_uploader(f"Log file (at most {UPLOAD_LIMIT_MB} MB)", key="upload",
                              max_upload_size=UPLOAD_LIMIT_MB)
    c1, c2, c3 = st.columns(3)
    up_run = c1.text_input("Run name (default: file name)", key="upload_run")
    up_role = c2.selectbox("Role", ROLES, index=ROLES.index("other"), key="upload_role")
    up_proxy_of = c3.selectbox("Proxy of", [""] + names, key="upload_proxy_of")
    if st.button("Ingest upload", key="upload_button", disabled=upload is None):
        safe_name = upload_file_name(upload.name)
        with tempfile.TemporaryDirectory(prefix="moeproxy-upload-") as tmp:
            target = Path(tmp) / safe_name
            try:
                target.write_bytes(upload.getvalue())
                st.session_state["ingest_message"] = ingest_and_diagnose(
                    [target], up_run or Path(safe_name).stem, up_role, up_proxy_of)
            except Exception as exc:  # a hostile upload must not kill the page; the store is unchanged
                st.error(md_failure(exc))
            else:
                st.rerun()

if names:
    st.subheader("Link a proxy run to its full run")
    c1, c2, c3 = st.columns([2, 2, 1])
    proxy_like = [n for n in names if n in set(table.loc[table["role"] == "proxy", "run"])] + \
        [n for n in names if n not in set(table.loc[table["role"] == "proxy", "run"])]
    proxy_run = c1.selectbox("Proxy run", proxy_like, key="link_proxy")
    full_run = c2.selectbox("Full run", [n for n in names if n != proxy_run] or [""], key="link_full")
    if c3.button("Link", key="link_button", disabled=not full_run):
        try:
            queries.store().set_role(proxy_run, "proxy", proxy_of=full_run)
            queries.store().set_role(full_run, "full")
            st.session_state["ingest_message"] = [f"{proxy_run} is now the proxy of {full_run}"]
        except Exception as exc:
            st.error(md_failure(exc))
        else:
            st.rerun()

    st.subheader("Tag a run")
    c1, c2, c3 = st.columns([2, 2, 1])
    tag_run = c1.selectbox("Run", names, key="tag_run")
    current = next((list(t) for r, t in zip(table["run"], table["tags"]) if r == tag_run), [])
    tag_text = c2.text_input("Tags (comma-separated)", value=", ".join(current), key=f"tag_text:{tag_run}")
    if c3.button("Save tags", key="tag_button"):
        try:
            saved = queries.store().set_tags(tag_run, tag_text.split(","))
            st.session_state["ingest_message"] = [f"{tag_run}: tags {', '.join(saved) or '(none)'}"]
        except Exception as exc:
            st.error(md_failure(exc))
        else:
            st.rerun()

    st.subheader("Delete a run")
    c1, c2, c3 = st.columns([2, 2, 1])
    victim = c1.selectbox("Run to delete", names, key="delete_run")
    confirm = c2.checkbox(f"Yes, delete {md_code(victim)} and its findings", key="delete_confirm")
    if c3.button("Delete", key="delete_button", disabled=not confirm, type="primary"):
        queries.store().delete_run(victim)
        if st.session_state.get("run") == victim:
            del st.session_state["run"]
        st.rerun()
