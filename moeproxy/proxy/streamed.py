"""Run a checkpoint through its transformers model one module at a time.

The model is built on the meta device. Every module that holds weights outside the decoder layers
(embeddings, final norm, LM head) and each decoder layer is loaded from the safetensors shards just
before its forward and freed right after (``module.to("meta")``, then ``heap.trim_heap()``), so memory
holds one decoder layer's weights (or the embedding matrix) plus activations, never the whole outer
model beside a layer. Rotary embeddings (non-persistent buffers) are rebuilt on the device. On-disk
keys are converted to transformers' in-memory layout here (per-expert tensors stacked into fused
``gate_up_proj``/``down_proj``; Mixtral's ``block_sparse_moe`` renamed to ``mlp``). Loading uses
``load_state_dict(strict=True)``, so a missing, extra or wrongly shaped tensor is an error; the outer
tensors are checked when the model is opened. ``on_layer_loaded(index, layer)`` lets callers mask
experts or attach statistics hooks; ``on_layer_output(index, args, kwargs, output)`` sees each
decoder layer's call after it ran. ``close()`` (or leaving a ``with`` block) removes the hooks and
drops the model. Used by the ``activations`` feature method and by post-build verification.
"""

from __future__ import annotations

import re
from typing import Callable

from moeproxy.errors import InputError
from moeproxy.proxy.arch import FamilyAdapter
from moeproxy.proxy.checkpoint import Checkpoint, read_tensor, read_tensor_into, torch_dtype
from moeproxy.proxy.heap import bound_heap_growth, trim_heap

_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def checkpoint_quantisation(config: dict) -> str | None:
    return (config.get("quantization_config") or {}).get("quant_method")


