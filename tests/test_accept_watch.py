"""The accept-length watch: its window logic, and the launcher's checks of the expectation
(exit 2 with one message before SGLang loads). The live warning and the metrics are checked on
real servers in test_served_lifecycle.py."""

from __future__ import annotations

import json

import pytest
from conftest_helpers_layout import flat_config, make_flat_draft, write_json
from test_launch import run_launch

from sglang_eagle3 import env_names
from sglang_eagle3.errors import WiringError
from sglang_eagle3.hooks.accept_watch import AcceptWindow, WatchSettings, watch_settings


def test_one_judgement_per_full_window_and_a_warning_only_below_the_fraction():
    w = AcceptWindow(WatchSettings(3.0, "doctor.json", 0.8, 100, "python -m doctor X"))
    assert w.feed(60, 30) is None and w.last is None  # not full yet
    low = w.feed(60, 30)  # 120 tokens in 60 verifies: 2.0 < 0.8 * 3.0
    assert low and "served accept length 2.00 over the last 120 verified tokens" in low
    assert "0.8 x the expected 3.00 (from doctor.json)" in low and "python -m doctor X" in low
    assert w.feed(99, 10) is None and w.warnings == 1  # a new window starts empty
    assert w.feed(30, 60) is not None and w.warnings == 2  # 129 tokens in 70 verifies
    assert w.feed(250, 100) is None and w.last == 2.5  # 2.5 >= 2.4: within the expectation


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"expected": 1.0}, "is not above 1"),
        ({"expected": float("nan")}, "is not above 1"),
        ({"fraction": 1.0}, "--accept-watch-fraction 1.0 is not between 0 and 1"),
        ({"window": 0}, "--accept-watch-window 0 is not a positive number"),
    ],
)
def test_settings_are_refused_with_one_message(kwargs, message):
    with pytest.raises(WiringError, match=message):
        WatchSettings(**{"expected": 2.0, "source": "x", **kwargs})


def test_the_environment_round_trips_and_a_foreign_value_is_named():
    s = WatchSettings(2.5, "tune.json", 0.7, 500, "doctor")
    assert watch_settings(s.to_env()) == s and watch_settings({}) is None
    with pytest.raises(WiringError, match=env_names.ACCEPT_WATCH):
        watch_settings({env_names.ACCEPT_WATCH: '{"expected": 2}'})


@pytest.fixture
def launch_args(tmp_path):
    target = write_json(tmp_path / "t" / "config.json", {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 8, "hidden_size": 16,
    }).parent  # fmt: skip
    draft = make_flat_draft(tmp_path / "d", flat_config(hidden=16, ids=[-1, 2, 5]), fc_in=48)
    return ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft)]  # fmt: skip


@pytest.mark.parametrize(
    "case,extra,message",
    [
        ("at most 1", ["--expected-accept-length", "0.9"], "0.9 is not above 1"),
        ("no speculation", ["--expected-accept-length", "2"], "needs a speculative EAGLE-3"),
        ("unreadable", ["--expected-accept-length", "missing.json"],
         "--expected-accept-length 'missing.json' is neither a number, nor JSON, nor an existing "
         "file"),
        ("no value", ["--expected-accept-length", "{}"], "no accept length in it"),
        ("other steps", ["--expected-accept-length", '{"replay_accept_length": 2.2, '
                         '"steps": 5}'], "the expectation is for steps=5, but this server runs "
                         "steps=3"),
        ("fraction", ["--expected-accept-length", "2", "--accept-watch-fraction", "0"],
         "not between 0 and 1"),
    ],
)  # fmt: skip
def test_a_bad_expectation_exits_2_before_sglang(tmp_path, launch_args, case, extra, message):
    if extra[1].startswith("{"):
        extra[1] = str(write_json(tmp_path / "doctor.json", json.loads(extra[1])))
    args = launch_args[:2] if case == "no speculation" else launch_args
    out = run_launch([*args, *extra, "--dry-run"], tmp_path)
    assert out.returncode == 2, (case, out.stdout, out.stderr)
    err = [line for line in out.stderr.splitlines() if line.strip()]
    assert err[0].startswith("python -m sglang_eagle3.launch: error:") and message in err[0], err
    assert "SGLANG_IMPORTED" not in out.stderr


