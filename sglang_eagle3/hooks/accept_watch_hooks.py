"""The live accept-length watch in SGLang's scheduler, and its metrics.

A hook on ``SchedulerMetricsReporter.report_decode_stats`` reads the two running totals SGLang
keeps itself (``spec_total_num_accept_tokens``, ``spec_total_num_forward_ct``, advanced once per
decode-stats interval) and feeds their change into an ``AcceptWindow``: two integer reads per
call, nothing per token. With ``--enable-metrics`` it exports, next to SGLang's own
``sglang:spec_accept_length``:

- ``sglang_eagle3:layout_info{layout, capture_order, source}`` = 1, the served taps;
- ``sglang_eagle3:expected_accept_length{source}``;
- ``sglang_eagle3:window_accept_length``, the served accept length of the last full window.

Per-position acceptance is not exported: SGLang 0.5.23 counts accepted tokens and verifies per
interval only, not how deep each verify got.
"""

from __future__ import annotations

import os

from sglang.srt.plugins.hook_registry import HookType

from sglang_eagle3.hooks.accept_watch import AcceptWindow, watch_settings
from sglang_eagle3.hooks.capture import process_plan
from sglang_eagle3.log import get_logger

logger = get_logger()

REPORTER = "sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter"
_STATE = "_sglang_eagle3_watch"


class _Watch:
    def __init__(self, reporter) -> None:
        self.settings = watch_settings(os.environ)
        self.window = AcceptWindow(self.settings) if self.settings else None
        self.seen = (0, 0)
        self.gauges = _gauges(self.settings) if getattr(reporter, "enable_metrics", False) else {}


def _gauges(settings) -> dict:
    from prometheus_client import Gauge

    gauges = {}
    plan = process_plan()
    if plan is not None:
        info = Gauge("sglang_eagle3:layout_info", "The taps the drafter's fc is fed, in fc order "
                     "(layer:K = output of decoder layer K, 0-indexed), and SGLang's capture "
                     "order", labelnames=["layout", "capture_order", "source"],
                     multiprocess_mode="mostrecent")  # fmt: skip
        capture = [""] * len(plan.taps)
        for tap, pos in zip(plan.taps, plan.fc_block_order, strict=True):
            capture[pos] = tap
        info.labels(",".join(plan.taps), ",".join(capture), plan.source).set(1)
    if settings is not None:
        expected = Gauge("sglang_eagle3:expected_accept_length", "The accept length the drafter "
                         "should reach (launcher --expected-accept-length)",
                         labelnames=["source"], multiprocess_mode="mostrecent")  # fmt: skip
        expected.labels(settings.source).set(settings.expected)
        gauges["window"] = Gauge(
            "sglang_eagle3:window_accept_length",
            "Served accept length over the last full watch window",
            multiprocess_mode="mostrecent",
        )
    return gauges


def report_decode_stats(original, self, *args, **kwargs):
    result = original(self, *args, **kwargs)
    watch = self.__dict__.get(_STATE)
    if watch is None:
        watch = self.__dict__[_STATE] = _Watch(self)
    if watch.window is None:
        return result
    totals = (getattr(self, "spec_total_num_accept_tokens", 0),
              getattr(self, "spec_total_num_forward_ct", 0))  # fmt: skip
    if totals != watch.seen:
        tokens, verifies = totals[0] - watch.seen[0], totals[1] - watch.seen[1]
        watch.seen = totals
        warning = watch.window.feed(tokens, verifies)
        if watch.window.last is not None and "window" in watch.gauges:
            watch.gauges["window"].set(watch.window.last)
        if warning:
            logger.warning("accept-length watch: %s", warning)
    return result


def wanted(argv: list[str]) -> bool:
    """Hook the reporter only for a watch or for metrics: otherwise it is SGLang's alone."""
    return bool(watch_settings(os.environ)) or "--enable-metrics" in argv


HOOKS = [(f"{REPORTER}.report_decode_stats", report_decode_stats, HookType.AROUND)]
