"""Testing helpers: a .tflite model builder and the LiteRT oracle."""

from ._builder import ModelBuilder, SubgraphBuilder
from ._oracle import assert_allclose_rel, random_inputs, rel_error, run_litegpu, run_litert

__all__ = [
    "ModelBuilder",
    "SubgraphBuilder",
    "run_litert",
    "run_litegpu",
    "rel_error",
    "assert_allclose_rel",
    "random_inputs",
]
