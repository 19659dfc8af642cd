"""`python -m sglang_eagle3.layout stamp --draft D --data DATA --out D2`: a copy of draft D whose
config declares the taps its training data holds, as the data's capture manifest records them.

D is copied whole to D2 (a new or empty directory; D is never written), then D2's config.json
gets the manifest's fc taps as the explicit ``eagle_config.hidden_state_layout`` (with the
data's ``verifier_tap``), the key every draft format's reader honours over ids. Id lists the
config already holds are rewritten to spell the same taps (the reader refuses ids that disagree
with an explicit layout). D2 is then read back with the launcher's own reader; unless it
resolves to exactly the manifest's fc taps it is removed. Bad input: one line, exit 2, nothing
written.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from sglang_eagle3.checkpoint.config_json import read_draft_config_json
from sglang_eagle3.checkpoint.draft_readers import read_draft
from sglang_eagle3.checkpoint.flat_draft import flat_ids
from sglang_eagle3.checkpoint.safetensors_header import read_checkpoint_tensors, safetensors_files
from sglang_eagle3.data.manifest import DataManifest, manifest_mismatch, read_manifest
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import Convention
from sglang_eagle3.layout.families import Family, family_for
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout
from sglang_eagle3.layout.taps import Tap, format_taps, parse_taps

PROG = "python -m sglang_eagle3.layout"
IDS = "eagle_aux_hidden_state_layer_ids"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Tools for a draft's hidden-state layout.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser(
        "stamp",
        prog=f"{PROG} stamp",
        help="copy a draft, declaring the taps its training data holds",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--draft", type=Path, required=True, help="the draft directory (read only)")
    s.add_argument("--data", type=Path, required=True,
                   help="its training data, with a capture manifest (python -m "
                   "sglang_eagle3.capture writes one)")  # fmt: skip
    s.add_argument("--out", type=Path, required=True, help="the stamped copy (new or empty)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        lines = stamp(args.draft, args.data, args.out)
    except WiringError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def stamp(draft: Path, data: Path, out: Path) -> list[str]:
    """Write the stamped copy; every check runs before the first byte is written. Returns
    what was done, for humans."""
    _check_paths(draft, data, out)
    manifest = read_manifest(data)
    if manifest is None:
        raise WiringError(
            "the data has no capture manifest (no 'manifest' key in its "
            "sglang_eagle3_data.json): nothing says which taps it holds",
            path=str(data),
            fix="stamp needs data captured by python -m sglang_eagle3.capture; for other data, "
            "add eagle_config.hidden_state_layout to the draft's config yourself, or pass "
            "--hidden-state-layout to python -m sglang_eagle3.launch",
        )
    fc = parse_taps(list(manifest.fc_taps))
    n, width = manifest.target.num_layers, manifest.target.hidden_size
    family = family_for(manifest.target.architecture)
    _check_verifier(draft, manifest, data)
    _check_fc_width(draft, fc, width, data)
    before = _declared(draft, manifest, family)
    try:  # the draft read with the data's taps: what the config says must not contradict
        # their count, the target's width or the weights (override: its own taps may differ)
        spec = read_draft(draft, num_layers=n, target_hidden_size=width, family=family,
                          layout=[str(t) for t in fc], override_layout=True)  # fmt: skip
    except WiringError as err:
        raise WiringError(
            f"the data's fc taps {format_taps(fc)} do not fit this draft: {err.message}",
            path=err.path or str(draft),
            fix="stamp the draft that was trained on this data",
        ) from None
    layout = HiddenStateLayout(fc, n, width, Tap.parse(manifest.verifier))
    cfg = stamped_config(read_draft_config_json(draft), spec.format, layout, family)
    existed = out.exists()  # an empty directory the user made: left as it was on failure
    try:
        _write(draft, out, cfg)
        after = _verified(out, manifest, family, draft=str(draft), data=str(data))
    except BaseException:  # Ctrl-C included: no half-written copy is left behind
        shutil.rmtree(out, ignore_errors=True)
        if existed:
            out.mkdir(exist_ok=True)
        raise
    return [
        f"stamped {out} (a copy of {draft}) with the taps of {data}'s manifest",
        f"  {draft} declared: {before}",
        f"  {out} declares: {after}",
        f"  serve it: python -m sglang_eagle3.launch ... --speculative-draft-model-path {out} "
        f"--training-data {data}",
    ]


def _check_verifier(draft: Path, manifest: DataManifest, data: Path) -> None:
    """A draft whose config names the target it was trained against (speculators'
    ``speculators_config.verifier``) as a local directory: that target must be the data's. A
    hub name cannot be read here; the launcher compares the data with the served target."""
    from sglang_eagle3.checkpoint.target_config import read_target
    from sglang_eagle3.data.manifest import target_mismatch

    cfg = read_draft_config_json(draft)
    verifier = (cfg.get("speculators_config") or {}).get("verifier") or {}
    where = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    if not isinstance(where, str) or not (Path(where) / "config.json").is_file():
        return
    try:
        target = read_target(where)
    except WiringError:
        return  # not a target config we read: nothing to compare
    err = target_mismatch(manifest, target.architecture, target.num_layers, target=where,
                          data=str(data))  # fmt: skip
    if err is not None:
        raise WiringError(
            f"the draft was trained against {where} (its speculators_config.verifier): "
            f"{err.message}",
            path=str(draft / "config.json"),
            fix="stamp the draft with data captured from the target it was trained against",
        )


def _check_paths(draft: Path, data: Path, out: Path) -> None:
    if not draft.is_dir():
        raise WiringError("draft directory not found", path=str(draft),
                          fix="pass the directory that holds the draft's config.json")  # fmt: skip
    if not data.exists():
        raise WiringError("data not found", path=str(data), fix="pass the training data directory")
    src, dst = draft.resolve(), out.resolve()
    if dst == src or src in dst.parents:  # copytree would write into D (or copy itself)
        raise WiringError("--out is the draft directory or inside it; stamp never writes there",
                          path=str(out), fix="pass a new directory next to the draft")  # fmt: skip
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise WiringError("--out exists and is not an empty directory", path=str(out),
                          fix="pass a new directory, or remove this one")  # fmt: skip


def _check_fc_width(draft: Path, fc: tuple[Tap, ...], width: int, data: Path) -> None:
    """fc.weight must take len(fc) taps of the data's width: the clearest refusal there is
    (the reader's own checks word it from the config's side)."""
    if safetensors_files(draft) is None:
        return  # a config-only draft: the reader checks what the config says
    shape = read_checkpoint_tensors(draft).get("fc.weight", (None, None))[1]
    if not shape or len(shape) != 2 or shape[1] == len(fc) * width:
        return  # no fc.weight or an odd shape: the reader names the problem
    taps = f"{shape[1] / width:g} taps" if shape[1] % width == 0 else "no whole number of taps"
    raise WiringError(
        f"the data has {len(fc)} fc taps ({format_taps(fc)}) of width {width} = "
        f"{len(fc) * width} input features, but the draft's fc.weight takes {shape[1]} "
        f"({taps} of {width})",
        path=str(draft),
        fix=f"stamp the draft that was trained on {data}, or capture data with the draft's taps",
    )


def _declared(draft: Path, manifest: DataManifest, family: Family | None) -> str:
    """What the draft says on its own, for the report (its ids may be ambiguous)."""
    t = manifest.target
    try:
        spec = read_draft(draft, num_layers=t.num_layers, target_hidden_size=t.hidden_size,
                          family=family)  # fmt: skip
    except WiringError as err:
        return f"no layout it can be served with ({err.message})"
    if spec.layout is None:
        return f"no layout ({spec.layout_source})"
    return f"{format_taps(spec.layout.taps)} ({spec.layout_source})"


def stamped_config(
    cfg: dict[str, Any], fmt: str, layout: HiddenStateLayout, family: Family | None
) -> dict[str, Any]:
    """``cfg`` with ``layout`` as its explicit layout and every id list it holds rewritten to
    spell the same taps; nothing else changes."""
    out = copy.deepcopy(cfg)
    keys: dict[str, Any] = {"hidden_state_layout": layout.names()}
    if layout.verifier is not None:
        keys["verifier_tap"] = str(layout.verifier)
    eagle = out.get("eagle_config")
    eagle = dict(eagle) if isinstance(eagle, dict) else {}
    eagle.update(keys)
    if IDS in eagle:
        eagle[IDS] = _flat_ids(layout, family)
    out["eagle_config"] = eagle
    if fmt == "speculators":
        if "hidden_state_layout" in out:  # speculators' top-level layout wins over eagle_config
            out.update(keys)
        if IDS in out:  # speculators' ids are always input-to-layer
            out[IDS] = list(layout.ids(Convention.INPUT_TO_LAYER))
    elif IDS in out:  # the MLA drafter counts its fc taps from top-level ids too
        out[IDS] = _flat_ids(layout, family)
    return out


def _flat_ids(layout: HiddenStateLayout, family: Family | None) -> list[int]:
    """Ids stock SGLang turns into these taps on the data's target family (the launcher's flat
    copy writes the same), where they also spell the layout in one convention; else
    input-to-layer ids (the plugin reads the layout key)."""
    ids = flat_ids(layout, family, stock_readable=False)
    spellings = [list(layout.ids(c)) for c in (Convention.INPUT_TO_LAYER,
                                                Convention.OUTPUT_OF_LAYER)]  # fmt: skip
    return ids if ids in spellings else spellings[0]


def _write(draft: Path, out: Path, cfg: dict[str, Any]) -> None:
    """D copied to D2 (plain copies, links followed: D may be edited later), then D2's config
    replaced."""
    shutil.copytree(draft, out, dirs_exist_ok=out.exists())
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")


def _verified(
    out: Path, manifest: DataManifest, family: Family | None, *, draft: str, data: str
) -> str:
    """D2 resolved by the launcher's reader, which must give the manifest's fc taps (the
    caller removes D2 otherwise)."""
    t = manifest.target
    fix = "report this: stamp wrote a config its own reader reads otherwise (copy removed)"
    try:
        spec = read_draft(out, num_layers=t.num_layers, target_hidden_size=t.hidden_size,
                          family=family)  # fmt: skip
    except WiringError as err:
        raise WiringError(f"the stamped copy does not read back: {err.message}", path=str(out),
                          fix=fix) from None  # fmt: skip
    taps = spec.layout.taps if spec.layout is not None else ()
    err = manifest_mismatch(manifest, taps, draft=draft, data=data)
    if err is not None:
        raise WiringError(f"the stamped copy does not resolve to the data's taps: {err.message}",
                          path=str(out), fix=fix)  # fmt: skip
    return f"{format_taps(taps)} ({spec.layout_source})"
