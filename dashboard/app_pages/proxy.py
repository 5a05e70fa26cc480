"""Proxy: pick a checkpoint, see the plan (accelerators, memory, step cost, full vs proxy), start
``moeproxy build`` as a background job on the detected accelerator, follow it, cancel it, read the
finished proxy's report. Jobs live in files next to the store, so they survive reloads."""

from __future__ import annotations

from pathlib import Path


import pandas as pd
import streamlit as st

from dashboard import queries
from moeproxy import jobs
from moeproxy.allowed_paths import BUNDLED_DATA, allowed_roots, resolve_inside_roots
from moeproxy.devices import DEVICE_NAMES
from moeproxy.units import human_bytes
from dashboard.safe_text import md_code, md_failure, md_text



@st.cache_resource(show_spinner="Detecting accelerators ...")
def detected_device() -> str:
    """The device a build runs on: what ``auto`` resolves to (NPU, then CUDA, else CPU)."""
    from moeproxy.devices import auto_device_kind

    return auto_device_kind()


@st.cache_data(ttl=3600, max_entries=32, show_spinner="Planning (counting parameters on the meta device) ...")
def plan(path: str, keep_ratio: float, memory_gib: float) -> dict | str:
    from moeproxy.proxy.plan import plan_proxy

    try:
        return plan_proxy(path, keep_ratio=keep_ratio, device_memory_gib=memory_gib)
    except Exception as exc:  # a hostile config.json: an error line, not a dead page
        return md_failure(exc)


def plan_table(p: dict) -> pd.DataFrame:
    from moeproxy.proxy.plan import plan_rows

    return pd.DataFrame([{"": name, "full": a, "proxy": b} for name, a, b in plan_rows(p)])


def job_panel(root: str) -> None:
    """Progress, log tail and cancel for the active job; the finished proxy's report otherwise."""
    listed = jobs.list_jobs(root)
    if not listed:
        st.caption("No jobs yet.")
        return
    job = listed[0]
    state = job["state"]
    if state not in jobs.ACTIVE_STATES and st.session_state.get("job_polling"):
        st.session_state["job_polling"] = False
        st.rerun()  # the job just finished: redraw the whole page once and stop polling
    st.markdown(f"**Job {md_text(job['job_id'])}** ({md_text(job['kind'])} on "
                f"{md_text(DEVICE_NAMES.get(job['device'], job['device']))}): {md_code(state)} — "
                f"{md_text(job.get('message', ''))}")
    if state in jobs.ACTIVE_STATES:
        total = int(job.get("total") or 0)
        if total <= 0 or not job.get("stage"):  # the job process is starting (importing torch)
            st.progress(0.0, text="starting the job process (loading torch and the checkpoint's index) ...")
        else:
            st.progress(min(1.0, int(job.get("done") or 0) / total), text=md_text(
                f"{job.get('stage')} {job.get('done', 0)}/{total}"))
        if st.button("Cancel", key="cancel_job"):
            jobs.cancel(root, job["job_id"])
            st.rerun()
    st.code(jobs.log_tail(root, job["job_id"], 15) or "(no output yet)", language="text")
    if state == "succeeded":
        report_path = jobs.build_report_path(job["job_dir"])
        if report_path.exists():
            from moeproxy.proxy.proxy_report import ProxyReport

            report = ProxyReport.read(report_path)
            st.success(f"Proxy written to {md_code(report.output)}: " + md_text(report.headline()))
            for note in report.notes:
                st.caption(md_text(note))
            st.dataframe(pd.DataFrame([{"layer": k, "kept experts": ", ".join(map(str, v))}
                                       for k, v in report.kept_experts.items()]),
                         hide_index=True, key="kept_experts")
            with st.expander("proxy_report.json"):
                st.json(report.model_dump(mode="json"))
    if len(listed) > 1:
        with st.expander(f"All jobs ({len(listed)})"):
            st.dataframe(pd.DataFrame([{k: j.get(k) for k in ("job_id", "kind", "device", "state", "message",
                                                               "created_at")} for j in listed]),
                         hide_index=True, key="jobs_table")


def weight_files(folder) -> list:
    """The checkpoint's weight files (safetensors, single or sharded) directly in ``folder``."""
    try:
        return sorted(p for p in Path(folder).glob("*.safetensors") if p.is_file())
    except OSError:
        return []


st.title("Proxy")
root = str(jobs.jobs_root(queries.db_path()))
device = detected_device()
st.markdown(f"Builds run on: **{DEVICE_NAMES[device]}** ({md_code(device)}) · jobs in {md_code(root)}")

default_ckpt = str(BUNDLED_DATA / "tiny-moe") if (BUNDLED_DATA / "tiny-moe").is_dir() else ""
c1, c2, c3 = st.columns([3, 1, 1])
ckpt = c1.text_input("Checkpoint directory (safetensors; inside the allowed roots)", value=default_ckpt,
                     key="proxy_ckpt", help="Allowed roots: " + ", ".join(md_code(r) for r in allowed_roots()))
keep_ratio = c2.number_input("Keep ratio", min_value=0.01, max_value=1.0, value=0.25, step=0.05, key="proxy_keep")
memory = c3.number_input("Memory per accelerator (GiB)", min_value=1.0, value=64.0, step=8.0, key="proxy_mem")

checkpoint = None
if ckpt:
    try:
        checkpoint = resolve_inside_roots(ckpt, "checkpoint directory")
    except Exception as exc:
        st.error(md_failure(exc))
if checkpoint is not None:
    planned = plan(str(checkpoint), float(keep_ratio), float(memory))
    if isinstance(planned, str):
        st.error(planned)
    else:
        st.subheader(f"Plan: {planned['family']}, {planned['moe_layers']} MoE layers")
        c1, c2, c3 = st.columns(3)
        c1.metric("Accelerators", f"{planned['full']['accelerators']} -> {planned['proxy']['accelerators']}",
                  f"-{planned['accelerator_reduction']:.0%}" if planned["accelerator_reduction"] > 0 else None,
                  delta_color="inverse")
        c2.metric("Training memory, full -> proxy",
                  f"{human_bytes(planned['full']['train_state_bytes'])} -> {human_bytes(planned['proxy']['train_state_bytes'])}")
        c3.metric("Step cost ratio (full/proxy)", f"{planned['step_cost_ratio']:.2f}")
        st.dataframe(plan_table(planned), hide_index=True, key="plan_table")
        for note in planned.get("notes", []):
            st.caption(md_text(note))
        weights = weight_files(checkpoint)
        if not weights:  # a config-only directory can be planned, not built
            st.caption("This directory holds a config but no weights (`*.safetensors`): the plan above is "
                       "computed from the config; a build needs the checkpoint's weight files.")
        if st.button(f"Build proxy on {DEVICE_NAMES[device]}", key="start_build", type="primary",
                     disabled=not weights):
            try:
                job_id = jobs.launch(root, "build", {"src": str(checkpoint), "keep_ratio": float(keep_ratio),
                                                     "allowed_roots": [str(r) for r in allowed_roots()]}, device)
                st.toast(f"started job {job_id}")
            except Exception as exc:
                st.error(md_failure(exc))

st.subheader("Build job")
active = any(j["state"] in jobs.ACTIVE_STATES for j in jobs.list_jobs(root))
st.session_state["job_polling"] = active
st.fragment(job_panel, run_every="2s" if active else None)(root)
