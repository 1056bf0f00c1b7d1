"""Testing helpers: a .tflite model builder, the LiteRT oracle, small generated models."""

from ._builder import Blockwise, ModelBuilder, SubgraphBuilder
from ._models import small_image_classifier
from ._oracle import assert_allclose_rel, random_inputs, rel_error, run_invokes, run_litegpu, run_litert

__all__ = [
    "ModelBuilder",
    "Blockwise",
    "SubgraphBuilder",
    "run_litert",
    "run_litegpu",
    "run_invokes",
    "rel_error",
    "assert_allclose_rel",
    "random_inputs",
    "small_image_classifier",
]
