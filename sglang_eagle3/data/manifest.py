"""The capture manifest: which taps a training data set holds, recorded where the data begins.

`python -m sglang_eagle3.capture` writes it into the data's sidecar (``sglang_eagle3_data.json``,
key ``manifest``, next to the ``taps`` and ``num_layers`` the readers already use) and into
every ``hs_{i}.safetensors`` file's metadata. Taps are in this project's vocabulary (``embed``,
``layer:K``: the output of decoder layer K, 0-indexed), ``fc_taps`` in the order the drafter's
fc consumes them; the files store ``fc_taps + [verifier]``, the verifier last, as speculators
0.9 trains. Data without a manifest (SpecForge's, speculators') is read as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from sglang_eagle3.data.arrow import META_NAME
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.schema_base import SchemaModel
from sglang_eagle3.layout.taps import Tap, format_taps, parse_taps

MANIFEST_KEY = "manifest"  # in the sidecar and in each file's "sglang_eagle3" metadata
_MODEL = ConfigDict(strict=True, frozen=True, extra="forbid")


class TargetRecord(SchemaModel):
    model_config = _MODEL
    architecture: str = Field(description="config.json architectures[0] of the captured target")
    num_layers: int = Field(ge=1, description="decoder layers of the target")
    hidden_size: int = Field(ge=1, description="width of one tap")
    config_sha256: str = Field(description="sha256 of the target's config.json, keys sorted")


class DataManifest(SchemaModel):
    """What a captured data set is: its taps, its target, the software that captured it."""

    model_config = _MODEL
    error_prefix = "manifest."
    version: Literal[1] = Field(1, description="manifest format version")
    fc_taps: tuple[str, ...] = Field(
        min_length=1, description="the taps the fc consumes, in its input order ('embed', "
        "'layer:K' = output of decoder layer K, 0-indexed)",
        strict=False,  # JSON has lists, not tuples: strict would refuse every sidecar
    )  # fmt: skip
    verifier: str = Field(description="the tap the trainer's targets come from, stored last")
    target: TargetRecord = Field(description="the target the hidden states came from")
    sglang: str = Field(description="SGLang version that served the capture")
    sglang_eagle3: str = Field(description="sglang-eagle3 version that captured")
    dtype: str = Field(description="dtype of the stored hidden states, e.g. 'bfloat16'")
    samples: int | None = Field(None, ge=0, description="samples in the set (None: in a file)")
    tokens: int | None = Field(None, ge=0, description="tokens in the set (None: in a file)")

    @field_validator("fc_taps", "verifier", mode="after")
    @classmethod
    def _known_taps(cls, value):
        parse_taps([value] if isinstance(value, str) else list(value))
        return value

    @model_validator(mode="after")
    def _taps_exist(self) -> DataManifest:
        fc = parse_taps(list(self.fc_taps))
        if len(set(fc)) != len(fc):
            raise WiringError(f"manifest.fc_taps names a tap twice: {format_taps(fc)}")
        n = self.target.num_layers
        for tap in (*fc, Tap.parse(self.verifier)):
            if not tap.exists_in(n):
                raise WiringError(f"manifest: {tap} is not a tap of a {n}-layer target")
        return self

    @property
    def stored_taps(self) -> tuple[Tap, ...]:
        """The taps in each file's hidden_states, in stored order (verifier last)."""
        return (*parse_taps(list(self.fc_taps)), Tap.parse(self.verifier))


def config_sha256(config: dict) -> str:
    """A target config's hash, independent of key order and whitespace."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def sidecar(manifest: DataManifest) -> dict:
    """The sidecar's JSON: the readers' keys (``taps``, ``num_layers``) and the manifest."""
    return {
        "taps": [str(t) for t in manifest.stored_taps],
        "num_layers": manifest.target.num_layers,
        MANIFEST_KEY: manifest.model_dump(),
    }


def read_manifest(data: str | Path) -> DataManifest | None:
    """The manifest of a data directory (or of the directory holding a data file); None when
    the data has none (SpecForge's or speculators' own output)."""
    data = Path(data)
    side = (data if data.is_dir() else data.parent) / META_NAME
    if not side.is_file():
        return None
    try:
        raw = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WiringError(f"cannot read {META_NAME}: {err}", path=str(side),
                          fix=f"restore or delete {side}") from None  # fmt: skip
    if not isinstance(raw, dict) or MANIFEST_KEY not in raw:
        return None
    return DataManifest.load(raw[MANIFEST_KEY], path=str(side),
                             fix="capture the data again, or delete the manifest key")  # fmt: skip


def manifest_mismatch(manifest: DataManifest, draft_taps: Sequence[Tap], *, draft: str,
                      data: str) -> WiringError | None:  # fmt: skip
    """The refusal when a draft reads other taps (or another order) than its data holds."""
    fc = parse_taps(list(manifest.fc_taps))
    if tuple(draft_taps) == fc:
        return None
    return WiringError(
        f"the data was captured with fc taps {format_taps(fc)} (manifest of {data}), but the "
        f"draft declares {format_taps(draft_taps)} (in this project's ids: embed, layer:K = "
        "output of decoder layer K)",
        path=draft,
        fix=f"python -m sglang_eagle3.layout stamp --draft {draft} --data {data} --out "
        f"{draft.rstrip('/')}-stamped (writes a copy whose config declares the data's taps)",
    )


def target_mismatch(manifest: DataManifest, architecture: str, num_layers: int, *, target: str,
                    data: str) -> WiringError | None:  # fmt: skip
    """The refusal when data captured from one target meets another: layer:K is another
    tensor in another family or depth. The config hash is not compared: a quantized or
    re-saved copy of the same target differs there and has the same taps."""
    got = manifest.target
    if (architecture, num_layers) == (got.architecture, got.num_layers):
        return None
    return WiringError(
        f"the data was captured from a {got.architecture} of {got.num_layers} layers "
        f"(manifest of {data}), but the target here is a {architecture} of {num_layers} layers "
        f"({target}): its taps are other tensors here",
        path=data,
        fix="use the target the data was captured from, or capture the data again from this one",
    )
