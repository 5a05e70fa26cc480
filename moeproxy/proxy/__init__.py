"""Proxy construction: plan the accelerator savings, then prune each MoE layer's experts by clustering.

Public entry points: ``plan_proxy`` (moeproxy.proxy.plan) and ``build_proxy`` / ``BuildSpec``
(moeproxy.proxy.build). Family adapters are registered in ``moeproxy.proxy.arch.FAMILIES``.
"""
