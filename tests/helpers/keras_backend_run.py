"""Runs jax_unpool.keras layers on the Keras backend that $KERAS_BACKEND names, so that a
test compares backends with the same code (tests/integration/test_keras.py):

    KERAS_BACKEND=torch python tests/helpers/keras_backend_run.py CASES.json IN.npz OUT.npz

CASES.json is a list of cases: {"rank": k, "pool": the pooling layer's config, "unpool":
the unpooling layer's config, "input": a name in IN.npz, "indices": optionally a name in
IN.npz (hand-made indices for the unpool instead of the pool's), "output_size": optionally
the unpool call's}. OUT.npz gets "<i>.values", "<i>.indices" and "<i>.unpooled" per case.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def run(cases: list[dict], inputs) -> dict[str, np.ndarray]:
    import keras

    import jax_unpool.keras as juk

    out = {}
    for i, case in enumerate(cases):
        k = case["rank"]
        pool = getattr(juk, f"MaxPoolingWithArgmax{k}D")(**case["pool"])
        unpool = getattr(juk, f"MaxUnpooling{k}D")(**case["unpool"])
        values, indices = pool(inputs[case["input"]])
        if case.get("indices"):
            indices = inputs[case["indices"]]
        unpooled = unpool(values, indices, output_size=case.get("output_size"))
        for name, value in (("values", values), ("indices", indices), ("unpooled", unpooled)):
            out[f"{i}.{name}"] = keras.ops.convert_to_numpy(value)
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    np.savez(sys.argv[3], **run(cases, np.load(sys.argv[2])))
