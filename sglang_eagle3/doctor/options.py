"""The doctor's options, checked before anything is read (bad input: exit 2)."""

from __future__ import annotations

from dataclasses import dataclass

from sglang_eagle3.doctor.candidates import SERVED_BY
from sglang_eagle3.errors import WiringError

ENGINES = ("auto", "hf", "sglang")
NO_EVIDENCE_FIX = (
    "pass --data DIR (the drafter's training hidden states), --target DIR (the doctor runs the "
    "target itself) or --server URL (a target in capture mode; see --help)"
)


@dataclass(frozen=True)
class DoctorOptions:
    draft: str
    data: str | None = None  # None: data-free, the evidence comes from --target or --server
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
    server: str | None = None  # data-free: a live target in capture mode
    prompts: str | None = None  # data-free: a JSONL prompts file (None: the built-in set)
    # data-free: prompts given by the caller (the tuner's timed set), instead of a file
    prompt_texts: tuple[str, ...] | None = None
    max_new_tokens: int = 64  # data-free: the target's greedy continuation per prompt
    request_timeout: float = 300.0  # --server: seconds per HTTP request
    server_time_limit: float = 1800.0  # --server: seconds for all requests together
    engine: str = "auto"  # --target without data: hf, sglang, or auto (sglang with a GPU)

    @property
    def tree(self) -> tuple[int, int]:
        """(topk, draft tokens) as the server drafts: a chain of steps + 1 unless given."""
        return self.topk, self.draft_tokens or self.steps + 1

    @property
    def data_free(self) -> bool:
        return self.data is None

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
        self._check_sources()

    def _check_sources(self) -> None:
        if self.data is None and self.target is None and self.server is None:
            raise WiringError("no --data and no --target: nothing to score the draft on",
                              fix=NO_EVIDENCE_FIX)  # fmt: skip
        if self.data is not None and self.server is not None:
            raise WiringError("--data and --server both give hidden states: pass one",
                              fix="drop --server to score the training data")  # fmt: skip
        if self.prompts is not None and self.prompt_texts is not None:
            raise WiringError("a prompts file and prompt texts both given: pass one",
                              fix="drop one of them")  # fmt: skip
        if self.prompt_texts is not None and not all(self.prompt_texts):
            raise WiringError("an empty prompt text", fix="give non-empty prompts")
        if self.data is not None and (self.prompts, self.prompt_texts) != (None, None):
            raise WiringError("--prompts is for the data-free mode (no --data)",
                              fix="drop --prompts, or drop --data to score the target's own "
                              "continuations of these prompts")  # fmt: skip
        if self.data is None and self.data_taps is not None:
            raise WiringError("--data-taps names the taps of --data; the data-free mode "
                              "captures named taps itself", fix="drop --data-taps")  # fmt: skip
        if self.engine not in ENGINES:
            raise WiringError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.engine != "auto" and (self.data is not None or self.server is not None):
            raise WiringError("--engine picks how the doctor runs --target without --data",
                              fix="drop --engine")  # fmt: skip
        if not 1 <= self.max_new_tokens <= 4096:
            raise WiringError(f"--max-new-tokens must be 1..4096, got {self.max_new_tokens}")
        for name, value in (("--request-timeout", self.request_timeout),
                            ("--server-time-limit", self.server_time_limit)):  # fmt: skip
            if not value > 0 or value == float("inf"):
                raise WiringError(f"{name} must be a positive number of seconds, got {value}")
