"""nccl-report's expectation (ring and tree bounds, published runs) and the findings of a held-out review:
unchecked runs, single-rank sendrecv, ``mpirun --tag-output`` pieces inside rows, failed runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from efa_stack.nccl_report import expected_busbw, judge, parse_log
from efa_stack.nccl_report.judge import tree_factor
from tests.test_nccl_report import FOOTER, NEW_HEADER, GiB, MiB, new_row, run_command, write

A100_HOSTS = ["node-a", "node-b"]


def header(ranks_per_node: int = 8, hosts: list[str] = A100_HOSTS, collective: str = "all_reduce",
           gpu: str = "NVIDIA A100-SXM4-40GB") -> list[str]:
    pairs = [(h, i) for h in hosts for i in range(ranks_per_node)]  # ranks are numbered host by host
    devices = [
        f"#  Rank {k:2d} Group  0 Pid {100 + i:6d} on {h} device {i:2d} [0x{16 + i:x}] {gpu}"
        for k, (h, i) in enumerate(pairs)
    ]
    return [f"# Collective test starting: {collective}_perf", NEW_HEADER[0], "#", "# Using devices", *devices,
            "#", *NEW_HEADER[-3:]]


def log(tmp_path: Path, busbw: float, *, extra: list[str] = (), **kw) -> Path:  # type: ignore[assignment]
    rows = [new_row(MiB, busbw / 10), new_row(256 * MiB, busbw * 0.9), new_row(GiB, busbw)]
    lines = header(**kw)
    return write(tmp_path, "run.log", lines[:4] + list(extra) + lines[4:] + rows + FOOTER)


# --- the bounds -----------------------------------------------------------------------------------------------

def test_tree_factor_is_n_minus_1_over_n_times_nodes_over_nodes_minus_1():
    assert tree_factor(2, 16) == pytest.approx(2 * 15 / (1 * 16)) == 1.875
    assert tree_factor(4, 32) == pytest.approx(4 * 31 / (3 * 32))
    assert tree_factor(2, 2) == 1.0  # one rank per node: the tree moves what the ring moves
    assert tree_factor(1, 8) == 1.0


def test_p4d_pair_at_half_speed_is_below_the_tree_bound(tmp_path):
    # GIVEN 2 x p4d.24xlarge (50 GB/s of EFA each), 8 ranks per node, NCCL choosing the algorithm
    # WHEN the pair reaches 40 GB/s (80% of the line rate, about half of a healthy pair's 77 GB/s)
    v = judge(parse_log(log(tmp_path, 40.0)), "p4d.24xlarge", 2)
    # THEN it is judged against the tree bound (50 x 1.875 = 93.75 GB/s), and fails the 70% mark
    assert v.expectation is not None and v.expectation.bound == "tree"
    assert v.expectation.expected_gbytes == pytest.approx(93.75)
    assert v.status == "below expectation" and not v.ok
    assert "tree bound" in v.summary and "93.75" in v.summary


def test_healthy_p4d_pair_above_the_line_rate_passes(tmp_path):
    v = judge(parse_log(log(tmp_path, 77.35)), "p4d.24xlarge", 2)
    assert v.status == "pass" and v.ratio == pytest.approx(77.35 / 93.75)
    assert any("1.55 x the line rate" in n for n in v.notes)


def test_nccl_algo_ring_in_the_log_judges_against_the_ring_bound(tmp_path):
    ring = ["node-a:100:100 [0] NCCL INFO NCCL_ALGO set by environment to Ring"]
    run = parse_log(log(tmp_path, 40.0, extra=ring))
    assert run.facts.algorithm == "Ring"
    v = judge(run, "p4d.24xlarge", 2)
    assert v.expectation is not None and v.expectation.bound == "ring" and v.expectation.expected_gbytes == 50.0
    assert v.status == "pass" and "NCCL_ALGO=Ring" in v.expectation.reason


def test_all_gather_is_judged_against_the_ring_bound(tmp_path):
    v = judge(parse_log(log(tmp_path, 40.0, collective="all_gather")), "p4d.24xlarge", 2)
    assert v.expectation is not None and v.expectation.bound == "ring" and v.status == "pass"


def test_p5_pair_uses_the_published_run_and_four_nodes_the_tree_bound():
    two = expected_busbw("p5.48xlarge", 2)
    assert two.bound == "published run" and two.expected_gbytes == 444.31
    four = expected_busbw("p5.48xlarge", 4)
    assert four.bound == "tree" and four.expected_gbytes == pytest.approx(400 * 4 * 31 / (3 * 32))
    # the reason says which bound and shows both
    assert "tree bound" in four.reason and "ring bound" in four.reason


def test_a_partial_node_run_is_not_judged_by_a_whole_node_publication():
    # g4dn's published run used one GPU per node: it does not become the expectation for 8 ranks a node
    assert expected_busbw("g4dn.metal", 2).bound == "tree"


# --- held-out review findings --------------------------------------------------------------------------------

def test_run_with_validation_off_is_unchecked_not_ok(tmp_path):
    # nccl-tests -c 0 prints N/A in #wrong and still ends with "Out of bounds values : 0 OK"
    rows = [new_row(MiB, 5.0, wrong="N/A", ip_wrong="N/A"), new_row(GiB, 11.0, wrong="N/A", ip_wrong="N/A")]
    run = parse_log(write(tmp_path, "c0.log", NEW_HEADER + rows + FOOTER))
    assert run.correctness == "unchecked"
    assert "correctness: unchecked" in judge(run).summary


def test_single_rank_sendrecv_message_says_busbw_is_algbw(tmp_path):
    lines = header(ranks_per_node=1, hosts=["node-a"], collective="sendrecv")
    run = parse_log(write(tmp_path, "one.log", lines + [new_row(GiB, 11.0)] + FOOTER))
    v = judge(run)
    assert v.status == "single rank"
    assert "busbw equals algbw" in v.reason and "0 by definition" not in v.reason
    one_allreduce = parse_log(write(tmp_path, "ar.log", header(1, ["node-a"]) + [new_row(GiB, 0.0)] + FOOTER))
    assert "0 by definition" in judge(one_allreduce).reason


def test_tag_output_pieces_inside_a_row_are_read(tmp_path):
    # mpirun --tag-output tags every piece nccl-tests prints with several printf calls
    tag = "[1,0]<stdout>:"
    rows = []
    for size, bw in ((MiB, 5.0), (GiB, 11.0)):
        r = new_row(size, bw)
        cut1, cut2 = r.index("  ", 60), r.index("  ", 100)
        rows.append(tag + r[:cut1] + tag + r[cut1:cut2] + tag + r[cut2:])
    run = parse_log(write(tmp_path, "tagged.log", [tag + ln for ln in NEW_HEADER] + rows + [tag + f for f in FOOTER]))
    assert [r.size for r in run.rows] == [MiB, GiB]
    assert run.large_message_row().out_of_place.busbw == 11.0


@pytest.mark.parametrize("failure", [
    "node-b: Test NCCL failure common.cu:1279 'remote process exited or there was a network error / '",
    "node-a: Test CUDA failure common.cu:890 'out of memory'",
    "[node-a:00101] [[1234,1],3] mpirun noticed that process rank 3 with PID 0 on node node-b exited on signal 9",
])
def test_failed_run_is_a_failed_check_that_quotes_why(tmp_path, failure):
    # GIVEN a run whose table stops and whose log says why
    lines = NEW_HEADER + [new_row(MiB, 5.0), "node-b:102:190 [0] NCCL WARN NET/OFI Request completed with error",
                          failure]
    path = write(tmp_path, "failed.log", lines)
    # WHEN reported THEN it is a failed check (exit 1), quoting the strongest line, not bad input (exit 2)
    code, _, err = run_command([path], instance_type="p4d.24xlarge")
    assert code == 1 and failure.split(": ", 1)[-1][:30] in " ".join(err.split())
    code, out, _ = run_command([path], instance_type="p4d.24xlarge", json_out=True)
    doc = json.loads(out)
    assert code == doc["exit_code"] == 1 and failure in doc["error"]["failure"]


def test_truncated_log_without_a_failure_line_is_still_bad_input(tmp_path):
    path = write(tmp_path, "cut.log", NEW_HEADER + [new_row(MiB, 5.0)])
    code, _, err = run_command([path])
    assert code == 2 and "truncated" in err
