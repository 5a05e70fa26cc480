"""Tiny MoE checkpoints (2-3 layers, hidden 32, 8 experts) built with transformers' own classes."""

from __future__ import annotations

COMMON = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=128, max_position_embeddings=64)


def tiny_config(family: str, **overrides):
    """The tiny config of ``family``; ``overrides`` replace its fields (e.g. ``topk_group=1``)."""
    config = _tiny_config(family)
    for key, value in overrides.items():
        if not hasattr(config, key):
            raise KeyError(f"{family} config has no field {key!r}")
        setattr(config, key, value)
    return config


def _tiny_config(family: str):
    import transformers as tf

    if family == "qwen2_moe":
        return tf.Qwen2MoeConfig(**COMMON, intermediate_size=48, moe_intermediate_size=16,
                                 shared_expert_intermediate_size=24, num_experts=8, num_experts_per_tok=2)
    if family == "qwen3_moe":
        return tf.Qwen3MoeConfig(**COMMON, head_dim=8, intermediate_size=48, moe_intermediate_size=16,
                                 num_experts=8, num_experts_per_tok=2, norm_topk_prob=True)
    if family == "mixtral":
        return tf.MixtralConfig(**COMMON, intermediate_size=16, num_local_experts=8, num_experts_per_tok=2)
    if family == "olmoe":
        return tf.OlmoeConfig(**COMMON, intermediate_size=16, num_experts=8, num_experts_per_tok=2,
                              eos_token_id=1, pad_token_id=0)
    if family == "deepseek_v3":
        return tf.DeepseekV3Config(
            hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, vocab_size=128,
            intermediate_size=48, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2,
            n_group=2, topk_group=2, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=16,
            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, max_position_embeddings=64)
    if family == "gpt_oss":
        return tf.GptOssConfig(**COMMON, head_dim=8, intermediate_size=16, num_local_experts=8,
                               num_experts_per_tok=2, layer_types=["sliding_attention", "full_attention"],
                               sliding_window=8)
    raise KeyError(family)


FAMILIES = ["qwen2_moe", "qwen3_moe", "mixtral", "olmoe", "deepseek_v3", "gpt_oss"]


def make_tiny(family: str, path, seed: int = 0, mutate=None, **overrides):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, **overrides))
    with torch.no_grad():
        for name, p in model.named_parameters():  # random init leaves routers/biases at zero
            if "norm" not in name:
                p.normal_(0, 0.3)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0, 0.05)
        if mutate is not None:
            mutate(model)
    model.save_pretrained(path)
    return path


