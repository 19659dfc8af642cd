"""What one EAGLE-3 server serves, as one record two servers can compare (PD disaggregation).

Under prefill-decode disaggregation the prefill server runs the drafter over the prompt and
hands the decode server the draft state and the drafter's KV for the whole prompt, so the
prefill server's taps, drafter and fc order fix the drafter's context for the whole request.
Both sides must serve the same plan: the same taps in the same fc order, the same drafter
weights and the same speculative settings. The prefill side publishes this record; the decode
side compares it with its own before it takes a request from that prefill server.

Pure: pydantic only. Taps are in this project's vocabulary (`embed`, `layer:K` = output of
decoder layer K, 0-indexed); capture indices are SGLang's (index j captures the input of
decoder layer j).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.schema_base import SchemaModel

ROUTE = "/sglang_eagle3/plan"  # on the prefill server's bootstrap server, beside its /route
_MODEL = ConfigDict(strict=True, frozen=True, extra="forbid")
# the fields two servers must share (the role, version and fingerprint describe, not define)
COMPARED = ("taps", "capture_indices", "fc_block_order", "drafter", "algorithm",
            "num_steps", "topk", "num_draft_tokens")  # fmt: skip


class ServedPlan(SchemaModel):
    """The plan of one server: the capture plan its target applies, its drafter, its settings."""

    model_config = _MODEL
    error_prefix = "plan."
    version: Literal[1] = Field(1, description="record format version")
    role: str = Field(description="SGLang's --disaggregation-mode: 'prefill', 'decode' or 'null'")
    taps: tuple[str, ...] | None = Field(
        strict=False, description="declared taps in fc input order; None: stock SGLang capture"
    )
    capture_indices: tuple[int, ...] = Field(
        strict=False, description="SGLang capture indices, ascending (empty for stock capture)"
    )
    fc_block_order: tuple[int, ...] = Field(
        strict=False, description="[j] = fill position of declared tap j (the fc permutation)"
    )
    drafter: str | None = Field(
        description="sha256 of the drafter's weight files (checkpoint/draft_identity.py), or "
        "'unhashed:<path>' where the path is not a local directory; None: no drafter"
    )
    algorithm: str | None = Field(description="--speculative-algorithm, upper case; None: none")
    num_steps: int | None = Field(description="--speculative-num-steps")
    topk: int | None = Field(description="--speculative-eagle-topk")
    num_draft_tokens: int | None = Field(description="--speculative-num-draft-tokens")
    sglang_eagle3: str = Field(description="sglang-eagle3 version of the server")

    @model_validator(mode="after")
    def _consistent(self) -> ServedPlan:
        n = len(self.taps or ())
        if len(self.capture_indices) != n or sorted(self.fc_block_order) != list(range(n)):
            raise WiringError(
                f"plan.capture_indices {list(self.capture_indices)} and plan.fc_block_order "
                f"{list(self.fc_block_order)} must describe the {n} taps {list(self.taps or ())}"
            )
        return self

    def compared(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in COMPARED}

    @property
    def fingerprint(self) -> str:
        """16 hex digits of sha256 over the compared fields (canonical JSON)."""
        text = json.dumps(self.compared(), sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line: what a person needs to tell two plans apart."""
        taps = ", ".join(self.taps) if self.taps is not None else "stock SGLang capture"
        order = f", fc blocks permuted {list(self.fc_block_order)}" if self.permuted else ""
        drafter = (self.drafter or "none")[:16]
        spec = (f"{self.algorithm} steps {self.num_steps} topk {self.topk} draft tokens "
                f"{self.num_draft_tokens}") if self.algorithm else "no speculation"  # fmt: skip
        return f"taps {taps}{order}; drafter {drafter}; {spec} [plan {self.fingerprint}]"

    @property
    def permuted(self) -> bool:
        return self.fc_block_order != tuple(range(len(self.fc_block_order)))

    def to_json(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "fingerprint": self.fingerprint}


def read_peer_plan(data: Any, *, peer: str) -> ServedPlan:
    """A peer's published record (its own fingerprint checked against its fields)."""
    if not isinstance(data, dict):
        raise WiringError(f"the plan it published is not a JSON object: {data!r}", path=peer)
    stated = data.get("fingerprint")
    plan = ServedPlan.load({k: v for k, v in data.items() if k != "fingerprint"}, path=peer)
    if stated != plan.fingerprint:
        raise WiringError(f"its plan states fingerprint {stated!r} but its fields hash to "
                          f"{plan.fingerprint}", path=peer)  # fmt: skip
    return plan


FIX = (
    "start every prefill and decode server of the deployment through python -m "
    "sglang_eagle3.launch with the same drafter, --hidden-state-layout and speculative flags "
    "(each PD server logs its plan and fingerprint at start)"
)


def pd_role_note(role: str | None, bootstrap_port: str | None) -> str | None:
    """What a PD server of ``role`` publishes or checks (the launcher's plan says it)."""
    if role == "prefill":
        return (f"PD prefill: publishes this server's plan (taps, fc order, drafter weights "
                f"sha256, speculative flags) at GET {ROUTE} on its bootstrap server (port "
                f"{bootstrap_port or 'SGLang default 8998'}); decode servers refuse requests "
                "from a prefill whose plan is not theirs")  # fmt: skip
    if role == "decode":
        return (f"PD decode: checks each prefill server's plan (GET {ROUTE} on its bootstrap "
                "server) before taking its first request; a prefill serving another plan, or "
                "none (no plugin), has every request refused with both plans named")  # fmt: skip
    return None


def plan_mismatch(mine: ServedPlan, peer: ServedPlan | None, *, peer_name: str,
                  why_none: str = "") -> WiringError | None:  # fmt: skip
    """None when ``peer`` serves ``mine``; else the one error that names both plans.
    ``peer`` None: the peer published no plan (``why_none`` says what it answered)."""
    if peer is None:
        return WiringError(
            f"prefill server {peer_name} publishes no sglang-eagle3 plan ({why_none}): it runs "
            "without the sglang-eagle3 plugin, so the taps it feeds the drafter over every "
            f"prompt are unknown; this decode server serves {mine.describe()}",
            path=f"{mine.role} server",
            fix=FIX,
        )
    if peer.fingerprint == mine.fingerprint:
        return None
    differ = [k for k in COMPARED if getattr(peer, k) != getattr(mine, k)]
    return WiringError(
        f"prefill server {peer_name} serves another plan ({', '.join(differ)} differ): it "
        f"serves {peer.describe()}; this decode server serves {mine.describe()}. Its drafter "
        "context would lower the accept length of every request it prefills",
        path=f"{mine.role} server",
        fix=FIX,
    )
