"""Token-level plumbing shared by pre-training, GRPO and evaluation: encode, sample, score.

Prompts are left-padded (``<pad>... <bos> 3 7 + 5 8 =``) so that every row's next token sits in the
last column; position ids are derived from the attention mask. ``sample`` draws completions token by
token (no KV cache: sequences are ~12 tokens) and returns the sampling model's own log-probs, which is
what an inference engine reports; ``sequence_logprobs`` recomputes them with any model (the trainer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_NEW_TOKENS = 4  # a sum of two numbers below 100 has at most 3 digits, then <eos>


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def encode_prompts(tokenizer, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(input_ids, attention_mask)`` with ``<bos>`` in front of every prompt."""
    rows = [[tokenizer.bos_token_id] + tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def encode_supervised(tokenizer, prompts: list[str], answers: list[str]):
    """``(input_ids, attention_mask, labels)``: prompt + answer + ``<eos>``, loss on answer tokens only."""
    p_ids, p_mask = encode_prompts(tokenizer, prompts)
    answer_rows = [tokenizer(a, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for a in answers]
    width = max(len(r) for r in answer_rows)
    a_ids = torch.full((len(answers), width), tokenizer.pad_token_id, dtype=torch.long)
    a_mask = torch.zeros((len(answers), width), dtype=torch.long)
    for i, r in enumerate(answer_rows):
        a_ids[i, : len(r)] = torch.tensor(r)
        a_mask[i, : len(r)] = 1
    ids = torch.cat([p_ids, a_ids], dim=1)
    mask = torch.cat([p_mask, a_mask], dim=1)
    labels = ids.clone()
    labels[:, : p_ids.shape[1]] = -100
    labels[mask == 0] = -100
    return ids, mask, labels


@dataclass
class Rollout:
    """Completions of a batch of prompts: tokens, their mask (stops after ``<eos>``), sampler log-probs."""

    prompt_ids: torch.Tensor  # [B, P]
    prompt_mask: torch.Tensor  # [B, P]
    completion_ids: torch.Tensor  # [B, T]
    completion_mask: torch.Tensor  # [B, T] 1 up to and including <eos>
    sampler_logprobs: torch.Tensor  # [B, T] fp32

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


def _next_logits(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_for(mask), use_cache=False)
    return out.logits[:, -1, :].float()


@torch.no_grad()
def sample(model, tokenizer, prompt_ids, prompt_mask, *, temperature: float = 1.0,
           generator: torch.Generator | None = None, max_new_tokens: int = MAX_NEW_TOKENS) -> Rollout:
    """Sample completions (greedy when ``temperature == 0``); rows stop at ``<eos>``."""
    ids, mask = prompt_ids, prompt_mask
    batch = ids.shape[0]
    done = torch.zeros(batch, dtype=torch.bool)
    tokens, token_mask, logps = [], [], []
    for _ in range(max_new_tokens):
        logits = _next_logits(model, ids, mask)
        logprobs = torch.log_softmax(logits / max(temperature, 1e-6), dim=-1) if temperature > 0 else torch.log_softmax(logits, dim=-1)
        if temperature > 0:
            probs = logprobs.exp()
            probs = torch.nan_to_num(probs, nan=0.0)
            bad = probs.sum(-1) <= 0
            probs[bad] = 1.0
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            nxt = logits.argmax(-1)
        alive = ~done
        nxt = torch.where(alive, nxt, torch.full_like(nxt, tokenizer.pad_token_id))
        tokens.append(nxt)
        token_mask.append(alive.long())
        logps.append(logprobs.gather(1, nxt[:, None]).squeeze(1) * alive)
        done = done | (nxt == tokenizer.eos_token_id)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        mask = torch.cat([mask, alive.long()[:, None]], dim=1)
        if bool(done.all()):
            break
    return Rollout(prompt_ids, prompt_mask, torch.stack(tokens, 1), torch.stack(token_mask, 1), torch.stack(logps, 1).float())


def sequence_logprobs(model, rollout: Rollout, temperature: float = 1.0, output_router_logits: bool = False):
    """Per-token log-probs ``[B, T]`` (fp32) of the completion under ``model``, and the model output."""
    ids, mask = rollout.input_ids, rollout.attention_mask
    extra = {"output_router_logits": True} if output_router_logits else {}
    out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_for(mask), use_cache=False, **extra)
    prompt_len = rollout.prompt_ids.shape[1]
    logits = out.logits[:, prompt_len - 1 : -1, :].float() / max(temperature, 1e-6)
    logprobs = torch.log_softmax(logits, dim=-1).gather(2, rollout.completion_ids[:, :, None]).squeeze(2)
    return logprobs, logits, out


def decode_completions(tokenizer, rollout: Rollout) -> list[str]:
    texts = []
    for row, m in zip(rollout.completion_ids.tolist(), rollout.completion_mask.tolist()):
        kept = [t for t, keep in zip(row, m) if keep and t not in (tokenizer.eos_token_id, tokenizer.pad_token_id)]
        texts.append(tokenizer.decode(kept))
    return texts
