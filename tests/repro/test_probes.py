import math

import pytest
import torch

from moeproxy.errors import InputError
from moeproxy.repro.probes import RoutingProbe, RoutingProbeCallback, find_routers, router_family, routing_scores


def _qwen3(layers=2, experts=8, top_k=2):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(vocab_size=32, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         num_experts=experts, num_experts_per_tok=top_k)
    return Qwen3MoeForCausalLM(cfg)


def test_uniform_router_has_entropy_one_and_balanced_load():
    model = _qwen3()
    with torch.no_grad():
        for _, _, router in find_routers(model):
            router.weight.zero_()
    probe = RoutingProbe(model)
    model(torch.randint(0, 32, (2, 6)))
    metrics = probe.collect()["metrics"]
    assert metrics["routing_entropy"] == pytest.approx(1.0, abs=1e-6)
    assert set(metrics) >= {"routing_entropy/layer_0", "routing_entropy/layer_1", "load_imbalance/layer_1"}


def test_collapsed_router_has_low_entropy_and_high_imbalance():
    model = _qwen3()
    with torch.no_grad():
        for _, _, router in find_routers(model):
            router.weight.zero_()
            router.weight[0] = 50.0  # expert 0 dominates every token with positive features
    probe = RoutingProbe(model)
    model(torch.randint(0, 32, (4, 8)))
    out = probe.collect()
    assert out["metrics"]["routing_entropy"] < 0.6
    assert max(out["load"][0]) > 1 / 8


def test_padding_is_excluded_through_the_token_mask():
    model = _qwen3(layers=1)
    probe = RoutingProbe(model)
    ids = torch.randint(0, 32, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    probe.set_token_mask(mask)
    model(ids, attention_mask=mask)
    probe.collect()
    assert probe._totals == {}
    probe.set_token_mask(mask)
    model(ids, attention_mask=mask)
    totals = probe._totals[0]
    assert totals.tokens == 10
    assert float(totals.load.sum()) == 10 * 2


def test_sigmoid_family_uses_correction_bias():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = DeepseekV3Config(vocab_size=32, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                           num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=8, num_experts_per_tok=2,
                           n_group=2, topk_group=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
                           kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_shared_experts=1)
    model = DeepseekV3ForCausalLM(cfg)
    family = router_family(model)
    assert family.scoring == "sigmoid" and family.bias_attr == "e_score_correction_bias"
    assert [layer for layer, _, _ in find_routers(model)] == [1]  # the dense layer 0 has no router
    logits = torch.zeros(3, 4)
    bias = torch.tensor([3.0, 0.0, 0.0, 0.0])
    scores = routing_scores(logits, family, bias)
    assert torch.allclose(scores.sum(-1), torch.ones(3))
    assert scores[0, 0] > scores[0, 1]  # the bias shifts the choice distribution


def test_unsupported_family_is_a_clear_error():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8))
    with pytest.raises(InputError, match="qwen3"):
        RoutingProbe(model)


def test_trainer_callback_logs_routing_entropy(tmp_path):
    from transformers import Trainer, TrainingArguments

    from moeproxy.repro.probes import attach_routing_probe

    model = _qwen3()
    data = [{"input_ids": torch.randint(0, 32, (8,)), "labels": torch.randint(0, 32, (8,))} for _ in range(8)]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, logging_steps=1,
                             report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    attach_routing_probe(trainer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2
    for entry in logged:
        assert 0 < entry["routing_entropy"] <= 1
        assert math.isfinite(entry["load_imbalance/layer_1"])
    assert isinstance(trainer.callback_handler.callbacks[0], RoutingProbeCallback)
