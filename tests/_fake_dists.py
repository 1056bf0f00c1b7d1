"""Make installed-looking distributions (dist-info + entry points) in a directory, without pip."""

from __future__ import annotations

import textwrap
from pathlib import Path


def make_dist(root: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str],
              version: str = "1.0") -> Path:
    """Write ``<dist>-<version>.dist-info`` with ``[litegpu]`` entry points and the given modules into ``root``."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    eps = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[litegpu]\n{eps}")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    return info


GOOD_PLUGIN = """
    import litegpu
    from litegpu import BackendSpec, Delegate, Support

    class GoodDelegate(Delegate):
        def supports(self, node):
            return Support.no("declines everything")
        def prepare(self, partition):
            raise NotImplementedError

    class GoodBackend(BackendSpec):
        name = "good"
        version = "1.2.3"
        description = "a test backend"
        def devices(self):
            return ["Good device 0", "Good device 1"]
        def create_delegate(self, options):
            return GoodDelegate(options)

    class SleepyBackend(BackendSpec):
        name = "sleepy"
        def availability(self):
            return False, "the sleepy driver is not loaded"
        def create_delegate(self, options):
            raise AssertionError("never called")

    @litegpu.hookimpl
    def register_backends(register):
        register(GoodBackend)
        register(SleepyBackend)
"""

BROKEN_IMPORT_PLUGIN = """
    import litegpu
    raise ImportError("libfoo.so.1: cannot open shared object file")
"""
