"""litegpu's pytest plugin, opt-in: ``pytest -p litegpu.testing.pytest_plugin``, or
``pytest_plugins = ["litegpu.testing.pytest_plugin"]`` in a ``conftest.py``, or
``addopts = "-p litegpu.testing.pytest_plugin"`` in the ``[tool.pytest.ini_options]`` of a backend's
``pyproject.toml``.  (Installing litegpu registers nothing with pytest: a plugin loaded into every
pytest run of every project on the machine was a surprise.)

It provides the ``litegpu_backend`` fixture, parametrized over every
registered backend (``cpu`` included), so a backend package's tests and
core's own run once per backend::

    def test_add(litegpu_backend):
        out = litegpu_backend.run(model_bytes, [x, y])
        np.testing.assert_allclose(out[0], x + y)

A backend that is not available on the machine is *skipped with its reason*
(``SKIPPED [1] ... backend 'opencl' is not available here: no OpenCL
platform``), never silently passed.  ``--litegpu-backend=NAME`` (repeatable,
or comma-separated) restricts the parametrization; a name that is not
installed still produces a test, which skips saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

__all__ = ["BackendUnderTest", "litegpu_backend"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("litegpu")
    group.addoption(
        "--litegpu-backend",
        action="append",
        default=[],
        metavar="NAME",
        help="run litegpu_backend-parametrized tests only for these backends (repeatable or comma-separated)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "litegpu_backend: test parametrized over litegpu backends")


def _selected(config: pytest.Config) -> list[str]:
    names: list[str] = []
    for value in config.getoption("--litegpu-backend", default=[]) or []:
        names.extend(n.strip() for n in value.split(",") if n.strip())
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "litegpu_backend" not in metafunc.fixturenames:
        return
    import litegpu

    names = [b.name for b in litegpu.available_backends()]
    wanted = _selected(metafunc.config)
    if wanted:
        names = wanted
    metafunc.parametrize("litegpu_backend", names, indirect=True, ids=[f"backend={n}" for n in names])


class BackendUnderTest:
    """What the ``litegpu_backend`` fixture gives a test: one available backend.

    ``name`` and ``info`` (:class:`litegpu.BackendInfo`) describe it;
    :meth:`delegate` creates its delegate (closed after the test);
    :meth:`delegates` is the list to pass as ``experimental_delegates``
    (empty for ``cpu``); :meth:`run` runs a model through
    ``litegpu.Interpreter`` with it.
    """

    def __init__(self, info: Any):
        self.info = info
        self.name: str = info.name
        self._opened: list[Any] = []

    def __repr__(self) -> str:
        return f"<litegpu backend {self.name!r} {self.info.version}>"

    def delegate(self, **options: Any) -> Any:
        import litegpu

        d = litegpu.load_delegate(self.name, options or None)
        self._opened.append(d)
        return d

    def delegates(self, **options: Any) -> list[Any]:
        return [] if self.name == "cpu" else [self.delegate(**options)]

    def run(self, model: bytes, inputs: Sequence[np.ndarray], **options: Any) -> list[np.ndarray]:
        """Run ``model`` (``.tflite`` bytes) on ``inputs``; outputs in output order."""
        import litegpu

        cls = getattr(litegpu, "Interpreter", None)
        if cls is None:
            pytest.skip("litegpu.Interpreter is not available in this build")
        interp = cls(model_content=model, experimental_delegates=self.delegates(**options))
        interp.allocate_tensors()
        for detail, value in zip(interp.get_input_details(), inputs, strict=True):
            interp.set_tensor(detail["index"], np.asarray(value))
        interp.invoke()
        return [np.array(interp.get_tensor(d["index"])) for d in interp.get_output_details()]

    def close(self) -> None:
        while self._opened:
            d = self._opened.pop()
            try:
                d.close()
            except Exception:  # teardown must not mask the test's own outcome
                pass


@pytest.fixture
def litegpu_backend(request: pytest.FixtureRequest) -> Any:
    """One registered litegpu backend (parametrized); skips when it is unavailable here."""
    import litegpu

    name = getattr(request, "param", None)
    if name is None:
        pytest.skip("litegpu_backend is parametrized by the litegpu pytest plugin's pytest_generate_tests")
    info = next((b for b in litegpu.available_backends() if b.name == name), None)
    if info is None:
        installed = ", ".join(b.name for b in litegpu.available_backends())
        pytest.skip(f"backend {name!r} is not installed (installed: {installed})")
    if not info.available:
        pytest.skip(f"backend {name!r} is not available here: {info.reason}")
    handle = BackendUnderTest(info)
    yield handle
    handle.close()
