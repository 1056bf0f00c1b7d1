"""Plugin manager and backend registry: entry points, env controls, broken plugins, registration checks."""

from __future__ import annotations

import sys
import warnings

import litegpu
import pytest
from _fake_dists import BROKEN_IMPORT_PLUGIN, GOOD_PLUGIN, make_dist
from litegpu import BackendSpec, Delegate, Support
from litegpu._plugins import LiteGPUPluginWarning, register_plugin, reset_plugins, unregister_plugin


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh plugin state with ``tmp_path`` on sys.path as a site directory for fake distributions."""
    monkeypatch.syspath_prepend(str(tmp_path))
    # Only the fake distributions made here: the backends installed on this machine (litegpu-opencl...)
    # would change every listing below.
    import litegpu._plugins as plugins_mod

    real_iter = plugins_mod._iter_entry_points
    monkeypatch.setattr(plugins_mod, "_iter_entry_points", lambda: [
        ep for ep in real_iter() if ep.dist is not None and str(ep.dist.locate_file("")).startswith(str(tmp_path))])
    monkeypatch.delenv("LITEGPU_PLUGINS", raising=False)
    monkeypatch.delenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    reset_plugins()
    yield tmp_path
    for mod in [m for m in sys.modules if m.startswith("fake_litegpu_")]:
        del sys.modules[mod]
    reset_plugins()


def names():
    return [b.name for b in litegpu.available_backends()]


def test_cpu_backend_always_listed_and_available(site):
    (cpu,) = [b for b in litegpu.available_backends() if b.name == "cpu"]
    assert cpu.available and cpu.plugin == "litegpu" and cpu.devices and not cpu.is_gpu
    row = [p for p in litegpu.get_plugins() if p["name"] == "litegpu._cpu_backend"][0]
    assert row["builtin"] and row["status"] == "ok" and row["hooks"] == ["register_backends"]
    assert row["backends"] == ["cpu"]


def test_entry_point_plugin_is_loaded_and_listed(site):
    make_dist(site, "litegpu-good", {"good": "fake_litegpu_good"}, {"fake_litegpu_good": GOOD_PLUGIN}, "1.2.3")
    rows = {b.name: b for b in litegpu.available_backends()}
    assert list(rows) == ["cpu", "good", "sleepy"]
    good = rows["good"]
    assert (good.version, good.available, good.plugin) == ("1.2.3", True, "litegpu-good")
    assert good.devices == ("Good device 0", "Good device 1")
    assert rows["sleepy"].available is False and rows["sleepy"].reason == "the sleepy driver is not loaded"
    plugin = [p for p in litegpu.get_plugins() if p["name"] == "good"][0]
    assert plugin == {
        "name": "good", "version": "1.2.3", "module": "fake_litegpu_good", "distribution": "litegpu-good",
        "hooks": ["register_backends"], "builtin": False, "status": "ok", "error": None, "problems": [],
        "backends": ["good", "sleepy"],
    }
    d = litegpu.load_delegate("good", {"precision": "fp16"})
    assert d.name == "good" and d.options["precision"] == "fp16"


def test_load_delegate_errors(site):
    make_dist(site, "litegpu-good", {"good": "fake_litegpu_good"}, {"fake_litegpu_good": GOOD_PLUGIN})
    with pytest.raises(litegpu.UnknownBackendError, match=r"unknown backend 'goood' \(installed: cpu, good, sleepy\); "
                                                          r"did you mean 'good'\?"):
        litegpu.load_delegate("goood")
    with pytest.raises(ValueError):  # also a ValueError, as LiteRT raises for bad delegates
        litegpu.load_delegate("nothing")
    with pytest.raises(litegpu.UnknownBackendError, match="pip install litegpu-vulkan"):
        litegpu.load_delegate("vulkan")
    with pytest.raises(litegpu.BackendUnavailableError,
                       match="backend 'sleepy' is not available here: the sleepy driver is not loaded"):
        litegpu.load_delegate("sleepy")
    with pytest.raises(litegpu.ConfigError, match=r"backends\.good\.tuning: 'slow' is not one of none, fast, "
                                                  r"exhaustive \(load_delegate options\)"):
        litegpu.load_delegate("good", {"tuning": "slow"})


def test_broken_plugin_warns_and_is_listed_never_crashes(site):
    make_dist(site, "litegpu-good", {"good": "fake_litegpu_good"}, {"fake_litegpu_good": GOOD_PLUGIN})
    make_dist(site, "litegpu-foo", {"foo": "fake_litegpu_broken"}, {"fake_litegpu_broken": BROKEN_IMPORT_PLUGIN})
    with pytest.warns(LiteGPUPluginWarning, match=r"litegpu plugin 'litegpu-foo' failed to import: "
                                                  r"ImportError\('libfoo.so.1: cannot open shared object file'\)"):
        assert names() == ["cpu", "good", "sleepy"]
    broken = [p for p in litegpu.get_plugins() if p["name"] == "foo"][0]
    assert broken["status"] == "broken" and "libfoo.so.1" in broken["error"] and broken["backends"] == []


def test_env_plugins_allowlist_and_disable(site, monkeypatch):
    make_dist(site, "litegpu-good", {"good": "fake_litegpu_good"}, {"fake_litegpu_good": GOOD_PLUGIN})
    make_dist(site, "litegpu-foo", {"foo": "fake_litegpu_broken"}, {"fake_litegpu_broken": BROKEN_IMPORT_PLUGIN})
    monkeypatch.setenv("LITEGPU_PLUGINS", "good")
    reset_plugins()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # foo is not even imported
        assert names() == ["cpu", "good", "sleepy"]
    monkeypatch.setenv("LITEGPU_PLUGINS", "godo")
    reset_plugins()
    with pytest.warns(LiteGPUPluginWarning, match="LITEGPU_PLUGINS names 'godo'.*did you mean 'good'"):
        assert names() == ["cpu"]
    monkeypatch.delenv("LITEGPU_PLUGINS")
    monkeypatch.setenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    assert names() == ["cpu"]
    assert [p["name"] for p in litegpu.get_plugins()] == ["litegpu._cpu_backend"]


class _Plugin:
    """A plugin object registering the backends given to it."""

    def __init__(self, *backends):
        self.backends = backends

    @litegpu.hookimpl
    def register_backends(self, register):
        for b in self.backends:
            register(b)


class _D(Delegate):
    def supports(self, node):
        return Support.no("x")

    def prepare(self, partition):
        raise NotImplementedError


class NoFactory(BackendSpec):
    name = "foo"


class NoName(BackendSpec):
    def create_delegate(self, options):
        return _D(options)


class BadName(BackendSpec):
    name = "Foo Bar"

    def create_delegate(self, options):
        return _D(options)


class BadDefaults(BackendSpec):
    name = "baddefaults"
    default_options = {"precison": "fp16"}

    def create_delegate(self, options):
        return _D(options)


class BadSchema(BackendSpec):
    name = "badschema"
    option_schema = {"x": int}

    def create_delegate(self, options):
        return _D(options)


class NeedsArgs(BackendSpec):
    name = "needsargs"

    def __init__(self, driver):
        self.driver = driver

    def create_delegate(self, options):
        return _D(options)


class Dup(BackendSpec):
    name = "cpu"

    def create_delegate(self, options):
        return _D(options)


class Duck:
    """Not a BackendSpec subclass, but has what is needed."""

    name = "duck"

    def availability(self):
        return True, ""

    def devices(self):
        return []

    def create_delegate(self, options):
        return _D(options)


@pytest.mark.parametrize(
    "spec, message",
    [
        (NoFactory, "backend 'foo' from plugin 'litegpu-foo' does not define create_delegate"),
        (NoName, "backend class NoName from plugin 'litegpu-foo' does not define a name"),
        (BadName, "backend 'Foo Bar' from plugin 'litegpu-foo' has an invalid name"),
        (BadDefaults, "backend 'baddefaults' from plugin 'litegpu-foo': default_options has unknown option 'precison'; "
                      "did you mean 'precision'?"),
        (BadSchema, "backend 'badschema' from plugin 'litegpu-foo': option_schema must map option names to "
                    "litegpu.Option"),
        (NeedsArgs, "backend 'needsargs' from plugin 'litegpu-foo' could not be instantiated without arguments"),
        (Dup, "backend 'cpu' from plugin 'litegpu-foo' clashes with the backend of the same name from plugin 'litegpu'"),
    ],
)
def test_registration_check_names_what_is_missing(site, spec, message):
    with pytest.warns(LiteGPUPluginWarning) as record:
        register_plugin(_Plugin(spec, Duck), "litegpu-foo")
    assert any(str(w.message).startswith(message) for w in record), [str(w.message) for w in record]
    row = [p for p in litegpu.get_plugins() if p["name"] == "litegpu-foo"][0]
    assert row["status"] == "ok" and row["problems"] and row["backends"] == ["duck"]  # the good one still registers
    assert "duck" in names()
    unregister_plugin("litegpu-foo")
    assert "duck" not in names()


def test_availability_and_factory_failures_are_contained(site):
    class Flaky(BackendSpec):
        name = "flaky"

        def availability(self):
            raise OSError("driver crashed")

        def create_delegate(self, options):  # pragma: no cover
            return _D(options)

    class Crashy(BackendSpec):
        name = "crashy"

        def create_delegate(self, options):
            raise RuntimeError("out of device memory")

    class Wrong(BackendSpec):
        name = "wrong"

        def create_delegate(self, options):
            return object()

    register_plugin(_Plugin(Flaky, Crashy, Wrong), "p")
    rows = {b.name: b for b in litegpu.available_backends()}
    assert not rows["flaky"].available and rows["flaky"].reason == "availability check raised OSError('driver crashed')"
    with pytest.raises(litegpu.DelegateError, match=r"backend 'crashy' \(plugin 'p'\) failed to create its delegate: "
                                                    r"RuntimeError\('out of device memory'\)"):
        litegpu.load_delegate("crashy")
    with pytest.raises(litegpu.DelegateError, match="create_delegate returned object, which has no supports"):
        litegpu.load_delegate("wrong")


def test_hook_that_raises_marks_plugin_broken(site):
    class Exploding:
        @litegpu.hookimpl
        def register_backends(self, register):
            raise RuntimeError("boom")

    with pytest.warns(LiteGPUPluginWarning, match=r"raised from its register_backends hook: RuntimeError\('boom'\)"):
        register_plugin(Exploding(), "exploding")
    assert [p for p in litegpu.get_plugins() if p["name"] == "exploding"][0]["status"] == "broken"
    assert names() == ["cpu"]


def test_misspelled_hook_is_reported(site):
    class Typo:
        @litegpu.hookimpl
        def register_backend(self, register):  # missing the final s
            raise AssertionError("never called")

    with pytest.warns(LiteGPUPluginWarning, match="implements unknown hook 'register_backend'; "
                                                  "did you mean 'register_backends'"):
        register_plugin(Typo(), "typo")


def test_plugin_calling_back_into_litegpu_during_load(site):
    class Reentrant:
        @litegpu.hookimpl
        def register_backends(self, register):
            litegpu.available_backends()  # must not deadlock or recurse forever
            register(Duck)

    register_plugin(Reentrant(), "reentrant")
    assert "duck" in names()


def test_availability_cached_until_refresh(site):
    calls = []

    class Counting(BackendSpec):
        name = "counting"

        def availability(self):
            calls.append(1)
            return True, ""

        def create_delegate(self, options):
            return _D(options)

    register_plugin(_Plugin(Counting), "counting")
    litegpu.available_backends()
    litegpu.available_backends()
    assert len(calls) == 1
    litegpu.available_backends(refresh=True)
    assert len(calls) == 2


# -- load_delegate's early start: the entry point named like the backend first, the rest after its delegate

_NAMED_PLUGIN = """
    import sys
    import litegpu
    from litegpu import BackendSpec, Delegate, Support

    MADE, CLOSED = [], []

    class NamedDelegate(Delegate):
        def supports(self, node):
            return Support.no("declines everything")
        def prepare(self, partition):
            raise NotImplementedError
        def close(self):
            CLOSED.append(self)

    class NamedBackend(BackendSpec):
        name = "{backend}"
        description = "from {module}"
        def create_delegate(self, options):
            d = NamedDelegate(options)
            # which other fake plugins were imported when this delegate was made
            d.seen = sorted(m for m in sys.modules if m.startswith("fake_litegpu_") and m != "{module}")
            MADE.append(d)
            return d

    @litegpu.hookimpl
    def register_backends(register):
        register(NamedBackend)
