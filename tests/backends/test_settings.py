"""The environment variables jax_unpool reads, in one module (`jax_unpool._settings`): each
value checked there, with an error naming the variable; the out-of-range policy they set is
the unpool primitives' `check_indices`, in the jaxpr; no lowering reads the environment."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fresh_process
import pytest

from jax_unpool import _settings

PACKAGE = Path(__file__).resolve().parents[2] / "jax_unpool"


@pytest.mark.parametrize("name, value, message", [
    ("JAX_UNPOOL_BACKEND", "XLA", "JAX_UNPOOL_BACKEND must be 'xla' or unset, got 'XLA'"),
    ("JAX_UNPOOL_CHECK_INDICES", "yes",
     "JAX_UNPOOL_CHECK_INDICES must be '1' or '0' or unset, got 'yes'"),
    ("JAX_UNPOOL_CUDA_CHECK_INDICES", "true",
     "JAX_UNPOOL_CUDA_CHECK_INDICES must be '1' or '0' or unset, got 'true'"),
    ("JAX_UNPOOL_NPU_CHECK_INDICES", "2",
     "JAX_UNPOOL_NPU_CHECK_INDICES must be '1' or '0' or unset, got '2'"),
    ("JAX_UNPOOL_CUDA_OPS", "max_pool,max_unpoool",
     "JAX_UNPOOL_CUDA_OPS must name ops among max_unpool, max_unpool_backward, max_pool"),
    ("JAX_UNPOOL_CPU_GATHER", "avx2",
     "JAX_UNPOOL_CPU_GATHER must be 'vector' or 'scalar' or unset, got 'avx2'"),
])
def test_a_value_it_does_not_know_is_an_error_naming_the_variable(name, value, message):
    with pytest.raises(_settings.SettingError) as err:
        _settings.read({name: value})
    assert message in str(err.value)


def test_unset_means_each_platforms_backend_and_no_extra_checks():
    assert _settings.read({}) == {"backend": None, "check_indices": False,
                                  "cuda_ops": ("max_unpool", "max_unpool_backward", "max_pool"),
                                  "cpu_gather": None}


@pytest.mark.parametrize("name", ["JAX_UNPOOL_CHECK_INDICES", "JAX_UNPOOL_CUDA_CHECK_INDICES",
                                  "JAX_UNPOOL_NPU_CHECK_INDICES"])
def test_each_check_variable_sets_the_default_of_check_indices(name):
    assert _settings.read({name: "1"})["check_indices"] is True
    assert _settings.read({name: "0"})["check_indices"] is False


JAXPR = """
import jax, jax.numpy as jnp, jax_unpool as ju
x, i = jnp.ones((1, 1, 2, 2)), jnp.zeros((1, 1, 2, 2), jnp.int32)
print(jax.make_jaxpr(lambda x: jax.grad(lambda x: ju.max_unpool2d(x, i, 2).sum())(x))(x))
"""


@pytest.mark.parametrize("value, shown", [("1", "True"), ("", "False")])
def test_the_policy_is_in_the_jaxpr_of_both_ops(value, shown):
    env = fresh_process.child_env(JAX_UNPOOL_CHECK_INDICES=value)
    done = subprocess.run([sys.executable, "-c", JAXPR], capture_output=True, text=True,
                          env=env, timeout=300, check=True)
    assert done.stdout.count(f"check_indices={shown}") == 2, done.stdout  # forward, transpose


def test_a_bad_value_stops_the_import_with_the_variables_name():
    env = fresh_process.child_env(JAX_UNPOOL_CHECK_INDICES="yes")
    done = subprocess.run([sys.executable, "-c", "import jax_unpool"], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "jax_unpool._settings.SettingError: jax_unpool: environment variable "
        "JAX_UNPOOL_CHECK_INDICES must be '1' or '0' or unset, got 'yes'")


def test_only_the_settings_module_reads_the_environment():
    readers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                    getattr(node.value, "id", None) == "os":
                readers.append(str(path.relative_to(PACKAGE)))
    # The command line shows the CPU gather setting it was started with (`info`).
    assert sorted(set(readers)) == ["_settings.py"], readers
