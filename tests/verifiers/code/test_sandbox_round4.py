"""Issue 29, a fourth red team (this project's own, before the outside one): what a program
could still make the host do, make itself unjudged with, or hold outside its budget.

Each test here failed on the code before its fix: a forged report the host could not decode, a
container made unusable by its own folders' modes, a quadratic folder clear and reply read,
kernel memory held through pipes and inotify, a writable stdin, numbers the float tolerance
should not have read as numbers.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from veristep.verifiers import Status
from veristep.verifiers.code.plain_data import decode_plain
from veristep.verifiers.code.verifier import outputs_match

TWO_TESTS = [{"stdin": "1 2", "stdout": "3"}, {"stdin": "2 2", "stdout": "5"}]


def _judged(result, *statuses: Status) -> None:
    assert result.judged, (result.status, result.detail)
    assert result.status in statuses, (result.status, result.detail)


# ---- a forged report line the host cannot turn into a value ----------------------------------
def test_a_complex_too_large_for_a_float_is_a_decode_error():
    text = json.dumps({"$complex": [{"$int": "f" * 400}, 0]})
    with pytest.raises(ValueError):
        decode_plain(text)


def test_a_forged_report_that_overflows_on_the_host_is_the_programs_verdict(code_verifier):
    code = """
        import json, os
        bad = json.dumps({"$complex": [{"$int": "f" * 400}, 0]})
        os.write(3, (json.dumps({"index": 0, "value": bad}) + "\\n").encode())
        def f(x):
            return 0
    """
    for reference in ({"asserts": ["assert f(1) == 2"]},
                      {"fn_name": "f", "inputs": [[1]], "outputs": [2]}):
        _judged(code_verifier.verify(textwrap.dedent(code), reference), Status.WRONG)


# ---- the program's own folders, locked or filled ------------------------------------------------
@pytest.mark.parametrize("folder", ["/sandbox", "/tmp"])
def test_a_program_that_locks_its_folders_still_gets_its_verdict(code_verifier, folder):
    # The program owns its tmpfs roots: mode 0 on one made the next step's set-up fail in the
    # container's supervisor (sandbox_error, unjudged), and what it left there stayed.
    code = f"""
        import os
        if os.path.exists("/tmp/left"):
            print("LEFT")
        a, b = map(int, input().split())
        print(a + b)
        open("/tmp/left", "w").close()
        os.chmod({folder!r}, 0)
    """
    result = code_verifier.verify(textwrap.dedent(code), {"tests": TWO_TESTS})
    _judged(result, Status.WRONG)
    assert result.extra["passed"] == 1
    right = textwrap.dedent(code).replace("print(a + b)", "print(a + b if a == 1 else 5)")
    _judged(code_verifier.verify(right, {"tests": TWO_TESTS}), Status.CORRECT)


def test_a_full_read_only_folder_is_cleared_in_linear_time(timed_verify):
    # Filled to its inode cap, then made read-only: the clear before the next test walked the
    # folder once per entry it could not remove (12 s, then "sandbox did not answer in time").
    code = """
        import os
        a, b = map(int, input().split())
        print(a + b)
        n = 0
        try:
            while True:
                os.close(os.open("/tmp/f%d" % n, os.O_CREAT | os.O_WRONLY, 0o600))
                n += 1
        except OSError:
            pass
        os.chmod("/tmp", 0o500)
    """
    result, seconds = timed_verify(code, {"tests": TWO_TESTS}, timeout=5.0)
    _judged(result, Status.WRONG)
    assert result.extra["passed"] == 1
    assert seconds < 8.0


def test_large_invalid_output_on_every_channel_is_read_in_linear_time(timed_verify):
    # Just under the output cap of undecodable bytes on stdout and on the report channel: the
    # host read the reply frame by concatenating bytes, quadratic, 11 s of CPU holding the GIL.
    code = """
        import os
        def write(fd, data):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        write(1, b"\\xff" * ((8 << 20) - 4096))
        write(3, b"\\xff" * ((8 << 20) - 4096))
        def f(x):
            return 2
    """
    result, seconds = timed_verify(code, {"asserts": ["assert f(1) == 2"]}, timeout=2.0)
    assert result.judged, (result.status, result.detail)
    assert seconds < 8.0


# ---- kernel memory outside the budget, and a writable stdin ------------------------------------
def test_vmsplice_and_inotify_are_denied(code_verifier):
    # vmsplice of one page of a transparent huge page pins all 2 MiB in a pipe, outside every
    # count (a 64 MiB program held 956 MiB); inotify watches are per-user kernel memory shared
    # by every sandbox on the host.
    code = """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        class IoVec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
        buf = ctypes.create_string_buffer(4096)
        r, w = os.pipe()
        vec = IoVec(ctypes.cast(buf, ctypes.c_void_p), 4096)
        got = []
        if libc.vmsplice(w, ctypes.byref(vec), 1, 0) >= 0:
            got.append("vmsplice")
        if libc.inotify_init1(0) >= 0:
            got.append("inotify")
        print("LEAK " + " ".join(got) if got else "denied")
    """
    _judged(code_verifier.verify(textwrap.dedent(code), {"tests": [{"stdout": "denied"}]}),
            Status.CORRECT)


def test_standard_input_cannot_be_written_or_grown(code_verifier):
    # The test's stdin was a writable memfd: up to the file-size limit per test that no
    # budget counted.
    code = """
        import os
        held = []
        for call in (lambda: os.write(0, b"x" * 4096), lambda: os.ftruncate(0, 1 << 20)):
            try:
                call()
                held.append(call)
            except OSError:
                pass
        print(input() if not held else "LEAK")
    """
    _judged(code_verifier.verify(textwrap.dedent(code),
                                 {"tests": [{"stdin": "kept\n", "stdout": "kept"}]}),
            Status.CORRECT)


# ---- what the float tolerance reads as a number ------------------------------------------------
def test_float_tolerance_reads_ascii_finite_numbers_only():
    assert outputs_match("3.0000001", "3", float_tolerance=1e-6)
    for got, want in (("３", "3"), ("٣", "3"), ("१२", "12"), ("1e400", "1e309"),
                      ("-1e999", "-1e400")):
        assert not outputs_match(got, want, float_tolerance=1e-6), (got, want)
    assert outputs_match("1e400", "1e400", float_tolerance=1e-6)  # the same text still matches
