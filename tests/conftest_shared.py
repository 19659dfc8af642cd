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
