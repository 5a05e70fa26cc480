"""The tiny MoE: a real ``Qwen3MoeForCausalLM`` (32 experts, top-4: keep ratio 0.125 still leaves E'=4 >= top-k) and its character tokenizer.

``tiny_moe_config()`` gives the architecture, ``build_tokenizer()`` a ``PreTrainedTokenizerFast``
over the arithmetic alphabet (saved with the checkpoint, loadable by ``AutoTokenizer``), and
``load_tiny_moe(path)`` reads a saved checkpoint back (also the dense baseline of
``build_tiny_dense``, a Qwen3 with the same backbone, used by bench/fidelity.py). The committed checkpoint lives in
``data/tiny-moe/`` (see ``DEFAULT_CHECKPOINT``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from moeproxy.errors import NotFound

ALPHABET = "0123456789+="
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
DEFAULT_CHECKPOINT = Path(__file__).resolve().parents[2] / "data" / "tiny-moe"


@dataclass(frozen=True)
class TinyMoeShape:
    """Architecture knobs of the tiny model (defaults: the committed checkpoint)."""

    hidden_size: int = 64
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    num_experts: int = 32
    num_experts_per_tok: int = 4
    moe_intermediate_size: int = 32
    max_position_embeddings: int = 32
    router_aux_loss_coef: float = 0.01

    def __post_init__(self):
        positive = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                    "num_experts", "num_experts_per_tok", "moe_intermediate_size")
        bad = [f"{name}={getattr(self, name)}" for name in positive if getattr(self, name) < 1]
        if bad:
            raise ValueError(f"model shape: {', '.join(bad)} must be >= 1")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(f"model shape: top-k {self.num_experts_per_tok} is more than the "
                             f"{self.num_experts} experts")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"model shape: {self.num_attention_heads} attention heads do not share "
                             f"{self.num_key_value_heads} key/value heads evenly")

    @classmethod
    def from_options(cls, hidden_size: int | None = None, moe_intermediate_size: int | None = None,
                     layers: int | None = None, experts: int | None = None, top_k: int | None = None,
                     heads: int | None = None) -> "TinyMoeShape":
        """The shape the command-line options ask for, the rest from the defaults: heads split the
        hidden size (``head_dim = hidden_size // heads``) and share half as many key/value heads."""
        base = cls()
        hidden = hidden_size or base.hidden_size
        n_heads = heads or base.num_attention_heads
        if hidden % n_heads:
            raise ValueError(f"model shape: hidden size {hidden} is not a multiple of {n_heads} heads")
        return cls(hidden_size=hidden, num_hidden_layers=layers or base.num_hidden_layers,
                   num_attention_heads=n_heads, num_key_value_heads=max(1, n_heads // 2), head_dim=hidden // n_heads,
                   num_experts=experts or base.num_experts, num_experts_per_tok=top_k or base.num_experts_per_tok,
                   moe_intermediate_size=moe_intermediate_size or base.moe_intermediate_size)

    @classmethod
    def from_config(cls, config) -> "TinyMoeShape":
        """The shape of a model from its transformers config (or its config.json as a dict); a dense
        config has no experts: its MLP width stands for one expert of top-1."""
        get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
        hidden = get("hidden_size")
        heads = get("num_attention_heads")
        experts = get("num_experts") or get("num_local_experts") or 1  # transformers 5 saves num_local_experts
        return cls(hidden_size=hidden, num_hidden_layers=get("num_hidden_layers"), num_attention_heads=heads,
                   num_key_value_heads=get("num_key_value_heads") or heads, head_dim=get("head_dim") or hidden // heads,
                   num_experts=experts, num_experts_per_tok=get("num_experts_per_tok") or 1,
                   moe_intermediate_size=get("moe_intermediate_size") or get("intermediate_size"),
                   max_position_embeddings=get("max_position_embeddings") or cls.max_position_embeddings,
                   router_aux_loss_coef=get("router_aux_loss_coef") or 0.0)

    @property
    def key(self) -> str:
        """A short name for checkpoints cached by shape: ``h64-i32-l3-e32-k4-a4``."""
        return (f"h{self.hidden_size}-i{self.moe_intermediate_size}-l{self.num_hidden_layers}-e{self.num_experts}"
                f"-k{self.num_experts_per_tok}-a{self.num_attention_heads}")


def vocab() -> dict[str, int]:
    table = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in ALPHABET:
        table[ch] = len(table)
    return table


def build_tokenizer():
    """A character-level fast tokenizer; prompts get ``<bos>`` prepended by the caller."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab=vocab(), unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        padding_side="left",
    )


def tiny_moe_config(shape: TinyMoeShape | None = None):
    from transformers import Qwen3MoeConfig

    shape = shape or TinyMoeShape()
    table = vocab()
    return Qwen3MoeConfig(
        vocab_size=len(table),
        hidden_size=shape.hidden_size,
        intermediate_size=4 * shape.hidden_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        num_experts=shape.num_experts,
        num_experts_per_tok=shape.num_experts_per_tok,
        moe_intermediate_size=shape.moe_intermediate_size,
        max_position_embeddings=shape.max_position_embeddings,
        norm_topk_prob=True,
        router_aux_loss_coef=shape.router_aux_loss_coef,
        tie_word_embeddings=False,
        pad_token_id=table["<pad>"],
        bos_token_id=table["<bos>"],
        eos_token_id=table["<eos>"],
    )


def build_tiny_moe(seed: int, shape: TinyMoeShape | None = None):
    """A randomly initialised tiny MoE (deterministic for a seed)."""
    import torch
    from transformers import Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    return Qwen3MoeForCausalLM(tiny_moe_config(shape))


def tiny_dense_config(intermediate_size: int, shape: TinyMoeShape | None = None):
    """A dense Qwen3 with the tiny MoE's backbone and one MLP of ``intermediate_size`` per layer."""
    from transformers import Qwen3Config

    shape = shape or TinyMoeShape()
    table = vocab()
    return Qwen3Config(
        vocab_size=len(table), hidden_size=shape.hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=shape.num_hidden_layers, num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads, head_dim=shape.head_dim,
        max_position_embeddings=shape.max_position_embeddings, tie_word_embeddings=False,
        pad_token_id=table["<pad>"], bos_token_id=table["<bos>"], eos_token_id=table["<eos>"],
    )


def dense_intermediate_for(active_parameters: int, shape: TinyMoeShape | None = None) -> int:
    """The dense MLP width whose model has about ``active_parameters`` parameters."""
    from transformers import Qwen3ForCausalLM

    shape = shape or TinyMoeShape()
    base = Qwen3ForCausalLM(tiny_dense_config(1, shape))
    fixed = sum(p.numel() for p in base.parameters()) - 3 * shape.hidden_size * shape.num_hidden_layers
    per_unit = 3 * shape.hidden_size * shape.num_hidden_layers
    return max(1, round((active_parameters - fixed) / per_unit))


def build_tiny_dense(seed: int, intermediate_size: int, shape: TinyMoeShape | None = None):
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(seed)
    return Qwen3ForCausalLM(tiny_dense_config(intermediate_size, shape))


def load_tiny_moe(path: str | Path | None = None, dtype=None):
    """(model, tokenizer) from a saved checkpoint directory (default: the committed one)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path) if path is not None else DEFAULT_CHECKPOINT
    if not (path / "config.json").is_file():
        raise NotFound(f"{path}: no config.json (not a Hugging Face checkpoint directory)")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    return model, tokenizer