"""


def _named(site, plugin: str, backend: str) -> None:
    module = f"fake_litegpu_{plugin}"
    make_dist(site, f"litegpu-{plugin}", {plugin: module},
              {module: _NAMED_PLUGIN.replace("{backend}", backend).replace("{module}", module)})


@pytest.fixture
def ordered(site, monkeypatch):
    """``site`` with the entry points in name order (a directory's listing order is the file system's)."""
    import litegpu._plugins as plugins_mod

    listed = plugins_mod._iter_entry_points
    monkeypatch.setattr(plugins_mod, "_iter_entry_points", lambda: sorted(listed(), key=lambda ep: ep.name))
    return site


def _state() -> tuple[list, list]:
    return ([(b.name, b.plugin, b.description) for b in litegpu.available_backends()],
            [(p["name"], p["status"], p["problems"], p["backends"]) for p in litegpu.get_plugins()])


@pytest.mark.parametrize("early", [True, False])
def test_load_delegate_makes_its_delegate_before_the_other_plugins_load(ordered, monkeypatch, early):
    import litegpu._backend_loading as loading

    monkeypatch.setattr(loading, "EARLY_START", early)
    _named(ordered, "aa", "first")
    make_dist(ordered, "litegpu-bb", {"bb": "fake_litegpu_bb"}, {"fake_litegpu_bb": BROKEN_IMPORT_PLUGIN})
    _named(ordered, "zz", "zz")
    with pytest.warns(LiteGPUPluginWarning, match="'litegpu-bb' failed to import"):  # still reported, by load_delegate
        d = litegpu.load_delegate("zz")
    assert d.seen == ([] if early else ["fake_litegpu_aa"])  # (bb's import failed: never in sys.modules)
    backends, plugins = _state()
    assert backends == [("cpu", "litegpu", backends[0][2]), ("first", "litegpu-aa", "from fake_litegpu_aa"),
                        ("zz", "litegpu-zz", "from fake_litegpu_zz")]
    assert [(name, status) for name, status, _p, _b in plugins] == [
        ("litegpu._cpu_backend", "ok"), ("aa", "ok"), ("bb", "broken"), ("zz", "ok")]


def test_early_start_keeps_the_backend_of_the_plugin_first_in_order(ordered, monkeypatch):
    """Two plugins register backend ``same``; the one named ``same`` loads first for load_delegate("same")
    but is later in the order: the other one's backend is kept, as in a load in order, and the delegate
    made early is closed."""
    import litegpu._backend_loading as loading

    got = {}
    for early in (False, True):
        monkeypatch.setattr(loading, "EARLY_START", early)
        reset_plugins()
        for mod in [m for m in sys.modules if m.startswith("fake_litegpu_")]:
            del sys.modules[mod]
        if not early:
            _named(ordered, "aa", "same")
            _named(ordered, "same", "same")
        with pytest.warns(LiteGPUPluginWarning) as record:
            d = litegpu.load_delegate("same")
        aa, same = sys.modules["fake_litegpu_aa"], sys.modules["fake_litegpu_same"]
        assert d.options is not None and aa.MADE == [d]
        assert (len(same.MADE), len(same.CLOSED)) == ((1, 1) if early else (0, 0))
        got[early] = (_state(), [str(w.message) for w in record])
    assert got[True] == got[False]
    (_backends, plugins), warned = got[True]
    assert warned == ["backend 'same' from plugin 'litegpu-same' clashes with the backend of the same name from "
                      "plugin 'litegpu-aa'; the one of the plugin first in the plugins' order is kept"]
    assert [p for name, _s, p, _b in plugins if name == "same"] == [warned]


def test_the_packaged_default_configuration_needs_no_plugin_scan(site, monkeypatch):
    """``backend: auto`` and ``backends: all`` are checked without the plugins (so that load_delegate's
    early start is not undone by reading the configuration); a backend named in a configuration still
    loads them to be checked."""
    import litegpu._plugins as plugins_mod

    monkeypatch.delenv("LITEGPU_CONFIG", raising=False)
    make_dist(site, "litegpu-good", {"good": "fake_litegpu_good"}, {"fake_litegpu_good": GOOD_PLUGIN})
    litegpu.load_config()
    assert plugins_mod._state is None or not plugins_mod._state.loaded
    assert litegpu.load_config({"backend": "good", "backends": {"good": {"precision": "fp16"}}}).data["backend"] == ["good"]
    assert plugins_mod._state.loaded and "good" in names()
    with pytest.raises(litegpu.ConfigError, match=r"unknown backend 'goood' \(installed: cpu, good, sleepy"):
        litegpu.load_config({"backend": "goood"})
