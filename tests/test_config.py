"""YAML configuration: validation messages with key path and line, layering, presets, litegpu.load."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import litegpu
import pytest
import yaml
from litegpu import BackendSpec, ConfigError, Delegate, Option, Support
from litegpu._config import SCHEMA, load_config, packaged_config_dir, packaged_configs
from litegpu._plugins import register_plugin, unregister_plugin


class FakeDelegate(Delegate):
    def supports(self, node):
        return Support.no("fake")

    def prepare(self, partition):  # pragma: no cover
        raise NotImplementedError


class FakeGpu(BackendSpec):
    name = "fakegpu"
    version = "9.9"
    option_schema = {"workgroup_size": Option.int(64, min=8, max=1024, doc="threads per group")}
    default_options = {"precision": "fp16"}

    def devices(self):
        return ["Fake GPU 0"]

    def create_delegate(self, options):
        return FakeDelegate(options)


class DownGpu(BackendSpec):
    name = "downgpu"

    def availability(self):
        return False, "no Down driver (libdown.so not found)"

    def create_delegate(self, options):  # pragma: no cover - never reached
        raise AssertionError("unavailable backends are never created")


class FakePlugin:
    @litegpu.hookimpl
    def register_backends(self, register):
        register(FakeGpu)
        register(DownGpu)


@pytest.fixture(autouse=True)
def fake_backends(monkeypatch):
    # Only core's own plugins and the fakes below: what is installed on this machine (litegpu-opencl...)
    # must not change which backend these tests see first.
    from litegpu._plugins import reset_plugins

    monkeypatch.delenv("LITEGPU_CONFIG", raising=False)
    monkeypatch.setenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugins()
    name = register_plugin(FakePlugin(), "fake-gpu-plugin")
    yield
    unregister_plugin(name)
    monkeypatch.delenv("LITEGPU_DISABLE_PLUGIN_AUTOLOAD")
    reset_plugins()


# (yaml text, dotted path, line, text the message must contain)
BAD_CONFIGS = [
    ("backend: opencll\n", "backend", 1, "unknown backend 'opencll'"),
    ("backend:\n  - opencl\n  - vulkn\n", "backend[1]", 3, "did you mean 'vulkan'?"),
    ("backend: []\n", "backend", 1, "the backend list is empty"),
    ("backend: 3\n", "backend", 1, "expected a backend name, a list of names or auto, got integer 3"),
    ("backnd: opencl\n", "backnd", 1, "unknown key (valid: backend, strict, backends, partition, cache, autoselect, logging); "
                                      "did you mean 'backend' or 'backends'?"),
    ("backends:\n  opencl:\n    device: 0\n    precision: fp8\n", "backends.opencl.precision", 4,
     "'fp8' is not one of fp32, fp16, fp16_fp32acc"),
    ("backends:\n  all:\n    device: -1\n", "backends.all.device", 3, "-1 is below the minimum 0"),
    ("backends:\n  vulkan:\n    tuning: slow\n", "backends.vulkan.tuning", 3, "'slow' is not one of none, fast, exhaustive"),
    ("backends:\n  opencl:\n    quantization_simulation: 1\n", "backends.opencl.quantization_simulation", 3,
     "expected a boolean (true/false), got integer 1"),
    ("backends:\n  opencl:\n    precison: fp16\n", "backends.opencl.precison", 3, "did you mean 'precision'?"),
    ("backends:\n  fakegpu:\n    workgroup_size: 7\n", "backends.fakegpu.workgroup_size", 3, "7 is below the minimum 8"),
    ("backends:\n  fakegpu:\n    workgroup_sise: 64\n", "backends.fakegpu.workgroup_sise", 3,
     "unknown key (valid: precision, device, tuning, quantization_simulation, workgroup_size); "
     "did you mean 'workgroup_size'?"),
    ("backends:\n  openGL:\n    precision: fp16\n", "backends.openGL", 2, "unknown backend 'openGL'"),
    ("backends: [opencl]\n", "backends", 1, "expected a mapping of backend names to options"),
    ("partition:\n  max_delegated_partitions: -1\n", "partition.max_delegated_partitions", 2, "below the minimum 0"),
    ("partition:\n  min_nodes_per_partition: two\n", "partition.min_nodes_per_partition", 2,
     "expected an integer, got string 'two'"),
    ("partition:\n  max_partitions: 2\n", "partition.max_partitions", 2, "did you mean 'max_delegated_partitions'?"),
    ("cache:\n  enabled: maybe\n", "cache.enabled", 2, "expected a boolean (true/false), got string 'maybe'"),
    ("cache:\n  max_bytes: 1.5\n", "cache.max_bytes", 2, "expected an integer, got number 1.5"),
    ("cache: /tmp/litegpu\n", "cache", 1, "expected a mapping, got string '/tmp/litegpu'"),
    ("autoselect:\n  policy: fastest\n", "autoselect.policy", 2, "'fastest' is not one of latency, init_time, memory"),
    ("autoselect:\n  precisions:\n    - fp32\n    - fp64\n", "autoselect.precisions", 2,
     "item 1: 'fp64' is not one of fp32, fp16, fp16_fp32acc"),
    ("autoselect:\n  time_budget_s: -5\n", "autoselect.time_budget_s", 2, "below the minimum 0"),
    ("logging:\n  level: verbose\n", "logging.level", 2, "'VERBOSE' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ("logging:\n  log_unsupported_ops: 'yes'\n", "logging.log_unsupported_ops", 2, "expected a boolean"),
    ("partition:\n  min_nodes_per_partition: 1\n  min_nodes_per_partition: 2\n", "partition.min_nodes_per_partition",
     3, "duplicate key (lines 2 and 3 of"),
    ("- backend\n", "<top level>", 1, "the configuration must be a mapping"),
]


@pytest.mark.parametrize("text, path, line, needle", BAD_CONFIGS, ids=[c[1] + f"-{i}" for i, c in enumerate(BAD_CONFIGS)])
def test_bad_config_file_names_path_line_and_choices(tmp_path, text, path, line, needle):
    f = tmp_path / "app.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg
    assert needle in msg, msg
    if "duplicate" not in needle:
        assert msg.endswith(f"({f} line {line})"), msg
    assert info.value.path == path and info.value.line == line


def test_the_example_message_verbatim(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.yaml").write_text("backend: opencl\nbackends:\n  opencl:\n    precision: fp8\n")
    with pytest.raises(ConfigError) as info:
        load_config("app.yaml")
    assert str(info.value) == "backends.opencl.precision: 'fp8' is not one of fp32, fp16, fp16_fp32acc (app.yaml line 4)"


def test_invalid_yaml_syntax_names_the_line(tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("partition:\n  max_delegated_partitions: [1, 2\nlogging: {}\n")
    with pytest.raises(ConfigError, match=r"invalid YAML: .* line \d+\)") as info:
        load_config(f)
    assert info.value.line is not None


@pytest.mark.parametrize(
    "config, path, needle",
    [
        ({"partition": {"max_partitions": 2}}, "partition.max_partitions", "did you mean 'max_delegated_partitions'?"),
        ({"backends": {"fakegpu": {"workgroup_size": "big"}}}, "backends.fakegpu.workgroup_size", "expected an integer"),
        ({"backend": ["fakegpu", "nope"]}, "backend[1]", "unknown backend 'nope'"),
        ({"logging": {"level": 10}}, "logging.level", "10 is not one of DEBUG"),
    ],
)
def test_bad_dict_config(config, path, needle):
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(info.value).startswith(f"{path}: ") and needle in str(info.value)
    assert str(info.value).endswith("(config dict passed by the application)")
    assert info.value.line is None


@pytest.mark.parametrize(
    "kwargs, path, needle",
    [
        ({"precision": "fp8"}, "backends.all.precision", "(keyword argument precision)"),
        ({"precison": "fp16"}, "precison", "did you mean 'precision'?"),
        ({"partition__max_delegated_partitions": "2"}, "partition.max_delegated_partitions",
         "(keyword argument partition__max_delegated_partitions)"),
        ({"partition__maximum": 2}, "partition.maximum", "unknown key"),
        ({"max_delegated_partitions": -3}, "partition.max_delegated_partitions", "below the minimum 0"),
        ({"backend": "gpu"}, "backend", "unknown backend 'gpu'"),
    ],
)
def test_bad_keyword_arguments(kwargs, path, needle):
    with pytest.raises(ConfigError) as info:
        load_config(None, **kwargs)
    assert str(info.value).startswith(f"{path}: ") and needle in str(info.value), str(info.value)


def test_bad_config_type_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config must be a YAML file path, a preset name, a dict"):
        load_config(42)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match=r"no packaged config named 'low-latncy'.*did you mean 'low-latency'"):
        load_config("low-latncy")


# -- layering -----------------------------------------------------------------------------------------


def test_defaults_match_schema_defaults():
    cfg = load_config()
    assert cfg.sources == ["litegpu default.yaml"]
    assert cfg.backends == ["auto"]
    for section, schema in SCHEMA.items():
        for key, opt in schema.items():
            default = list(opt.default) if isinstance(opt.default, tuple) else opt.default
            assert cfg.data[section][key] == default, f"default.yaml {section}.{key} differs from the schema default"


def test_layering_default_env_app_kwargs(tmp_path, monkeypatch):
    env_file = tmp_path / "env.yaml"
    env_file.write_text("partition:\n  max_delegated_partitions: 2\n  min_nodes_per_partition: 3\n"
                        "backends:\n  fakegpu:\n    workgroup_size: 128\n")
    monkeypatch.setenv("LITEGPU_CONFIG", str(env_file))
    cfg = load_config()
    assert cfg.get("partition.max_delegated_partitions") == 2 and cfg.get("partition.min_nodes_per_partition") == 3
    app = {"partition": {"max_delegated_partitions": 3}, "backend": ["fakegpu", "cpu"]}
    cfg = load_config(app)
    assert cfg.get("partition.max_delegated_partitions") == 3  # app beats env
    assert cfg.get("partition.min_nodes_per_partition") == 3  # env kept where app is silent
    assert cfg.backends == ["fakegpu", "cpu"]
    cfg = load_config(app, max_delegated_partitions=1, partition__min_nodes_per_partition=1, backend="cpu")
    assert cfg.partition_options().max_delegated_partitions == 1  # kwargs beat everything
    assert cfg.partition_options().min_nodes_per_partition == 1
    assert cfg.backends == ["cpu"]
    assert cfg.sources == ["litegpu default.yaml", str(env_file), "config dict passed by the application",
                           "keyword arguments"]
    assert cfg.backend_options("fakegpu")["workgroup_size"] == 128


def test_env_config_errors_name_that_file(tmp_path, monkeypatch):
    env_file = tmp_path / "site.yaml"
    env_file.write_text("# site config\nlogging:\n  level: LOUD\n")
    monkeypatch.setenv("LITEGPU_CONFIG", str(env_file))
    with pytest.raises(ConfigError, match=rf"logging.level: 'LOUD' is not one of .* \({env_file} line 3\)"):
        load_config()
    monkeypatch.setenv("LITEGPU_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="LITEGPU_CONFIG names a file that does not exist"):
        load_config()


def test_backends_all_section_precedence(tmp_path):
    f = tmp_path / "app.yaml"
    f.write_text("backends:\n  all:\n    precision: fp16\n  opencl:\n    precision: fp32\n")
    cfg = load_config(f)
    assert cfg.backend_options("opencl")["precision"] == "fp32"  # named section beats all in one layer
    assert cfg.backend_options("vulkan")["precision"] == "fp16"
    cfg = load_config(f, precision="fp16_fp32acc")  # a higher layer's all beats a lower named section
    assert cfg.backend_options("opencl")["precision"] == "fp16_fp32acc"
    cfg = load_config(f, backends={"opencl": {"device": 2}})
    assert cfg.backend_options("opencl") | {"cache": None} == {"precision": "fp32", "device": 2, "cache": None}


def test_backend_options_reach_load_delegate_with_backend_defaults():
    cfg = load_config({"backends": {"fakegpu": {"workgroup_size": 256}}})
    d = litegpu.load_delegate("fakegpu", cfg.backend_options("fakegpu"))
    assert d.options["workgroup_size"] == 256
    assert d.options["precision"] == "fp16"  # the backend's own default_options
    assert d.options["cache"]["enabled"] is True and d.options["tuning"] == "none"
    assert d.name == "fakegpu"


def test_not_installed_first_party_backend_accepts_its_own_keys():
    cfg = load_config({"backends": {"webgpu": {"power_preference": "high-performance", "precision": "fp16"}}})
    assert cfg.backend_options("webgpu")["power_preference"] == "high-performance"


def test_packaged_presets_are_valid_and_installed_as_package_data():
    names = packaged_configs()
    assert {"default", "low-latency", "max-precision", "cpu-only"} <= set(names)
    assert (packaged_config_dir() / "__init__.py").is_file()
    for name in names:
        text = (packaged_config_dir() / f"{name}.yaml").read_text()
        assert text.lstrip().startswith("#"), f"{name}.yaml should open with a comment saying what it is for"
        cfg = load_config(name)
        assert cfg.sources[-1] == f"packaged {name}.yaml"
    assert load_config("cpu-only").backends == ["cpu"]
    assert load_config("low-latency").backend_options("opencl")["precision"] == "fp16"
    assert load_config("max-precision").get("autoselect.precisions") == ["fp32"]
    # the source tree's pyproject (the tests may run against an installed litegpu): the presets live
    # inside the package (core/litegpu/configs), installed as its package data, with no folder remapping
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'package-dir = { "" = "core" }' in pyproject and '"litegpu.configs" = ["*.yaml"]' in pyproject


def test_config_object_roundtrip_and_overrides():
    cfg = load_config({"partition": {"min_nodes_per_partition": 2}})
    again = load_config(yaml.safe_load(cfg.to_yaml()))
    assert again.data == cfg.data
    assert load_config(cfg, min_nodes_per_partition=5).get("partition.min_nodes_per_partition") == 5
    assert cfg.get("partition.min_nodes_per_partition") == 2  # unchanged


# -- litegpu.load -------------------------------------------------------------------------------------


class FakeInterpreter:
    instances: list = []

    def __init__(self, model_path=None, model_content=None, experimental_delegates=None, num_threads=None):
        self.kwargs = dict(model_path=model_path, model_content=model_content,
                           experimental_delegates=experimental_delegates)
        self.allocated = False
        self.partition_options = None
        FakeInterpreter.instances.append(self)

    def set_partition_options(self, options):
        assert not self.allocated, "partition options must be set before allocate_tensors"
        self.partition_options = options

    def allocate_tensors(self):
        self.allocated = True


@pytest.fixture
def fake_interpreter(monkeypatch):
    monkeypatch.setattr(litegpu._load, "Interpreter", FakeInterpreter)
    FakeInterpreter.instances.clear()
    return FakeInterpreter


def test_load_uses_first_available_backend(fake_interpreter, caplog):
    with caplog.at_level(logging.INFO, logger="litegpu"):
        it = litegpu.load(b"model-bytes", backend=["opencl", "downgpu", "fakegpu", "cpu"], max_delegated_partitions=2)
    assert it.allocated and it.litegpu_backend == "fakegpu"
    (d,) = it.kwargs["experimental_delegates"]
    assert isinstance(d, FakeDelegate) and d.options["precision"] == "fp16"
    assert it.kwargs["model_content"] == b"model-bytes"
    assert it.partition_options.max_delegated_partitions == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(
        "backend 'opencl' is not installed (pip install 'litegpu[opencl]'); backend 'downgpu' is not available "
        "here: no Down driver")
    assert warnings[0].endswith("; running on fakegpu instead")


def test_load_falls_back_to_cpu_with_reasons(fake_interpreter, caplog, tmp_path):
    model = tmp_path / "m.tflite"
    with caplog.at_level(logging.INFO, logger="litegpu"):
        it = litegpu.load(model, backend=["downgpu"])
    assert it.litegpu_backend == "cpu" and it.kwargs["experimental_delegates"] is None
    assert it.kwargs["model_path"] == str(model)
    assert any(r.levelno == logging.WARNING and r.getMessage().startswith(
        "backend 'downgpu' is not available here") and r.getMessage().endswith(
        "running on the CPU reference interpreter instead") for r in caplog.records)


def test_load_auto_picks_first_available_gpu_and_says_so(fake_interpreter, caplog, tmp_path):
    with caplog.at_level(logging.INFO, logger="litegpu"):
        it = litegpu.load(b"m", cache={"dir": str(tmp_path)})
    assert it.litegpu_backend == "fakegpu"
    # no decision cached for this model and no measure_on_load: nothing is measured
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "no measured decision cached for this model" in text and "litegpu autoselect MODEL" in text
    assert "backend 'auto' resolved to 'fakegpu'" in text
    assert "measuring" not in text and not list(tmp_path.glob("autoselect-*"))


def test_load_auto_that_cannot_measure_takes_the_first_gpu(fake_interpreter, caplog, tmp_path):
    with caplog.at_level(logging.INFO, logger="litegpu"):
        it = litegpu.load(b"m", cache={"dir": str(tmp_path)}, autoselect={"measure_on_load": True})
    assert it.litegpu_backend == "fakegpu"
    # b"m" is no model, so benchmark-based autoselect fails and auto falls back to the first GPU backend
    assert any("autoselect failed" in r.getMessage() for r in caplog.records)
    assert any("backend 'auto' resolved to 'fakegpu'" in r.getMessage() for r in caplog.records)


def test_load_config_errors_surface(fake_interpreter):
    with pytest.raises(ConfigError, match="backends.fakegpu.workgroup_size"):
        litegpu.load(b"m", backend="fakegpu", backends={"fakegpu": {"workgroup_size": 3}})
    assert not FakeInterpreter.instances


def test_load_sets_logger_level_only_when_configured(fake_interpreter):
    logger = logging.getLogger("litegpu")
    before = logger.level
    try:
        litegpu.load(b"m", backend="cpu")
        assert logger.level == before
        litegpu.load(b"m", backend="cpu", logging={"level": "debug"})
        assert logger.level == logging.DEBUG
    finally:
        logger.setLevel(before)


def test_load_signature():
    params = list(inspect.signature(litegpu.load).parameters)
    assert params[:3] == ["model", "config", "backend"]
