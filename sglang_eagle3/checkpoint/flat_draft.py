"""Write an SGLang-loadable flat draft next to a speculators draft, never touching the source.

SGLang 0.5.23 cannot read speculators' nested config (``transformer_layer_config``, top-level
ids): it silently falls back to its default taps. The flat copy spells everything where SGLang
looks, plus the explicit ``hidden_state_layout`` this project's plugin reads. Weights are
symlinked (copied where links fail): SGLang loads speculators' tensor names as they are.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sglang_eagle3 import __version__
from sglang_eagle3.checkpoint.draft_schema import FLAT_ARCH
from sglang_eagle3.checkpoint.draft_spec import DraftSpec
from sglang_eagle3.checkpoint.safetensors_header import INDEX_NAME, read_index, safetensors_files
from sglang_eagle3.errors import WiringError
from sglang_eagle3.layout.conventions import DEEPSEEK, Convention
from sglang_eagle3.layout.families import Family
from sglang_eagle3.layout.hidden_state_layout import HiddenStateLayout

MARKER = "sglang_eagle3_conversion.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "generation_config.json",
)


def flat_ids(
    layout: HiddenStateLayout, family: Family | None, *, stock_readable: bool
) -> list[int]:
    """The ids for the flat copy's eagle_config: those the target family's stock rule turns
    into exactly the layout's captures, so SGLang without the plugin gets the right taps.
    Where the rule cannot say it, input-to-layer ids for the plugin (which reads the
    explicit layout key), or, with ``stock_readable``, a WiringError saying why."""
    if family is not None and layout.is_ascending():
        ids = family.stock_ids(layout.capture_indices(), layout.num_layers)
        if ids is not None:
            return list(ids)
    if stock_readable:
        why = (
            "it packs taps in ascending order"
            if family is not None and not layout.is_ascending()
            else f"its rule ({family.rule}) has no ids for these captures"
            if family is not None
            else "the target's family is not in sglang-eagle3's table"
        )
        name = family.label if family else "this target"
        raise WiringError(
            f"stock SGLang 0.5.23 on {name} cannot capture {layout} from eagle_config ids: {why}",
            fix="add --for-plugin to write the copy for SGLang with the sglang-eagle3 plugin (or "
            "its patches), which reads eagle_config.hidden_state_layout",
        )
    return list(layout.ids(Convention.INPUT_TO_LAYER))


def flat_config(cfg: dict[str, Any], spec: DraftSpec, ids: list[int]) -> dict[str, Any]:
    """The flat config for a speculators ``cfg`` already checked into ``spec``."""
    if spec.layout is None:
        raise WiringError("the draft has no resolved layout", path=spec.config_path)
    out = dict(cfg["transformer_layer_config"])
    layout = spec.layout
    eagle: dict[str, Any] = {
        # ids the target's stock rule reads right (flat_ids); the plugin reads the layout key
        "eagle_aux_hidden_state_layer_ids": ids,
        "hidden_state_layout": layout.names(),
        "use_aux_hidden_state": True,
    }
    if layout.verifier is not None:
        eagle["verifier_tap"] = str(layout.verifier)
    out.update(
        architectures=[FLAT_ARCH],
        model_type="llama",
        draft_vocab_size=spec.draft_vocab_size or out.get("vocab_size"),
        target_hidden_size=spec.target_hidden_size,
        norm_before_fc=spec.norm_before_fc,
        fc_norm=spec.fc_norm,
        norm_output=spec.norm_output,
        norm_before_residual=spec.norm_before_residual,
        embed_requires_grad=spec.embed_requires_grad,
        eagle_config=eagle,
        num_aux_hidden_states=len(layout.taps),
    )
    # transformers 5 writes rope_parameters; older readers (and SGLang's llama code) want
    # rope_theta / rope_scaling at top level
    rope = out.get("rope_parameters")
    if isinstance(rope, dict):
        if "rope_theta" not in out and "rope_theta" in rope:
            out["rope_theta"] = rope["rope_theta"]
        if "rope_scaling" not in out and rope.get("rope_type", "default") != "default":
            out["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    for key in ("dtype", "torch_dtype"):
        if key in cfg and key not in out:
            out[key] = cfg[key]
    if "dtype" in out and "torch_dtype" not in out:
        out["torch_dtype"] = out["dtype"]
    return out


def write_flat_draft(
    spec: DraftSpec,
    src_dir: str | Path,
    dst_dir: str | Path,
    *,
    family: Family | None = DEEPSEEK,
    stock_readable: bool = False,
) -> Path:
    """Write the flat draft for ``spec`` (read from ``src_dir``) into ``dst_dir``, with ids
    for the target ``family``'s stock rule (``flat_ids``).

    ``dst_dir`` must not exist, be empty, or hold an earlier conversion of the same source
    (then it is replaced). Everything is checked before anything is written, and the result
    appears atomically (written to a temporary sibling, then renamed)."""
    src = Path(src_dir).resolve()
    dst = Path(dst_dir).absolute()
    cfg_path = src / "config.json"
    layout = _check_convertible(spec, src, dst)
    ids = flat_ids(layout, family, stock_readable=stock_readable)
    raw = _read_bytes(cfg_path)
    try:
        cfg = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WiringError(f"config is not valid JSON ({err})", path=str(cfg_path)) from None
    files = {
        "config.json": flat_config(cfg, spec, ids),
        MARKER: {  # written last: a marker means a complete conversion
            "tool": "sglang_eagle3",
            "version": __version__,
            "source": str(src),
            "source_config_sha256": hashlib.sha256(raw).hexdigest(),
            "hidden_state_layout": layout.names(),
        },
    }
    weights = _weight_files(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dst):  # concurrent launches of one draft: one writes, the others reuse it
        names = {*files, *(f.name for f in weights)}
        names |= {n for n in TOKENIZER_FILES if (src / n).is_file()}
        if _same_conversion(dst, files, names):
            return dst
        replace = _check_destination(dst, src)
        tmp = dst.parent / f".{dst.name}.tmp-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        try:
            _fill(tmp, src, files, weights)
            if replace:
                shutil.rmtree(dst)
            elif dst.exists():
                dst.rmdir()  # empty, checked above
            tmp.rename(dst)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dst


@contextlib.contextmanager
def _locked(dst: Path) -> Iterator[None]:
    with open(dst.parent / f".{dst.name}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _same_conversion(dst: Path, files: dict[str, dict[str, Any]], names: set[str]) -> bool:
    """Whether ``dst`` already holds exactly this conversion, file for file (written by a
    launch that held the lock first): then there is nothing to write."""
    try:
        if {p.name for p in dst.iterdir()} != names:
            return False
        return all(json.loads((dst / name).read_text(encoding="utf-8")) == json.loads(
            json.dumps(data)) for name, data in files.items())  # fmt: skip
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False


def check_cache_dir(path: Path, *, flag: str = "--draft-cache-dir") -> Path:
    """``path`` if the launcher can create flat copies in it, or a WiringError naming ``flag``:
    checked before anything starts, in a dry run too, and without creating anything (a probe
    file in the nearest existing folder is removed at once)."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(f"{probe} is a file")
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".sglang-eagle3-write-test-"):
            pass
    except OSError as err:
        raise WiringError(
            f"{path} cannot hold converted drafts ({err.strerror or err})",
            path=flag,
            fix=f"give {flag} a writable folder",
        ) from None
    return path


