"""Everything the launcher decides before SGLang starts, as one value (pure: no torch/sglang).

checkpoint and flags -> target info, draft spec, capture plan, resolved speculative flags,
the exact SGLang argv and the environment for the plugin. Any problem is a WiringError.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from sglang_eagle3 import env_names
from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.draft_settings import REFUSED, Setting, draft_settings
from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.checkpoint.flat_draft import check_cache_dir
from sglang_eagle3.checkpoint.prestart import prestart_check
from sglang_eagle3.checkpoint.target_config import TargetInfo, read_target
from sglang_eagle3.errors import WiringError
from sglang_eagle3.launch.argv import argv_get, argv_has, argv_int, argv_set
from sglang_eagle3.launch.spec_flags import Resolution, sglang_argv_flags
from sglang_eagle3.launch.spec_resolve import resolve_spec_argv
from sglang_eagle3.layout.capture_plan import (
    LAYOUT_ENV,
    CapturePlan,
    check_family,
    plan_from_layout,
)
from sglang_eagle3.layout.conventions import stock_capture
from sglang_eagle3.layout.families import example_layout
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.served_plan import pd_role_note
from sglang_eagle3.layout.taps import parse_taps

DRAFT_PATH = "--speculative-draft-model-path"
WINDOW = "--speculative-draft-window-size"
LAYOUT_FLAG = "--hidden-state-layout"
PP_FLAGS = ("--pp-size", "--pipeline-parallel-size")  # SGLang's flag and its alias
CAPTURE_FLAG = "--enable-return-aux-hidden-states"  # SGLang's capture-only mode
EAGLE_ALGOS = ("EAGLE3",)


@dataclass(frozen=True)
class LaunchOptions:
    hidden_state_layout: str | None = None
    aux_layer_convention: str | None = None
    cache_dir: Path = Path.home() / ".cache" / "sglang_eagle3" / "drafts"
    # serve hidden_state_layout even where it contradicts the draft's own layout or ids
    override_draft_layout: bool = False


@dataclass(frozen=True)
class LaunchPlan:
    target: TargetInfo
    draft: DraftSpec | None
    draft_src: str | None
    converted_draft: str | None  # where a speculators draft is written for SGLang
    capture: CapturePlan | None
    resolution: Resolution | None
    sglang_argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    changes: tuple[dict, ...] = ()
    notes: tuple[str, ...] = ()
    settings: tuple[Setting, ...] = ()  # each training-time setting, and how it is served
    capture_order: tuple[str, ...] | None = None  # capture-only mode: taps in fill order

    def to_json(self) -> dict:
        flags = self.resolution.flags if self.resolution else None
        adaptive = self.resolution.adaptive if self.resolution else None
        d = self.draft
        return {
            "target": {
                "path": self.target.path,
                "architecture": self.target.architecture,
                "num_layers": self.target.num_layers,
                "hidden_size": self.target.hidden_size,
            },
            "layout": list(self.capture.taps) if self.capture else None,
            "hf_hidden_states_indices": (
                [t.hf_index for t in parse_taps(self.capture.taps)] if self.capture else None
            ),
            "capture_indices": list(self.capture.capture_indices) if self.capture else None,
            "fc_block_order": list(self.capture.fc_block_order) if self.capture else None,
            "layout_source": self.capture.source if self.capture else None,
            "verifier": str(d.layout.verifier) if d and d.layout and d.layout.verifier else None,
            "draft": None
            if d is None
            else {
                "path": self.draft_src,
                "format": d.format,
                "served_from": self.converted_draft,
                "fc_in_features": d.fc_in_features,
                "num_aux": d.num_aux,
                "norm_before_fc": d.norm_before_fc,
                "fc_norm": d.fc_norm,
                "norm_output": d.norm_output,
                "norm_before_residual": d.norm_before_residual,
                "draft_vocab_size": d.draft_vocab_size,
                "target_vocab_size": d.target_vocab_size,
                "d2t": d.has_d2t,
                "t2d": d.has_t2d,
                "sliding_window": d.sliding_window,
            },
            "speculative": None
            if flags is None
            else {
                "num_steps": flags.num_steps,
                "eagle_topk": flags.eagle_topk,
                "num_draft_tokens": flags.num_draft_tokens,
                # only adaptive plans carry it: the steps above are where SGLang starts
                **({"adaptive": adaptive.to_json()} if adaptive else {}),
            },
            "settings": [st.to_json() for st in self.settings],
            "changes": list(self.changes),
            "notes": list(self.notes),
            "env": dict(self.env),
            "sglang_argv": list(self.sglang_argv),
            # only capture-only plans carry these (the other plans' JSON stays as it was)
            **(
                {"capture_only": True, "capture_order": list(self.capture_order)}
                if self.capture_order
                else {}
            ),
        }


def converted_dir(cache_dir: Path, draft_src: Path, layout: list[str]) -> Path:
    """A stable cache directory per source draft (path + config contents) and served layout:
    an --override-draft-layout launch gets its own copy, so it never rewrites the one another
    server of the same draft is loading."""
    digest = hashlib.sha256(str(draft_src.resolve()).encode())
    digest.update((draft_src / "config.json").read_bytes())
    digest.update(",".join(layout).encode())
    return cache_dir / f"{draft_src.resolve().name}-{digest.hexdigest()[:12]}"


def capture_plan_for(target: TargetInfo, spec: DraftSpec) -> CapturePlan:
    """The capture plan for a declared layout on this target, or a WiringError in the
    target's own terms (family not in the table, a family that cannot capture, a tap past
    the last index the family's loop reaches)."""
    family = check_family(target.family, target.architecture, path=target.path)
    where = f"{spec.layout_source} ({spec.config_path})"
    return plan_from_layout(spec.layout, where, final_layer=family.final_layer)


