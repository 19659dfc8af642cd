"""Which stored tap is the embedding output? Tell from the numbers, not from the labels.

Decoder layers add to the residual stream, so its per-token L2 norm grows with depth, while the
embedding output (``embed``) is just a row of the embedding matrix: the seed's target showed
~1 for ``embed`` against 37-174 for layer outputs. A stored tap whose median norm is far below
every other tap's is the embedding output. When the embedding matrix is at hand the check is
exact: ``embed`` at token t equals row ``input_ids[t]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from sglang_eagle3.layout.taps import Tap, format_taps

# "far smaller": the smallest median norm must be below this fraction of the next smallest
EMBED_RATIO = 0.25


@dataclass(frozen=True)
class TapFingerprint:
    norms: tuple[float, ...]  # median per-token L2 norm of each stored tap, in stored order
    embed_index: int | None  # stored tap that looks like the embedding output; None: none does
    ratio: float | None  # its median norm / the next smallest (None with a single tap)
    tokens: int  # tokens measured
    exact_match: tuple[float, ...] | None = None  # per tap: fraction of tokens == embed row

    def __post_init__(self) -> None:
        if self.embed_index is not None and not 0 <= self.embed_index < len(self.norms):
            raise ValueError(f"embed_index {self.embed_index} outside {len(self.norms)} taps")

    def describe(self, taps: Sequence[Tap] | None = None) -> str:
        names = [str(t) for t in taps] if taps else [f"#{i}" for i in range(len(self.norms))]
        norms = ", ".join(f"{n}={v:.3g}" for n, v in zip(names, self.norms, strict=True))
        if self.embed_index is None:
            head = "no stored tap looks like the embedding output"
        elif self.exact_match is not None and self.exact_match[self.embed_index] > 0.99:
            head = (
                f"stored tap #{self.embed_index} ({names[self.embed_index]}) is the embedding "
                f"output: it equals its token's embedding row for "
                f"{self.exact_match[self.embed_index]:.0%} of tokens"
            )
        else:
            head = (
                f"stored tap #{self.embed_index} ({names[self.embed_index]}) looks like the "
                f"embedding output (median norm {self.ratio:.2g}x the next smallest)"
            )
        return f"{head}; median per-token L2 norms over {self.tokens} tokens: {norms}"


def fingerprint_taps(
    samples: Iterable[tuple[torch.Tensor, torch.Tensor]],  # ([seq, num_taps, hidden], [seq] ids)
    *,
    max_tokens: int = 4096,
    embed: Callable[[torch.Tensor], torch.Tensor] | None = None,  # ids [n] -> rows [n, hidden]
) -> TapFingerprint:
    """Median norms over up to ``max_tokens`` tokens (streamed); with ``embed``, also the
    fraction of tokens where each tap equals the embedding row (cosine > 0.999)."""
    norms: list[torch.Tensor] = []
    matches: list[torch.Tensor] = []
    seen = 0
    for hs, ids in samples:
        take = min(hs.shape[0], max_tokens - seen)
        if take <= 0:
            break
        h = hs[:take].float()
        norms.append(h.norm(dim=-1))  # [take, num_taps]
        if embed is not None:
            rows = embed(ids[:take]).float().cpu()[:, None, :]  # [take, 1, hidden]
            cos = torch.nn.functional.cosine_similarity(h, rows.expand_as(h), dim=-1)
            matches.append(cos > 0.999)
        seen += take
    if not norms:
        raise ValueError("no tokens to fingerprint")
    med = torch.cat(norms).median(dim=0).values.tolist()
    exact = None
    if matches:
        exact = tuple(torch.cat(matches).float().mean(dim=0).tolist())
    order = sorted(range(len(med)), key=lambda i: med[i])
    ratio = None if len(med) < 2 else med[order[0]] / max(med[order[1]], 1e-30)
    index = order[0] if ratio is not None and ratio < EMBED_RATIO else None
    if exact is not None:  # the exact test, when possible, overrules the statistics
        hits = [i for i, f in enumerate(exact) if f > 0.99]
        index = hits[0] if len(hits) == 1 else index
    return TapFingerprint(tuple(med), index, ratio, seen, exact)


def check_against_taps(fp: TapFingerprint, taps: Sequence[Tap] | None) -> list[str]:
    """Disagreements between the fingerprint and the taps the data says it stores."""
    if not taps:
        return []
    problems = []
    labelled = [i for i, t in enumerate(taps) if t.is_embed]
    if fp.embed_index is not None and fp.embed_index not in labelled:
        where = f"#{labelled[0]}" if labelled else "none of them"
        problems.append(
            f"stored tap #{fp.embed_index} (labelled {taps[fp.embed_index]}) looks like the "
            f"embedding output, but the data labels {where} as embed "
            f"(stored taps: {format_taps(taps)})"
        )
    if labelled and fp.embed_index is None:
        i = labelled[0]
        problems.append(
            f"stored tap #{i} is labelled embed but its norms ({fp.norms[i]:.3g}) do not stand "
            "out from the layer outputs; it may be a layer output"
        )
    return problems


def check_against_layout(
    fp: TapFingerprint, layout_indices: Sequence[int], layout_taps: Sequence[Tap], name: str
) -> str | None:
    """Does a layout that reads stored taps ``layout_indices`` put ``embed`` where the
    fingerprint finds it? Returns a sentence when it does not."""
    wants = [i for i, t in zip(layout_indices, layout_taps, strict=True) if t.is_embed]
    if fp.embed_index is None:
        if wants:
            return (
                f"{name} layout feeds stored tap #{wants[0]} as embed, which does not look like one"
            )
        return None
    if wants and wants[0] != fp.embed_index:
        return (
            f"{name} layout feeds stored tap #{wants[0]} as embed, but stored tap "
            f"#{fp.embed_index} is the one that looks like the embedding output"
        )
    if not wants and fp.embed_index in layout_indices:
        return (
            f"{name} layout feeds stored tap #{fp.embed_index} as a layer output, but it looks "
            "like the embedding output"
        )
    return None
