"""The Streamlit triage app (``moeproxy dashboard``): app.py, pages/, and the pure figure builders in figures.py."""
