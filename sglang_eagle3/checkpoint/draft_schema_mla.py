"""The config.json of an MLA EAGLE-3 draft, ``Eagle3DeepseekV2ForCausalLM`` (pure).

SGLang 0.5.23 serves it with its own ``models/kimi_k25_eagle3.py``: one decoder layer with
DeepSeek-V2 multi-latent attention (so the draft KV cache has the target's MLA shape), a dense
MLP, its own lm_head, optional ``d2t`` / ``t2d``. The keys are the flat ones (ids and layout in
``eagle_config``) plus the MLA dimensions; EAGLE-3.1 adds ``fc_norm`` (legacy
``use_aux_norm``) and ``norm_output``.

Where the ids come from, and which convention each form uses:

- TorchSpec's training config (``configs/draft_models/kimi_k25_eagle3_mla.json``,
  ``model_type: kimi_k2``, ids ``[1, 29, 57]``): read by SGLang's DeepSeek rule ("+1 only when
  the first id is 1") they capture ``hs[2], hs[30], hs[58]``: output-of-layer ids,
  ``layer:1, layer:29, layer:57`` (TorchSpec's own capture code not checked here).
- TorchSpec's export (``tools/convert_to_hf.py``, ``_fixup_export_config``: only with
  ``export_for_vllm`` and ``model_type == "kimi_k2"``, its comment "vLLM uses 1-indexed layer
  IDs for kimi_k2") adds 1 to both top-level and ``eagle_config`` ids: ``[2, 30, 58]``,
  vLLM's input-to-layer ids for the same taps. Stock SGLang reads both lists as those taps (a first
  id of 1 gets +1, any other list is taken as capture indices), which is what SGLang PR #25454
  was written for.
- The flat SGLang form: whatever the file says, in no stated convention.

All three are the same config shape (TorchSpec's draft-model JSONs already carry
``architectures: ["Eagle3DeepseekV2ForCausalLM"]``, the MLA keys and ``eagle_config``, as in
its ``configs/draft_models/kimi_k3_eagle3_mla.json``, ids ``[1, 45, 89]``); only the ids differ.

So ``[1, 29, 57]`` and ``[2, 30, 58]`` are the same network, and no file says which form it
is: ids that read validly both ways are refused as for Llama-style drafts, with both readings
and the ``--hidden-state-layout`` fix; ``-1``, an id of n, or ``eagle_config.hidden_state_layout``
settle it as they do there.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field, model_validator

from sglang_eagle3.checkpoint.draft_schema import FlatDraftConfig
from sglang_eagle3.errors import WiringError

MLA_ARCH = "Eagle3DeepseekV2ForCausalLM"  # SGLang 0.5.23's MLA drafter (kimi_k25_eagle3.py)


def is_mla_config(cfg: dict) -> bool:
    """A parsed config.json of SGLang's MLA drafter (by its ``architectures``)."""
    archs = cfg.get("architectures")
    return isinstance(archs, list) and MLA_ARCH in archs


class MlaDraftConfig(FlatDraftConfig):
    """An ``Eagle3DeepseekV2ForCausalLM`` config.json (SGLang-flat, or TorchSpec's forms)."""

    model_config = ConfigDict(title="SGLang MLA EAGLE-3 draft config (Eagle3DeepseekV2)")
    mla: ClassVar[bool] = True

    num_attention_heads: int = Field(ge=1, description="MLA attention heads.")
    q_lora_rank: int = Field(ge=1, description="Query latent rank (SGLang requires it).")
    kv_lora_rank: int = Field(ge=1, description="KV latent rank (the draft KV cache width).")
    qk_nope_head_dim: int = Field(ge=1, description="Per-head query/key width without rope.")
    qk_rope_head_dim: int = Field(ge=1, description="Per-head rope width (shared key).")
    v_head_dim: int = Field(ge=1, description="Per-head value width.")
    intermediate_size: int = Field(ge=1, description="The dense MLP's width.")
    tie_word_embeddings: bool = Field(False, description="lm_head is embed_tokens.")
    # DeepseekV3Config's defaults: SGLang builds the draft's config from it (kimi_k2 maps there)
    rms_norm_eps: float = Field(1e-6, gt=0, description="Every RMSNorm's epsilon.")
    hidden_act: str = Field("silu", description="The dense MLP's activation.")
    rope_interleave: bool = Field(
        True, description="Rope on interleaved pairs (SGLang: is_neox_style = not this)."
    )
    eagle_aux_hidden_state_layer_ids: list[int] | None = Field(
        None, description="Top-level ids: SGLang's MLA fc counts them when eagle_config has none."
    )

    @model_validator(mode="after")
    def _sglang_limits(self) -> MlaDraftConfig:
        if self.num_hidden_layers != 1:
            raise WiringError(
                f"num_hidden_layers is {self.num_hidden_layers}; SGLang 0.5.23's "
                f"{MLA_ARCH} raises 'EAGLE3 currently only supports 1 layer'",
                fix="use a one-layer MLA draft",
            )
        # the fc is sized by the MLA rule, the worker's tap width by num_aux_hidden_states first
        if self.num_aux_hidden_states and self.num_aux_hidden_states != self._mla_num_aux():
            raise WiringError(
                f"num_aux_hidden_states is {self.num_aux_hidden_states} but {MLA_ARCH} sizes "
                f"its fc for {self._mla_num_aux()} taps ({self.num_aux_source})",
                fix="remove num_aux_hidden_states, or make the ids name that many taps",
            )
        return self

    def _mla_num_aux(self) -> int:
        # kimi_k25_eagle3._get_eagle_aux_layer_count: eagle_config ids, top-level ids, else 3
        ids = self.ids or self.eagle_aux_hidden_state_layer_ids
        return len(ids) if ids else 3

    @property
    def num_aux(self) -> int:
        return self._mla_num_aux()

    @property
    def num_aux_source(self) -> str:
        if self.ids:
            return "len(eagle_config ids)"
        if self.eagle_aux_hidden_state_layer_ids:
            return "len(top-level eagle_aux_hidden_state_layer_ids)"
        return f"{MLA_ARCH} default 3"

    @property
    def draft_head_from_target(self) -> bool:
        """SGLang shares the target's lm_head only without draft_vocab_size (untied)."""
        return not self.tie_word_embeddings and self.draft_vocab_size is None
