"""End to end at test size: one scenario pair (build, heal, GRPO on both, ingest, compare) and the
compare / evaluate commands on its output. Budget: the pair runs in well under 90 s on 2 cores."""

import json

import pytest

from moeproxy.cli import main
from moeproxy.errors import InputError
from moeproxy.repro.harness import HarnessSpec, run_pair

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    out = tmp_path_factory.mktemp("pair")
    db = out / "runs.duckdb"
    spec = HarnessSpec(scenario="divergence", out=out / "run", keep_ratio=0.25, steps=20, seed=0, db=str(db),
                       heal_steps=30, evaluate=False)
    return spec, run_pair(spec, log=lambda *_: None), db


def test_pair_writes_fidelity_json_and_stores_both_runs(pair):
    spec, result, db = pair
    saved = json.loads((spec.out / "fidelity.json").read_text())
    assert saved["verdict_match"] == result["verdict_match"]
    for key in ("full", "proxy", "verdict_match", "onset_relative_difference", "correlations", "cost"):
        assert key in saved
    assert saved["full"]["verdict"] == "divergence"  # lr x10 without clipping at step 9
    assert saved["full"]["onset_step"] >= 9
    assert saved["proxy_build"]["experts_after"] == 8
    # the scenario's settings are the full model's shape's (scenarios.CALIBRATED), on both sides
    assert saved["scenario"]["full_shape"] == "h64-i32-l3-e32-k4-a4"
    assert saved["cost"]["parameters"]["ratio"] < 0.5
    from moeproxy.store import Store

    runs = Store(db).runs().set_index("run")
    assert runs.loc[f"{spec.run_name}-full", "role"] == "full"
    assert runs.loc[f"{spec.run_name}-proxy", "proxy_of"] == f"{spec.run_name}-full"
    assert runs.loc[f"{spec.run_name}-proxy", "verdict"] == saved["proxy"]["verdict"]  # findings saved


def test_compare_command_prints_the_same_json(pair, capsys):
    spec, result, db = pair
    assert main(["compare", f"{spec.run_name}-full", f"{spec.run_name}-proxy", "--db", str(db), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["verdict_match"] == result["verdict_match"]
    assert printed["correlations"] == result["correlations"]
    assert main(["compare", f"{spec.run_name}-full", "missing", "--db", str(db)]) == 2


def test_evaluate_command_keeps_or_rejects_with_figures(pair, tmp_path, capsys):
    spec, _, _ = pair
    from moeproxy.repro.tiny_moe import DEFAULT_CHECKPOINT

    tasks = tmp_path / "tasks.jsonl"
    lines = (DEFAULT_CHECKPOINT / "eval_tasks.jsonl").read_text().splitlines()[:64]
    tasks.write_text("\n".join(lines) + "\n")
    code = main(["evaluate", str(DEFAULT_CHECKPOINT), str(spec.out / "proxy"), "--tasks", str(tasks),
                 "--max-quality-drop", "1.0", "--max-perplexity-ratio", "100", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["decision"] == "keep"
    assert result["proxy"]["parameters"] < result["full"]["parameters"]
    assert 0 <= result["proxy"]["exact_match"] <= 1 and result["full"]["perplexity"] >= 1
    code = main(["evaluate", str(DEFAULT_CHECKPOINT), str(spec.out / "proxy"), "--tasks", str(tasks),
                 "--max-quality-drop", "0.0", "--max-perplexity-ratio", "1.0"])
    assert code == 1 and "REJECT" in capsys.readouterr().out


def test_bad_task_file_names_file_and_line(tmp_path):
    from moeproxy.repro.evaluation import read_tasks

    bad = tmp_path / "t.jsonl"
    bad.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": 3}\n')
    with pytest.raises(InputError, match=r"t.jsonl:2"):
        read_tasks(bad)


def test_spec_validation():
    with pytest.raises(InputError, match="scenario"):
        HarnessSpec(scenario="nope", out="x")
    with pytest.raises(InputError, match="keep-ratio"):
        HarnessSpec(scenario="healthy", out="x", keep_ratio=1.5)
