"""Memory mappings: each pins a few hundred bytes of kernel memory that no resident size shows
(`vm_area_struct`, its share of a `maple_node`, `anon_vma` records), so the watchdog counts them:
at most one per 4 KiB of `memory_mb`, all processes of the completion together.

The two programs that split their memory into one-page mappings failed on the code before this
(they held their mappings and were judged correct: 1.9 GiB of kernel memory at `memory_mb=512`
in 64 processes, 7 MiB seen by the watchdog).
"""

from __future__ import annotations

import textwrap

import pytest
from veristep.verifiers import Status
from veristep.verifiers.code.sandbox import StepResult
from veristep.verifiers.code.verifier import classify_step

# 64 MiB: at most 16,384 mappings; each process holds about 8,600, so the fork doubles them.
_PYTHON_MAPPINGS = """
    import mmap, os, time
    maps = [mmap.mmap(-1, 4096) for _ in range(8500)]  # shared anonymous: none of them merge
    pid = os.fork()
    time.sleep(2)
    if pid:
        os.waitpid(pid, 0)
        print("held")
"""

_CPP_MAPPINGS = r"""
    #include <sys/mman.h>
    #include <sys/wait.h>
    #include <unistd.h>
    #include <cstdio>
    int main() {
      const long page = 4096, pages = 10240;  // 40 MiB, every other page read-only
      char* p = (char*)mmap(nullptr, pages * page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return 1;
      for (long i = 1; i < pages; i += 2) mprotect(p + i * page, page, PROT_READ);
      pid_t pid = fork();
      sleep(2);
      if (pid > 0) { waitpid(pid, nullptr, 0); std::puts("held"); }
    }
"""


@pytest.mark.parametrize("language", ["python", "cpp"])
def test_one_page_mappings_past_the_limit_are_a_memory_limit(make_code_verifier, language):
    verifier = make_code_verifier(timeout=3.0, workers=1, memory_mb=64)
    source = _PYTHON_MAPPINGS if language == "python" else _CPP_MAPPINGS
    with verifier:
        result = verifier.verify(f"```{language}\n{textwrap.dedent(source)}```",
                                 {"language": language,
                                  "tests": [{"stdin": "", "stdout": "held\n"}]})
    assert result.judged, (result.status, result.detail)
    assert result.status is Status.MEMORY_LIMIT, (result.status, result.detail)
    test = result.extra["tests"][0]
    assert "more than 16384 memory mappings" in test["detail"]
    assert test["time_s"] < 1.5  # stopped at a sample, not at the end of its sleep


def test_a_few_python_processes_stay_under_the_mapping_limit(make_code_verifier):
    # Five interpreters of about 23 MiB VmSize each: their bounds (one mapping per page) add up
    # to more than 16,384, so each one's mappings are counted (about 100 each).
    program = """
        import multiprocessing as mp
        def f(x):
            return sum(range(x * 10000))
        if __name__ == "__main__":
            with mp.Pool(4) as pool:
                print(sum(pool.map(f, range(16))))
    """
    expected = sum(sum(range(x * 10000)) for x in range(16))
    verifier = make_code_verifier(timeout=5.0, workers=1, memory_mb=64)
    with verifier:
        result = verifier.verify(f"```python\n{textwrap.dedent(program)}```",
                                 {"tests": [{"stdin": "", "stdout": f"{expected}\n"}]})
    assert result.status is Status.CORRECT, (result.status, result.detail)


def test_the_mapping_limit_is_named_in_the_detail():
    result = StepResult(exit_code=None, signal=9, stdout="", stderr="", wall_s=0.1,
                        timed_out=False, output_limited=False, limit="mappings",
                        peak_memory_bytes=1 << 20, mapping_limit=131072)
    assert classify_step(result) == (
        Status.MEMORY_LIMIT,
        "memory limit exceeded (more than 131072 memory mappings across the completion)")
