"""Every rule is a declared object; the verdict reads their properties; the learned verdict is
compared by leave-one-source-out cross-validation and ships as plain numbers."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np

import moeproxy.diagnose.detectors  # noqa: F401  (declarations)
from moeproxy.diagnose.config import DiagnoseConfig
from moeproxy.diagnose.evaluation import Case, source_of
from moeproxy.diagnose.rules import CHAIN, RULES
from moeproxy.diagnose.verdict_model import FEATURES, LearnedVerdict, cross_validate, fit, held_out

DIAGNOSE = Path(__file__).resolve().parents[2] / "moeproxy" / "diagnose"


def _fired_rule_names() -> set[str]:
    """Rule names written as string literals in Finding(...) calls of the diagnose package."""
    names = set()
    for path in DIAGNOSE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding" and len(node.args) >= 5:
                rule = node.args[4]
                if isinstance(rule, ast.Constant) and isinstance(rule.value, str):
                    names.add(rule.value)
    return names


def test_every_rule_a_detector_fires_is_declared_with_its_thresholds_in_the_config():
    fired = _fired_rule_names()
    assert len(fired) > 25
    assert fired <= set(RULES), sorted(fired - set(RULES))
    config = set(DiagnoseConfig().to_dict())
    for rule in RULES.values():
        assert set(rule.thresholds) <= config, (rule.name, rule.thresholds)
        assert 0 <= rule.rank <= len(CHAIN)
        assert rule.measures


def test_no_rule_names_a_file_a_repository_or_a_run():
    import re

    # every string the diagnosis code holds (rule names, metric names, messages, docstrings)
    text = " ".join(node.value.lower() for p in DIAGNOSE.rglob("*.py") for node in ast.walk(ast.parse(p.read_text()))
                    if isinstance(node, ast.Constant) and isinstance(node.value, str))

    for marker in (r"\w\.(?:log|jsonl|csv|txt)\b", r"github\.com/", r"cs336", r"hotpotqa", r"bloom",
                   r"tests/fixtures", r"\b\d{3}_[a-z]"):
        assert not re.search(marker, text), (marker, re.search(marker, text))


def _case(source: str, label: str, cands: list[tuple[str, int]], verdict: str, onset) -> Case:
    findings = [{"category": c, "onset_step": s, "severity": "critical", "metric": "m", "rule": "x",
                 "evidence": ""} for c, s in cands]
    case = Case(f"{source}-{len(cands)}-{label}.log", "t", source, (label,), {label: [[0, 100]]})
    case.verdict, case.onset = verdict, onset
    case.result = {"verdict": verdict, "onset_step": onset, "findings": findings,
                   "data": {"first_step": 0, "last_step": 100, "step_gap": 1, "records": 100}}
    return case


def test_cross_validation_never_trains_on_the_held_out_source_and_the_model_is_plain_json():
    cases = []
    for i in range(6):
        cases.append(_case(f"o/r{i}", "divergence", [("divergence", 10), ("reward_collapse", 12)], "divergence", 10))
        cases.append(_case(f"o/r{i}", "healthy", [], "healthy", None))
    cv = cross_validate(cases)
    assert cv["causal"]["right"] == 12 and cv["causal"]["n"] == 12
    assert cv["learned"]["n"] == 12 and set(cv["learned"]["predictions"]) == {f"t/{c.file}" for c in cases}
    model = fit(cases)
    text = model.to_json()
    back = LearnedVerdict.from_json(text)
    assert json.loads(text)["features"] == list(FEATURES)
    assert np.allclose(back.coef, model.coef)
    assert back.predict(cases[0].result)[0] == "divergence"
    assert back.predict(cases[1].result) == ("healthy", None)
    # a fresh set scored by a model fitted elsewhere: both ways of choosing, on every log of it
    fresh = [_case("o/new", "reward_collapse", [("divergence", 10), ("reward_collapse", 12)], "divergence", 10)]
    out = held_out(fresh, back)
    assert out["causal"]["right"] == 0 and out["causal"]["n"] == 1 and out["causal"]["judged"] == 1
    assert out["learned"]["predictions"] == {f"t/{fresh[0].file}": back.predict(fresh[0].result)}


def test_sources_group_by_repository():
    assert source_of("https://github.com/Org/Repo/blob/abc/x.log") == "org/repo"
    assert source_of("https://github.com/org/repo/issues/5#issuecomment-1") == "org/repo"


def test_no_detector_keeps_a_threshold_of_its_own_outside_the_config():
    """Every number a rule compares against lives in DiagnoseConfig (stored with the findings):
    no module of the diagnosis keeps a numeric constant at module level, bar the pure maths of
    robust.py (IQR to sigma) and its bound on the work done per departure."""
    allowed = {("robust.py", "IQR_TO_SIGMA"), ("robust.py", "LOCAL_CONTEXT")}
    found = []
    for path in DIAGNOSE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.BinOp)):
                value = node.value
                numeric = (isinstance(value, ast.Constant) and isinstance(value.value, (int, float))
                           and not isinstance(value.value, bool)) or isinstance(value, ast.BinOp)
                for target in node.targets:
                    if numeric and isinstance(target, ast.Name) and (path.name, target.id) not in allowed:
                        found.append(f"{path.relative_to(DIAGNOSE)}:{target.id}")
    assert not found, found


def test_every_threshold_is_declared_where_it_is_read_and_every_read_is_declared():
    """A threshold lives with the code that reads it (``thresholds(...)`` in its module): each
    declared one is read as ``cfg.<name>`` or ``config.<name>`` in its declaring module (those every
    detector reads, robust z and history, with the detector contract in ``registry.py``), and every
    such read anywhere in the diagnosis names a declared threshold."""
    import re

    from moeproxy.diagnose.config import THRESHOLDS

    read = re.compile(r"\b(?:cfg|config)\.([a-z_][a-z0-9_]*)\b")
    methods = {"to_dict", "from_dict"}
    everywhere = " ".join(p.read_text() for p in DIAGNOSE.rglob("*.py"))
    for spec in THRESHOLDS.values():
        if spec.module == "moeproxy.diagnose.registry":
            assert spec.name in read.findall(everywhere), spec.name
            continue
        path = DIAGNOSE.parent.parent / (spec.module.replace(".", "/") + ".py")
        if not path.exists():
            path = path.with_suffix("") / "__init__.py"
        assert spec.name in read.findall(path.read_text()), (spec.name, spec.module)
        assert spec.doc.strip(), spec.name
    for path in DIAGNOSE.rglob("*.py"):
        unknown = set(read.findall(path.read_text())) - set(THRESHOLDS) - methods
        assert not unknown, (path.name, sorted(unknown))


def test_a_config_is_immutable_validated_and_round_trips():
    import pytest

    cfg = DiagnoseConfig(kl_factor=5)
    assert cfg.kl_factor == 5 and DiagnoseConfig.from_dict(cfg.to_dict()) == cfg
    assert hash(cfg) == hash(DiagnoseConfig(kl_factor=5)) and cfg != DiagnoseConfig()
    with pytest.raises(AttributeError):
        cfg.kl_factor = 1
    with pytest.raises(ValueError, match="unknown key"):
        DiagnoseConfig(no_such_threshold=1)
    with pytest.raises(ValueError, match="is_ratio_low must be below is_ratio_high"):
        DiagnoseConfig(is_ratio_low=3.0)
