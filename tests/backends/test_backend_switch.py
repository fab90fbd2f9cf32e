"""JAX_UNPOOL_BACKEND=xla, read when jax_unpool is imported: every platform, the CPU
included, lowers through the XLA-ops backend; the CPU targets stay registered; any other
value is refused. Each case runs in a fresh process (the variable is read at import)."""

from __future__ import annotations

import subprocess
import sys

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle

import jax_unpool as ju

SWITCHED = """
import sys
import jax, jax.numpy as jnp, numpy as np
import jax_unpool as ju
from jax_unpool import backends
from jax_unpool.backends import registry

assert backends.switch() == "xla", backends.switch()
for op in registry.OPS:
    assert registry.serving("cpu", op).backend == "xla", (op, registry.serving("cpu", op))

def step(x):
    def loss(x):
        v, i = ju.max_pool2d_with_indices(x, 2)
        return jnp.sum(ju.max_unpool2d(v * 3, i, 2) * x)
    return jax.value_and_grad(loss)(x)

text = jax.jit(step).lower(jnp.zeros((2, 3, 8, 8))).as_text()
assert "custom_call" not in text, text
data = np.load(sys.argv[1])
value, grad = jax.jit(step)(data["x"])
np.save(sys.argv[2], np.asarray(grad))
# An artifact exported without the switch calls the CPU targets: it still runs.
exported = jax.export.deserialize(bytearray(open(sys.argv[3], "rb").read()))
np.save(sys.argv[4], np.asarray(exported.call(data["v"], data["i"])))
print("OK")
"""


def _step(x):
    def loss(x):
        v, i = ju.max_pool2d_with_indices(x, 2)
        return jnp.sum(ju.max_unpool2d(v * 3, i, 2) * x)
    return jax.value_and_grad(loss)(x)


def test_switch_lowers_the_cpu_through_xla_ops_and_keeps_the_targets(tmp_path, rng):
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    v, i = (np.asarray(a) for a in ju.max_pool2d_with_indices(x, 2))
    np.savez(tmp_path / "in.npz", x=x, v=v, i=i)
    exported = jax.export.export(jax.jit(lambda v, i: ju.max_unpool2d(v, i, 2)),
                                 disabled_checks=ju.export_safety_checks())(v, i)
    assert "jax_unpool_max_unpool_v2" in exported.mlir_module()
    (tmp_path / "f.bin").write_bytes(exported.serialize())
    proc = subprocess.run(
        [sys.executable, "-c", SWITCHED, str(tmp_path / "in.npz"), str(tmp_path / "grad.npy"),
         str(tmp_path / "f.bin"), str(tmp_path / "unpooled.npy")],
        env=fresh_process.child_env(JAX_UNPOOL_BACKEND="xla"), capture_output=True,
        text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-4000:]
    # The native kernels' gradient here, the XLA ops' there: the same bits.
    np.testing.assert_array_equal(np.load(tmp_path / "grad.npy"), np.asarray(_step(x)[1]))
    np.testing.assert_array_equal(np.load(tmp_path / "unpooled.npy"),
                                  oracle.unpool(v * 1, i, (8, 8)))


def test_unknown_value_is_refused_at_import():
    proc = subprocess.run([sys.executable, "-c", "import jax_unpool"],
                          env=fresh_process.child_env(JAX_UNPOOL_BACKEND="cpu"),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode != 0
    assert ("SettingError: jax_unpool: environment variable JAX_UNPOOL_BACKEND must be 'xla' "
            "or unset, got 'cpu'") in proc.stderr


def test_unset_or_empty_keeps_each_platforms_backend():
    code = ("from jax_unpool import backends; from jax_unpool.backends import registry; "
            "print(backends.switch(), registry.serving('cpu', 'max_unpool').backend)")
    for env in ({}, {"JAX_UNPOOL_BACKEND": ""}):
        child = fresh_process.child_env(**env)
        if not env:
            child.pop("JAX_UNPOOL_BACKEND", None)
        proc = subprocess.run([sys.executable, "-c", code], env=child, capture_output=True,
                              text=True, timeout=600, check=True)
        assert proc.stdout.split() == ["None", "cpu"]


def test_info_names_the_switch():
    proc = subprocess.run([sys.executable, "-m", "jax_unpool", "info"],
                          env=fresh_process.child_env(JAX_UNPOOL_BACKEND="xla"),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "JAX_UNPOOL_BACKEND: xla (every platform lowers through XLA ops)" in proc.stdout
    assert "  max_unpool2d " in proc.stdout
    for line in proc.stdout.splitlines():
        if line.startswith("  max_"):
            assert line.split()[1:3] == ["XLA", "ops"], line


NPU_UNDER_SWITCH = """
import sys, warnings
import jax, jax.numpy as jnp
import jax_unpool as ju
from jax_unpool import npu
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    where = npu.register("cpu", sys.argv[1])
messages = [str(w.message) for w in caught]
assert any("JAX_UNPOOL_BACKEND=xla (read at import) keeps every platform on XLA's ops"
           in m for m in messages), messages
assert where and not npu.cpu_emulation_active()
x = jnp.zeros((1, 1, 2, 2))
text = jax.jit(lambda v, i: ju.max_unpool2d(v, i, 2)).lower(x, x.astype(jnp.int32)).as_text()
assert "custom_call" not in text, text
print("OK")
"""


def test_npu_register_loads_cann_but_keeps_xla_ops_under_the_switch(fake_cann_dir):
    proc = subprocess.run([sys.executable, "-c", NPU_UNDER_SWITCH, str(fake_cann_dir)],
                          env=fresh_process.child_env(JAX_UNPOOL_BACKEND="xla"),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-4000:]
