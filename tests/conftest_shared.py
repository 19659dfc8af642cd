"""Computations several test files read (a pytest plugin, loaded by conftest.py): each runs
once per test run, however many tests assert on it."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def doctor_report():
    """``doctor_report(DoctorOptions(...))``: ``run_doctor`` once per distinct options (a
    frozen dataclass), shared by every test that reads that report. Tests only read it."""
    from sglang_eagle3.doctor.run import run_doctor

    done: dict = {}

    def get(opts):
        if opts not in done:
            done[opts] = run_doctor(opts)
        return done[opts]

    return get


@pytest.fixture(scope="session")
def random_draft(tmp_path_factory):
    """A seeded random speculators EAGLE-3 draft on disk (hidden 64, ids [0, 3, 6]): the
    doctor's bad-input tests read it, none writes to it."""
    pytest.importorskip("speculators.models.eagle3")
    try:
        from test_draft_forward import speculators_model
    except ImportError:  # run from elsewhere with the repository root on sys.path
        from tests.test_draft_forward import speculators_model

    d = tmp_path_factory.mktemp("random_draft")
    speculators_model(True).save_pretrained(str(d))
    return d
