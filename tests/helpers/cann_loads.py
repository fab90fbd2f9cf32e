"""Loads CANN in a fresh process, step by step, with jax_unpool's extension module alone
(no jax: a few milliseconds a process), and prints what each step answered as JSON.

    python cann_loads.py '{"module": PATH_OF_THE_EXTENSION, "preload": LIBRARY_OR_NULL,
                           "steps": [["load", LIBRARY_DIR, HOST], ["probe", LIBRARY_DIR], ...]}'

`preload` is handed to ctypes.CDLL first, as a PJRT plugin would load the runtime: a path,
or a bare soname for the dynamic loader's search (LD_LIBRARY_PATH is read at start-up, so
the parent sets it). Each step prints {"where": {...}} or {"error": message}.
"""

import ctypes
import importlib.util
import json
import sys

spec = json.loads(sys.argv[1])
module_spec = importlib.util.spec_from_file_location("_jax_unpool", spec["module"])
module = importlib.util.module_from_spec(module_spec)
module_spec.loader.exec_module(module)
if spec["preload"]:
    ctypes.CDLL(spec["preload"])
answers = []
for kind, *args in spec["steps"]:
    call = module.load_cann if kind == "load" else module.probe_cann
    try:
        answers.append({"where": dict(call(*args))})
    except RuntimeError as err:
        answers.append({"error": str(err)})
print(json.dumps(answers))