def test_a_doctor_json_sets_the_watch_for_the_plugin(tmp_path, launch_args):
    said = {"predicted_accept_length": 2.31, "replay_accept_length": 2.27, "steps": 3}
    doctor = write_json(tmp_path / "doctor.json", said)
    out = run_launch(
        [*launch_args, "--expected-accept-length", str(doctor), "--json", "--dry-run"], tmp_path
    )
    assert out.returncode == 0, out.stderr
    env = json.loads(json.loads(out.stdout)["env"][env_names.ACCEPT_WATCH])
    assert env["expected"] == 2.27 and env["source"] == str(doctor)  # the replay, first
    assert env["fraction"] == 0.8 and env["window"] == 2000
    assert env["doctor"].startswith("python -m sglang_eagle3.doctor --draft ")


# (extra flags, what the one line must say); the server drafts 3 steps (DeepSeek's default)
EXPECTATIONS = [
    (["--expected-accept-length", "9", "--speculative-num-steps", "3"],
     "--expected-accept-length 9 is more than a verify can yield with --speculative-num-steps "
     "3: at most steps + 1 = 4"),
    (["--expected-accept-length", "2.5", "--speculative-num-steps", "1"], "steps + 1 = 2"),
    (["--expected-accept-length", "doctor.json"], "doctor.json: its accept length 4.5 is more "
     "than a verify can yield with --speculative-num-steps 3"),
    (["--expected-accept-length", '{"expected_accept_length": 7}'], "its accept length 7 is more"),
    (["--expected-accept-length", "abc"],
     "--expected-accept-length 'abc' is neither a number, nor JSON, nor an existing file"),
    (["--expected-accept-length", ""], "'' is neither a number"),
    (["--expected-accept-length", "{bad"], "'{bad' is not valid JSON"),
    (["--expected-accept-length", "inf"], "--expected-accept-length inf is not a finite number"),
    (["--expected-accept-length", "nan"], "--expected-accept-length nan is not a finite number"),
    (["--expected-accept-length", '{"replay_accept_length": true}'], "true is not a number"),
    (["--expected-accept-length", '{"replay_accept_length": 2, "steps": "3"}'],
     'its steps "3" is not a whole number'),
    # the watch's own options, refused with or without an expectation (nan passes no check)
    (["--accept-watch-fraction", "nan"], "--accept-watch-fraction nan is not between 0 and 1"),
    (["--accept-watch-fraction", "inf", "--expected-accept-length", "2"], "inf is not between"),
    (["--accept-watch-fraction", "-0.5"], "-0.5 is not between 0 and 1"),
    (["--accept-watch-window", "0"], "--accept-watch-window 0 is not a positive number"),
    (["--accept-watch-window", "x"], "argument --accept-watch-window: invalid int value: 'x'"),
]  # fmt: skip


def test_an_expectation_no_verify_can_meet_is_one_line_and_exit_2(
    tmp_path, launch_args, monkeypatch, capsys
):
    from sglang_eagle3.launch.cli import main

    write_json(tmp_path / "doctor.json", {"replay_accept_length": 4.5, "steps": 3})
    monkeypatch.chdir(tmp_path)
    for extra, message in EXPECTATIONS:
        assert main([*launch_args, *extra, "--dry-run"]) == 2, extra
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        assert out == "" and len(lines) == 1, (extra, out, lines)
        assert lines[0].startswith("python -m sglang_eagle3.launch: error:"), lines
        assert message in lines[0], (extra, lines[0])
    # steps + 1 itself, and the JSON as text, are taken
    for value in ("4", '{"replay_accept_length": 2.2, "steps": 3}'):
        assert main([*launch_args, "--expected-accept-length", value, "--json", "--dry-run"]) == 0
        env = json.loads(json.loads(capsys.readouterr().out)["env"][env_names.ACCEPT_WATCH])
        assert env["expected"] in (4.0, 2.2)
