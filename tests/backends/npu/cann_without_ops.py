"""Emulated CANNs that lack some aclnn ops (the layouts of fake_cann.build), for the tests
of what registering and calling the handlers say and do then."""

from fake_cann.check_fake_cann import build
from fresh_process import run_code

PREDATES = "this CANN predates the op; install a newer CANN toolkit"


def run_without_ops(tmp_path, layout, code):
    """Runs `code` in a fresh process, the directory of a `layout` build as sys.argv[1];
    returns the path of the build's op library and the lines the code printed."""
    lib_dir = build(tmp_path, layout=layout)
    proc = run_code(code, str(lib_dir))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return str(lib_dir / "libopapi.so"), proc.stdout.splitlines()


def missing_op(op, opapi, *functions, advice=PREDATES):
    """What a handler says when the loaded op library lacks the op's `functions`."""
    return (f"FAILED_PRECONDITION: {op}: the loaded CANN op library ({opapi}) has no "
            f"{', '.join(functions)}: {advice}")
