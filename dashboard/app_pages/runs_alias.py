"""``/runs``: the Runs page is the default page, served at ``/``; a link to ``/runs`` goes there."""

import streamlit as st

st.switch_page("app_pages/runs.py")
