"""DraftSpec: everything about an EAGLE-3 draft checkpoint that matters for wiring it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import Convention, check_ids
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import Tap, parse_taps

FORMATS = ("sglang-flat", "speculators", "specforge")
STOCK_DEFAULT_SOURCE = "none (stock SGLang default)"


def _opt_int(value: object, field: str, *, minimum: int = 1) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WiringError(f"DraftSpec.{field} must be an int >= {minimum} or None, got {value!r}")


@dataclass(frozen=True)
class DraftSpec:
    """A parsed, target-checked draft. ``layout`` is None when the draft does not say which
    taps it reads (stock SGLang then uses its default); ``layout_source`` says where the
    layout came from, ``convention`` in which convention ``raw_ids`` were read."""

    config_path: str
    format: str
    layout: HiddenStateLayout | None
    convention: Convention | None
    layout_source: str
    raw_ids: tuple[int, ...] | None
    draft_hidden_size: int
    target_hidden_size: int
    num_aux: int
    fc_in_features: int | None
    draft_vocab_size: int | None
    target_vocab_size: int | None
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    norm_before_residual: bool = False
    has_d2t: bool = False
    has_t2d: bool = False
    sliding_window: int | None = None
    verifier_name: str | None = None
    notes: tuple[str, ...] = ()
    embed_requires_grad: bool = False  # speculators: the draft trained its own embedding
    has_embed: bool = False  # the checkpoint holds embed_tokens.weight
    draft_layers: int = 1  # decoder layers in the draft
    null_target_hidden: bool = False  # target_hidden_size: null (speculators' default)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise WiringError(f"DraftSpec.format must be one of {FORMATS}, got {self.format!r}")
        for name in ("draft_hidden_size", "target_hidden_size", "num_aux"):
            _opt_int(getattr(self, name), name)
            if getattr(self, name) is None:
                raise WiringError(f"DraftSpec.{name} is required")
        _opt_int(self.draft_layers, "draft_layers")
        for name in ("fc_in_features", "draft_vocab_size", "target_vocab_size", "sliding_window"):
            _opt_int(getattr(self, name), name)
        if self.convention is not None and not isinstance(self.convention, Convention):
            object.__setattr__(self, "convention", Convention.parse(self.convention))
        if self.raw_ids is not None:
            object.__setattr__(self, "raw_ids", tuple(self.raw_ids))
        object.__setattr__(self, "notes", tuple(self.notes))
        # the reader reports these with file context; this re-check keeps hand-built specs honest
        if self.layout is not None:
            if len(self.layout.taps) != self.num_aux:
                raise WiringError(
                    f"layout has {len(self.layout.taps)} taps but the fc takes {self.num_aux}",
                    path=self.config_path,
                )
            if self.layout.hidden_size != self.target_hidden_size:
                raise WiringError(
                    f"layout hidden_size {self.layout.hidden_size} != target_hidden_size "
                    f"{self.target_hidden_size}",
                    path=self.config_path,
                )
        want = self.num_aux * self.target_hidden_size
        if self.fc_in_features is not None and self.fc_in_features != want:
            raise WiringError(
                f"fc in_features {self.fc_in_features} != {self.num_aux} taps x "
                f"{self.target_hidden_size} = {want}",
                path=self.config_path,
            )

    @property
    def ids_convention_text(self) -> str:
        """The raw ids with their convention, e.g. ``[-1, 2, 30] (output-of-layer)``."""
        if self.raw_ids is None:
            return "none"
        return f"{list(self.raw_ids)} ({self.convention or 'convention unknown'})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (for the doctor and logs)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["layout"] = None if self.layout is None else self.layout.to_dict()
        out["convention"] = None if self.convention is None else str(self.convention)
        out["raw_ids"] = None if self.raw_ids is None else list(self.raw_ids)
        out["notes"] = list(self.notes)
        return out

    def describe(self) -> str:
        """A few lines for humans."""
        layout = "none declared" if self.layout is None else self.layout.describe()
        lines = [
            f"draft {self.config_path} ({self.format})",
            f"  layout: {layout}",
            f"  layout source: {self.layout_source}; ids {self.ids_convention_text}",
            f"  fc: {self.num_aux} taps x {self.target_hidden_size} -> {self.draft_hidden_size}"
            + (
                ""
                if self.fc_in_features is None
                else f" (fc.weight in_features {self.fc_in_features})"
            ),
        ]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


# ---- raw fields of a config, before any convention is applied ---------------------------

_MISSING = object()


@dataclass(frozen=True)
class DraftFields:
    """What a config states, with the dotted field names used in error messages."""

    where: str
    draft_hidden: int
    declared_target_hidden: int
    null_target: bool  # target_hidden_size: null (speculators: "same as the draft")
    num_aux: int
    num_aux_source: str
    ids: tuple[int, ...] | None
    ids_field: str
    layout_taps: tuple[Tap, ...] | None
    layout_field: str
    verifier: Tap | None  # from an explicit verifier_tap key
    verifier_is_final: bool  # speculators' data keeps the last captured tap for targets
    draft_vocab: int | None
    target_vocab: int | None
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool
    norm_before_residual: bool
    sliding_window: int | None
    verifier_name: str | None
    embed_requires_grad: bool = False
    draft_layers: int = 1


class _Fields:
    """Typed lookups in one JSON object; errors name the dotted field and the file."""

    def __init__(self, d: dict, prefix: str, where: str) -> None:
        self.d, self.prefix, self.where = d, prefix, where

    def get(self, key: str, kind: str, default: Any = _MISSING) -> Any:
        """``kind`` is int, bool, str, dict or list; a trailing ``?`` also allows null."""
        name = self.prefix + key
        if key not in self.d:
            if default is _MISSING:
                raise WiringError(f"missing field {name}", path=self.where)
            return default
        value = self.d[key]
        if value is None and kind.endswith("?"):
            return None
        base = kind.rstrip("?")
        types = {"int": int, "bool": bool, "str": str, "dict": dict, "list": list}[base]
        ok = isinstance(value, types) and not (base == "int" and isinstance(value, bool))
        if not ok or (base == "int" and value < 1):
            want = "an int >= 1" if base == "int" else f"a {base}"
            raise WiringError(f"field {name} must be {want}, got {value!r}", path=self.where)
        return value

    def sub(self, key: str) -> _Fields:
        return _Fields(self.get(key, "dict?", None) or {}, f"{self.prefix}{key}.", self.where)

    def ids(self) -> tuple[int, ...] | None:
        raw = self.get("eagle_aux_hidden_state_layer_ids", "list?", None)
        name = f"{self.prefix}eagle_aux_hidden_state_layer_ids"
        return None if raw is None else check_ids(raw, path=self.where, field=name)

    def layout(self) -> tuple[tuple[Tap, ...] | None, Tap | None]:
        raw = self.get("hidden_state_layout", "list?", None)
        verifier = self.get("verifier_tap", "str?", None)
        return (
            None if raw is None else parse_taps(raw, path=self.where),
            None if verifier is None else Tap.parse(verifier, path=self.where),
        )

    def window(self) -> int | None:
        layer_types = self.d.get("layer_types") or []
        sliding = "sliding_attention" in layer_types or self.d.get("use_sliding_window")
        value = self.get("sliding_window", "int?", None)
        return value if sliding else None

    def flag(self, key: str) -> bool:
        return self.get(key, "bool", False)


def speculators_fields(cfg: dict, where: str) -> DraftFields:
    top = _Fields(cfg, "", where)
    tl = _Fields(top.get("transformer_layer_config", "dict"), "transformer_layer_config.", where)
    hidden = tl.get("hidden_size", "int")
    target = top.get("target_hidden_size", "int?", None)
    ids = top.ids()
    taps, verifier = top.layout()
    layout_field = "hidden_state_layout"
    if taps is None:
        taps, verifier = top.sub("eagle_config").layout()
        layout_field = "eagle_config.hidden_state_layout"
    ver = top.sub("speculators_config").sub("verifier")
    return DraftFields(
        where=where,
        draft_hidden=hidden,
        declared_target_hidden=hidden if target is None else target,
        null_target=target is None,
        num_aux=len(ids) if ids else 3,  # speculators 0.9 builds fc with len(ids) or 3
        num_aux_source="len(eagle_aux_hidden_state_layer_ids)" if ids else "speculators default 3",
        ids=ids,
        ids_field="speculators top-level eagle_aux_hidden_state_layer_ids",
        layout_taps=taps,
        layout_field=layout_field,
        verifier=verifier,
        verifier_is_final=True,
        draft_vocab=top.get("draft_vocab_size", "int?", None),
        target_vocab=tl.get("vocab_size", "int?", None),
        norm_before_fc=top.flag("norm_before_fc"),
        fc_norm=top.flag("fc_norm"),
        norm_output=top.flag("norm_output"),
        norm_before_residual=top.flag("norm_before_residual"),
        sliding_window=tl.window(),
        verifier_name=ver.get("name_or_path", "str?", None),
        embed_requires_grad=top.flag("embed_requires_grad"),
        draft_layers=tl.get("num_hidden_layers", "int", 1),
    )


def flat_fields(cfg: dict, where: str) -> DraftFields:
    top = _Fields(cfg, "", where)
    hidden = top.get("hidden_size", "int")
    if "target_hidden_size" in cfg and cfg["target_hidden_size"] is None:
        raise WiringError(
            "target_hidden_size is null; SGLang 0.5.23 multiplies it by the tap count and crashes",
            path=where,
            fix="set target_hidden_size to the target's hidden size, or remove the key",
        )
    eagle = top.sub("eagle_config")
    ids = eagle.ids()
    taps, verifier = eagle.layout()
    explicit = top.get("num_aux_hidden_states", "int?", None)
    # SGLang's order: num_aux_hidden_states, then len(eagle_config ids), then 3
    num_aux = explicit or (len(ids) if ids else 3)
    source = "num_aux_hidden_states" if explicit else "len(eagle_config ids)"
    nbf = eagle.get("norm_before_fc", "bool?", None)  # SGLang reads eagle_config first
    return DraftFields(
        where=where,
        draft_hidden=hidden,
        declared_target_hidden=top.get("target_hidden_size", "int", hidden),
        null_target=False,
        num_aux=num_aux,
        num_aux_source=source if explicit or ids else "SGLang default 3",
        ids=ids,
        ids_field="eagle_config.eagle_aux_hidden_state_layer_ids",
        layout_taps=taps,
        layout_field="eagle_config.hidden_state_layout",
        verifier=verifier,
        verifier_is_final=False,
        draft_vocab=top.get("draft_vocab_size", "int?", None),
        target_vocab=top.get("vocab_size", "int?", None),
        norm_before_fc=top.flag("norm_before_fc") if nbf is None else nbf,
        fc_norm=bool(top.get("fc_norm", "bool?", None)) or top.flag("use_aux_norm"),
        norm_output=top.flag("norm_output"),
        norm_before_residual=top.flag("norm_before_residual"),
        sliding_window=top.window(),
        verifier_name=None,
        embed_requires_grad=top.flag("embed_requires_grad"),
        draft_layers=top.get("num_hidden_layers", "int", 1),
    )
