"""Taps: the public names of the hidden states a draft reads from its target.

``embed`` is the embedding output (Hugging Face ``hidden_states[0]``); ``layer:K`` is the output
of decoder layer K counted from 0 (``hidden_states[K+1]``; for the last layer the value BEFORE the
final norm, which is what SGLang and vLLM capture). These strings are the only spelling accepted
on the command line, in JSON and in logs, so a tap never depends on an id convention.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from sglang_eagle3.errors import WiringError

_TAP_RE = re.compile(r"(?:embed|layer:(0|[1-9][0-9]*))")
_TAP_FIX = "write 'embed' or 'layer:K' with K the 0-based decimal layer number, e.g. layer:2"


@dataclass(frozen=True, order=True)
class Tap:
    """One hidden state, stored as its Hugging Face ``hidden_states`` index (the one
    unambiguous numbering): 0 = embed, K+1 = layer:K."""

    hf_index: int

    def __post_init__(self) -> None:
        if isinstance(self.hf_index, bool) or not isinstance(self.hf_index, int):
            raise WiringError(f"Tap hf_index must be an int, got {self.hf_index!r}")
        if self.hf_index < 0:
            raise WiringError(f"Tap hf_index must be >= 0, got {self.hf_index}")

    @classmethod
    def embed(cls) -> Tap:
        return cls(0)

    @classmethod
    def layer_output(cls, k: int) -> Tap:
        """``layer:k``: the output of decoder layer k (0-based)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise WiringError(f"layer number must be an int >= 0, got {k!r}", fix=_TAP_FIX)
        return cls(k + 1)

    @classmethod
    def parse(cls, text: str, *, path: str | None = None) -> Tap:
        """Parse exactly ``embed`` or ``layer:K`` (canonical decimal, no sign, no spaces)."""
        if not isinstance(text, str):
            raise WiringError(f"a tap must be a string, got {text!r}", path=path, fix=_TAP_FIX)
        m = _TAP_RE.fullmatch(text)
        if m is None:
            raise WiringError(f"invalid tap {text!r}", path=path, fix=_TAP_FIX)
        return cls(0) if m.group(1) is None else cls(int(m.group(1)) + 1)

    @property
    def is_embed(self) -> bool:
        return self.hf_index == 0

    @property
    def layer(self) -> int | None:
        """The decoder layer whose output this is; None for ``embed``."""
        return None if self.hf_index == 0 else self.hf_index - 1

    def exists_in(self, num_layers: int) -> bool:
        """Whether a target with ``num_layers`` decoder layers has this hidden state."""
        return self.hf_index <= num_layers

    def is_capturable(self, num_layers: int) -> bool:
        """SGLang's layer loop captures the INPUT of layer i for i in 0..n-1, so the output of
        the last layer (``layer:{n-1}``) never passes a capture point."""
        return self.hf_index <= num_layers - 1

    def capture_index(self, num_layers: int) -> int:
        """The SGLang loop index that captures this tap: embed -> 0, layer:K -> K+1.

        The last layer's output gets index ``num_layers``, which the loop never reaches:
        callers that capture must refuse it with :meth:`is_capturable`."""
        if not self.exists_in(num_layers):
            raise WiringError(
                f"tap {self} does not exist in a {num_layers}-layer target "
                f"(valid: embed, layer:0..layer:{num_layers - 1})",
                fix="pick taps of the target the draft was trained for",
            )
        return self.hf_index

    def __str__(self) -> str:
        return "embed" if self.hf_index == 0 else f"layer:{self.hf_index - 1}"


def parse_taps(text: str | Iterable[str | Tap], *, path: str | None = None) -> tuple[Tap, ...]:
    """Parse ``"embed,layer:2,layer:30"`` (spaces around commas allowed) or a list of tap
    strings. Order is kept; duplicates are left for the layout to reject with context."""
    if isinstance(text, str):
        items: list[str | Tap] = [part.strip() for part in text.split(",")]
        if text.strip() == "":
            items = []
    else:
        try:
            items = list(text)
        except TypeError:
            raise WiringError(
                f"taps must be a comma-separated string or a list, got {text!r}",
                path=path,
                fix="e.g. embed,layer:2,layer:30",
            ) from None
    if not items:
        raise WiringError("no taps given", path=path, fix="e.g. embed,layer:2,layer:30")
    return tuple(item if isinstance(item, Tap) else Tap.parse(item, path=path) for item in items)


def format_taps(taps: Iterable[Tap]) -> str:
    """The canonical comma-space list, e.g. ``embed, layer:2, layer:30``."""
    return ", ".join(str(t) for t in taps)
