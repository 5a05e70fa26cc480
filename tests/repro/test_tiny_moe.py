import json

import pytest

from moeproxy.errors import NotFound
from moeproxy.repro.tiny_moe import DEFAULT_CHECKPOINT, build_tokenizer, load_tiny_moe


def test_tokenizer_round_trips_through_autotokenizer(tmp_path):
    from transformers import AutoTokenizer

    build_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    ids = tok("37+58=95", add_special_tokens=False).input_ids
    assert len(ids) == 8
    assert tok.decode(ids) == "37+58=95"
    assert tok.eos_token == "<eos>" and tok.pad_token == "<pad>"


def test_committed_checkpoint_is_a_partially_trained_qwen3_moe():
    model, tok = load_tiny_moe()
    assert model.config.model_type == "qwen3_moe"
    assert model.config.num_experts == 32 and model.config.num_experts_per_tok == 4
    report = json.loads((DEFAULT_CHECKPOINT / "pretrain_report.json").read_text())
    assert 0.3 < report["eval_exact_match"] < 0.95  # partial competence, leaves room for RL
    assert (DEFAULT_CHECKPOINT / "model.safetensors").stat().st_size < 5 * 2**20


def test_missing_checkpoint_names_the_path(tmp_path):
    with pytest.raises(NotFound, match="config.json"):
        load_tiny_moe(tmp_path)
