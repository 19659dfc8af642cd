"""Each training-time setting of a draft, and whether the server honours it (pure).

One row per setting speculators 0.9 trains with and SGLang 0.5.23 could serve differently
(see ../shared/reference/sglang-0.5.23-eagle3.md): what stock SGLang does with it, what the
server does through this project (plugin hooks, the launcher's flat copy and flags). The
launcher prints the rows and refuses to start when one cannot be honoured; the doctor prints
them next to its accuracy table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sglang_eagle3 import env_names
from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.layout.conventions import stock_capture
from sglang_eagle3.layout.families import Family
from sglang_eagle3.table import text_table

OK, REFUSED, NOT_ENFORCED = "honoured", "refused", "not enforced"
MLA_FORMAT = "sglang-mla"  # Eagle3DeepseekV2ForCausalLM, SGLang's own MLA drafter


@dataclass(frozen=True)
class Setting:
    name: str
    trained: str  # the value the draft was trained with
    stock: str  # what stock SGLang 0.5.23 serves
    served: str  # what the server serves through sglang-eagle3
    status: str  # OK, REFUSED or NOT_ENFORCED

    def __post_init__(self) -> None:
        if self.status not in (OK, REFUSED, NOT_ENFORCED):
            raise ValueError(f"Setting.status must be one of {OK}/{REFUSED}/{NOT_ENFORCED}")

    @property
    def honoured(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict:
        return {**asdict(self), "honoured": self.honoured}


def draft_settings(
    spec: DraftSpec,
    *,
    family: Family | None,
    norm_fix: bool = True,
    window_flag: int | None = None,
) -> list[Setting]:
    """``window_flag``: --speculative-draft-window-size as the server will get it."""
    s = spec
    rows = [_layout(s, family)]
    width = "null (= draft hidden size)" if s.null_target_hidden else str(s.target_hidden_size)
    rows.append(
        Setting(
            "target_hidden_size",
            width,
            "crashes at load (None x taps)" if s.null_target_hidden else OK,
            f"{OK} (flat copy states {s.target_hidden_size})" if s.null_target_hidden else OK,
            OK,
        )
    )
    for name in ("norm_before_fc", "fc_norm", "norm_output"):
        if name == "norm_before_fc" and s.norm_before_fc and s.format == MLA_FORMAT:
            rows.append(_mla_norm_before_fc())
            continue
        rows.append(Setting(name, str(getattr(s, name)).lower(), OK, OK, OK))
    if s.format == MLA_FORMAT:
        rows.append(_mla_drafter())
    if s.norm_before_residual and s.format == MLA_FORMAT:
        rows.append(
            Setting(
                "norm_before_residual",
                "true",
                "ignored (residual = un-normed fc out)",
                "refused: the plugin honours it on Llama-style drafters only",
                REFUSED,
            )
        )
    elif s.norm_before_residual:
        served = (
            f"{OK} (plugin: residual = hidden_norm(fc out))"
            if norm_fix
            else f"NOT honoured ({env_names.NORM_BEFORE_RESIDUAL}=0, for measurement)"
        )
        rows.append(
            Setting(
                "norm_before_residual",
                "true",
                "ignored (residual = un-normed fc out)",
                served,
                OK if norm_fix else NOT_ENFORCED,
            )
        )
    else:
        rows.append(Setting("norm_before_residual", "false", OK, OK, OK))
    rows.append(_embedding(s))
    if s.draft_layers > 1:
        rows.append(
            Setting(
                "decoder layers",
                str(s.draft_layers),
                "layers 1+ normalise with hidden_norm, input_layernorm never read",
                f"{OK} (plugin loads layers 1+ input_layernorm as hidden_norm)",
                OK,
            )
        )
    rows.append(_window(s, window_flag))
    return rows


def _layout(s: DraftSpec, family: Family | None) -> Setting:
    trained = "unknown" if s.layout is None else ",".join(s.layout.names())
    stock = _stock_layout(s, family)
    if s.layout is None:
        return Setting("hidden-state layout", trained, stock, "refused: undeclared", REFUSED)
    if family is None:
        return Setting(
            "hidden-state layout",
            trained,
            stock,
            "refused: the target's family is not in sglang-eagle3's table",
            REFUSED,
        )
    return Setting("hidden-state layout", trained, stock, f"{OK} (plugin capture plan)", OK)


def _stock_layout(s: DraftSpec, family: Family | None) -> str:
    if family is None or s.layout is None:
        return "eagle_config ids (or the model's default), by SGLang's rule for the model"
    ids = None if s.format == "speculators" else s.raw_ids
    cap = stock_capture(family, list(ids) if ids else None, s.layout.num_layers)
    if cap.taps is not None and tuple(cap.taps) == tuple(s.layout.taps):
        return OK
    text = cap.describe().split(": ", 1)[-1]
    if s.format == "speculators":
        return "cannot load the format; flattened by hand, top-level ids ignored: " + text
    return text


def _mla_drafter() -> Setting:
    """SGLang serves the MLA drafter itself; stock, it packs the taps ascending into an fc
    trained on the declared order, and a tensor its loader skips is one warning line."""
    return Setting(
        "drafter",
        "Eagle3DeepseekV2 (MLA attention, 1 layer)",
        "SGLang's kimi_k25_eagle3; fc never permuted, skipped tensors only logged",
        f"{OK} (SGLang's own drafter; plugin: fc permuted to capture order, load gaps refused)",
        OK,
    )


def _mla_norm_before_fc() -> Setting:
    # Eagle3MLAModel builds no input_norm and reads no norm_before_fc: the fc gets raw taps
    return Setting(
        "norm_before_fc",
        "true",
        "ignored (Eagle3DeepseekV2 has no input_norm)",
        "refused: no hook adds input_norm to SGLang's MLA drafter",
        REFUSED,
    )


def _embedding(s: DraftSpec) -> Setting:
    if not s.embed_requires_grad:
        return Setting("embed_requires_grad", "false", OK, f"{OK} (target's embedding)", OK)
    if not s.has_embed:
        return Setting(
            "embed_requires_grad",
            "true",
            "target's embedding swapped in",
            "refused: the checkpoint has no embed_tokens.weight",
            REFUSED,
        )
    return Setting(
        "embed_requires_grad",
        "true",
        "target's embedding swapped in",
        f"{OK} (plugin keeps the draft's embedding)",
        OK,
    )


def _window(s: DraftSpec, flag: int | None) -> Setting:
    if s.sliding_window is None:
        if flag is None:
            return Setting("sliding window", "none", OK, OK, OK)
        return Setting(
            "sliding window",
            "none",
            OK,
            f"not honoured: --speculative-draft-window-size {flag} adds one",
            NOT_ENFORCED,
        )
    stock = "ignored (the draft config's window is not read)"
    if flag == s.sliding_window:
        return Setting(
            "sliding window",
            str(s.sliding_window),
            stock,
            f"{OK} (--speculative-draft-window-size {flag})",
            OK,
        )
    got = "unset" if flag is None else str(flag)
    return Setting(
        "sliding window",
        str(s.sliding_window),
        stock,
        f"not honoured: --speculative-draft-window-size {got}",
        NOT_ENFORCED,
    )


def render(rows: list[Setting], indent: str = "        ") -> list[str]:
    """Aligned text lines: setting, trained, stock SGLang 0.5.23, served here."""
    head = ("setting", "trained", "stock SGLang 0.5.23", "served here")
    cells = [head] + [(r.name, r.trained, r.stock, r.served) for r in rows]
    return text_table(cells, indent=indent)
