"""Which aclnn operators an Ascend chip has, by the SoC name CANN's aclrtGetSocName()
returns: the NPU routing sends an operation to aclnn only where CANN documents it.

The products per operator are the "产品支持情况" lists of hicann/ops-nn
index/scatter_elements/docs/aclnnMaxUnpool{2,3}d.md,
index/gather_elements/docs/aclnnMaxUnpool{2,3}dBackward.md and
pooling/max_pool3d_with_argmax_v2/docs/aclnnMaxPool{2dWithIndices,3dWithArgmax}.md. The
SoC names of each product are those of CANN's platform configs (hicann/runtime
src/platform/platform_config/{cann,cann-dev}/*.ini, SoC_version, which aclrtGetSocName
returns: src/acl/aclrt_impl/acl_rt_impl_base.cpp). The pool operators' sources check the
same chips: on every NpuArch but 2201 (Atlas A2/A3) and 3510 (the 950) the 2-D operator's
dtype list is empty ("support for Ascend910 is not implemented", 161002) and the 3-D
operator's CheckPlatform refuses (hicann/ops-nn pooling/max_pool3d_with_argmax_v2/op_api/
aclnn_max_pool2d_with_indices.cpp, aclnn_max_pool3d_with_argmax.cpp). The unpool
operators check no chip: on a product their docs exclude, their outcome is unknown.
"""

from __future__ import annotations

from typing import NamedTuple

UNPOOL_OPS = frozenset({"max_unpool2d", "max_unpool2d_backward", "max_unpool3d",
                        "max_unpool3d_backward"})
BACKWARDS = frozenset({"max_unpool2d_backward", "max_unpool3d_backward"})
POOL_RANKS = frozenset({2, 3})  # aclnnMaxPool2dWithIndices, aclnnMaxPool3dWithArgmax


class Chip(NamedTuple):
    """A chip as CANN's operator docs name its product, and the operators they list."""

    product: str | None  # None: a chip none of the docs names
    unpool_ops: frozenset  # names as the extension's cann_ops()
    pool_ranks: frozenset  # 2 and/or 3


UNKNOWN = Chip(None, frozenset(), frozenset())
_EVERY_OP = (UNPOOL_OPS, POOL_RANKS)
# The first Atlas training series chips (NpuArch 1001). "Ascend910B" is the first 910's
# 30-core bin (hicann/runtime src/runtime/core/src/runtime.cc, SocTypeInit), not an Atlas A2;
# "Ascend910" is loaded as Ascend910A (src/platform/platform_info.cpp).
_TRAINING_910 = frozenset({"Ascend910", "Ascend910A", "Ascend910B", "Ascend910ProA",
                           "Ascend910ProB", "Ascend910PremiumA"})
# By SoC name prefix, the first match wins. Platform configs: Ascend910B1..B4, B2C, B4-1
# (A2); Ascend910_9362..9392 (A3); Ascend950PR_*, Ascend950DT_* (950); Ascend310P1/3/5/7;
# Ascend310B1..B4.
_BY_PREFIX = (
    ("Ascend910B", Chip("Atlas A2 training/inference series", *_EVERY_OP)),
    ("Ascend910_93", Chip("Atlas A3 training/inference series", *_EVERY_OP)),
    ("Ascend950", Chip("Ascend 950PR/950DT", *_EVERY_OP)),
    ("Ascend310P", Chip("Atlas inference series (Ascend 310P)", frozenset(), frozenset())),
    ("Ascend310B", Chip("Atlas 200I/500 A2 inference products (Ascend 310B)", frozenset(),
                        frozenset())),
)


def chip(soc_name: str | None) -> Chip:
    """The chip of SoC name `soc_name` (None: CANN named none), UNKNOWN for a name no
    product of the docs has."""
    if soc_name in _TRAINING_910:
        return Chip("Atlas training series (Ascend 910)", BACKWARDS, frozenset())
    for prefix, known in _BY_PREFIX:
        if soc_name and soc_name.startswith(prefix):
            return known
    return UNKNOWN
