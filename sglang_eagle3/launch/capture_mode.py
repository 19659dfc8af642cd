"""The launcher in SGLang's capture-only mode: taps returned over HTTP, no draft (pure).

`--enable-return-aux-hidden-states` makes SGLang 0.5.23 capture aux hidden states on the
target alone and return them in `meta_info.hidden_states` (the doctor scores a drafter on
them). `--speculative-algorithm` then only names the capture convention and is reset by
SGLang (`arg_groups/validation_hook.py`, handle_aux_hidden_state_capture), so no draft is
loaded. There is no draft config to read a layout from: `--hidden-state-layout` is required,
and the plugin captures exactly those taps, in SGLang's ascending fill order.
"""

from __future__ import annotations

from sglang_eagle3.checkpoint.prestart import checked_tensors
from sglang_eagle3.checkpoint.target_config import TargetInfo
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.argv import argv_get, argv_has, argv_int, argv_set
from sglang_eagle3.launch.plan import (
    CAPTURE_FLAG,
    DRAFT_PATH,
    LAYOUT_FLAG,
    PP_FLAGS,
    LaunchOptions,
    LaunchPlan,
    layout_from_flag,
)
from sglang_eagle3.layout.capture_plan import (
    LAYOUT_ENV,
    CapturePlan,
    check_family,
    plan_from_layout,
)
from sglang_eagle3.layout.families import example_layout

ALGO = "--speculative-algorithm"
LAYER_IDS = "--return-aux-hidden-state-layer-ids"
WHERE = "command line"


def capture_order(capture: CapturePlan) -> tuple[str, ...]:
    """The declared taps in SGLang's fill order: the column blocks of meta_info.hidden_states."""
    return tuple(capture.taps[capture.fc_block_order.index(p)] for p in range(len(capture.taps)))


def _refuse_inputs(argv: list[str], opts: LaunchOptions, example: str) -> None:
    algo = argv_get(argv, ALGO)
    if algo is not None and algo.upper() != "EAGLE3":
        # DFLASH / DSPARK capture through other switches the plugin does not set
        raise WiringError(
            f"{CAPTURE_FLAG} with {ALGO} {algo}: the plugin captures declared taps in the "
            "EAGLE-3 convention only",
            path=WHERE,
            fix=f"use {ALGO} EAGLE3, or leave it out (the launcher adds it)",
        )
    if argv_has(argv, DRAFT_PATH):
        raise WiringError(
            f"{CAPTURE_FLAG} captures on the target alone; SGLang refuses a draft with it",
            path=WHERE,
            fix=f"drop {DRAFT_PATH} (or drop {CAPTURE_FLAG} to serve the drafter)",
        )
    if argv_has(argv, LAYER_IDS):
        raise WiringError(
            f"{LAYOUT_FLAG} replaces {LAYER_IDS}: the plugin writes the capture indices "
            "itself, and SGLang's ids count in the family's own convention",
            path=WHERE,
            fix=f"drop {LAYER_IDS} and name the taps with {LAYOUT_FLAG} (e.g. {example})",
        )
    if opts.override_draft_layout or opts.aux_layer_convention:
        flag = "--override-draft-layout" if opts.override_draft_layout else "--aux-layer-convention"
        raise WiringError(
            f"{flag} reads a draft's config, and {CAPTURE_FLAG} serves no draft",
            path=WHERE,
            fix=f"drop {flag}; {LAYOUT_FLAG} alone says which taps are captured",
        )
    if not opts.hidden_state_layout:
        raise WiringError(
            f"{CAPTURE_FLAG} needs {LAYOUT_FLAG}: there is no draft to read a layout from, and "
            "without one SGLang captures its own default taps",
            path=WHERE,
            fix=f"add {LAYOUT_FLAG} TAPS, the taps the drafter was trained on (e.g. {example})",
        )


def plan_capture_only(argv: list[str], opts: LaunchOptions, target: TargetInfo) -> LaunchPlan:
    """The plan for SGLang's capture-only mode with the declared taps, or a WiringError."""
    example = ",".join(example_layout(target.num_layers))
    _refuse_inputs(argv, opts, example)
    layout = layout_from_flag(opts.hidden_state_layout, target)
    checked_tensors(target.path)  # a speculative start's header-only check: weights whole
    stages = max(argv_int(argv, flag) or 1 for flag in PP_FLAGS)
    family = check_family(target.family, target.architecture, path=target.path,
                          two_batch_overlap=argv_has(argv, "--enable-two-batch-overlap"),
                          pipeline_stages=stages)  # fmt: skip
    # the last layer's output only where the family's loop reaches it (families.py)
    capture = plan_from_layout(layout, LAYOUT_FLAG, final_layer=family.final_layer)
    out, changes = list(argv), []
    if argv_get(argv, ALGO) is None:
        out = argv_set(out, ALGO, "EAGLE3")
        changes.append(
            {
                "flag": ALGO,
                "from": None,
                "to": "EAGLE3",
                "why": f"SGLang's {CAPTURE_FLAG} needs it to name the capture convention; "
                "no draft is loaded and nothing is speculated",
            }
        )
    order = capture_order(capture)
    h = target.hidden_size
    note = (
        f"capture only: taps {', '.join(capture.taps)} returned in ascending capture order "
        f"{', '.join(order)}: each row of meta_info.hidden_states is {len(order)} blocks of "
        f"{h} columns in that order (request with return_hidden_states); GET "
        "/sglang_eagle3/capture on the server says the same"
    )
    return LaunchPlan(
        target,
        None,
        None,
        None,
        capture,
        None,
        tuple(out),
        {LAYOUT_ENV: ",".join(capture.taps)},
        tuple(changes),
        (note,),
        capture_order=order,
    )
