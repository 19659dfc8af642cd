"""What the launcher needs to know about the target model, read from its config.json (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.checkpoint.config_json import read_config_json
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import MAX_LAYERS
from sglang_eagle3.layout.families import Family, family_for


@dataclass(frozen=True)
class TargetInfo:
    path: str
    architecture: str
    num_layers: int
    hidden_size: int

    def __post_init__(self) -> None:
        if self.num_layers < 1 or self.hidden_size < 1:
            raise WiringError(
                f"num_hidden_layers {self.num_layers} and hidden_size {self.hidden_size} "
                "must be >= 1",
                path=self.path,
                fix="use the target model's own config.json",
            )
        if self.num_layers > MAX_LAYERS:
            raise WiringError(
                f"num_hidden_layers {self.num_layers} is not a decoder depth (at most "
                f"{MAX_LAYERS})",
                path=self.path,
                fix="use the target model's own config.json",
            )

    @property
    def family(self) -> Family | None:
        """Its row in SGLang 0.5.23's table of EAGLE-3 target families (None: not listed)."""
        return family_for(self.architecture)


def read_target_config(
    model_path: str | Path,
    *,
    ints: tuple[str, ...] = ("num_hidden_layers", "hidden_size"),
    missing: str = "no config.json for the target model",
    fix: str = "--model-path must be a local model directory (download it first)",
    refuse_draft: bool = False,
) -> tuple[dict, dict]:
    """A local target's config.json and the language model's part of it (multimodal configs
    such as Kimi-K2.5 keep it in text_config), with ``ints`` checked there."""
    cfg_path = Path(model_path) / "config.json"
    cfg = read_config_json(model_path, missing=missing, fix=fix)
    draft = draft_marker(cfg) if refuse_draft else None
    if draft:  # its own fields would pass or fail for the wrong reason, blaming the draft
        raise WiringError(
            f"this is an EAGLE-3 draft's config ({draft}), where the target model's is expected",
            path=str(cfg_path),
            fix=fix,
        )
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    for key in ints:
        value = text.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise WiringError(f"{key} must be an int, got {value!r}", path=str(cfg_path), fix=fix)
    return cfg, text


DRAFT_KEYS = ("speculators_config", "speculators_model_type", "draft_vocab_size")


def draft_marker(cfg: dict) -> str | None:
    """What says ``cfg`` is an EAGLE-3 draft's config (a key or an architecture), or None."""
    key = next((k for k in DRAFT_KEYS if k in cfg), None)
    if key is not None:
        return key
    archs = cfg.get("architectures")
    names = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    return next((a for a in names if "eagle" in a.lower() or "speculator" in a.lower()), None)


def read_target(model_path: str | Path, *, refuse_draft: bool = False) -> TargetInfo:
    """Read a local target's config.json (multimodal configs: the text_config).
    ``refuse_draft``: where the user named a target (SGLang's own processes also read a
    draft model's config through here)."""
    cfg, text = read_target_config(model_path, refuse_draft=refuse_draft)
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        path = str(Path(model_path) / "config.json")
        raise WiringError("architectures must be a non-empty list", path=path)
    return TargetInfo(str(model_path), archs[0], text["num_hidden_layers"], text["hidden_size"])
