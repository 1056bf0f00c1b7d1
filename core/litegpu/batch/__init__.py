"""``litegpu.batch``: batch inference beyond one process, on Ray Data (extra ``litegpu[ray]``).

A folder of images or ``.npy`` files, or a Parquet/Arrow dataset, flows through a Ray Data pipeline:
CPU tasks read and preprocess each input (resize, normalise, quantize: the same code as ``litegpu
eval``, :mod:`litegpu.cli._preprocess`); a pool of actors, each holding one prepared litegpu model on
one device (Ray's GPU id as the backend's device index; CPU actors when the cluster has no GPU), runs
the model and returns each batch's outputs; a write stage of CPU tasks writes one output shard per
batch (outside the actors, whose device thread would otherwise wait for the GIL while shards are
written); the driver only collects a small summary.  The model
is prepared once before the pool starts and its serialization-cache entries are shipped to every
actor, so each actor's prepare is a warm start.  Ray retries failed tasks, replaces an actor that dies
and re-runs its batch; shards are named by their contents, so a re-run rewrites the same file; a rerun
over the same output folder skips every input already written.  See docs/batch.md.

``run_batch`` is the API; ``litegpu batch`` the command; ``read_outputs`` loads a finished folder.
Importing this module does not import Ray.
"""

from ._job import BatchResult, list_inputs, run_batch
from ._shards import FORMATS, done_paths, read_outputs

__all__ = ["run_batch", "BatchResult", "list_inputs", "read_outputs", "done_paths", "FORMATS"]
