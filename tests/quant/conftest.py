"""Print per-op identical-element statistics of the quantized kernel tests at the end of the session."""

from __future__ import annotations

import pytest

from ._harness import STATS

litert = pytest.importorskip("ai_edge_litert.interpreter")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not STATS:
        return
    tr = terminalreporter
    tr.section("quantized kernels vs LiteRT reference")
    tr.write_line(f"{'op':<34}{'identical':>14}{'total':>12}{'pct':>10}{'max LSB':>9}")
    for name in sorted(STATS):
        s = STATS[name]
        pct = 100.0 * s.identical / max(s.total, 1)
        tr.write_line(f"{name:<34}{s.identical:>14}{s.total:>12}{pct:>9.3f}%{s.max_lsb:>9}")