class StreamedModel:
    def __init__(self, ckpt: Checkpoint, adapter: FamilyAdapter, device="cpu", dtype=None,
                 on_layer_loaded: Callable | None = None, on_layer_output: Callable | None = None):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        quant = checkpoint_quantisation(ckpt.config)
        if quant:
            raise InputError(f"{ckpt.path}: running a {quant}-quantised checkpoint layer by layer is not "
                             "supported (calibration and forward verification need unquantised weights)")
        bound_heap_growth()
        self.ckpt, self.adapter, self.device = ckpt, adapter, torch.device(device)
        if dtype is None:
            name = str(ckpt.config.get("torch_dtype") or ckpt.config.get("dtype") or "float32")
            dtype = getattr(torch, _DTYPES.get(name.replace("torch.", ""), "float32"))
        self.dtype = dtype
        self.config = AutoConfig.from_pretrained(str(ckpt.path))
        with torch.device("meta"):
            self.model = AutoModelForCausalLM.from_config(self.config, attn_implementation="eager",
                                                          experts_implementation="eager", dtype=dtype)
        self.model.eval()
        self.on_layer_loaded = on_layer_loaded
        self.layers = self.model.model.layers
        self._hooks = []
        self._fused: dict = {}
        self._prepare_outer()
        for i, layer in enumerate(self.layers):
            self._hooks.append(layer.register_forward_pre_hook(self._make_loader(i)))
            self._hooks.append(layer.register_forward_hook(self._unload))
            if on_layer_output is not None:
                self._hooks.append(layer.register_forward_hook(self._make_output_hook(i, on_layer_output),
                                                               with_kwargs=True))
        self._hooks.append(self.layers[-1].register_forward_hook(self._drop_fused_buffers))

    def close(self) -> None:
        """Remove the loading hooks and drop the model (its hooks would otherwise keep it alive)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._fused = {}
        self.model = self.layers = self.on_layer_loaded = None
        trim_heap()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- tensors --------------------------------------------------------------------------------
    def _read(self, keys: list[str]) -> dict:
        return {k: read_tensor(self.ckpt.tensors[k]) for k in keys}

    def _outer_modules(self) -> dict[str, object]:
        """Weight-holding modules outside the decoder layers, by on-disk key prefix."""
        outer = {f"model.{name}.": child for name, child in self.model.model.named_children()
                 if name != "layers" and "rotary" not in name}
        outer["lm_head."] = self.model.lm_head
        return {prefix: module for prefix, module in outer.items() if module.state_dict()}

    def _outer_sources(self, prefix: str, module) -> dict[str, str]:
        """Parameter name -> checkpoint key for one outer module (a tied LM head reads the embeddings)."""
        sources = {}
        for name in module.state_dict():
            key = prefix + name
            if key == "lm_head.weight" and key not in self.ckpt.tensors:
                if not getattr(self.config, "tie_word_embeddings", False):
                    raise InputError(f"{self.ckpt.path}: lm_head.weight missing and embeddings are not tied")
                key = "model.embed_tokens.weight"
            sources[name] = key
        return sources

    def _prepare_outer(self):
        base = self.model.model
        for name, child in base.named_children():
            if "rotary" in name:  # non-persistent buffers: rebuild on the real device
                setattr(base, name, type(child)(config=self.config).to(self.device))
        for prefix, module in self._outer_modules().items():
            sources = self._outer_sources(prefix, module)
            missing = [k for k in sources.values() if k not in self.ckpt.tensors]
            if missing:
                raise InputError(f"{self.ckpt.path}: tensors missing for {missing[:3]}")
            for name, key in sources.items():
                want, ref = tuple(module.state_dict()[name].shape), self.ckpt.tensors[key]
                if tuple(ref.shape) != want:
                    raise InputError(f"{self.ckpt.path}: {key} has shape {list(ref.shape)}, the model "
                                     f"expects {list(want)}")
            self._hooks.append(module.register_forward_pre_hook(self._make_outer_loader(sources)))
            self._hooks.append(module.register_forward_hook(self._unload))

    def _make_outer_loader(self, sources: dict[str, str]):
        def hook(module, args):
            sd = {name: self._to_device(read_tensor(self.ckpt.tensors[key])) for name, key in sources.items()}
            module.load_state_dict(sd, strict=True, assign=True)
        return hook

    def _fused_buffer(self, name: str, shape: tuple):
        """A fused expert tensor, reused by the next decoder layer of the same shape.

        Layers run one after another and each is unloaded before the next loads, so the buffer is
        free again by then; reusing it spares the page faults of a fresh layer-sized allocation. It
        is dropped after the last decoder layer (and by ``close``).
        """
        import torch

        buf = self._fused.get(name)
        if buf is None or tuple(buf.shape) != tuple(shape):
            self._fused.pop(name, None)
            buf = self._fused[name] = torch.empty(shape, dtype=self.dtype)
        return buf

    def _read_into(self, key: str, slot) -> None:
        ref = self.ckpt.tensors[key]
        if tuple(ref.shape) != tuple(slot.shape):
            raise InputError(f"{self.ckpt.path}: {key} has shape {list(ref.shape)}, expected {list(slot.shape)}")
        if torch_dtype(ref) == slot.dtype and slot.is_contiguous() and slot.device.type == "cpu":
            read_tensor_into(ref, slot)
        else:
            slot.copy_(read_tensor(ref))

    def _to_device(self, tensor):
        if tensor.is_floating_point():
            return tensor.to(device=self.device, dtype=self.dtype)
        return tensor.to(self.device)

    def layer_state_dict(self, index: int) -> dict:
        """The decoder layer's tensors under transformers' in-memory names (experts fused).

        Per-expert tensors are read one at a time straight into their slots of preallocated fused
        tensors (or read and converted, when the model's dtype differs from the checkpoint's), so the
        peak is one layer's experts plus at most one expert.
        """
        import torch
        prefix = f"model.layers.{index}."
        keys = [k for k in self.ckpt.tensors if k.startswith(prefix)]
        if not keys:
            raise InputError(f"{self.ckpt.path}: no tensors for decoder layer {index}")
        a = self.adapter
        expert_re = re.compile(r"^(?P<pre>.+)\.experts\.(?P<e>\d+)\.(?P<name>.+)$")
        plain, experts = [], {}
        for k in keys:
            mem = k.replace(*a.memory_block_rename) if a.memory_block_rename else k
            m = expert_re.match(mem) if a.layout == "per_expert" else None
            if m:
                experts.setdefault(m["pre"][len(prefix):], {}).setdefault(int(m["e"]), {})[m["name"]] = k
            else:
                plain.append((mem[len(prefix):], k))
        raw = self._read([k for _, k in plain])
        sd = {n: raw[k] for n, k in plain}
        for local, by_id in experts.items():
            ids = sorted(by_id)
            first = by_id[ids[0]]
            g, u, d = (self.ckpt.tensors[first[n]] for n in (a.gate_name, a.up_name, a.down_name))
            gate_up = self._fused_buffer(f"{local}.gate_up", (len(ids), g.shape[0] + u.shape[0], g.shape[1]))
            down = self._fused_buffer(f"{local}.down", (len(ids), *d.shape))
            for pos, e in enumerate(ids):
                names = by_id[e]
                self._read_into(names[a.gate_name], gate_up[pos, : g.shape[0]])
                self._read_into(names[a.up_name], gate_up[pos, g.shape[0]:])
                self._read_into(names[a.down_name], down[pos])
            sd[f"{local}.experts.gate_up_proj"] = gate_up
            sd[f"{local}.experts.down_proj"] = down
        return {k: self._to_device(v) for k, v in sd.items()}

    def _make_loader(self, index: int):
        def hook(layer, args):
            sd = self.layer_state_dict(index)
            try:
                layer.load_state_dict(sd, strict=True, assign=True)
            except RuntimeError as exc:
                first = str(exc).splitlines()[0:3]
                raise InputError(f"{self.ckpt.path}: decoder layer {index} does not load into "
                                 f"{type(layer).__name__}: {' '.join(first)}") from exc
            left = [n for n, t in list(layer.named_parameters()) + list(layer.named_buffers()) if t.is_meta]
            if left:
                raise InputError(f"{self.ckpt.path}: decoder layer {index} has no weights for {left[:3]}")
            if self.on_layer_loaded is not None:
                self.on_layer_loaded(index, layer)
        return hook

    @staticmethod
    def _make_output_hook(index: int, on_layer_output: Callable):
        def hook(layer, args, kwargs, output):
            on_layer_output(index, args, kwargs, output)
        return hook

    def _drop_fused_buffers(self, module, args, output):
        self._fused = {}
        trim_heap()

    @staticmethod
    def _unload(module, args, output):
        module.to("meta")
        trim_heap()

    def logits(self, input_ids, attention_mask=None):
        """The LM head's logits for every position."""
        return self._run(self.model, input_ids, attention_mask).logits

    def hidden_states(self, input_ids, attention_mask=None):
        """The final-norm hidden states (no LM head: calibration needs no vocabulary-sized logits)."""
        return self._run(self.model.model, input_ids, attention_mask).last_hidden_state

    def _run(self, module, input_ids, attention_mask):
        import torch

        with torch.no_grad():
            return module(input_ids=input_ids.to(self.device),
                          attention_mask=None if attention_mask is None else attention_mask.to(self.device),
                          use_cache=False)
