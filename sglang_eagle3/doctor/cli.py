"""``python -m sglang_eagle3.doctor --draft DIR --data PATH [--target DIR] [--json] ...``

Replays an EAGLE-3 draft on its training data under several candidate hidden-state layouts
(declared, served, shifted, default ...) and says whether the layout that would be served is
the one the draft works with. Exit codes: 0 fine (or cannot tell), 1 the served layout scores
clearly below the best candidate (or would not start), or no layout beats the taps-zeroed
floor; 2 bad input (non-finite draft weights included).

"Clearly below": at least 5 points under the best candidate's step-1 top-1 accuracy, on the same
tokens, with a paired (McNemar) z of at least 4. Not a ratio: drafts trained with
``norm_before_residual`` (speculators' default) fall back on the token embedding when fed the
wrong taps, so a wrong layout keeps most of the accuracy a draft has without any taps (shown
as the "taps zeroed" floor row) and loses only what the taps add.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass

from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.checkpoint.prestart import prestart_check
from sglang_eagle3.doctor.candidates import (
    SERVED_BY,
    build_candidates,
    draft_layouts,
    resolve_stored_taps,
)
from sglang_eagle3.doctor.report import Report, make_report
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.families import Family
from sglang_eagle3.layout.taps import parse_taps

MIN_GAP = 0.05  # served at least 5 points of step-1 top-1 below the best candidate ...
MIN_Z = 4.0  # ... and that on the same tokens, beyond noise (paired McNemar z)


@dataclass(frozen=True)
class DoctorOptions:
    draft: str
    data: str
    target: str | None = None
    steps: int = 3
    max_tokens: int = 4096
    allow_pickle: bool = False
    device: str = "cpu"
    dtype: str = "auto"
    served_by: str = "plugin"
    data_taps: str | None = None
    num_layers: int | None = None
    search: bool = False
    progress: bool | None = None
    threads: int | None = None  # None: 1 for small drafts (hidden <= 1024), else torch's
    topk: int = 1  # --speculative-eagle-topk the server drafts with (> 1: a tree)
    draft_tokens: int | None = None  # --speculative-num-draft-tokens (None: steps + 1)

    @property
    def tree(self) -> tuple[int, int]:
        """(topk, draft tokens) as the server drafts: a chain of steps + 1 unless given."""
        return self.topk, self.draft_tokens or self.steps + 1

    def __post_init__(self) -> None:
        from sglang_eagle3.doctor.draft_tree import check_tree

        check_tree(self.steps, *self.tree)
        if self.threads is not None and self.threads < 1:
            raise WiringError(f"--threads must be >= 1, got {self.threads}")
        if not 1 <= self.steps <= 8:
            raise WiringError(f"--steps must be 1..8, got {self.steps}")
        if self.max_tokens < 1:
            raise WiringError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if self.served_by not in SERVED_BY:
            raise WiringError(f"--served-by must be one of {SERVED_BY}, got {self.served_by!r}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise WiringError(f"--dtype must be auto, float32, bfloat16 or float16: {self.dtype}")


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
    from sglang_eagle3.data.train_data import TrainData
    from sglang_eagle3.doctor.draft_forward import load_draft
    from sglang_eagle3.doctor.evaluate import evaluate
    from sglang_eagle3.doctor.target import VerifierHead, check_target, target_config

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
    if given is not None and len(given) != info.num_taps:
        raise WiringError(
            f"--data-taps names {len(given)} taps, the data stores {info.num_taps}",
            path=opts.data,
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
    cands = build_candidates(lay, stored, info.num_taps, n, search=opts.search)
    draft = load_draft(opts.draft, target_dir=opts.target, device=opts.device, dtype=opts.dtype)
    head = VerifierHead(opts.target, device=opts.device) if opts.target else None
    fp = fingerprint_taps(
        ((s.hidden_states, s.input_ids) for s in data), max_tokens=2048, embed=draft.embed
    )
    results = evaluate(
        draft,
        iter(data),
        cands,
        steps=opts.steps,
        max_tokens=opts.max_tokens,
        tree=opts.tree,
        head=head,
        progress=opts.progress,
    )
    check = None
    if opts.target and head is not None:
        check = check_target(opts.target, iter(data), head, stored=stored)
    report = make_report(
        opts_dict=opts.__dict__,
        info=info,
        num_layers=n,
        stored=stored,
        stored_source=stored_source,
        lay=lay,
        results=results,
        fingerprint=fp,
        target_check=check,
        steps=opts.steps,
        margins=(MIN_GAP, MIN_Z),
    )
    report.settings = _settings(lay.spec, family)
    if opts.topk > 1:
        report.notes.append(
            f"scored as SGLang drafts a tree: topk {opts.topk}, "
            f"{opts.tree[1]} draft tokens; p_d is depth d accepted "
            "given depth d-1, replay walks the tree's greedy verify"
        )
    return report


def target_family(target: str | None) -> Family | None:
    """The target's row in the family table, read from the top level of its config.json as
    the launcher and the plugin read it (a multimodal wrapper is its own row); None: not in
    the table. Without a target (or its architectures) the doctor speaks of the seed's
    family, DeepSeek (DeepSeek-V3, Kimi-K2.x)."""
    from sglang_eagle3.checkpoint.target_config import read_target_config
    from sglang_eagle3.layout.conventions import DEEPSEEK
    from sglang_eagle3.layout.families import family_for

    if target is None:
        return DEEPSEEK
    archs = read_target_config(target, ints=())[0].get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        return DEEPSEEK
    return family_for(archs[0])


def _settings(spec: DraftSpec | None, family: Family | None) -> list[dict]:
    """Each training-time setting, and whether the server honours it (as the launcher says);
    none when the draft's ids are ambiguous (the report's notes say so)."""
    from sglang_eagle3.checkpoint.draft_settings import draft_settings

    if spec is None:
        return []
    return [st.to_json() for st in draft_settings(spec, family=family)]


def parse_args(argv: list[str] | None) -> tuple[DoctorOptions, bool]:
    """(options, print JSON)."""
    p = argparse.ArgumentParser(
        prog="python -m sglang_eagle3.doctor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--draft", required=True, help="draft checkpoint directory")
    p.add_argument("--data", required=True, help="speculators data directory (or hs_*.safetensors)")
    p.add_argument("--target", help="target model directory (its head gives the true tokens)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--steps", type=int, default=3, help="chained draft steps to score (3)")
    p.add_argument("--max-tokens", type=int, default=4096, help="draft positions to score")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read .pt data with torch.load(weights_only=True): tensors and plain containers only",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto", help="auto (as stored), float32, bfloat16")
    p.add_argument("--served-by", default="plugin", choices=SERVED_BY)
    p.add_argument("--data-taps", help="taps the data stores, e.g. embed,layer:2,layer:5,layer:7")
    p.add_argument("--num-layers", type=int, help="the target's decoder layers (no --target)")
    p.add_argument("--search", action="store_true", help="also score every K-subset of taps")
    p.add_argument("--threads", type=int, help="torch threads (default: 1 for small drafts)")
    p.add_argument("--topk", type=int, default=1, help="the server's --speculative-eagle-topk")
    p.add_argument(
        "--draft-tokens", type=int, help="the server's --speculative-num-draft-tokens (steps + 1)"
    )
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    opts = DoctorOptions(
        draft=a.draft,
        data=a.data,
        target=a.target,
        steps=a.steps,
        max_tokens=a.max_tokens,
        allow_pickle=a.allow_pickle,
        device=a.device,
        dtype=a.dtype,
        served_by=a.served_by,
        data_taps=a.data_taps,
        num_layers=a.num_layers,
        topk=a.topk,
        draft_tokens=a.draft_tokens,
        search=a.search,
        progress=False if a.no_progress else None,
        threads=a.threads,
    )
    return opts, a.json


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    try:
        opts, as_json = parse_args(argv)
        report = run_doctor(opts)
    except WiringError as err:
        print(f"sglang_eagle3.doctor: {err}", file=sys.stderr)
        return 2
    seconds = round(time.monotonic() - start, 1)
    if as_json:
        print(json.dumps({**report.to_dict(), "wall_seconds": seconds}, indent=2))
    else:
        print(report.render())
        print(f"doctor wall time: {seconds} s")
    return report.exit_code
