"""Expert signatures for clustering, by registered method.

``weights`` needs no data: each expert's signature is its router row (L2-normalised) joined with its
response to fixed probe inputs (L2-normalised). The probes are rows of the model's own input
embedding at seeded random token ids, RMS-normalised and scaled by the layer's post-attention norm,
so they look like the inputs the experts really see. Both parts are invariant to the order of
neurons inside an expert, so independently trained experts are comparable. One expert is read and
dequantised (FP8 block scales) at a time. MXFP4 experts are not dequantised: their signature is the
router row alone (recorded in the report).

``activations`` (moeproxy.proxy.calibration) runs calibration tokens through the model layer by layer
and returns each expert's mean output and routing frequency.

Each method yields ``(MoeLayer, LayerFeatures)`` one MoE layer at a time.
"""

from __future__ import annotations

from typing import Callable, Iterator

from moeproxy.errors import InputError
from moeproxy.proxy.checkpoint import Checkpoint, read_tensor, read_tensor_into, torch_dtype
from moeproxy.proxy.feature_types import FeatureContext, LayerFeatures  # noqa: F401  (re-exported)
from moeproxy.proxy.heap import bound_heap_growth, trim_heap
from moeproxy.proxy.layout import MoeLayer
from moeproxy.proxy.threads import one_intra_op_thread
from moeproxy.registry import Registry

PROBE_TOKENS = 32


def _normalise(x):
    import torch

    n = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(1e-12)
    return x / n


class TensorReader:
    """Reads whole tensors or dim-0 rows with pread (no memory maps left resident).

    ``get_float_scratch`` reads one expert's weight into buffers reused from call to call (one per
    shape and dtype), so the per-expert loop of a 64-expert layer allocates nothing: each expert's
    tensors are the same shape, and fresh 1-3 MB buffers would each cost hundreds of page faults.
    """

    def __init__(self, ckpt: Checkpoint):
        self.ckpt = ckpt
        self._scratch: dict = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def get(self, key):
        return read_tensor(self.ckpt.tensors[key])

    def _buffer(self, shape, dtype):
        import torch

        buf = self._scratch.get((shape, dtype))
        if buf is None:
            buf = self._scratch[(shape, dtype)] = torch.empty(shape, dtype=dtype)
        return buf

    def get_float_scratch(self, key):
        """``key`` as float32, in a buffer that the next call for the same shape overwrites."""
        import torch

        ref = self.ckpt.tensors[key]
        raw = self._buffer(tuple(ref.shape), torch_dtype(ref))
        read_tensor_into(ref, raw)
        if raw.dtype == torch.float32:
            return raw
        out = self._buffer(tuple(ref.shape), torch.float32)
        out.copy_(raw)
        return out

    def row(self, key, i):
        return read_tensor(self.ckpt.tensors[key], i)

    def has(self, key) -> bool:
        return key in self.ckpt.tensors


def dequantise_fp8(weight, scale_inv):
    """Block-scaled FP8 (DeepSeek-V3: 128x128 blocks) to float32."""
    out_dim, in_dim = weight.shape
    bo = -(-out_dim // scale_inv.shape[0])
    bi = -(-in_dim // scale_inv.shape[1])
    scale = scale_inv.float().repeat_interleave(bo, 0)[:out_dim].repeat_interleave(bi, 1)[:, :in_dim]
    return weight.float() * scale


def _per_expert_weight(reader: TensorReader, names: dict[str, str], suffix: str):
    key = names[suffix]
    scale_key = names.get(suffix + "_scale_inv")
    if scale_key is not None:
        return dequantise_fp8(reader.get(key), reader.get(scale_key))
    return reader.get_float_scratch(key)  # consumed by the caller's matmul before the next read


def probe_inputs(ctx: FeatureContext, reader: TensorReader, layer: MoeLayer):
    import torch

    emb_keys = [k for k in ctx.ckpt.tensors if k.endswith("embed_tokens.weight")]
    if not emb_keys:
        raise InputError(f"{ctx.ckpt.path}: no embed_tokens.weight to build probe inputs from")
    vocab = ctx.ckpt.tensors[emb_keys[0]].shape[0]
    gen = torch.Generator().manual_seed(ctx.seed)
    ids = torch.randint(0, vocab, (PROBE_TOKENS,), generator=gen)
    rows = torch.stack([reader.row(emb_keys[0], int(i)).float() for i in ids])
    rows = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-6)
    norm_key = layer.block.rsplit(".", 1)[0] + ".post_attention_layernorm.weight"
    if reader.has(norm_key):
        rows = rows * reader.get(norm_key).float()
    return rows


def _activation(name: str):
    import torch.nn.functional as F

    return {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "relu": F.relu}.get(name, F.silu)


def weight_features(ctx: FeatureContext) -> Iterator[tuple[MoeLayer, LayerFeatures]]:
    import torch

    bound_heap_growth()  # per-expert float copies must not stay resident once freed
    act = _activation(ctx.ckpt.config.get("hidden_act", "silu"))
    a = ctx.adapter
    for layer in ctx.layout.layers:
        with TensorReader(ctx.ckpt) as reader, torch.no_grad(), one_intra_op_thread():
            router_key = next(k for s, (k, d) in layer.router_tensors.items() if s.endswith("weight"))
            router = _normalise(reader.get(router_key).float())
            parts = [router]
            kind = "router rows"
            x = None
            if a.layout == "per_expert":
                x = probe_inputs(ctx, reader, layer)
                responses = []
                for e in range(layer.num_experts):
                    names = layer.expert_tensors[e]
                    g = x @ _per_expert_weight(reader, names, a.gate_name).T
                    u = x @ _per_expert_weight(reader, names, a.up_name).T
                    y = (act(g) * u) @ _per_expert_weight(reader, names, a.down_name).T
                    responses.append(y.flatten())
                parts.append(_normalise(torch.stack(responses)))
                kind = "router rows + probe responses"
            elif "gate_up_proj" in layer.fused_tensors:  # GPT-OSS style, unquantised
                x = probe_inputs(ctx, reader, layer)
                f = layer.fused_tensors
                limit = float(ctx.ckpt.config.get("swiglu_limit", 7.0))
                alpha = float(ctx.ckpt.config.get("swiglu_alpha", 1.702))
                responses = []
                for e in range(layer.num_experts):
                    gu = x @ reader.row(f["gate_up_proj"], e).float()
                    if "gate_up_proj_bias" in f:
                        gu = gu + reader.row(f["gate_up_proj_bias"], e).float()
                    gate = gu[..., ::2].clamp(max=limit)
                    up = gu[..., 1::2].clamp(-limit, limit)
                    h = (up + 1) * gate * torch.sigmoid(gate * alpha)
                    y = h @ reader.row(f["down_proj"], e).float()
                    if "down_proj_bias" in f:
                        y = y + reader.row(f["down_proj_bias"], e).float()
                    responses.append(y.flatten())
                parts.append(_normalise(torch.stack(responses)))
                kind = "router rows + probe responses"
            feats = torch.cat(parts, dim=1).numpy()
        trim_heap()
        yield layer, LayerFeatures(feats, kind=kind)


def activation_features(ctx: FeatureContext) -> Iterator[tuple[MoeLayer, LayerFeatures]]:
    from moeproxy.proxy.calibration import calibrate  # lazily: it needs torch and a tokenizer file

    yield from calibrate(ctx)


FEATURE_METHODS: Registry[Callable[[FeatureContext], Iterator[tuple[MoeLayer, LayerFeatures]]]] = \
    Registry("feature method")
FEATURE_METHODS.add("weights", weight_features)
FEATURE_METHODS.add("activations", activation_features)
