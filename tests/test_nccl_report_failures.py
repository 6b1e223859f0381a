"""A failed run quotes the line that says why; a log that is only cut short is bad input, whatever NCCL warned.

The logs are the real g4dn.metal launcher log (tests/fixtures/nccl/SOURCES.md) cut short, with lines added in the
wording of the programs that print them: NCCL up to v2.10.3 warns ``Failed to open libibverbs.so[.1]`` on hosts
without rdma-core's library (NVIDIA/nccl@v2.10.3-1 src/misc/ibvwrap.cc ``wrap_ibv_symbols``; an INFO line from
v2.11.4 on), which healthy runs print too; nccl-tests prints ``<host>: Test timeout (<s>s) common.cu:<line>`` when a
collective outlives ``-T`` and then `` .. <host> pid <pid>: Test failure common.cu:<line>`` from each ``TESTCHECK``
it returns through (NVIDIA/nccl-tests@v2.19.6 src/common.cu ``testStreamSynchronize``, src/common.h ``TESTCHECK``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from efa_stack import contract
from efa_stack.nccl_report import report_command
from efa_stack.nccl_report.model import NcclLogError
from efa_stack.nccl_report.parse import parse_text_runs

G4DN = (Path(__file__).parent / "fixtures" / "nccl" / "g4dn.metal-2node-efa-mpijob.log").read_text().splitlines()
TABLE_HEADER = next(i for i, line in enumerate(G4DN) if "size         count" in line)
FIRST_ROWS = TABLE_HEADER + 8  # the header, its units line, a NCCL INFO line and five rows
IBVERBS = "[1,1]<stdout>:test-nccl-efa-worker-1:21:21 [0] NCCL WARN Failed to open libibverbs.so[.1]"
TIMEOUT = "[1,0]<stdout>:test-nccl-efa-worker-0: Test timeout (300s) common.cu:523"
RELAY = ["[1,0]<stdout>: .. test-nccl-efa-worker-0 pid 21: Test failure common.cu:738",
         "[1,0]<stdout>: .. test-nccl-efa-worker-0 pid 21: Test failure common.cu:1037"]


def _with_warning(lines: list[str]) -> list[str]:
    """``lines`` with NCCL's libibverbs warning after worker 1's Bootstrap line (as NCCL <= 2.10 prints it)."""
    at = next(i for i, line in enumerate(lines) if "worker-1:21:21 [0] NCCL INFO Bootstrap" in line)
    return [*lines[:at + 1], IBVERBS, *lines[at + 1:]]


def _report(tmp_path: Path, lines: list[str], json_out: bool = False) -> tuple[int, str]:
    path = tmp_path / "launcher.log"
    path.write_text("\n".join(lines) + "\n")
    out, err = io.StringIO(), io.StringIO()
    code = report_command([path], "g4dn.metal", None, json_out, None, contract.NCCL_PASS_THRESHOLD,
                          console=Console(file=out, width=300, color_system=None),
                          err_console=Console(file=err, width=300, color_system=None))
    return code, out.getvalue() if json_out else " ".join(err.getvalue().split())


def test_a_complete_run_with_the_warning_is_judged():
    # the warning is no failure: the whole log with it reads and passes
    (run,) = parse_text_runs("\n".join(_with_warning(G4DN)), "g4dn.log")
    assert any("libibverbs" in p for p in run.problems)
    assert run.footer.out_of_bounds == 0


def test_a_cut_excerpt_with_a_benign_warning_is_bad_input_not_a_failed_run(tmp_path):
    # GIVEN the log cut after five rows, with NCCL's libibverbs warning in it
    lines = _with_warning(G4DN[:FIRST_ROWS])
    # WHEN reported THEN it is an incomplete log (exit 2), not "the run failed" (exit 1)
    code, err = _report(tmp_path, lines)
    assert code == 2
    assert "truncated" in err and "the nccl-tests run failed" not in err
    try:
        parse_text_runs("\n".join(lines), "cut.log")
    except NcclLogError as exc:
        assert exc.failure is None
    else:
        raise AssertionError("a cut log parsed")


def test_a_timeout_quotes_the_timeout_not_the_failure_lines_after_it(tmp_path):
    # GIVEN the run cut by nccl-tests' -T timeout, then the failure lines each TESTCHECK prints on the way out
    lines = _with_warning(G4DN[:FIRST_ROWS]) + [TIMEOUT, *RELAY]
    # WHEN reported THEN it is a failed run (exit 1) and the quoted line is the one that says why
    code, err = _report(tmp_path, lines)
    assert code == 1
    assert "Test timeout (300s)" in err and "Test failure common.cu:738" not in err
    code, out = _report(tmp_path, lines, json_out=True)
    doc = json.loads(out)
    assert code == doc["exit_code"] == 1
    assert doc["error"]["failure"] == f"line {len(lines) - 2}: {TIMEOUT.split(':', 1)[1]}"


def test_failure_lines_alone_still_say_the_run_failed(tmp_path):
    # only the relayed lines (the cause was not captured): the run failed all the same, quoting the first
    code, err = _report(tmp_path, G4DN[:FIRST_ROWS] + RELAY)
    assert code == 1 and "Test failure common.cu:738" in err


def test_the_cause_is_kept_behind_many_warnings(tmp_path):
    # every rank of a large job warns: the timeout after 30 warnings is still the line quoted
    warnings = [IBVERBS.replace("worker-1:21:21", f"worker-1:21:{n}") for n in range(30)]
    code, err = _report(tmp_path, G4DN[:FIRST_ROWS] + warnings + [TIMEOUT, *RELAY])
    assert code == 1 and "Test timeout (300s)" in err
