"""Test-wide settings: hypothesis draws the same examples on every run, so a failure seen once
(on CI or locally) reproduces exactly; set HYPOTHESIS_PROFILE=explore for fresh random draws."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
