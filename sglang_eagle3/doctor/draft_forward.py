"""A reference EAGLE-3 draft forward in plain PyTorch, following SGLang 0.5.23's
``srt/models/llama_eagle3.py`` (and speculators 0.9's ``Eagle3DraftModel``).

One draft step, for each position t of a sequence:
  h   = fc(taps_t)                        taps: the fc's target hidden states, concatenated
        (``norm_before_fc``: one RMSNorm over the concat, weight ``input_norm.weight``;
         ``fc_norm``: one RMSNorm per tap chunk; fc only when the width is not hidden_size)
  x   = cat([input_layernorm(embed(id_t)), hidden_norm(h)])      -> first layer's q/k/v
  res = h (SGLang) or hidden_norm(h) when ``norm_before_residual`` (speculators' default)
  h'  = Llama attention + MLP (residual adds), more layers if any; logits = lm_head(norm(h'))
        (an MLA draft, SGLang's ``kimi_k25_eagle3.py``: one layer, DeepSeek-V2 multi-latent
         attention in its place, see draft_mla)
  draft token (target id) = argmax + d2t[argmax]

Later steps (chain drafting) feed the previous step's own token and its pre-norm output ``h'``
(normed when ``norm_output``), at position + 1, attending to step 0's keys causally plus their
own earlier steps' keys at the same position: speculators' TTT mask and SGLang's draft decode.
Layers after the first use ``input_layernorm`` as speculators trains them (SGLang 0.5.23 reads
``hidden_norm`` there; the plugin loads the trained ``input_layernorm`` into it). Sliding
windows are ignored, as SGLang does by default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from sglang_eagle3.checkpoint.draft_config import (
    HIDDEN_ACTS,
    DraftArch,
    check_weights,
    load_draft_config,
)
from sglang_eagle3.checkpoint.draft_weights import RowTable, find_tensor, load_tensors, stored_dtype
from sglang_eagle3.doctor.draft_attention import LayerCache, attention
from sglang_eagle3.doctor.draft_mla import mla_qkv, mla_rotary, mla_softmax_scale
from sglang_eagle3.errors import WiringError
from sglang_eagle3.ops.rms_norm import rms_norm as _rms_norm

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_ACTS = {name: getattr(F, name) for name in HIDDEN_ACTS}  # the schema allows only these


def act(name: str, x: torch.Tensor) -> torch.Tensor:
    return _ACTS[name](x)


def rotary_embedding(c: DraftArch) -> torch.nn.Module:
    """transformers' Llama rotary table for this config (default, llama3, yarn ...)."""
    from transformers import AutoConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    kwargs = {k: v for k, v in c.layer_config.items() if k != "model_type"}
    try:
        return LlamaRotaryEmbedding(AutoConfig.for_model("llama", **kwargs))
    except Exception as err:  # transformers 5 validates with its own error types
        raise WiringError(f"cannot build a Llama config from it ({err})", path=c.path) from None


# speculators trains with HF's LlamaRMSNorm: the normed input is rounded before the weight
rms_norm = partial(_rms_norm, cast_before_weight=True)


@dataclass
class StepOutput:
    logits: torch.Tensor  # [R, draft_vocab]
    hidden: torch.Tensor  # [R, hidden]: what the next step is fed (pre-norm unless norm_output)
    draft_ids: torch.Tensor  # [R] int64 in draft ids (argmax)
    target_ids: torch.Tensor  # [R] int64 in target ids (through d2t)
    rows: torch.Tensor  # [R] the positions this step ran for (all T unless ``keep`` narrowed)


