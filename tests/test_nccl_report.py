"""Tests for efa_stack/nccl_report: parsing, verdicts, comparison, rendering, plotting, the command."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from efa_stack import contract
from efa_stack.nccl_report import (
    REFERENCE_RUNS,
    NcclLogError,
    compare_runs,
    expected_busbw,
    human_size,
    judge,
    parse_log,
    parse_text,
    plot_busbw,
    render_comparison,
    render_run,
    report_command,
    report_dict,
)
from efa_stack.planning.catalog import UnknownInstanceType

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
G4DN = FIXTURES / "g4dn.metal-2node-efa-mpijob.log"
P5 = FIXTURES / "p5.48xlarge-2node-efa-mpijob-table.log"
GiB = 1 << 30
MiB = 1 << 20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def p5():
    return parse_log(P5)


@pytest.fixture(scope="module")
def g4dn():
    return parse_log(G4DN)


# --------------------------------------------------------------------------------------------------
# Synthetic logs (hand-written for these tests; not real runs)

NEW_HEADER = [
    (
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0"
    ),
    "#",
    "# Using devices",
    "#  Rank  0 Group  0 Pid    101 on node-a device  0 [0x10] NVIDIA A100-SXM4-40GB",
    "#  Rank  1 Group  0 Pid    102 on node-b device  0 [0x10] NVIDIA A100-SXM4-40GB",
    "#",
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]
OLD_HEADER = [
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
    "#",
    "#                                                 out-of-place                    in-place",
    "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
    "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
]
FOOTER = ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.5", "#"]


def new_row(size: int, busbw: float, wrong: int | str = 0, redop: str = "sum", root: str = "-1",
            dtype: str = "float", ip_busbw: float | None = None, ip_wrong: int | str = 0) -> str:
    ip = busbw if ip_busbw is None else ip_busbw
    count = size // 4
    algbw = busbw  # 2 ranks: busbw == algbw for all_reduce
    t = (size / 1e3 / busbw) if busbw else 10.0
    return (
        f"{size:12d}  {count:12d}  {dtype:>8}  {redop:>6}  {root:>6}  {t:7.1f}  {algbw:6.2f}  {busbw:6.2f}"
        f"  {wrong!s:>6}  {t:7.1f}  {ip:6.2f}  {ip:6.2f}  {ip_wrong!s:>6}"
    )


def old_row(size: int, busbw: float, error: str = "5e-07") -> str:
    t = size / 1e3 / busbw
    return (
        f"{size:12d}  {size // 4:12d}  {'float':>6}  {'sum':>6}  {t:7.1f}  {busbw:6.2f}  {busbw:6.2f}"
        f"  {error:>6}  {t:7.1f}  {busbw:6.2f}  {busbw:6.2f}  {error:>6}"
    )


def mpi(lines: list[str], rank: int = 0) -> list[str]:
    return [f"[1,{rank}]<stdout>:{ln}" for ln in lines]


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def good_rows() -> list[str]:
    return [new_row(MiB, 5.0), new_row(256 * MiB, 10.0), new_row(GiB, 11.0)]


def efa_log_lines() -> list[str]:
    info = [
        "node-a:101:101 [0] NCCL INFO NET/OFI Selected Provider is efa (found 1 nics)",
        "node-a:101:101 [0] NCCL INFO Using network AWS Libfabric",
        "NCCL version 2.18.5+cuda12.2",
    ]
    return mpi(NEW_HEADER[:5] + info + NEW_HEADER[5:] + good_rows() + FOOTER)


def socket_log_lines() -> list[str]:
    info = [
        "node-a:101:101 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
        "node-a:101:101 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
        "node-a:101:101 [0] NCCL INFO Using network Socket",
        "NCCL version 2.18.5+cuda12.2",
        "node-a:101:105 [0] NCCL INFO Channel 00/0 : 1[10] -> 0[10] [receive] via NET/Socket/0",
    ]
    rows = [new_row(MiB, 0.5), new_row(256 * MiB, 1.0), new_row(GiB, 1.1)]
    return mpi(NEW_HEADER[:5] + info + NEW_HEADER[5:] + rows + FOOTER)


def run_command(logs, **kw):
    out, err = io.StringIO(), io.StringIO()
    code = report_command(
        [Path(p) for p in logs],
        kw.pop("instance_type", None),
        kw.pop("nodes", None),
        kw.pop("json_out", False),
        kw.pop("plot", None),
        kw.pop("threshold", contract.NCCL_PASS_THRESHOLD),
        console=Console(file=out, width=200, color_system=None),
        err_console=Console(file=err, width=200, color_system=None),
    )
    assert not kw
    return code, out.getvalue(), err.getvalue()


def rendered(renderable) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(renderable)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------
# The p5.48xlarge fixture (table and footer only)


def test_p5_row_count_includes_two_zero_byte_rows(p5):
    # 0, 0, then 4 B .. 2 GiB in powers of two: 2 + 30 = 32 rows.
    assert len(p5.rows) == 32
    assert [r.size for r in p5.rows[:3]] == [0, 0, 4]


def test_p5_largest_row_exact_numbers(p5):
    last = p5.rows[-1]
    assert last.size == 2 * GiB
    assert last.count == 536870912
    assert (last.type, last.redop, last.root) == ("float", "sum", -1)
    assert last.out_of_place.time_us == 9062.5
    assert last.out_of_place.algbw == 236.96
    assert last.out_of_place.busbw == 444.31
    assert last.in_place is not None
    assert last.in_place.busbw == 444.41
    assert last.in_place.time_us == 9060.4
    assert last.out_of_place.wrong == 0 and last.in_place.wrong == 0


def test_p5_footer(p5):
    assert p5.footer.avg_busbw == 79.9352
    assert p5.footer.out_of_bounds == 0
    assert p5.footer.out_of_bounds_status == "OK"


def test_p5_has_no_header_facts(p5):
    assert p5.facts.transport == "unknown"
    assert p5.facts.nranks is None and p5.facts.nodes is None and p5.facts.hostnames == ()
    assert p5.facts.nccl_version is None and p5.facts.ofi_nccl_version is None
    assert p5.check_column == "#wrong"
    assert p5.header_line == 3  # line 1 is the source's "...", line 2 the out-of-place/in-place line


def test_p5_correctness_ok(p5):
    assert not p5.has_wrong_values
    assert p5.correctness == "ok"
    assert p5.wrong_total == 0


def test_p5_row_line_numbers(p5):
    assert p5.rows[0].line == 5
    assert p5.rows[-1].line == 36


# --------------------------------------------------------------------------------------------------
# The g4dn.metal fixture (complete launcher log)


def test_g4dn_header_facts(g4dn):
    assert g4dn.facts.nranks == 2
    assert g4dn.facts.hostnames == ("test-nccl-efa-worker-0", "test-nccl-efa-worker-1")
    assert g4dn.facts.nodes == 2
    assert g4dn.facts.gpu_names == ("Tesla T4",)
    assert (g4dn.facts.nthread, g4dn.facts.ngpus) == (1, 1)
    assert (g4dn.facts.min_bytes, g4dn.facts.max_bytes) == (1, 1073741824)
    assert (g4dn.facts.iters, g4dn.facts.warmup_iters) == (100, 5)


def test_g4dn_versions(g4dn):
    assert g4dn.facts.nccl_version == "2.12.7"
    assert g4dn.facts.cuda_version == "11.4"
    assert g4dn.facts.ofi_nccl_version == "1.5.0aws"  # as printed by aws-ofi-nccl


def test_g4dn_transport_efa_with_evidence(g4dn):
    assert g4dn.facts.transport == "efa"
    assert len(g4dn.facts.transport_evidence) == 1
    assert "Selected Provider is efa" in g4dn.facts.transport_evidence[0]


def test_g4dn_devices(g4dn):
    d0, d1 = g4dn.facts.devices
    assert (d0.rank, d0.host, d0.pid, d0.device, d0.bus_id, d0.group) == (0, "test-nccl-efa-worker-0", 21, 0, "0x35", 0)
    assert (d1.rank, d1.bus_id) == (1, "0xf5")


def test_g4dn_rows_and_last_rows(g4dn):
    assert len(g4dn.rows) == 31  # 0, 0, 4 B .. 1 GiB
    last, before = g4dn.rows[-1], g4dn.rows[-2]
    assert last.size == GiB
    assert last.out_of_place.time_us == 344981
    assert (last.out_of_place.algbw, last.out_of_place.busbw) == (3.11, 3.11)
    assert last.in_place is not None
    assert (last.in_place.time_us, last.in_place.busbw) == (344454, 3.12)
    assert before.size == 512 * MiB
    assert (before.out_of_place.busbw, before.in_place.busbw) == (3.13, 3.12)


def test_g4dn_skips_nccl_info_line_inside_table(g4dn):
    # Line 56 is "NCCL INFO Launch mode Parallel", between the units line and the first row.
    assert g4dn.header_line == 55
    assert g4dn.rows[0].line == 58


def test_g4dn_footer_after_interleaved_destroy_lines(g4dn):
    assert g4dn.footer.avg_busbw == 1.15327
    assert g4dn.footer.out_of_bounds == 0


def test_g4dn_peak_is_not_the_last_row(g4dn):
    assert g4dn.peak_row().out_of_place.busbw == 3.15
    assert g4dn.peak_row().size == 256 * MiB


# --------------------------------------------------------------------------------------------------
# Reference runs: the table must match the published logs


def test_reference_p5_matches_fixture(p5):
    ref = next(r for r in REFERENCE_RUNS if r.instance_type == "p5.48xlarge")
    row = next(r for r in p5.rows if r.size == ref.size)
    assert (ref.busbw_out_of_place, ref.busbw_in_place) == (row.out_of_place.busbw, row.in_place.busbw)
    assert ref.nodes == 2 and "aws-do-eks" in ref.source


def test_reference_g4dn_matches_fixture(g4dn):
    ref = next(r for r in REFERENCE_RUNS if r.instance_type == "g4dn.metal")
    row = next(r for r in g4dn.rows if r.size == ref.size)
    assert (ref.busbw_out_of_place, ref.busbw_in_place) == (row.out_of_place.busbw, row.in_place.busbw)
    assert ref.ranks == g4dn.facts.nranks


# --------------------------------------------------------------------------------------------------
# expected_busbw


def test_expected_p5_line_rate():
    e = expected_busbw("p5.48xlarge", 2, algorithm="Ring")
    assert e.applicable and e.bound == "ring"
    assert e.line_rate_gbps == 3200.0
    assert e.line_rate_gbytes == 400.0 == e.expected_gbytes
    assert e.pass_mark_gbytes == pytest.approx(280.0)
    assert e.gpus_per_node == 8
    assert e.efa_interfaces == 32


def test_expected_g4dn_and_p4d_line_rates():
    assert expected_busbw("g4dn.metal", 2).line_rate_gbytes == 12.5
    assert expected_busbw("p4d.24xlarge", 4).line_rate_gbytes == 50.0


def test_expected_single_node_not_applicable():
    e = expected_busbw("p5.48xlarge", 1)
    assert not e.applicable
    assert "single node" in e.reason


def test_expected_instance_without_efa_not_applicable():
    e = expected_busbw("g4dn.xlarge", 2)
    assert not e.applicable
    assert e.line_rate_gbps == 0


def test_expected_unknown_instance_type_has_suggestions():
    with pytest.raises(UnknownInstanceType) as exc:
        expected_busbw("p5.48xl", 2)
    assert "p5.48xlarge" in exc.value.suggestions


@pytest.mark.parametrize("nodes", [0, -1])
def test_expected_rejects_bad_nodes(nodes):
    with pytest.raises(ValueError):
        expected_busbw("p5.48xlarge", nodes)


def test_expected_threshold_is_configurable():
    assert expected_busbw("p5.48xlarge", 2, threshold=0.5, algorithm="Ring").pass_mark_gbytes == 200.0
    with pytest.raises(ValueError):
        expected_busbw("p5.48xlarge", 2, threshold=0)


def test_expected_attaches_matching_references_only():
    assert [r.instance_type for r in expected_busbw("p5.48xlarge", 2).references] == ["p5.48xlarge"]
    assert expected_busbw("p5.48xlarge", 4).references == ()


# --------------------------------------------------------------------------------------------------
# Verdicts


def test_verdict_p5_passes_on_two_p5(p5):
    v = judge(p5, "p5.48xlarge", 2)
    assert v.status == "pass" and v.ok
    assert v.measured_busbw == 444.31  # out-of-place, max over sizes >= 1 GiB
    assert v.measured_size == 2 * GiB
    # no NCCL_ALGO in the log: NCCL chose, and a published healthy 2 x p5 run (16 ranks) is the expectation
    assert v.expectation is not None and v.expectation.bound == "published run"
    assert v.ratio == pytest.approx(444.31 / 444.31)
    assert v.nodes == 2


def test_verdict_p5_mentions_tree_algorithms_above_line_rate(p5):
    v = judge(p5, "p5.48xlarge", 2)
    assert any("tree" in n for n in v.notes)
    assert any("published reference" in n for n in v.notes)


def test_verdict_p5_without_nodes_is_not_judged(p5):
    v = judge(p5, "p5.48xlarge")
    assert v.status == "not judged" and v.ok
    assert "node count" in v.reason


def test_verdict_p5_strict_threshold_fails(p5):
    v = judge(p5, "p5.48xlarge", 2, threshold=1.2)
    assert v.status == "below expectation" and not v.ok


def test_verdict_g4dn_is_below_expectation(g4dn):
    # Largest size is 1 GiB: 3.11 GB/s against 100 Gbit/s = 12.5 GB/s -> 24.9 % < 70 %.
    v = judge(g4dn, "g4dn.metal")  # nodes inferred from the two hostnames
    assert v.nodes == 2
    assert v.measured_busbw == 3.11
    assert v.ratio == pytest.approx(3.11 / 12.5)
    assert v.status == "below expectation"
    assert not v.ok
    assert any("each g4dn.metal has 8 GPUs" in n for n in v.notes)


def test_verdict_g4dn_passes_with_low_threshold(g4dn):
    assert judge(g4dn, "g4dn.metal", threshold=0.2).status == "pass"


def test_verdict_single_node_not_applicable(g4dn):
    v = judge(g4dn, "g4dn.metal", nodes=1)
    assert v.status == "not applicable" and v.ok
    assert any("2 host(s)" in n for n in v.notes)  # --nodes disagrees with the header


def test_verdict_without_instance_type_not_judged(g4dn):
    v = judge(g4dn)
    assert v.status == "not judged" and v.ok and v.correctness == "ok"


def test_verdict_unknown_instance_type_raises(g4dn):
    with pytest.raises(UnknownInstanceType):
        judge(g4dn, "g4dn.metall")


def test_verdict_uses_max_over_sizes_from_1gib(tmp_path):
    rows = [new_row(256 * MiB, 300.0), new_row(GiB, 320.0), new_row(2 * GiB, 310.0)]
    run = parse_log(write(tmp_path, "x.log", NEW_HEADER + rows + FOOTER))
    v = judge(run, "p5.48xlarge", 2)
    assert (v.measured_size, v.measured_busbw) == (GiB, 320.0)


def test_verdict_uses_largest_size_below_1gib(tmp_path):
    rows = [new_row(64 * MiB, 300.0), new_row(128 * MiB, 250.0)]
    run = parse_log(write(tmp_path, "x.log", NEW_HEADER + rows + FOOTER))
    v = judge(run, "p5.48xlarge", 2)
    assert (v.measured_size, v.measured_busbw) == (128 * MiB, 250.0)
    assert v.status == "below expectation"  # 250 / 400 = 62.5 %


def test_verdict_notes_socket_transport(tmp_path):
    run = parse_log(write(tmp_path, "sock.log", socket_log_lines()))
    v = judge(run, "g4dn.metal")
    assert v.status == "not EFA" and not v.ok
    assert "TCP sockets" in v.reason and "Using network Socket" in v.reason


# --------------------------------------------------------------------------------------------------
# Transport detection


def test_socket_fallback_detected(tmp_path):
    run = parse_log(write(tmp_path, "sock.log", socket_log_lines()))
    assert run.facts.transport == "socket"
    assert "Using network Socket" in " ".join(run.facts.transport_evidence)


def test_socket_wins_over_ofi_lines(tmp_path):
    lines = socket_log_lines()
    lines.insert(3, "[1,0]<stdout>:node-a:101:101 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.7.4-aws")
    run = parse_log(write(tmp_path, "sock.log", lines))
    assert run.facts.transport == "socket"
    assert run.facts.ofi_nccl_version == "1.7.4-aws"


def test_ofi_non_efa_provider_counts_as_socket(tmp_path):
    info = [
        "node-a:1:1 [0] NCCL INFO NET/OFI Selected Provider is tcp (found 1 nics)",
        "node-a:1:1 [0] NCCL INFO Using network AWS Libfabric",
    ]
    run = parse_log(write(tmp_path, "tcp.log", info + NEW_HEADER + good_rows() + FOOTER))
    assert run.facts.transport == "socket"
    assert "tcp" in " ".join(run.facts.transport_evidence)


def test_efa_detected_in_plain_log_without_mpi_tags(tmp_path):
    info = ["node-a:1:1 [0] NCCL INFO Channel 00/0 : 0[10] -> 1[10] [send] via NET/AWS Libfabric/0"]
    run = parse_log(write(tmp_path, "plain.log", NEW_HEADER + info + good_rows() + FOOTER))
    assert run.facts.transport == "efa"
    assert run.facts.nranks == 2 and run.facts.nodes == 2


def test_transport_unknown_without_nccl_debug(tmp_path):
    run = parse_log(write(tmp_path, "quiet.log", NEW_HEADER + good_rows() + FOOTER))
    assert run.facts.transport == "unknown" and run.facts.transport_evidence == ()


def test_synthetic_efa_log_facts(tmp_path):
    run = parse_log(write(tmp_path, "efa.log", efa_log_lines()))
    assert run.facts.transport == "efa"
    assert (run.facts.nccl_version, run.facts.cuda_version) == ("2.18.5", "12.2")
    assert run.facts.gpu_names == ("NVIDIA A100-SXM4-40GB",)
    assert run.facts.iters == 20 and run.facts.warmup_iters == 5


# --------------------------------------------------------------------------------------------------
# Layouts: collectives, old error columns, prefixes


def test_all_gather_none_redop(tmp_path):
    rows = [new_row(MiB, 5.0, redop="none"), new_row(GiB, 9.0, redop="none")]
    lines = ["# Collective test starting: all_gather_perf"] + NEW_HEADER + rows + FOOTER
    run = parse_log(write(tmp_path, "ag.log", lines))
    assert run.facts.collective == "all_gather"
    assert run.rows[0].redop is None and run.rows[0].root == -1
    assert any("all_gather" in n for n in judge(run, "g4dn.metal", 2).notes)


def test_dash_redop_and_root(tmp_path):
    run = parse_log(write(tmp_path, "a2a.log", NEW_HEADER + [new_row(GiB, 9.0, redop="-", root="-")] + FOOTER))
    assert (run.rows[0].redop, run.rows[0].root) == (None, None)


def test_header_without_redop_and_root_columns(tmp_path):
    header = [
        "#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error",
        "#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    row = "     1048576        262144   float    100.0   10.49   15.73  0e+00     99.5   10.54   15.81  0e+00"
    run = parse_log(write(tmp_path, "old-ag.log", header + [row] + FOOTER))
    r = run.rows[0]
    assert (r.redop, r.root, r.type) == (None, None, "float")
    assert r.out_of_place.busbw == 15.73 and r.in_place is not None and r.in_place.busbw == 15.81


def test_old_error_columns_small_error_is_ok(tmp_path):
    run = parse_log(write(tmp_path, "old.log", OLD_HEADER + [old_row(MiB, 10.0), old_row(GiB, 12.0)] + FOOTER))
    assert run.check_column == "error"
    r = run.rows[-1]
    assert r.out_of_place.error == 5e-07 and r.out_of_place.wrong is None
    assert not r.failed
    assert run.correctness == "ok"


def test_old_error_columns_large_error_is_wrong(tmp_path):
    rows = [old_row(MiB, 10.0), old_row(GiB, 12.0, error="2e+00")]
    run = parse_log(write(tmp_path, "old-bad.log", OLD_HEADER + rows + FOOTER))
    assert run.rows[-1].failed and run.correctness == "wrong values"


def test_old_error_nan_is_wrong(tmp_path):
    run = parse_log(write(tmp_path, "old-nan.log", OLD_HEADER + [old_row(GiB, 12.0, error="nan")] + FOOTER))
    assert run.rows[0].failed
    assert json.loads(run.model_dump_json())["rows"][0]["out_of_place"]["error"] is None  # JSON has no NaN


def test_na_check_columns_are_unchecked(tmp_path):
    rows = [new_row(GiB, 9.0, wrong="N/A", ip_wrong="N/A")]
    lines = NEW_HEADER + rows + ["# Avg bus bandwidth    : 9.0"]
    run = parse_log(write(tmp_path, "nocheck.log", lines))
    assert run.rows[0].out_of_place.wrong is None
    assert run.correctness == "unchecked"
    assert judge(run).ok


def test_mpi_prefixes_with_multi_digit_job_and_stderr_noise(tmp_path):
    lines = [f"[12,0]<stdout>:{ln}" for ln in NEW_HEADER]
    lines.append("[12,1]<stderr>:12345 this is not a row")
    lines += [f"[12,0]<stdout>:{ln}" for ln in good_rows()]
    lines.append("[12,1]<stdout>:node-b:5:5 [0] NCCL INFO comm 0x1 rank 1 nranks 2 - Destroy COMPLETE")
    lines += [f"[12,0]<stdout>:{ln}" for ln in FOOTER]
    run = parse_log(write(tmp_path, "tagged.log", lines))
    assert [r.size for r in run.rows] == [MiB, 256 * MiB, GiB]


def test_kubectl_timestamps_are_stripped(tmp_path):
    lines = [f"2024-05-01T10:00:00.123456789Z {ln}" for ln in efa_log_lines()]
    run = parse_log(write(tmp_path, "ts.log", lines))
    assert len(run.rows) == 3 and run.facts.transport == "efa"


def test_crlf_line_endings(tmp_path):
    p = tmp_path / "crlf.log"
    p.write_bytes(("\r\n".join(NEW_HEADER + good_rows() + FOOTER) + "\r\n").encode())
    assert len(parse_log(p).rows) == 3


# --------------------------------------------------------------------------------------------------
# Malformed and truncated logs


def _error(tmp_path: Path, lines: list[str]) -> NcclLogError:
    p = write(tmp_path, "bad.log", lines)
    with pytest.raises(NcclLogError) as exc:
        parse_log(p)
    assert str(p) in str(exc.value)
    return exc.value


def test_error_non_numeric_field(tmp_path):
    rows = good_rows()
    rows[1] = rows[1].replace(" 10.00 ", " 1O.00 ", 1)
    e = _error(tmp_path, NEW_HEADER + rows + FOOTER)
    assert e.line == len(NEW_HEADER) + 2
    assert e.message == "non-numeric value '1O.00' in column 'algbw' (out-of-place)"
    assert e.text is not None and "1O.00" in e.text
    assert f":{e.line}:" in str(e)


def test_error_non_numeric_wrong_count(tmp_path):
    rows = [new_row(GiB, 9.0, wrong="x")]
    e = _error(tmp_path, NEW_HEADER + rows + FOOTER)
    assert e.line == len(NEW_HEADER) + 1
    assert e.message == "non-integer value 'x' in column '#wrong' (out-of-place)"


def test_error_header_without_rows(tmp_path):
    e = _error(tmp_path, NEW_HEADER + FOOTER)
    assert e.line == 8  # the "#  size  count ..." line
    assert "without any data rows" in e.message
    assert e.text is not None and "busbw" in e.text


def test_error_header_then_eof(tmp_path):
    e = _error(tmp_path, NEW_HEADER)
    assert e.line == 8 and "without any data rows" in e.message


def test_error_no_table(tmp_path):
    e = _error(tmp_path, ["Warning: Permanently added 'x' to the list of known hosts.", "hello"])
    assert "no nccl-tests result table" in e.message
    assert e.line == 2


def test_error_empty_file(tmp_path):
    p = tmp_path / "empty.log"
    p.write_text("")
    with pytest.raises(NcclLogError, match="no nccl-tests result table"):
        parse_log(p)


def test_error_row_cut_off_mid_row(tmp_path):
    cut = new_row(GiB, 11.0)[:70]
    e = _error(tmp_path, NEW_HEADER + good_rows()[:2] + [cut])
    assert e.line == len(NEW_HEADER) + 3
    assert "cut off" in e.message and "of the header's 13 columns" in e.message
    assert e.text == cut


def test_error_row_with_extra_columns(tmp_path):
    e = _error(tmp_path, NEW_HEADER + [new_row(GiB, 11.0) + "  7"] + FOOTER)
    assert e.line == len(NEW_HEADER) + 1 and "14 columns" in e.message


def test_error_truncated_without_footer_names_last_line(tmp_path):
    lines = mpi(NEW_HEADER + good_rows()) + [
        "[1,1]<stdout>:node-b:5:5 [0] NCCL INFO comm 0x1 rank 1 nranks 2 - Destroy COMPLETE"
    ]
    e = _error(tmp_path, lines)
    assert "truncated" in e.message and "3 data rows" in e.message
    assert e.line == len(lines)
    assert e.text == lines[-1]


def test_error_truncated_reports_test_failure(tmp_path):
    lines = NEW_HEADER + good_rows()[:1] + [
        "node-a: Test NCCL failure common.cu:393 'unhandled system error'",
        " .. node-a pid 101: Test failure common.cu:842",
    ]
    e = _error(tmp_path, lines)
    # the run failed: the error carries the line that says why (the command exits 1 quoting it)
    assert "truncated" in e.message and e.failure is not None and "Test NCCL failure" in e.failure


def test_fails_parse_log_on_two_runs_names_both_tables(tmp_path):
    # GIVEN two complete runs in one log (read_runs reads both: see test_nccl_report_inputs.py)
    lines = NEW_HEADER + good_rows() + FOOTER + NEW_HEADER[6:] + good_rows() + FOOTER
    # WHEN parse_log, which returns one run, reads it THEN it says so and where the second table is
    e = _error(tmp_path, lines)
    second = len(NEW_HEADER) + 3 + len(FOOTER) + 2
    assert "2 runs in one log" in e.message and f"lines 8, {second}" in e.message
    assert e.line == second


def test_fails_on_a_second_table_before_the_first_ones_footer(tmp_path):
    lines = NEW_HEADER + good_rows() + NEW_HEADER[6:] + good_rows() + FOOTER
    e = _error(tmp_path, lines)
    assert "without its footer" in e.message and "truncated" in e.message
    assert e.line == len(NEW_HEADER) + 3 + 2


def test_error_missing_file(tmp_path):
    with pytest.raises(NcclLogError, match="cannot read"):
        parse_log(tmp_path / "nope.log")


def test_error_header_missing_busbw_is_not_a_table(tmp_path):
    e = _error(tmp_path, ["#  size  count  type  time  algbw", "1024 256 float 1.0 1.0"])
    assert "no nccl-tests result table" in e.message


def test_error_string_form():
    e = NcclLogError("run.log", 12, "bad thing", "the text")
    assert str(e) == "run.log:12: bad thing: 'the text'"


# --------------------------------------------------------------------------------------------------
# #wrong > 0


def test_wrong_values_detected(tmp_path):
    rows = [new_row(MiB, 5.0), new_row(GiB, 11.0, ip_wrong=3)]
    footer = ["# Out of bounds values : 3 FAILED", "# Avg bus bandwidth    : 8.0"]
    run = parse_log(write(tmp_path, "wrong.log", NEW_HEADER + rows + footer))
    assert run.has_wrong_values and run.wrong_total == 3
    assert run.footer.out_of_bounds == 3 and run.footer.out_of_bounds_status == "FAILED"
    assert [r.size for r in run.failed_rows] == [GiB]
    v = judge(run)
    assert v.correctness == "wrong values" and not v.ok
    assert any("wrong values" in n for n in v.notes)


def test_out_of_bounds_footer_alone_is_a_failure(tmp_path):
    footer = ["# Out of bounds values : 1 FAILED", "# Avg bus bandwidth    : 8.0"]
    run = parse_log(write(tmp_path, "oob.log", NEW_HEADER + good_rows() + footer))
    assert run.has_wrong_values and not run.failed_rows


def test_wrong_values_exit_code_1(tmp_path):
    rows = [new_row(MiB, 5.0, wrong=1), new_row(GiB, 11.0)]
    p = write(tmp_path, "wrong.log", NEW_HEADER + rows + FOOTER)
    code, out, _ = run_command([p])
    assert code == 1
    assert "wrong values" in out


# --------------------------------------------------------------------------------------------------
# Compare


def test_compare_efa_vs_socket(tmp_path):
    efa = parse_log(write(tmp_path, "efa.log", efa_log_lines()))
    sock = parse_log(write(tmp_path, "sock.log", socket_log_lines()))
    cmp = compare_runs(sock, efa)  # the baseline first, as on the command line
    assert (cmp.baseline, cmp.other) == ("sock.log", "efa.log")
    assert [r.size for r in cmp.rows] == [MiB, 256 * MiB, GiB]
    assert cmp.rows[0].speedup == pytest.approx(10.0)
    assert cmp.rows[-1].speedup == pytest.approx(11.0 / 1.1)
    assert cmp.rows[-1].speedup_in_place == pytest.approx(11.0 / 1.1)


def test_compare_only_common_sizes(p5, g4dn):
    cmp = compare_runs(g4dn, p5)
    sizes = [r.size for r in cmp.rows]
    assert sizes.count(0) == 2  # duplicate 0-byte rows are paired by order
    assert 2 * GiB not in sizes  # only in the p5 run
    assert len(cmp.rows) == 31
    row = next(r for r in cmp.rows if r.size == GiB)
    assert row.speedup == pytest.approx(442.13 / 3.11)


def test_compare_zero_busbw_gives_no_speedup(p5, g4dn):
    cmp = compare_runs(p5, g4dn)
    zero = [r for r in cmp.rows if r.size <= 256]
    assert compare_runs(g4dn, p5).rows[-1].speedup == pytest.approx(442.13 / 3.11)
    assert zero and all(r.speedup is None for r in zero)


def test_compare_with_itself_is_one(g4dn):
    cmp = compare_runs(g4dn, g4dn)
    assert all(r.speedup == pytest.approx(1.0) for r in cmp.rows if r.speedup is not None)


def test_render_comparison_shows_dash_for_zero(p5, g4dn):
    text = rendered(render_comparison(compare_runs(g4dn, p5)))
    assert "speed-up" in text
    zero_line = next(ln.strip(" │") for ln in text.splitlines() if ln.strip(" │").startswith("0 B"))
    assert zero_line.endswith("-")
    assert f"{442.13 / 3.11:.2f}x" in text


# --------------------------------------------------------------------------------------------------
# Rendering


@pytest.mark.parametrize(
    ("n", "expected"),
    [(0, "0 B"), (4, "4 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (MiB, "1 MiB"),
     (2 * GiB, "2 GiB"), (1 << 40, "1 TiB")],
)
def test_human_size(n, expected):
    assert human_size(n) == expected


def test_render_run_p5(p5):
    text = rendered(render_run(p5, judge(p5, "p5.48xlarge", 2)))
    assert "2 GiB" in text and "444.31" in text and "444.41" in text
    assert "79.9352" in text
    assert "verdict: pass" in text
    assert "transport" in text and "unknown" in text


def test_render_run_g4dn_facts(g4dn):
    text = rendered(render_run(g4dn, judge(g4dn, "g4dn.metal")))
    for s in ("Tesla T4", "2.12.7", "1.5.0aws", "efa", "test-nccl-efa-worker-1", "1 GiB", "3.11"):
        assert s in text
    assert "below expectation" in text


def test_render_run_without_verdict_has_no_verdict_line(g4dn):
    assert "verdict" not in rendered(render_run(g4dn))


def test_render_shows_type_column_when_types_differ(tmp_path):
    rows = [new_row(GiB, 9.0, dtype="float"), new_row(GiB, 8.0, dtype="half")]
    run = parse_log(write(tmp_path, "types.log", NEW_HEADER + rows + FOOTER))
    text = rendered(render_run(run))
    assert "half sum" in text and "float sum" in text


def test_model_dump_is_the_json_form(p5):
    d = json.loads(p5.model_dump_json())
    assert d["footer"] == {"out_of_bounds": 0, "out_of_bounds_status": "OK", "avg_busbw": 79.9352}
    assert d["rows"][-1]["out_of_place"]["busbw"] == 444.31
    assert d["facts"]["transport"] == "unknown"


def test_report_dict_shape(p5, g4dn):
    doc = report_dict([p5, g4dn], [judge(p5), judge(g4dn)], [compare_runs(p5, g4dn)])
    assert set(doc) == {"runs", "comparisons", "hosts", "plot", "exit_code", "error"}
    assert doc["runs"][0]["verdict"]["status"] == "not judged"
    assert doc["runs"][0]["run"]["label"] == p5.label
    assert doc["comparisons"][0]["baseline"] == p5.label
    json.dumps(doc)


# --------------------------------------------------------------------------------------------------
# Plot


def test_plot_writes_png(tmp_path, p5, g4dn):
    out = plot_busbw([p5, g4dn], tmp_path / "busbw.png", line_rate_gbytes=400.0, threshold=0.7)
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000


def test_plot_without_line_rate(tmp_path, g4dn):
    data = plot_busbw([g4dn], tmp_path / "one.png").read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5_000


# --------------------------------------------------------------------------------------------------
# report_command


def test_command_p5_passes(tmp_path):
    code, out, err = run_command([P5], instance_type="p5.48xlarge", nodes=2)
    assert code == 0, err
    assert "verdict: pass" in out


def test_command_g4dn_below_expectation_exit_1():
    code, out, _ = run_command([G4DN], instance_type="g4dn.metal")
    assert code == 1
    assert "below expectation" in out


def test_command_without_instance_type_exit_0():
    code, out, _ = run_command([G4DN])
    assert code == 0
    assert "not judged" in out


def test_command_single_node_not_applicable_exit_0():
    code, out, _ = run_command([G4DN], instance_type="g4dn.metal", nodes=1)
    assert code == 0 and "not applicable" in out


def test_command_parse_error_exit_2(tmp_path):
    p = write(tmp_path, "bad.log", NEW_HEADER + [new_row(GiB, 9.0)[:40]])
    code, out, err = run_command([G4DN, p])
    assert code == 2
    assert f"{p}:{len(NEW_HEADER) + 1}:" in err
    assert "Traceback" not in err + out
    assert out == ""


def test_command_missing_file_exit_2(tmp_path):
    code, _, err = run_command([tmp_path / "missing.log"])
    assert code == 2 and "cannot read" in err


def test_command_unknown_instance_type_exit_2():
    code, _, err = run_command([G4DN], instance_type="p5.48xl")
    assert code == 2
    assert "unknown instance type" in err and "p5.48xlarge" in err


@pytest.mark.parametrize(("kw", "fragment"), [({"threshold": 0.0}, "--threshold"),
                                              ({"threshold": math.nan}, "--threshold"),
                                              ({"nodes": 0}, "--nodes")])
def test_command_bad_options_exit_2(kw, fragment):
    code, _, err = run_command([G4DN], **kw)
    assert code == 2 and fragment in err


def test_command_no_logs_exit_2():
    assert run_command([])[0] == 2


def test_command_json_shape(tmp_path):
    code, out, _ = run_command([P5, G4DN], instance_type="p5.48xlarge", nodes=2, json_out=True)
    doc = json.loads(out)
    assert code == 1  # the g4dn run is far below a p5 line rate
    assert set(doc) == {"runs", "comparisons", "hosts", "plot", "exit_code", "error"}
    assert doc["exit_code"] == 1 and doc["plot"] is None and doc["error"] is None
    first = doc["runs"][0]
    assert set(first) == {"run", "verdict"}
    assert set(first["run"]) >= {"source", "label", "facts", "rows", "footer", "correctness"}
    assert len(first["run"]["rows"]) == 32
    assert first["verdict"]["status"] == "pass"
    assert first["verdict"]["measured_busbw"] == 444.31
    assert first["verdict"]["expectation"]["line_rate_gbytes"] == 400.0
    assert doc["runs"][1]["verdict"]["status"] == "below expectation"
    assert len(doc["comparisons"]) == 1 and doc["comparisons"][0]["other"] == G4DN.name


def test_command_json_single_passing_run():
    code, out, _ = run_command([P5], instance_type="p5.48xlarge", nodes=2, json_out=True)
    doc = json.loads(out)
    assert code == 0 and doc["exit_code"] == 0 and doc["comparisons"] == []


def test_command_writes_plot(tmp_path):
    png = tmp_path / "plot.png"
    code, out, _ = run_command([G4DN], instance_type="g4dn.metal", plot=png, threshold=0.2)
    assert code == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "plot written" in out


def test_command_unwritable_plot_exit_2(tmp_path):
    code, _, err = run_command([G4DN], plot=tmp_path / "no-such-dir" / "p.png")
    assert code == 2 and "cannot write the plot" in err


def test_command_compares_efa_and_socket(tmp_path):
    efa = write(tmp_path, "efa.log", efa_log_lines())
    sock = write(tmp_path, "sock.log", socket_log_lines())
    code, out, _ = run_command([sock, efa])
    assert code == 1  # the socket run is "not EFA"
    assert "speed-up of efa.log over the baseline sock.log" in out
    assert "10.00x" in out


# --------------------------------------------------------------------------------------------------
# Round trip: whatever nccl-tests prints, the parser reads back


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=34),
            st.floats(min_value=0, max_value=999.99, allow_nan=False).map(lambda x: round(x, 2)),
            st.integers(min_value=0, max_value=9),
        ),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
def test_round_trip(rows, tagged):
    lines = NEW_HEADER + [new_row(1 << e, bw, wrong=w) for e, bw, w in rows] + FOOTER
    if tagged:
        lines = mpi(lines)
    run = parse_text("\n".join(lines), source="gen.log")
    assert [(r.size, r.out_of_place.busbw, r.out_of_place.wrong) for r in run.rows] == [
        (1 << e, bw, w) for e, bw, w in rows
    ]
    assert run.has_wrong_values == any(w for _, _, w in rows)

