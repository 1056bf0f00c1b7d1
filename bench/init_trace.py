"""One prepare in this process with litegpu's debug timings: ``python bench/init_trace.py MODEL BACKEND CACHE_DIR``."""

import logging
import sys
import time

logging.basicConfig(level=logging.WARNING, format="%(message)s")
logging.getLogger("litegpu").setLevel(logging.DEBUG)
t0 = time.perf_counter()
import litegpu  # noqa: E402

t1 = time.perf_counter()
d = litegpu.load_delegate(sys.argv[2], {"cache": {"dir": sys.argv[3]}})
t2 = time.perf_counter()
it = litegpu.Interpreter(model_path=sys.argv[1], experimental_delegates=[d])
it.allocate_tensors()
t3 = time.perf_counter()
print(f"import {1e3 * (t1 - t0):.0f} ms, load_delegate {1e3 * (t2 - t1):.0f} ms, "
      f"Interpreter+allocate {1e3 * (t3 - t2):.0f} ms")
