"""The output directory of a capture: speculators 0.9's layout, filled one renamed file at a time,
so a killed run resumes where it stopped.

    OUT/hidden_states/hs_{i}.safetensors   sample i, complete: it arrived by rename
    OUT/.capture/run.json                  what the run captures; a resume must match it
    OUT/.capture/incoming/                 the capture servers' files, before their rename
    OUT/.capture/regenerated/{i}.json      --regenerate: sample i's conversation, as captured
    OUT/data-*.arrow, state.json, ...      the index, written once every sample is in
    OUT/sglang_eagle3_data.json            the manifest (data/manifest.py), written last

Sample i is the i-th sample of the input file (blank lines skipped), so ids are stable across
restarts; a request's rid names its run and sample, and a file a server finished after the
client died is adopted, not captured twice.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from sglang_eagle3.data.arrow import HS_DIR, META_NAME, write_rows
from sglang_eagle3.data.manifest import DataManifest, sidecar
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.capture_names import RID_PREFIX

STATE_DIR = ".capture"
HS_RE = re.compile(r"hs_(\d+)\.safetensors")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Store:
    def __init__(self, out: Path, run: dict, *, resume: bool) -> None:
        """Open ``out`` for this run: new and empty, or (``resume``) the same run's."""
        self.out, self.run = out, run
        self.run_id = hashlib.sha256(json.dumps(run, sort_keys=True).encode()).hexdigest()[:12]
        self.incoming = out / STATE_DIR / "incoming"
        self.regenerated = out / STATE_DIR / "regenerated"  # capture/regenerate.py
        run_file = out / STATE_DIR / "run.json"
        used = self.used(out)
        if used and not resume:
            self.refuse_used(out)
        if used:
            try:
                before = json.loads(run_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                raise WiringError("--resume: this directory was not written by a capture run",
                                  path=str(out), fix="give a new --out") from None  # fmt: skip
            changed = sorted(k for k in set(run) | set(before) if run.get(k) != before.get(k))
            if changed:
                raise WiringError(
                    f"--resume: this run differs from the one that wrote the directory in "
                    f"{', '.join(changed)} (was {[before.get(k) for k in changed]})",
                    path=str(run_file), fix="resume with the same arguments, or give a new --out",
                )  # fmt: skip
        (out / HS_DIR).mkdir(parents=True, exist_ok=True)
        self.incoming.mkdir(parents=True, exist_ok=True)
        if not used:
            tmp = run_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, run_file)

    @staticmethod
    def used(out: Path) -> bool:
        """Whether ``out`` holds anything but what a run that captured nothing leaves (its
        state folder, logs and empty folders): such a run is started again, not resumed."""
        if not out.is_dir():
            return False
        for p in out.iterdir():
            if p.name == HS_DIR and p.is_dir() and not any(p.iterdir()):
                continue
            state = [out / STATE_DIR / "incoming", out / STATE_DIR / "regenerated"]
            if (
                p.name == STATE_DIR
                and p.is_dir()
                and not any(f for d in state if d.is_dir() for f in d.iterdir())
            ):
                continue
            return True
        return False

    @staticmethod
    def refuse_used(out: Path) -> None:
        raise WiringError("the output directory is not empty", path=str(out),
                          fix="give a new --out, or --resume to continue the run that wrote "
                          "it")  # fmt: skip

    def rid(self, sid: int) -> str:
        return f"{RID_PREFIX}{self.run_id}-{sid}"

    def path(self, sid: int) -> Path:
        return self.out / HS_DIR / f"hs_{sid}.safetensors"

    def done(self, folders: Iterable[Path] = ()) -> set[int]:
        """Samples already in, after adopting the files servers finished for this run (in
        ``folders`` too: the capture folders of servers it did not launch)."""
        have = {int(m.group(1)) for p in (self.out / HS_DIR).iterdir()
                if (m := HS_RE.fullmatch(p.name))}  # fmt: skip
        prefix = f"{RID_PREFIX}{self.run_id}-"
        found = [p for d in {self.incoming, *folders} for p in d.glob(f"{prefix}*.safetensors")]
        for p in found:
            sid = p.name[len(prefix) : -len(".safetensors")]
            if sid.isdigit() and int(sid) not in have:
                self.adopt(p, int(sid))
                have.add(int(sid))
        return have

    def adopt(self, src: Path, sid: int) -> Path:
        """Move a server's finished file into place (a rename: whole or absent)."""
        dst = self.path(sid)
        try:
            os.replace(src, dst)
        except OSError as err:
            if err.errno != errno.EXDEV:
                raise
            tmp = dst.with_name(f".{dst.name}.tmp")  # another disk: copy, then rename
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
            src.unlink()
        return dst

    def finish(self, ids: list, masks: list, manifest: DataManifest) -> None:
        """The index and the manifest, once every sample's file is in."""
        write_rows(self.out, ids, masks)  # converts a record batch at a time
        side = self.out / META_NAME
        tmp = side.with_suffix(".tmp")
        tmp.write_text(json.dumps(sidecar(manifest), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, side)
        shutil.rmtree(self.incoming, ignore_errors=True)
