"""The doctor's run: read the evidence, score every candidate layout, make the report.

The evidence is the drafter's training data (``--data``), or hidden states the doctor takes
itself from the target's greedy continuation of prompts: in process (``--target``, Hugging
Face transformers) or from a live SGLang in capture mode (``--server``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.checkpoint.prestart import prestart_check
from sglang_eagle3.doctor.candidates import (
    DraftLayouts,
    build_candidates,
    draft_layouts,
    eagle_config_ids,
    resolve_stored_taps,
)
from sglang_eagle3.doctor.options import DoctorOptions
from sglang_eagle3.doctor.report import Report, make_report
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.families import Family
from sglang_eagle3.layout.taps import Tap, parse_taps

MIN_GAP = 0.05  # served at least 5 points of step-1 top-1 below the best candidate ...
MIN_Z = 4.0  # ... and that on the same tokens, beyond noise (paired McNemar z)


def _num_layers(opts: DoctorOptions, data_layers: int | None, target_cfg: dict | None) -> int:
    found = {
        "--target config.json num_hidden_layers": target_cfg and target_cfg["num_hidden_layers"],
        "data metadata num_layers": data_layers,
        "--num-layers": opts.num_layers,
    }
    values = {k: v for k, v in found.items() if v}
    if len(set(values.values())) > 1:
        raise WiringError(
            "the target's layer count disagrees: "
            + ", ".join(f"{k} = {v}" for k, v in values.items()),
            fix="use data generated from this target",
        )
    if not values:
        raise WiringError(
            "the target's number of decoder layers is unknown",
            fix="pass --target DIR or --num-layers N",
        )
    return next(iter(values.values()))


def run_doctor(opts: DoctorOptions) -> Report:
    """Everything but printing. Raises WiringError on bad input."""
    import torch

    from sglang_eagle3.checkpoint.draft_config import load_draft_config

    before = torch.get_num_threads()
    threads = opts.threads
    if threads is None and load_draft_config(opts.draft).hidden_size <= 1024:
        # tiny matrices: one thread is as fast alone and far faster on a shared machine
        threads = 1
    torch.set_num_threads(threads or before)
    try:
        return _run(opts)
    finally:
        torch.set_num_threads(before)


def _run(opts: DoctorOptions) -> Report:
    from sglang_eagle3.data.tap_fingerprint import fingerprint_taps
    from sglang_eagle3.doctor.draft_forward import load_draft
    from sglang_eagle3.doctor.evaluate import evaluate
    from sglang_eagle3.doctor.target import VerifierHead, check_target

    if opts.data_free:
        from sglang_eagle3.doctor.run_data_free import captured_evidence

        ev = captured_evidence(opts)
    else:
        ev = training_evidence(opts)
    data, info, n, lay, family = ev.data, ev.data.info, ev.num_layers, ev.lay, ev.family
    draft = load_draft(opts.draft, target_dir=opts.target, device=opts.device, dtype=opts.dtype)
    # captured data's truth is its own greedy continuation: the target's head adds nothing
    head = VerifierHead(opts.target, device=opts.device) if opts.target and ev.uses_head else None
    fp = fingerprint_taps(_checked(data, draft.embed.vocab_size), max_tokens=2048,
                          embed=draft.embed)  # fmt: skip
    results = evaluate(
        draft,
        iter(data),
        ev.candidates,
        steps=opts.steps,
        max_tokens=opts.max_tokens,
        tree=opts.tree,
        head=head,
        progress=opts.progress,
    )
    check = None
    if opts.target and head is not None:
        check = check_target(opts.target, iter(data), head, stored=ev.stored)
    search = None
    if opts.search:
        from sglang_eagle3.doctor.search_winner import search_winner

        search = search_winner(results)
    report = make_report(
        opts_dict=opts.__dict__,
        info=info,
        num_layers=n,
        stored=ev.stored,
        stored_source=ev.stored_source,
        lay=lay,
        results=results,
        fingerprint=fp,
        target_check=check,
        steps=opts.steps,
        margins=(MIN_GAP, MIN_Z),
        search=search,
    )
    report.search = search
    report.settings = _settings(lay.spec, family)
    report.source = ev.source
    _say_when_cut_short(report)
    if opts.topk > 1:
        report.notes.append(
            f"scored as SGLang drafts a tree: topk {opts.topk}, "
            f"{opts.tree[1]} draft tokens; p_d is depth d accepted "
            "given depth d-1, replay walks the tree's greedy verify"
        )
    return report


def _checked(data, vocab_size: int):
    """(hidden states, ids) of each sample, its ids checked against the vocabulary first, so
    a bad id names the data file (the embedding's own check names the draft's weights)."""
    from sglang_eagle3.doctor.evaluate import check_ids

    for s in data:
        check_ids(s, vocab_size)
        yield s.hidden_states, s.input_ids


def _say_when_cut_short(report) -> None:
    """A run --server-time-limit stopped early gives its verdict on part of the prompts: the
    note, the reason line and the JSON say so (it once read a plain OK on 1 of 18 prompts)."""
    cut = [n for n in report.source.get("notes", []) if "--server-time-limit" in n]
    report.source["cut_short"] = bool(cut)
    if not cut:
        return
    report.notes += cut
    report.reason += (
        f" (on {report.source.get('prompts')} prompts, {report.source.get('scored_tokens')} "
        "tokens only: --server-time-limit cut the run short; raise it to score every prompt)"
    )


@dataclass(frozen=True)
class Evidence:
    """What the scoring needs, whichever source gave it."""

    data: Any  # TrainData or target_capture.CapturedData: .info and samples when iterated
    num_layers: int
    lay: DraftLayouts
    family: Family | None
    stored: tuple[Tap, ...] | None
    stored_source: str
    candidates: list
    source: dict
    uses_head: bool  # truth from the target's head on the verifier tap (else the samples')


def training_evidence(opts: DoctorOptions) -> Evidence:
    from sglang_eagle3.data.train_data import TrainData
    from sglang_eagle3.doctor.target import target_config

    data = TrainData(opts.data, allow_pickle=opts.allow_pickle)
    info = data.info
    target_cfg = target_config(opts.target) if opts.target else None
    if target_cfg is not None and target_cfg["hidden_size"] != info.hidden_size:
        raise WiringError(
            f"the data's hidden states are {info.hidden_size} wide, the target's hidden size "
            f"is {target_cfg['hidden_size']}",
            path=opts.data,
            fix="use data generated from this target",
        )
    n = _num_layers(opts, info.num_layers, target_cfg)
    family = target_family(opts.target)
    lay = draft_layouts(
        opts.draft,
        num_layers=n,
        target_hidden_size=info.hidden_size,
        served_by=opts.served_by,
        family=family,
    )
    lay = _manifest_check(opts, lay, n)
    # the launcher's own pre-start refusals, with its messages, before any weight is loaded
    prestart_check(opts.draft, opts.target)
    if info.num_taps < lay.num_aux:
        raise WiringError(
            f"the data stores {info.num_taps} taps per token but the draft's fc takes "
            f"{lay.num_aux} (plus the verifier tap speculators stores last)",
            path=opts.data,
            fix="generate data with the draft's taps and the final layer",
        )
    given = parse_taps(opts.data_taps, path="--data-taps") if opts.data_taps else None
    if given is not None and len(set(given)) != len(given):
        twice = sorted({str(t) for t in given if given.count(t) > 1})
        raise WiringError(
            f"--data-taps names {', '.join(twice)} more than once: each stored tap is one "
            "hidden state",
            path="--data-taps",
            fix="name each stored tap once, in the order the data stores them",
        )
    if given is not None and len(given) != info.num_taps:
        raise WiringError(
            f"--data-taps names {len(given)} taps, the data stores {info.num_taps}",
            path=opts.data,
            fix=f"name the data's {info.num_taps} stored taps, in the order it stores them",
        )
    for tap in given or info.taps or ():
        if not tap.exists_in(n):
            raise WiringError(
                f"the data says it stores {tap}, which a {n}-layer target does not have",
                path="--data-taps" if given else info.taps_source,
                fix="name the taps of the target the data was generated from",
            )
    stored, stored_source = resolve_stored_taps(given or info.taps, info.num_taps, lay, n)
    if given is not None:
        stored_source = "--data-taps"
    extra = ()
    if opts.search:
        from sglang_eagle3.doctor.data_free import plausible_layouts

        extra = plausible_layouts(eagle_config_ids(Path(opts.draft))[0], lay.num_aux, n)
    cands = build_candidates(lay, stored, info.num_taps, n, search=opts.search, extra=extra)
    source = {"kind": "training data", "path": opts.data, "text": f"training data {opts.data}"}
    return Evidence(data, n, lay, family, stored, stored_source, cands, source, uses_head=True)


def _manifest_check(opts: DoctorOptions, lay: DraftLayouts, n: int) -> DraftLayouts:
    """The draft's declared layout against the data's capture manifest: a mismatch is refused
    as the launcher refuses it, unless --search asked to score other layouts anyway (a note).
    So is data captured from another target than --target, as the launcher refuses it."""
    from sglang_eagle3.data.manifest import manifest_mismatch, read_manifest, target_mismatch

    data = str(opts.data)  # training evidence: --data is given
    manifest = read_manifest(data)
    if manifest is None:
        return lay  # data without a manifest (SpecForge's, speculators'): read as before
    arch = target_architecture(opts.target) if opts.target else None
    if arch is not None and (err := target_mismatch(manifest, arch, n, target=opts.target,
                                                    data=data)):  # fmt: skip
        raise err
    if lay.declared is None:  # ids without a convention: each reading is scored
        fc = ", ".join(manifest.fc_taps)
        note = (f"the data's manifest says its fc taps are {fc}; the draft declares none "
                "(python -m sglang_eagle3.layout stamp writes them into a copy)")  # fmt: skip
        return replace(lay, notes=(*lay.notes, note))
    err = manifest_mismatch(manifest, lay.declared, draft=opts.draft, data=data)
    if err is None:
        return lay
    if not opts.search:
        raise err
    note = f"scored anyway (--search): {err.message}. Fix: {err.fix}"
    return replace(lay, notes=(*lay.notes, note))


def target_family(target: str | None) -> Family | None:
    """The target's row in the family table, read from the top level of its config.json as
    the launcher and the plugin read it (a multimodal wrapper is its own row); None: not in
    the table. Without a target (or its architectures) the doctor speaks of the seed's
    family, DeepSeek (DeepSeek-V3, Kimi-K2.x)."""
    from sglang_eagle3.layout.conventions import DEEPSEEK
    from sglang_eagle3.layout.families import family_for

    if target is None:
        return DEEPSEEK
    arch = target_architecture(target)
    return DEEPSEEK if arch is None else family_for(arch)


def target_architecture(target: str) -> str | None:
    """config.json's architectures[0] of a target (the top level: a multimodal wrapper is its
    own architecture); None when it names none."""
    from sglang_eagle3.checkpoint.target_config import read_target_config

    archs = read_target_config(target, ints=())[0].get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        return None
    return archs[0]


def _settings(spec: DraftSpec | None, family: Family | None) -> list[dict]:
    """Each training-time setting, and whether the server honours it (as the launcher says);
    none when the draft's ids are ambiguous (the report's notes say so)."""
    from sglang_eagle3.checkpoint.draft_settings import draft_settings

    if spec is None:
        return []
    return [st.to_json() for st in draft_settings(spec, family=family)]