class Eagle3Draft:
    """A loaded draft. ``forward(taps, input_ids, steps)`` runs ``steps`` chained draft steps
    over a whole sequence at once (batch 1). Not an nn.Module: inference only, no autograd."""

    def __init__(
        self,
        config: DraftArch,
        weights: dict[str, torch.Tensor],
        embed: RowTable,
        *,
        source: str = "",
    ) -> None:
        self.config, self.w, self.embed, self.source = config, weights, embed, source
        c = config
        check_weights(config, weights, embed)
        self.dtype = weights["fc.weight"].dtype
        self.device = weights["fc.weight"].device
        self.rope = (mla_rotary(c) if c.mla else rotary_embedding(c)).to(self.device)
        self.scale = mla_softmax_scale(c) if c.mla else c.head_dim**-0.5
        d2t = weights.get("d2t")
        self.hot_ids = (
            None if d2t is None else d2t.long() + torch.arange(len(d2t), device=d2t.device)
        )

    # ---- building blocks ------------------------------------------------------------
    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft ids -> target ids: ``draft_id + d2t[draft_id]`` (identity without d2t)."""
        if self.hot_ids is None:
            return draft_ids
        return self.hot_ids.to(draft_ids.device)[draft_ids]

    def truth_logprob(self, logits: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
        """logits [R, draft_vocab], target ids [R] -> [R] log p(target id) (NaN where the
        draft vocabulary lacks the token: no layout can draft it)."""
        logp = torch.log_softmax(logits.float(), -1)
        if self.hot_ids is None:
            return logp.gather(-1, target_ids[:, None].to(logp.device))[:, 0]
        hot = self.hot_ids.to(logp.device)
        match = hot[None, :] == target_ids[:, None].to(logp.device)  # [R, draft_vocab]
        got = torch.where(match, logp, torch.full_like(logp, float("-inf"))).amax(-1)
        return torch.where(match.any(-1), got, torch.full_like(got, float("nan")))

    def fc_input(self, taps: torch.Tensor) -> torch.Tensor:
        """taps: [T, num_aux * target_hidden] -> [T, hidden]."""
        c, w = self.config, self.w
        if taps.shape[-1] == c.hidden_size:  # SGLang: fc only when widths differ
            return taps
        if c.norm_before_fc:
            taps = rms_norm(taps, w["input_norm.weight"], c.rms_norm_eps)
        if c.fc_norm:
            chunks = taps.chunk(c.num_aux, dim=-1)
            taps = torch.cat(
                [
                    rms_norm(x, w[f"fc_norm.{i}.weight"], c.rms_norm_eps)
                    for i, x in enumerate(chunks)
                ],
                dim=-1,
            )
        return F.linear(taps, w["fc.weight"])

    def _layer(
        self,
        i: int,
        x: torch.Tensor,  # [R, 2*hidden] for layer 0, else [R, hidden]
        residual: torch.Tensor,  # [R, hidden]
        cos_sin: tuple[torch.Tensor, torch.Tensor],  # [1, R, rope width] each
        rows: torch.Tensor,  # [R]
        cache: LayerCache,
        tree: tuple[torch.Tensor, int, list[torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """``tree``: (slots [R], buffer size, per later step the [R] slots read): a draft
        tree's branches keep their keys apart (see draft_tree)."""
        c, p = self.config, f"layers.{i}."
        n = x.shape[0]
        q, k, v = mla_qkv(c, self.w, x, cos_sin) if c.mla else self._llama_qkv(p, x, cos_sin)
        if tree is None:
            cache.add(k, v, rows)
            attn = attention(q, rows, cache, scale=self.scale)
        else:
            slots, size, read = tree
            cache.add(k, v, slots, size)
            attn = attention(q, rows, cache, read, scale=self.scale)
        attn = attn.transpose(0, 1).reshape(n, -1)
        h = residual + self._linear(attn, p + "self_attn.o_proj")
        m = rms_norm(h, self.w[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
        gate, up = self._linear(m, p + "mlp.gate_proj"), self._linear(m, p + "mlp.up_proj")
        return h + self._linear(act(c.hidden_act, gate) * up, p + "mlp.down_proj")

    def _llama_qkv(
        self,
        p: str,
        x: torch.Tensor,  # [R, 2*hidden] for layer 0, else [R, hidden]
        cos_sin: tuple[torch.Tensor, torch.Tensor],  # [1, R, head_dim] each
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> q [H, R, D], k and v [Hkv, R, D], rope applied (Llama's, rotate-half)."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        c, n = self.config, x.shape[0]
        q = self._linear(x, p + "self_attn.q_proj").view(n, c.num_heads, c.head_dim)
        k = self._linear(x, p + "self_attn.k_proj").view(n, c.num_kv_heads, c.head_dim)
        v = self._linear(x, p + "self_attn.v_proj").view(n, c.num_kv_heads, c.head_dim)
        q, k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], *cos_sin)
        return q[0], k[0], v.transpose(0, 1)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def step(
        self,
        ids: torch.Tensor,  # [R] target ids fed
        hidden: torch.Tensor,  # [R, hidden] fc output (step 0) or the previous step's output
        rows: torch.Tensor,  # [R] positions
        step: int,
        caches: list[LayerCache],
        tree: tuple[torch.Tensor, int, list[torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft step -> (logits [R, draft_vocab], the hidden state the next step gets)."""
        c, w = self.config, self.w
        emb = self.embed(ids).to(self.device, self.dtype)
        normed = rms_norm(hidden, w["layers.0.hidden_norm.weight"], c.rms_norm_eps)
        x = torch.cat(
            [rms_norm(emb, w["layers.0.input_layernorm.weight"], c.rms_norm_eps), normed], -1
        )
        residual = normed if c.norm_before_residual else hidden
        # speculators' positions: token t+1 (fed with tap t) sits at t+1, +1 per step
        cos, sin = self.rope(hidden[None], (rows + 1 + step)[None])
        cos_sin = (cos.to(self.dtype), sin.to(self.dtype))
        h = self._layer(0, x, residual, cos_sin, rows, caches[0], tree)
        for i in range(1, c.num_layers):
            x = rms_norm(h, w[f"layers.{i}.input_layernorm.weight"], c.rms_norm_eps)
            h = self._layer(i, x, h, cos_sin, rows, caches[i], tree)
        normed_out = rms_norm(h, w["norm.weight"], c.rms_norm_eps)
        logits = F.linear(normed_out, w["lm_head.weight"])
        return logits, (normed_out if c.norm_output else h)

    # ---- the forward ----------------------------------------------------------------
    @torch.inference_mode()
    def forward(
        self,
        taps: torch.Tensor,  # [T, num_aux * target_hidden]: fc input, taps concatenated in order
        input_ids: torch.Tensor,  # [T] target ids: the token AFTER each tap's position
        steps: int = 1,
        feed: Sequence[torch.Tensor] | None = None,  # steps-1 x [T] target ids
        keep: Callable[[int, StepOutput], torch.Tensor] | None = None,  # -> [R] bool
    ) -> list[StepOutput]:
        """``steps`` chained draft steps. Step 1 predicts the token after ``input_ids[t]``;
        step k+1 is fed step k's own token (through d2t) and output hidden state, or
        ``feed[k-1]`` instead of the token (teacher forcing, as speculators' TTT trains).
        ``keep(k, out)`` (k from 0, called after every step) narrows the positions later
        steps run for (a chain that already failed needs no more steps); the output stops
        early when none are left."""
        c = self.config
        if steps < 1:
            raise WiringError(f"steps must be >= 1, got {steps}")
        if taps.ndim != 2 or taps.shape[-1] != c.num_aux * c.target_hidden_size:
            raise WiringError(
                f"fc input is {list(taps.shape)}; the draft takes [tokens, {c.num_aux} taps x "
                f"{c.target_hidden_size}]",
                path=c.path,
                fix="feed as many taps as the draft's fc was trained on, of the target's width",
            )
        if input_ids.shape != taps.shape[:1]:
            raise WiringError(f"input_ids {list(input_ids.shape)} vs taps {list(taps.shape)}")
        hidden = self.fc_input(taps.to(self.device, self.dtype))
        ids = input_ids.to(self.device)
        rows = torch.arange(ids.shape[0], device=self.device)
        caches = [LayerCache() for _ in range(c.num_layers)]
        out: list[StepOutput] = []
        for step in range(steps):
            logits, hidden = self.step(ids, hidden, rows, step, caches)
            draft_ids = logits.argmax(-1)
            target_ids = self.to_target_ids(draft_ids)
            result = StepOutput(logits, hidden, draft_ids, target_ids, rows)
            out.append(result)
            ids = (
                target_ids
                if feed is None or step >= len(feed)
                else feed[step].to(rows.device)[rows]
            )
            if keep is not None:  # called for every step: it also sees the last one
                go = keep(step, result).to(rows.device)
                rows, hidden, ids = rows[go], hidden[go], ids[go]
                if rows.numel() == 0:
                    break
        return out


def load_draft(
    draft_dir: str | Path,
    *,
    target_dir: str | Path | None = None,
    device: str = "cpu",
    dtype: torch.dtype | str | None = "auto",
) -> Eagle3Draft:
    """Load a draft (speculators, SGLang-flat or SpecForge names) from safetensors.

    ``dtype="auto"``: the dtype ``fc.weight`` is stored in. The embedding comes from the draft
    when it has one, else from ``target_dir`` (``model.embed_tokens.weight``), as SGLang shares
    the target's. A missing ``lm_head`` is taken from the target when the vocabularies match.
    """
    config = load_draft_config(draft_dir)
    if dtype == "auto" or dtype is None:
        dtype = stored_dtype(draft_dir)
    elif isinstance(dtype, str):
        if dtype not in _DTYPES:
            raise WiringError(f"dtype {dtype!r} is not one of auto, {', '.join(_DTYPES)}")
        dtype = _DTYPES[dtype]
    weights = load_tensors(draft_dir, dtype=dtype, device=device)
    found = find_tensor(draft_dir, "embed_tokens.weight")
    if found is None and target_dir is not None:
        found = find_tensor(target_dir, "embed_tokens.weight")
    if found is None:
        raise WiringError(
            "the draft has no embed_tokens.weight (it shares the target's)",
            path=str(draft_dir),
            fix="pass the target directory (--target) so its embedding can be used",
        )
    embed = RowTable(found[0], found[1], dtype=dtype, device=device)
    if config.tie_word_embeddings and "lm_head.weight" not in weights:
        weights["lm_head.weight"] = embed.full()
    if "lm_head.weight" not in weights and target_dir is not None:
        head = find_tensor(target_dir, "lm_head.weight")
        if head is not None and config.draft_vocab_size == embed.vocab_size:
            weights["lm_head.weight"] = RowTable(
                head[0], head[1], dtype=dtype, device=device
            ).full()
    return Eagle3Draft(config, weights, embed, source=str(draft_dir))
