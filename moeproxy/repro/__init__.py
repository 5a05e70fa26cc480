"""Reproduction harness: a tiny MoE on a verifiable arithmetic task, GRPO with real fault mechanisms.

Rooms: ``arithmetic`` (the task: prompts, splits, reward), ``tiny_moe`` (the Qwen3-MoE config and the
character tokenizer), ``pretrain`` (supervised warm-up to partial competence), ``probes`` (routing
entropy and expert load from router hooks, any supported family), ``grpo`` (the RL loop writing verl
file-logger JSONL), ``scenarios`` (named fault configurations), ``evaluation`` (task quality, memory
and throughput of a model pair), ``harness`` (full vs proxy end to end). Torch is imported by the
modules that need it, never by this package file.
"""
