"""The prepares ``litegpu autoselect`` cut at its budget, finished in a background process.

A backend's first prepare of a model on a machine compiles every kernel: seconds to tens of
seconds on a CPU driver (lavapipe, PoCL).  Its compiled programs reach the serialization cache
only when the prepare finishes, and the command ends its process at the budget (``os._exit``, so
that an abandoned driver call cannot hold it past the budget): a cut prepare was lost, every later
call started it cold again and cut it again, and that backend was never measured.

:func:`spawn` starts ``python -m litegpu._autoselect_prepare`` in a new session at the lowest CPU
priority, with no terminal output; it prepares each given candidate's delegate on the model
exactly as the measurement does (:func:`litegpu._autoselect._make`: same options, same
configuration, so the same cache entry), runs it once (the drivers' own first-launch compiles go
into their disk caches) and exits.  The next ``litegpu autoselect`` then loads
those entries (a warm prepare, a fraction of the cold one) and can measure the backend within
its share.  The command announces it at WARNING with the process id; ``--no-background`` turns it off.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["spawn", "main"]

log = logging.getLogger("litegpu")


def spawn(model_path: str, cands: Sequence[Any], config: str | None = None) -> subprocess.Popen[bytes] | None:
    """Prepare ``cands`` (:class:`litegpu._autoselect.Candidate`) on ``model_path`` in a detached
    background process; ``config`` is the ``--config`` argument (None: the default configuration,
    ``LITEGPU_CONFIG`` included, as the caller saw it).  Returns the process, or None when it could
    not start (logged at WARNING: only a later call's speed depends on it)."""
    spec = {"model": str(model_path), "config": config,
            "candidates": [{"backend": c.backend, "precision": c.precision, "options": dict(c.options)} for c in cands]}
    try:
        return subprocess.Popen([sys.executable, "-m", "litegpu._autoselect_prepare", json.dumps(spec)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except (OSError, TypeError, ValueError) as e:  # TypeError/ValueError: options JSON cannot carry
        log.warning("autoselect: could not start the background prepare of %s: %s",
                    ", ".join(c.label for c in cands), e)
        return None


def main(argv: Sequence[str]) -> int:
    try:
        os.nice(19)  # behind everything the user runs meanwhile
    except (AttributeError, OSError):
        pass
    spec = json.loads(argv[0])
    from ._autoselect import Candidate, _load_config, _make
    from ._reader import read_model

    with open(spec["model"], "rb") as f:
        model = read_model(f.read())
    config = _load_config(spec["config"])
    import numpy as np

    from ._profile import random_inputs

    failed = 0
    for c in spec["candidates"]:
        try:
            # the delegate stores its compiled entry at the end of its prepare, as in any process
            interp = _make(model, Candidate(c["backend"], c["precision"], c["options"]), config)
            # and one run: some drivers compile more at the first launch (PoCL specialises every
            # kernel for its work-group size, lavapipe its shader variants), into their own disk
            # caches; without it the next call's first check paid that (seconds on a 2-core machine)
            for d, a in zip(interp.get_input_details(), random_inputs(interp.get_input_details(),
                                                                      np.random.default_rng(0)), strict=True):
                interp.set_tensor(d["index"], a)
            interp.invoke()
            del interp
        except Exception:  # noqa: BLE001 - nobody to tell: the next measurement reports its own failure
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
