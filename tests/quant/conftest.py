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
    tr.write_line(f"{'op':<40}{'identical':>11}{'total':>10}{'pct':>10}{'max LSB / rel err':>19}")
    for name in sorted(STATS):
        s = STATS[name]
        pct = 100.0 * s.identical / max(s.total, 1)
        diff = f"{s.max_lsb}" if s.max_rel is None else f"{s.max_rel:.1e}"
        tr.write_line(f"{name:<40}{s.identical:>11}{s.total:>10}{pct:>9.3f}%{diff:>19}")