def _check_convertible(spec: DraftSpec, src: Path, dst: Path) -> HiddenStateLayout:
    """The layout to write, once ``spec`` is a speculators draft read from ``src`` and ``dst``
    lies outside it."""
    if spec.format != "speculators":
        raise WiringError(
            f"only speculators drafts need converting; this one is {spec.format}",
            path=spec.config_path,
            fix="serve it as it is",
        )
    if Path(spec.config_path).resolve() != src / "config.json":
        raise WiringError(f"the spec was read from {spec.config_path}, not from {src}")
    if spec.layout is None:
        raise WiringError("the draft has no resolved layout", path=spec.config_path)
    if dst.resolve() == src or src in dst.resolve().parents:
        raise WiringError(
            "the output directory is the source or inside it",
            path=str(dst),
            fix="write the flat draft to a new directory outside the source",
        )
    return spec.layout


def _fill(tmp: Path, src: Path, files: dict[str, dict[str, Any]], weights: list[Path]) -> None:
    """config.json, the weights (linked), the tokenizer files, then the marker, into ``tmp``."""
    _write_json(tmp / "config.json", files["config.json"])
    for f in weights:
        _link_or_copy(f, tmp / f.name)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, tmp / name)
    _write_json(tmp / MARKER, files[MARKER])


def flat_copy_for_target(
    draft_dir: str | Path, target_dir: str | Path, dst_dir: str | Path
) -> Path:
    """Read a speculators draft against its target and write its flat copy, as the launcher
    does before SGLang starts."""
    from sglang_eagle3.checkpoint.draft_readers import read_draft
    from sglang_eagle3.checkpoint.target_config import read_target

    t = read_target(target_dir)
    spec = read_draft(
        draft_dir, num_layers=t.num_layers, target_hidden_size=t.hidden_size, family=t.family
    )
    return write_flat_draft(spec, draft_dir, dst_dir, family=t.family)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise WiringError(f"cannot read config ({err.strerror or err})", path=str(path)) from None


def _weight_files(src: Path) -> list[Path]:
    files = safetensors_files(src)
    if files is None:
        raise WiringError("no .safetensors weights to link", path=str(src))
    if files[0].name == INDEX_NAME:
        shards = sorted(set(read_index(files[0]).values()))
        missing = [s for s in shards if not (src / s).is_file()]
        if missing:
            raise WiringError(f"index names missing shards {missing}", path=str(files[0]))
        return files + [src / s for s in shards]
    return files


def _check_destination(dst: Path, src: Path) -> bool:
    """True when ``dst`` holds an earlier conversion of ``src`` (to be replaced)."""
    if not dst.exists() and not dst.is_symlink():
        return False
    if not dst.is_dir() or dst.is_symlink():
        raise WiringError("output path exists and is not a directory", path=str(dst))
    if not any(dst.iterdir()):
        return False
    try:
        previous = json.loads((dst / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        previous = None
    if isinstance(previous, dict) and previous.get("source") == str(src):
        return True
    raise WiringError(
        "output directory is not empty and is not an earlier conversion of this draft",
        path=str(dst),
        fix="choose a new directory (nothing was written)",
    )


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.symlink(source, target)
    except OSError:  # e.g. filesystems without symlinks
        shutil.copy2(source, target)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