def layout_from_flag(value: str, target: TargetInfo) -> HiddenStateLayout:
    """--hidden-state-layout on this target; its mistakes name the flag, not a config."""
    try:
        return HiddenStateLayout(parse_taps(value), target.num_layers, target.hidden_size)
    except WiringError as err:
        example = ",".join(str(t) for t in example_layout(target.num_layers))
        raise WiringError(
            err.message,
            path=LAYOUT_FLAG,
            fix=err.fix or f"name taps of this {target.num_layers}-layer target, e.g. {example}",
        ) from None


def plan_launch(argv: list[str], opts: LaunchOptions) -> LaunchPlan:
    model = argv_get(argv, "--model-path")
    if not model:
        raise WiringError("no --model-path given", path="command line", fix="add --model-path DIR")
    target = read_target(model, refuse_draft=True)  # --model-path: the user's target
    if argv_has(argv, CAPTURE_FLAG):  # SGLang's capture-only mode: no draft, no speculation
        from sglang_eagle3.launch.capture_mode import plan_capture_only  # it imports this module

        return plan_capture_only(argv, opts, target)
    algo = (argv_get(argv, "--speculative-algorithm") or "").upper()
    if algo not in EAGLE_ALGOS:
        if opts.hidden_state_layout:
            raise WiringError(
                "--hidden-state-layout needs --speculative-algorithm EAGLE3",
                path="command line",
            )
        if opts.override_draft_layout:
            raise WiringError(
                "--override-draft-layout needs --speculative-algorithm EAGLE3",
                path="command line",
                fix="drop --override-draft-layout, or serve an EAGLE-3 drafter",
            )
        return LaunchPlan(
            target,
            None,
            None,
            None,
            None,
            None,
            tuple(argv),
            notes=("no EAGLE-3 speculation: SGLang runs as given",),
        )
    draft_src = argv_get(argv, DRAFT_PATH)
    if not draft_src:
        raise WiringError(
            f"EAGLE3 needs {DRAFT_PATH}",
            path="command line",
            fix=f"add {DRAFT_PATH} DIR (the EAGLE-3 drafter)",
        )
    if not Path(draft_src).is_dir():
        raise WiringError(
            "draft directory not found",
            path=draft_src,
            fix="download the drafter and pass its local directory",
        )
    if opts.override_draft_layout and not opts.hidden_state_layout:
        raise WiringError(
            "--override-draft-layout overrides nothing without --hidden-state-layout",
            path="command line",
            fix="add --hidden-state-layout TAPS (the taps the drafter was trained on)",
        )
    if opts.hidden_state_layout:  # its own mistakes name the flag, not the draft's config
        layout_from_flag(opts.hidden_state_layout, target)
    spec = read_draft(
        draft_src,
        num_layers=target.num_layers,
        target_hidden_size=target.hidden_size,
        convention=opts.aux_layer_convention,
        layout=opts.hidden_state_layout,
        family=target.family,
        override_layout=opts.override_draft_layout,
    )
    # the same refusals as the doctor's: weight files that are not whole, vocab maps that
    # do not fit the target (a dry run too: it must say what the real start would hit)
    prestart_check(draft_src, target.path)
    notes, changes, env = list(spec.notes), [], {}
    family = target.family
    if spec.layout is None:
        stock = (
            stock_capture(family, list(spec.raw_ids or []) or None, target.num_layers).describe()
            if family
            else f"apply {target.architecture}'s own rule, unknown to sglang-eagle3"
        )
        example = ",".join(str(t) for t in example_layout(target.num_layers))
        raise WiringError(
            f"the draft does not say which hidden states it was trained on; {stock}",
            path=spec.config_path,
            fix=f"pass --hidden-state-layout (e.g. {example} for this "
            f"{target.num_layers}-layer target) or add eagle_config.hidden_state_layout to the "
            "draft config",
        )
    capture = capture_plan_for(target, spec)
    tbo = argv_has(argv, "--enable-two-batch-overlap")
    stages = max(argv_int(argv, flag) or 1 for flag in PP_FLAGS)
    check_family(family, target.architecture, path=target.path, two_batch_overlap=tbo,
                 pipeline_stages=stages)  # fmt: skip
    env[LAYOUT_ENV] = ",".join(capture.taps)
    out = list(argv)
    converted = None
    if spec.format == "speculators":
        converted = str(converted_dir(check_cache_dir(opts.cache_dir), Path(draft_src),
                                      spec.layout.names()))  # fmt: skip
        out = argv_set(out, DRAFT_PATH, converted)
        changes.append(
            {
                "flag": DRAFT_PATH,
                "from": draft_src,
                "to": converted,
                "why": "SGLang cannot load speculators checkpoints; a flat copy is "
                "written there (weights linked, never modified in place)",
            }
        )
    if spec.sliding_window and not argv_has(argv, WINDOW):
        out = argv_set(out, WINDOW, str(spec.sliding_window))
        changes.append(
            {
                "flag": WINDOW,
                "from": None,
                "to": spec.sliding_window,
                "why": "not given; the draft was trained with this sliding window, "
                "which SGLang ignores in the draft config",
            }
        )
    window = argv_get(out, WINDOW)
    settings = draft_settings(
        spec,
        family=family,
        norm_fix=os.environ.get(env_names.NORM_BEFORE_RESIDUAL, "1") != "0",
        window_flag=int(window) if window and window.isdigit() else None,
    )
    refused = [st for st in settings if st.status == REFUSED]
    if refused:
        raise WiringError(
            "the server cannot serve what this draft was trained with: "
            + "; ".join(f"{st.name}={st.trained}: {st.served}" for st in refused),
            path=spec.config_path,
            fix="fix the draft checkpoint (nothing was started or written)",
        )
    resolution = resolve_spec_argv(argv, architecture=target.architecture)
    flag_argv = sglang_argv_flags(resolution)
    for flag, value in zip(flag_argv[::2], flag_argv[1::2], strict=True):
        out = argv_set(out, flag, value)
    changes += [c.to_dict() for c in resolution.changes]
    notes += list(resolution.notes)
    pd_note = pd_role_note(argv_get(argv, "--disaggregation-mode"),
                           argv_get(argv, "--disaggregation-bootstrap-port"))  # fmt: skip
    notes += [pd_note] if pd_note else []
    return LaunchPlan(
        target,
        spec,
        draft_src,
        converted,
        capture,
        resolution,
        tuple(out),
        env,
        tuple(changes),
        tuple(notes),
        tuple(settings),
    )
