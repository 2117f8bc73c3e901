"""Plugins registered by a test and gone after it: `registered()` restores the registries (methods, datasets,
evaluation sections and their settings, measures, claims) as they were, whatever the test registered meanwhile."""

from __future__ import annotations

import contextlib

from bayesncl.settings import registry
from bayesncl.evaluation.sections import SECTIONS
from bayesncl.report.cells import METRICS
from bayesncl.report.claims import CLAIMS


@contextlib.contextmanager
def registered():
    """Everything registered inside the block is unregistered when it ends."""
    saved = [(d, dict(d)) for d in (registry.METHODS._specs, registry.DATASETS._specs, SECTIONS._specs,
                                    METRICS._specs, CLAIMS._specs, registry.SECTION_SETTINGS)]
    try:
        yield
    finally:
        for d, before in saved:
            d.clear()
            d.update(before)


def forget(name: str) -> None:
    """The method `name` unregistered (a plugin module about to be loaded again)."""
    registry.METHODS._specs.pop(name, None)
