"""A byte-level BPE tokenizer trained locally on standard-library sources.

Byte-level BPE never needs an ``<unk>``: all 256 bytes are in the base alphabet, so any text
round-trips. Special tokens take ids 0..2 (bos, eos, pad), matching ``DeepseekV3Config``'s
default ``bos_token_id=0`` / ``eos_token_id=1``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from sglang_eagle3.testing.tiny import corpus

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = (BOS, EOS, PAD)
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
_BYTE_ALPHABET = 256

# Plain-text turns, so SGLang's OpenAI chat endpoint also works with the tiny model.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@dataclass(frozen=True)
class TokenizerRecipe:
    vocab_size: int = 1024
    # About a quarter of the train split: enough for stable merges, trains in a few seconds.
    max_corpus_bytes: int = 3_000_000
    min_frequency: int = 2
    model_max_length: int = 2048

    def __post_init__(self) -> None:
        floor = _BYTE_ALPHABET + len(SPECIAL_TOKENS)
        if self.vocab_size <= floor:
            raise ValueError(f"vocab_size must exceed {floor} (bytes + special tokens)")
        if self.max_corpus_bytes <= 0:
            raise ValueError("max_corpus_bytes must be positive")
        if self.min_frequency < 1:
            raise ValueError("min_frequency must be >= 1")
        if self.model_max_length <= 0:
            raise ValueError("model_max_length must be positive")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def train_tokenizer(recipe: TokenizerRecipe | None = None) -> Tokenizer:
    """Train the BPE tokenizer on a fixed subset of the stdlib train split."""
    recipe = recipe or TokenizerRecipe()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.vocab_size,
        min_frequency=recipe.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    files = corpus.shuffled_subset(corpus.stdlib_files("train"), recipe.max_corpus_bytes)
    tok.train_from_iterator(corpus.iter_texts(files), trainer=trainer, length=len(files))
    for token, want in zip(SPECIAL_TOKENS, (BOS_ID, EOS_ID, PAD_ID), strict=True):
        got = tok.token_to_id(token)
        if got != want:  # ids are baked into the model config; fail loudly if they moved
            raise RuntimeError(f"special token {token} got id {got}, expected {want}")
    # Prepend bos like DeepSeek-V3's own tokenizer does (add_special_tokens=True).
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS} $B",
        special_tokens=[(BOS, BOS_ID)],
    )
    return tok


def save_tokenizer(tok: Tokenizer, out_dir: Path, recipe: TokenizerRecipe | None = None) -> Path:
    """Write a directory ``PreTrainedTokenizerFast.from_pretrained`` / SGLang can load."""
    from transformers import PreTrainedTokenizerFast

    recipe = recipe or TokenizerRecipe()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=recipe.model_max_length,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    # transformers 5 writes its own class name (TokenizersBackend), which transformers 4 and
    # other readers do not know; PreTrainedTokenizerFast loads the same files in both.
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out_dir


def load_tokenizer(path: Path):  # -> PreTrainedTokenizerFast (lazy import keeps this light)
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path))
