"""SGLang 0.5.23's EAGLE-3 target families, one row per model class that captures (pure data).

Read from `sglang/srt/models/*.py` (29 files define `set_eagle3_layers_to_capture`). In every
family a stored capture index j captures hs[j], the residual stream at the input of decoder
layer j (0 = embed), in ascending j whatever the order stored. What differs is how stock SGLang
turns a draft's ids into stored indices (`IdRule`), how capture is switched on (`Switch`),
and whether index n (the last layer's output) is ever reached. The launcher, the doctor, the
plugin and the flat copy all read this table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class IdRule(str, Enum):
    PLUS_ONE = "+1 always"  # ids are output-of-layer: stored = id + 1
    PLUS_ONE_IF_FIRST_IS_1 = "+1 only when the first id is 1, else as is"
    AS_IS_IF_MAX_IS_N = "as is when max(ids) == num_layers, else +1"

    def __str__(self) -> str:
        return self.value


class Switch(str, Enum):
    LIST = "layers_to_capture list"
    PACKER = "layers_to_capture list, packed: any unmatched index crashes"
    FLAGS = "per-layer _is_layer_to_capture flags"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Family:
    name: str  # SGLang's model file, e.g. "qwen3_moe"
    sglang_class: str  # module.Class whose set_eagle3_layers_to_capture the plugin wraps
    architectures: tuple[str, ...]  # config.json `architectures[0]` values served by this row
    rule: IdRule
    switch: Switch
    final_layer: bool = False  # the loop also captures hs[n] (the last layer's output)
    default_plus_one: bool = False  # stock adds 1 to its default [2, n//2, n-3] too
    delegate: str | None = None  # wrapper: the attribute holding the language model
    stack: str = "model"  # attribute path to the decoder stack (layers_to_capture, layers)
    two_batch_overlap_skips: bool = False  # layers run without capture under TBO
    tested_here: bool = False  # served here, taps = HF (tests/test_family_capture.py)
    refused: str | None = None  # why the plugin cannot guarantee a declared layout here
    display: str | None = None  # the name messages use, when not the file's

    @property
    def label(self) -> str:
        return self.display or self.name

    @property
    def module(self) -> str:
        return "sglang.srt.models." + self.sglang_class.rsplit(".", 1)[0]

    def max_capture_index(self, num_layers: int) -> int:
        return num_layers if self.final_layer else num_layers - 1

    def stock_indices(self, ids: Sequence[int] | None, num_layers: int) -> tuple[int, ...]:
        """The capture indices stock SGLang 0.5.23 stores for a draft's ids (None: no ids)."""
        n = num_layers
        if ids is None:
            default = (2, n // 2, n - 3)
            return tuple(i + 1 for i in default) if self.default_plus_one else default
        ids = tuple(ids)
        if self.rule is IdRule.PLUS_ONE_IF_FIRST_IS_1 and not (ids and ids[0] == 1):
            return ids
        if self.rule is IdRule.AS_IS_IF_MAX_IS_N and ids and max(ids) == n:
            return ids
        return tuple(i + 1 for i in ids)

    def stock_ids(self, capture_indices: Sequence[int], num_layers: int) -> tuple[int, ...] | None:
        """Ids that stock SGLang turns into exactly these (ascending) capture indices, or None
        where its rule cannot express them."""
        want = tuple(sorted(capture_indices))
        if not want or any(i < 0 or i > self.max_capture_index(num_layers) for i in want):
            return None
        candidates = [tuple(i - 1 for i in want), want]
        if self.rule is IdRule.PLUS_ONE_IF_FIRST_IS_1 and want[0] == 1:
            candidates = [want[1:] + want[:1], *candidates]  # a first id of 1 triggers +1
        for ids in candidates:  # captures fill in ascending order, so order in the list is free
            got = self.stock_indices(ids, num_layers)
            if len(set(got)) == len(got) and tuple(sorted(got)) == want:
                return ids
        return None


def _row(name: str, cls: str, archs: Sequence[str], rule=IdRule.PLUS_ONE, switch=Switch.LIST,
         **kw) -> Family:  # fmt: skip
    return Family(name, f"{name}.{cls}", tuple(archs), rule, switch, **kw)


_DS, _MAX = IdRule.PLUS_ONE_IF_FIRST_IS_1, IdRule.AS_IS_IF_MAX_IS_N
_GEMMA3 = (
    "its loop captures each layer's MLP output, not the residual stream, so no capture list "
    "gives it a tap"
)
FAMILIES: tuple[Family, ...] = (
    _row("llama", "LlamaForCausalLM",
         ["LlamaForCausalLM", "Phi3ForCausalLM", "InternLM3ForCausalLM", "IQuestCoderForCausalLM",
          "MistralForCausalLM", "Ministral3ForCausalLM", "TeleFLMForCausalLM"], tested_here=True),
    _row("apertus", "ApertusForCausalLM", ["ApertusForCausalLM"]),
    _row("bailing_moe", "BailingMoEForCausalLM",
         ["BailingMoEForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
          "SarvamMoEForCausalLM"]),
    _row("deepseek_v2", "DeepseekV2ForCausalLM",
         ["DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
          "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM"],
         rule=_DS, switch=Switch.PACKER, two_batch_overlap_skips=True, tested_here=True,
         display="DeepSeek"),
    _row("exaone_moe", "ExaoneMoEForCausalLM", ["ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM"]),
    _row("gemma3_causal", "Gemma3ForCausalLM", ["Gemma3ForCausalLM"], refused=_GEMMA3),
    _row("gemma3_mm", "Gemma3ForConditionalGeneration", ["Gemma3ForConditionalGeneration"],
         delegate="language_model", stack="language_model.model", refused=_GEMMA3),
    _row("gemma4_causal", "Gemma4ForCausalLM", ["Gemma4ForCausalLM"], final_layer=True),
    _row("gemma4_mm", "Gemma4ForConditionalGeneration",
         ["Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration"],
         final_layer=True, stack="language_model"),
    _row("glm4_moe", "Glm4MoeForCausalLM", ["Glm4MoeForCausalLM"], two_batch_overlap_skips=True,
         tested_here=True),
    _row("glm4_moe_lite", "Glm4MoeLiteForCausalLM", ["Glm4MoeLiteForCausalLM"], rule=_DS,
         two_batch_overlap_skips=True),
    _row("glm5_next", "Glm5NextForConditionalGeneration", ["Glm5NextForConditionalGeneration"],
         two_batch_overlap_skips=True),
    _row("gpt_oss", "GptOssForCausalLM", ["GptOssForCausalLM"], rule=_MAX, final_layer=True,
         tested_here=True),
    _row("kimi_k25", "KimiK25ForConditionalGeneration", ["KimiK25ForConditionalGeneration"],
         rule=_DS, switch=Switch.PACKER, delegate="language_model", stack="language_model.model",
         two_batch_overlap_skips=True, display="DeepSeek (Kimi-K2.5 wrapper)", tested_here=True),
    _row("longcat_flash", "LongcatFlashForCausalLM", ["LongcatFlashForCausalLM"]),
    _row("minimax_m2", "MiniMaxM2ForCausalLM", ["MiniMaxM2ForCausalLM"],
         two_batch_overlap_skips=True, tested_here=True),
    _row("minimax_m3", "MiniMaxM3SparseForCausalLM", ["MiniMaxM3SparseForCausalLM"],
         switch=Switch.FLAGS, final_layer=True, two_batch_overlap_skips=True),
    _row("minimax_m3_vl", "MiniMaxM3SparseForConditionalGeneration",
         ["MiniMaxM3SparseForConditionalGeneration"], switch=Switch.FLAGS, final_layer=True,
         default_plus_one=True, two_batch_overlap_skips=True),
    _row("mllama4", "Llama4ForConditionalGeneration", ["Llama4ForConditionalGeneration"],
         delegate="language_model", stack="language_model.model"),
    _row("qwen2", "Qwen2ForCausalLM", ["Qwen2ForCausalLM"]),
    _row("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration",
         ["Qwen2_5_VLForConditionalGeneration"]),
    _row("qwen2_moe", "Qwen2MoeForCausalLM", ["Qwen2MoeForCausalLM"], switch=Switch.FLAGS,
         two_batch_overlap_skips=True),
    _row("qwen3", "Qwen3ForCausalLM", ["Qwen3ForCausalLM"], tested_here=True),
    _row("qwen3_5_text", "Qwen3_5ForCausalLM", ["Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"],
         switch=Switch.FLAGS),
    _row("qwen3_moe", "Qwen3MoeForCausalLM", ["Qwen3MoeForCausalLM", "MellumForCausalLM"],
         switch=Switch.FLAGS, two_batch_overlap_skips=True, tested_here=True),
    _row("qwen3_next", "Qwen3NextForCausalLM", ["Qwen3NextForCausalLM"], switch=Switch.FLAGS),
    _row("qwen3_vl", "Qwen3VLForConditionalGeneration",
         ["Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
          "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"]),
)  # fmt: skip

_BY_ARCH = {arch: fam for fam in FAMILIES for arch in fam.architectures}


def family_for(architecture: str) -> Family | None:
    """The row that serves a target's config.json `architectures[0]`, or None."""
    return _BY_ARCH.get(architecture)


def family_named(name: str) -> Family:
    return next(f for f in FAMILIES if f.name == name)


def example_layout(num_layers: int) -> tuple[str, ...]:
    """A layout that fits a target's depth, for messages: embed and stock's default spread."""
    n = num_layers
    layers = sorted({max(0, n // 2 - 1), max(0, n - 4)})
    return ("embed", *(f"layer:{k}" for k in layers))


def families_markdown() -> str:
    """The README's table: each family, stock SGLang's rule, and what the plugin does."""
    from sglang_eagle3.table import markdown_table

    def plugin(f: Family) -> str:
        if f.refused:
            return f"refuses a declared layout: {f.refused}"
        reach = "embed..last layer's output" if f.final_layer else "embed..layer:n-2"
        how = "flags cleared, then set" if f.switch is Switch.FLAGS else "list set"
        return f"exact taps in any order ({reach}); {how}"

    rows = [
        [f"`{f.name}`", ", ".join(f.architectures), str(f.rule), str(f.switch), plugin(f),
         "served; taps = HF" if f.tested_here else "stock rule run vs this row"]
        for f in FAMILIES
    ]  # fmt: skip
    header = ("SGLang file", "architectures", "stock id rule", "capture switch", "plugin",
              "tested here")  # fmt: skip
    return markdown_table(header, rows)


if __name__ == "__main__":
    print(families_markdown())
