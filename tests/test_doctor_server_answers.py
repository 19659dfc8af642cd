"""`doctor --server URL` against whatever answers there: a wrong server, an old plugin, a slow
one. Each answer that is not the plugin's gets one line naming --server and the fix, exit 2,
never a traceback. A real HTTP server on loopback plays the wrong server."""

from __future__ import annotations

import contextlib
import json
import time
from http.server import BaseHTTPRequestHandler

import pytest
from loopback import serving

from sglang_eagle3.doctor.cli import main

TAPS = ["embed"] + [f"layer:{k}" for k in range(7)]  # every tap the doctor's candidates need
GOOD = {"sglang_eagle3": "x", "sglang": "0.5.23", "capture_only": True, "layout": TAPS,
        "capture_order": TAPS, "num_layers": 8, "hidden_size": 64, "family": "deepseek_v2",
        "source": "env"}  # fmt: skip
HTML = b"<!DOCTYPE html><html><body><h1>404 Not Found</h1>" + b"x" * 3000 + b"</body></html>"


class _Answers(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, bytes, float]] = {}

    def _answer(self) -> None:
        code, body, delay = self.routes.get(self.path, (404, HTML, 0.0))
        time.sleep(delay)
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the doctor gave up waiting: fine
            pass

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def answering():
    """Start a loopback server with the given routes; yields a function: routes -> URL."""
    with contextlib.ExitStack() as stack:

        def start(routes: dict[str, tuple[int, bytes, float]]) -> str:
            return stack.enter_context(serving(type("H", (_Answers,), {"routes": routes})))

        yield start


def _capture(body) -> dict[str, tuple[int, bytes, float]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return {"/sglang_eagle3/capture": (200, raw, 0.0)}


CASES = {
    "an HTML page": (_capture(HTML), "answered an HTML page, not the JSON object"),
    "a JSON list": (_capture([1, 2]), "answered '[1, 2]', not the JSON object"),
    "an empty body": (_capture(b""), "answered an empty body"),
    "num_layers as a word": (_capture({**GOOD, "num_layers": "eight"}),
                             "num_layers is 'eight', not the int"),
    "hidden_size missing": (_capture({k: v for k, v in GOOD.items() if k != "hidden_size"}),
                            "hidden_size is None, not the int"),
    "taps not strings": (_capture({**GOOD, "capture_order": [0, 2, 5]}),
                         "capture_order is [0, 2, 5], not a list of tap names"),
    "/server_info missing": (_capture(GOOD), "answered /server_info with HTTP 404: an HTML page"),
    "too slow for --request-timeout": (
        {"/sglang_eagle3/capture": (200, json.dumps(GOOD).encode(), 3.0)},
        "did not answer /sglang_eagle3/capture within --request-timeout 0.5 s"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_answer_is_one_line_naming_the_server(case, answering, random_draft, capsys):
    routes, said = CASES[case]
    url = answering(routes)
    argv = ["--draft", str(random_draft), "--server", url, "--request-timeout", "0.5"]
    assert main(argv) == 2, case
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("sglang_eagle3.doctor: --server: "), err
    assert said in err[0], err[0]
    assert "Fix: " in err[0] and "<h1>" not in err[0] and len(err[0]) < 600, err[0]
