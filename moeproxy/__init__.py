"""moeproxy: triage failed MoE RL post-training runs and reproduce them on small proxies.

The library works without the dashboard: ``moeproxy.store`` (the DuckDB run store),
``moeproxy.ingest`` (log parsers), ``moeproxy.diagnose`` (failure classification),
``moeproxy.proxy`` (expert pruning and planning). ``moeproxy.cli`` is the command line.
"""

__version__ = "0.1.0"
