"""Model shape options (issue: fidelity where experts dominate the cost): ``repro pretrain`` and
``repro run`` take the model's shape, a pair on a shaped model pretrains the full model once into
its output and reuses it, and the dense baseline keeps the full model's backbone (it used to come
out with the bundled model's hidden size whatever the full model was)."""

from __future__ import annotations

import json

import pytest

from moeproxy.cli import main
from moeproxy.errors import InputError
from moeproxy.repro.harness import HarnessSpec, dense_model, ensure_full_model
from moeproxy.repro.tiny_moe import TinyMoeShape, tiny_moe_config

SMALL = dict(hidden_size=32, moe_intermediate_size=16, layers=2, experts=8, top_k=2, heads=2)


def test_a_shape_from_options_and_back_from_its_config():
    shape = TinyMoeShape.from_options(**SMALL)
    assert (shape.hidden_size, shape.head_dim, shape.num_key_value_heads, shape.num_experts) == (32, 16, 1, 8)
    assert TinyMoeShape.from_config(tiny_moe_config(shape)) == shape
    assert TinyMoeShape.from_config(json.loads(tiny_moe_config(shape).to_json_string())) == shape
    assert shape.key == "h32-i16-l2-e8-k2-a2"
    assert TinyMoeShape.from_options() == TinyMoeShape()  # no option: the bundled model's shape


@pytest.mark.parametrize("options, message", [
    (dict(hidden_size=30, heads=4), "not a multiple of 4 heads"),
    (dict(experts=4, top_k=8), "top-k 8 is more than the 4 experts"),
])
def test_a_shape_that_cannot_be_built_is_named(options, message):
    with pytest.raises(ValueError, match=message):
        TinyMoeShape.from_options(**options)


def test_the_command_line_refuses_a_model_and_a_shape_together(tmp_path, capsys):
    code = main(["repro", "run", "--scenario", "healthy", "--out", str(tmp_path / "o"), "--model", str(tmp_path),
                 "--layers", "2", "--db", str(tmp_path / "r.duckdb")])
    assert code != 0
    assert "either --model or the shape options" in capsys.readouterr().err
    code = main(["repro", "pretrain", "--out", str(tmp_path / "m"), "--hidden-size", "30", "--heads", "4"])
    assert code != 0 and "not a multiple of 4 heads" in capsys.readouterr().err


def test_pretrain_writes_the_shape_asked_for(tmp_path):
    out = tmp_path / "model"
    assert main(["repro", "pretrain", "--out", str(out), "--steps", "2", "--batch-size", "8", "--hidden-size", "32",
                 "--moe-intermediate-size", "16", "--layers", "2", "--experts", "8", "--top-k", "2", "--heads", "2"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert TinyMoeShape.from_config(config) == TinyMoeShape.from_options(**SMALL)


def test_a_shaped_pair_pretrains_its_full_model_once_and_the_dense_baseline_keeps_its_backbone(tmp_path):
    shape = TinyMoeShape.from_options(**SMALL)
    spec = HarnessSpec(scenario="healthy", out=tmp_path / "pair", shape=shape, pretrain_steps=2, baseline="dense",
                       dense_pretrain_steps=2, heal_steps=0, evaluate=False, steps=5)
    logged = []
    full = ensure_full_model(spec, log=logged.append)
    assert full == tmp_path / "pair" / f"full-{shape.key}" and (full / "config.json").is_file()
    assert ensure_full_model(spec, log=logged.append) == full
    assert sum("pretraining a full model" in line for line in logged) == 1  # reused the second time
    model, _, info = dense_model(spec, log=lambda *_: None)
    cfg = model.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (32, 2, 2)
    assert not getattr(cfg, "num_experts", None)
    assert "dense-h32-l2-a2-i" in info["checkpoint"]
    with pytest.raises(InputError, match="either --model or the shape options"):
        HarnessSpec(scenario="healthy", out=tmp_path / "x", shape=shape, model=str(full))
