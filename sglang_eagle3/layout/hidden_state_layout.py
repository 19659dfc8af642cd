"""HiddenStateLayout: which target hidden states a draft's fc consumes, in which order."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import (
    Convention,
    check_num_layers,
    ids_from_taps,
    taps_from_ids,
)
from sglang_eagle3.layout.taps import Tap, format_taps, parse_taps

_JSON_KEYS = {"taps", "num_layers", "hidden_size", "verifier"}


def _positive_int(value: object, field: str, path: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WiringError(f"{field} must be an int >= 1, got {value!r}", path=path)
    return value


@dataclass(frozen=True)
class HiddenStateLayout:
    """The taps fed to the draft's fc (concatenated in this order), for a target with
    ``num_layers`` decoder layers whose hidden states are ``hidden_size`` wide. ``verifier``
    is the tap the draft was trained to predict from (its targets' logits), when known."""

    taps: tuple[Tap, ...]
    num_layers: int
    hidden_size: int
    verifier: Tap | None = None

    def __post_init__(self) -> None:
        # accept lists and tap strings for convenience; store tuples of Tap (hashable, frozen)
        object.__setattr__(self, "taps", parse_taps(self.taps) if self.taps else ())
        if isinstance(self.verifier, str):
            object.__setattr__(self, "verifier", Tap.parse(self.verifier))
        n = check_num_layers(self.num_layers)
        _positive_int(self.hidden_size, "hidden_size")
        if not self.taps:
            raise WiringError("a hidden-state layout needs at least one tap")
        seen: set[Tap] = set()
        for tap in self.taps:
            if tap in seen:
                raise WiringError(
                    f"tap {tap} appears twice in {format_taps(self.taps)}",
                    fix="list each tap once",
                )
            seen.add(tap)
            _check_exists(tap, n, "tap")
        if self.verifier is not None:
            if not isinstance(self.verifier, Tap):
                raise WiringError(f"verifier must be a tap, got {self.verifier!r}")
            _check_exists(self.verifier, n, "verifier tap")

    @classmethod
    def from_ids(
        cls,
        ids: Sequence[int],
        convention: Convention | str,
        num_layers: int,
        hidden_size: int,
        *,
        verifier: Tap | str | None = None,
        path: str | None = None,
    ) -> HiddenStateLayout:
        taps = taps_from_ids(ids, convention, num_layers, path=path)
        return cls(taps, num_layers, hidden_size, verifier)  # type: ignore[arg-type]

    def names(self) -> list[str]:
        return [str(t) for t in self.taps]

    def hf_indices(self) -> list[int]:
        return [t.hf_index for t in self.taps]

    def ids(self, convention: Convention | str) -> tuple[int, ...]:
        return ids_from_taps(self.taps, convention, num_layers=self.num_layers)

    def uncapturable_taps(self) -> tuple[Tap, ...]:
        """Taps SGLang's layer loop cannot capture (the last layer's output)."""
        return tuple(t for t in self.taps if not t.is_capturable(self.num_layers))

    def is_capturable(self) -> bool:
        return not self.uncapturable_taps()

    def capture_indices(self) -> list[int]:
        """SGLang loop indices (embed -> 0, layer:K -> K+1), in layout order. An index equal
        to ``num_layers`` (the last layer's output) is never reached by the loop: check
        :meth:`is_capturable` before capturing."""
        return [t.capture_index(self.num_layers) for t in self.taps]

    def is_ascending(self) -> bool:
        """Stock SGLang packs captures in ascending layer order whatever the config says; a
        layout that is not ascending needs a capture that reorders."""
        return all(a < b for a, b in zip(self.taps, self.taps[1:], strict=False))

    @property
    def fc_in_features(self) -> int:
        return len(self.taps) * self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        return {
            "taps": self.names(),
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "verifier": None if self.verifier is None else str(self.verifier),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: object, *, path: str | None = None) -> HiddenStateLayout:
        if not isinstance(data, dict):
            raise WiringError(f"a layout must be a JSON object, got {data!r}", path=path)
        unknown = sorted(set(data) - _JSON_KEYS)
        if unknown or "taps" not in data:
            raise WiringError(
                f"layout keys must be {sorted(_JSON_KEYS)} (taps required), got {sorted(data)}",
                path=path,
            )
        if not isinstance(data["taps"], list):
            raise WiringError(f"layout taps must be a list, got {data['taps']!r}", path=path)
        verifier = data.get("verifier")
        try:
            return cls(
                parse_taps(data["taps"], path=path),
                _positive_int(data.get("num_layers"), "num_layers", path),
                _positive_int(data.get("hidden_size"), "hidden_size", path),
                None if verifier is None else Tap.parse(verifier, path=path),
            )
        except WiringError as err:
            raise err.with_path(path) from None

    @classmethod
    def from_json(cls, text: str, *, path: str | None = None) -> HiddenStateLayout:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError) as err:
            raise WiringError(f"layout is not valid JSON ({err})", path=path) from None
        return cls.from_dict(data, path=path)

    def describe(self) -> str:
        """One line, e.g. ``embed, layer:2, layer:30 (HF hidden_states [0, 3, 31]; SGLang
        capture indices [0, 3, 31])``."""
        text = (
            f"{format_taps(self.taps)} (HF hidden_states {self.hf_indices()}; "
            f"SGLang capture indices {self.capture_indices()})"
        )
        bad = self.uncapturable_taps()
        if bad:
            text += (
                f"; {format_taps(bad)} not capturable by SGLang (capture indices stop at "
                f"{self.num_layers - 1})"
            )
        if not self.is_ascending():
            text += "; not in ascending order (stock SGLang packs ascending)"
        if self.verifier is not None:
            text += f"; verifier {self.verifier} (HF hidden_states [{self.verifier.hf_index}])"
        return text

    def __str__(self) -> str:
        return format_taps(self.taps)


def _check_exists(tap: Tap, num_layers: int, what: str) -> None:
    if not tap.exists_in(num_layers):
        raise WiringError(
            f"{what} {tap} does not exist in a {num_layers}-layer target "
            f"(valid: embed, layer:0..layer:{num_layers - 1})",
            fix="use taps of the target the draft was trained for",
        )
