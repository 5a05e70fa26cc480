"""StreamedModel: same logits as the whole model, with at most one module's weights resident."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from moeproxy.errors import InputError
from moeproxy.proxy.arch import FAMILIES as ADAPTERS
from moeproxy.proxy.checkpoint import open_checkpoint
from moeproxy.proxy.streamed import StreamedModel

from tiny_moe_models import FAMILIES, tiny_config

INPUT = torch.tensor([[3, 17, 42, 9, 100, 5, 77, 12], [1, 2, 3, 4, 5, 6, 7, 8]])


def whole_model_logits(path):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=INPUT).logits


def resident_modules(model: StreamedModel) -> list[str]:
    """Names of the decoder layers and outer modules whose weights are loaded right now."""
    names = [f"layer {i}" for i, layer in enumerate(model.layers) if any(not p.is_meta for p in layer.parameters())]
    outer = dict(model.model.model.named_children()) | {"lm_head": model.model.lm_head}
    return names + [n for n, m in outer.items() if n != "layers" and any(not p.is_meta for p in m.parameters())]


@pytest.mark.parametrize("family", FAMILIES)
def test_streamed_logits_equal_the_whole_model_and_one_layer_is_resident(family, tiny_checkpoints):
    ckpt = open_checkpoint(tiny_checkpoints[family])
    seen = []
    streamed = StreamedModel(ckpt, ADAPTERS[family], on_layer_loaded=lambda i, layer: seen.append(resident_modules(streamed)))
    with streamed:
        logits = streamed.logits(INPUT)
        assert resident_modules(streamed) == []  # everything went back to meta after the forward
    assert seen == [[f"layer {i}"] for i in range(len(seen))] and len(seen) == ckpt.config["num_hidden_layers"]
    assert torch.allclose(logits, whole_model_logits(tiny_checkpoints[family]), atol=1e-5)


def test_tied_lm_head_reads_the_embeddings(tmp_path):
    config = tiny_config("qwen3_moe")
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.save_pretrained(tmp_path)
    ckpt = open_checkpoint(tmp_path)
    assert "lm_head.weight" not in ckpt.tensors
    with StreamedModel(ckpt, ADAPTERS["qwen3_moe"]) as streamed:
        logits = streamed.logits(INPUT)
    assert torch.allclose(logits, whole_model_logits(tmp_path), atol=1e-5)


def test_hidden_states_skip_the_lm_head(tiny_checkpoints):
    ckpt = open_checkpoint(tiny_checkpoints["olmoe"])
    with StreamedModel(ckpt, ADAPTERS["olmoe"]) as streamed:
        hidden = streamed.hidden_states(INPUT)
    assert hidden.shape == (*INPUT.shape, ckpt.config["hidden_size"])


def test_missing_or_misshapen_outer_tensors_are_named(tiny_checkpoints, tmp_path):
    ckpt = open_checkpoint(tiny_checkpoints["qwen3_moe"])
    norm = ckpt.tensors.pop("model.norm.weight")
    with pytest.raises(InputError, match=r"tensors missing for \['model.norm.weight'\]"):
        StreamedModel(ckpt, ADAPTERS["qwen3_moe"])
    ckpt.tensors["model.norm.weight"] = ckpt.tensors["lm_head.weight"]
    with pytest.raises(InputError, match=r"model.norm.weight has shape \[128, 32\], the model expects \[32\]"):
        StreamedModel(ckpt, ADAPTERS["qwen3_moe"])
    ckpt.tensors["model.norm.weight"] = norm
    ckpt.tensors.pop("lm_head.weight")
    with pytest.raises(InputError, match="lm_head.weight missing and embeddings are not tied"):
        StreamedModel(ckpt, ADAPTERS["qwen3_moe"])


def test_fused_expert_buffers_are_reused_by_the_next_layer_and_dropped_after_the_last(tiny_checkpoints):
    ckpt = open_checkpoint(tiny_checkpoints["qwen3_moe"])
    storage = []
    with StreamedModel(ckpt, ADAPTERS["qwen3_moe"],
                       on_layer_loaded=lambda i, layer: storage.append(layer.mlp.experts.gate_up_proj.data_ptr())) as sm:
        sm.logits(INPUT)
        assert sm._fused == {}
    assert len(storage) == 2 and storage[0] == storage[1]
