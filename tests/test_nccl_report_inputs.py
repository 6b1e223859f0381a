"""nccl-report on what nccl-tests >= 2.17 and schedulers really print, and on the terminals it is read on.

The ``nccl-tests-2.19.6-*`` fixtures are written exactly as NVIDIA/nccl-tests@v2.19.6 src/util.cu prints
(see tests/fixtures/nccl/SOURCES.md); their bandwidths are the p5.48xlarge reference run's.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from efa_stack import contract
from efa_stack.nccl_report import (
    NcclLogError,
    compare_runs,
    judge,
    parse_log,
    read_runs,
    render_comparison,
    render_run,
    report_command,
)
from efa_stack.nccl_report import parse as parse_mod
from efa_stack.nccl_report.units import human_size

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
S1 = FIXTURES / "nccl-tests-2.19.6-S1.log"
I1S1 = FIXTURES / "nccl-tests-2.19.6-I1-S1.log"
M1 = FIXTURES / "nccl-tests-2.19.6-M1.log"
N2 = FIXTURES / "nccl-tests-2.19.6-N2.log"
WRONG = FIXTURES / "nccl-tests-2.19.6-wrong-1e8.log"
JSON_RESULT = FIXTURES / "nccl-tests-2.19.6-J.json"
P5 = FIXTURES / "p5.48xlarge-2node-efa-mpijob-table.log"
G4DN = FIXTURES / "g4dn.metal-2node-efa-mpijob.log"
GiB = 1 << 30
#: The out-of-place busbw of the fixtures' 12 rows, 1 MiB .. 2 GiB (the p5.48xlarge reference run's).
BUSBW = [16.43, 27.33, 48.03, 80.54, 112.91, 136.87, 214.29, 271.6, 336.03, 393.42, 442.13, 444.31]


def run_command(logs, width: int = 200, **kw):
    out, err = io.StringIO(), io.StringIO()
    code = report_command(
        [Path(p) for p in logs],
        kw.pop("instance_type", None),
        kw.pop("nodes", None),
        kw.pop("json_out", False),
        kw.pop("plot", None),
        kw.pop("threshold", contract.NCCL_PASS_THRESHOLD),
        console=Console(file=out, width=width, color_system=None),
        err_console=Console(file=err, width=width, color_system=None),
    )
    assert not kw
    return code, out.getvalue(), err.getvalue()


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode())
    return p


# --------------------------------------------------------------------------------------------------
# nccl-tests 2.19.6 layouts: -S 1, -I 1, -M 1, -N, -J


def test_timestamp_column_is_read_and_the_run_judged():
    # GIVEN -S 1 output (a row has 15 words: the timestamp is "date time") WHEN judged on 2 x p5
    code, out, err = run_command([S1], instance_type="p5.48xlarge")
    # THEN it is read, not refused as "data row has 15 columns, the header has 14"
    assert code == 0, err
    assert "verdict: pass: 444.31 GB/s busbw at 2 GiB" in out
    run = parse_log(S1)
    assert [r.out_of_place.busbw for r in run.rows] == BUSBW
    assert run.rows[0].timestamp == "2025-06-30 12:00:00" and run.facts.timestamps
    assert run.facts.nccl_tests_version == "2.19.6" and run.facts.collective == "all_reduce"


def test_per_iteration_and_timestamp_columns_are_read():
    code, out, err = run_command([I1S1], instance_type="p5.48xlarge")
    assert code == 0, err  # was: "data row has 23 columns, the header has 22"
    assert "verdict: pass" in out
    run = parse_log(I1S1)
    last = run.rows[-1]
    assert (last.out_of_place.busbw, last.in_place.busbw) == (444.31, 444.41)
    assert last.out_of_place.per_iteration is not None
    assert (last.out_of_place.per_iteration.min_us, last.out_of_place.per_iteration.cv_pct) == (8790.62, 1.8)
    assert last.timestamp == "2025-06-30 12:00:11"
    assert run.facts.per_iteration_timing


def test_memory_report_line_is_kept_and_not_a_row():
    run = parse_log(M1)
    assert len(run.rows) == 12
    assert run.facts.memory_usage == (
        "Initialization 1.52 GB | User-Allocated 8.00 GB | Collective 608.0 MB | Total  10.11 GB"
    )
    assert "608.0 MB" in run_command([M1])[1]


def test_run_cycles_are_numbered_and_judged_on_the_best_large_row():
    run = parse_log(N2)
    assert len(run.rows) == 24 and run.cycles == 2
    assert [r.cycle for r in run.rows] == [1] * 12 + [2] * 12
    v = judge(run, "p5.48xlarge", 2)
    assert v.status == "pass" and v.measured_busbw == 444.31
    assert any("ran 2 times" in n for n in v.notes)


def test_json_result_is_read_directly():
    # GIVEN the -J file of the same run WHEN reported THEN it is judged like the text
    code, out, err = run_command([JSON_RESULT], instance_type="p5.48xlarge")
    assert code == 0, err
    assert "verdict: pass: 444.31 GB/s busbw at 2 GiB" in out
    run = parse_log(JSON_RESULT)
    assert run.format == "json"
    assert [r.out_of_place.busbw for r in run.rows] == BUSBW
    assert [r.size for r in run.rows] == [r.size for r in parse_log(S1).rows]
    assert run.rows[0].root == -1 and run.rows[0].redop == "sum"  # root is the string "    -1"
    assert run.facts.hostnames == ("ip-10-0-1-17", "ip-10-0-1-42") and run.facts.nranks == 16
    assert run.facts.collective == "all_reduce" and run.facts.nccl_version == "2.27.7"
    assert run.footer.out_of_bounds == 0 and run.footer.avg_busbw == pytest.approx(211.664, abs=1e-3)
    assert run.facts.transport == "unknown"


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d.update(version=9), "version: format version 9"),
        (lambda d: d["results"][3]["out_of_place"].update(bus_bw="x"), "results[3].out_of_place.bus_bw"),
        (lambda d: d["results"][0]["out_of_place"].update(time="nan"), "results[0].out_of_place.time"),
        (lambda d: d.pop("results"), "results: missing"),
        (lambda d: d.pop("out_of_bounds") and d.pop("average_bus_bandwidth"), "out_of_bounds: missing"),
    ],
)
def test_fails_on_a_json_result_that_is_not_version_3(tmp_path, mutate, fragment):
    doc = json.loads(JSON_RESULT.read_text())
    mutate(doc)
    p = write(tmp_path, "r.json", json.dumps(doc))
    with pytest.raises(NcclLogError) as exc:
        parse_log(p)
    assert fragment in str(exc.value) and "-J JSON" in str(exc.value)


def test_fails_on_a_json_result_cut_short(tmp_path):
    p = write(tmp_path, "cut.json", JSON_RESULT.read_text()[:3000])
    code, out, _ = run_command([p], json_out=True)
    doc = json.loads(out)
    assert code == 2 == doc["exit_code"]
    assert "not valid JSON" in doc["error"]["message"] and doc["error"]["layout"] == "nccl-tests -J JSON result"


def test_json_reads_the_pre_2_17_9_footer_spelling(tmp_path):
    # nccl-tests before 2.17.9 wrote "average_bus_bandwidith" / "bandwidith" (fixed in commit 85ca91d).
    text = JSON_RESULT.read_text().replace('"average_bus_bandwidth"', '"average_bus_bandwidith"')
    text = text.replace('"bandwidth"', '"bandwidith"')
    assert parse_log(write(tmp_path, "old.json", text)).footer.avg_busbw == pytest.approx(211.664, abs=1e-3)


def test_json_names_socket_from_nccl_net_env(tmp_path):
    doc = json.loads(JSON_RESULT.read_text())
    doc["env"].append("NCCL_NET=Socket")
    run = parse_log(write(tmp_path, "sock.json", json.dumps(doc)))
    assert run.facts.transport == "socket" and run.facts.transport_evidence == ("env: NCCL_NET=Socket",)


# --------------------------------------------------------------------------------------------------
# #wrong printed with %g: data corruption, never "bad log"


def test_wrong_count_in_exponent_form_is_data_corruption():
    # GIVEN "#wrong" printed by %6g as 2.68435e+08 WHEN reported THEN exit 1 (corruption), not 2 (bad log)
    code, out, err = run_command([WRONG], instance_type="p5.48xlarge")
    assert code == 1, err
    assert "DATA CORRUPTION" in out
    run = parse_log(WRONG)
    bad = run.failed_rows
    assert [r.size for r in bad] == [GiB]
    assert bad[0].out_of_place.wrong == 268435000  # %g keeps 6 significant digits
    assert run.wrong_total == 2 * 268435000 and run.correctness == "wrong values"


def test_wrong_count_json_is_data_corruption():
    code, out, _ = run_command([WRONG], json_out=True)
    doc = json.loads(out)
    assert code == 1 == doc["exit_code"]
    assert doc["runs"][0]["verdict"]["correctness"] == "wrong values"
    assert doc["runs"][0]["verdict"]["ok"] is False


# --------------------------------------------------------------------------------------------------
# Scheduler and launcher prefixes, pasted logs, several runs in one file


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_slurm_srun_label_prefixes(tmp_path):
    # srun -l: "0: " before every line of task 0; other tasks print their own lines
    lines = [f"0: {ln}" for ln in _lines(S1)]
    lines.insert(5, "1: ip-10-0-1-17:4101:4101 [1] NCCL INFO comm 0x1 rank 1 nranks 16")
    code, out, err = run_command([write(tmp_path, "slurm.log", "\n".join(lines) + "\n")], instance_type="p5.48xlarge")
    assert code == 0, err
    assert "verdict: pass" in out
    assert [r.out_of_place.busbw for r in parse_log(tmp_path / "slurm.log").rows] == BUSBW


def test_slurm_labels_padded_for_many_tasks(tmp_path):
    lines = [f" 0: {ln}" for ln in _lines(S1)] + ["15: ip-10-0-1-42:4107:4107 [7] NCCL INFO done"]
    assert len(parse_log(write(tmp_path, "slurm16.log", "\n".join(lines))).rows) == 12


def test_indented_paste_of_a_launcher_log(tmp_path):
    # GIVEN an MPI launcher log pasted into a document with four spaces of indentation
    text = "".join(f"    {ln}\n" for ln in _lines(G4DN))
    code, out, err = run_command([write(tmp_path, "pasted.log", text)], instance_type="g4dn.metal", threshold=0.2)
    assert code == 0, err
    assert "verdict: pass" in out
    run = parse_log(tmp_path / "pasted.log")
    assert len(run.rows) == 31 and run.facts.transport == "efa" and run.facts.nranks == 2


def test_crlf_and_kubectl_timestamps(tmp_path):
    text = "".join(f"2025-06-30T12:00:{i % 60:02d}.123456789Z {ln}\r\n" for i, ln in enumerate(_lines(G4DN)))
    code, _, err = run_command([write(tmp_path, "k.log", text)])
    assert code == 0, err
    run = parse_log(tmp_path / "k.log")
    assert len(run.rows) == 31 and run.facts.hostnames == ("test-nccl-efa-worker-0", "test-nccl-efa-worker-1")


def _socket(lines: list[str]) -> list[str]:
    """The same run as if NCCL had found no network plugin (lines as NCCL 2.30.7 prints them)."""
    out = []
    for ln in lines:
        if "NET/OFI" in ln or "Using network Libfabric" in ln:
            continue
        out.append(ln)
    at = next(i for i, ln in enumerate(out) if "NCCL version" in ln) + 1
    out[at:at] = [
        "ip-10-0-1-17:4100:4100 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.17<0>",
        "ip-10-0-1-17:4100:4100 [0] NCCL INFO Using network Socket",
    ]
    return out


def test_several_runs_in_one_file_are_all_read_and_compared(tmp_path):
    # GIVEN a socket run then an EFA run concatenated in one log (the EFA numbers 10 x higher)
    efa = _lines(S1)
    sock = [ln.replace("444.31", " 44.43") for ln in _socket(efa)]
    p = write(tmp_path, "both.log", "\n".join(sock + efa) + "\n")
    runs = read_runs(p)
    assert [r.label for r in runs] == ["both.log#1", "both.log#2"]
    assert [r.facts.transport for r in runs] == ["socket", "efa"]
    assert runs[1].header_line == len(sock) + parse_log(S1).header_line
    # WHEN reported THEN both are judged and the second is compared with the first
    code, out, _ = run_command([p], instance_type="p5.48xlarge")
    assert code == 1  # the first run is not EFA
    assert "not EFA" in out and "verdict: pass" in out
    assert "speed-up of both.log#2 over the baseline both.log#1" in out and "10.00x" in out


def test_fails_on_a_concatenated_log_whose_last_run_has_no_table(tmp_path):
    lines = _lines(S1) + _lines(S1)[:12]
    with pytest.raises(NcclLogError) as exc:
        read_runs(write(tmp_path, "cut.log", "\n".join(lines)))
    assert "run 2 starts here" in exc.value.message and exc.value.line == len(_lines(S1)) + 3


# --------------------------------------------------------------------------------------------------
# Verdicts: the speed-up direction, "not EFA", a single rank


def test_speedup_compares_every_later_run_with_the_first(tmp_path):
    # GIVEN socket then EFA, as --help says ("every later run is compared with the first")
    sock = write(tmp_path, "sock.log", "\n".join(ln.replace("444.31", " 44.43") for ln in _socket(_lines(S1))))
    _, out, _ = run_command([sock, S1])
    # THEN the 2 GiB row reads 444.31 / 44.43 = 10.00x, not 0.10x
    assert "10.00x" in out and "0.10x" not in out
    cmp = compare_runs(parse_log(sock), parse_log(S1))
    assert cmp.rows[-1].speedup == pytest.approx(444.31 / 44.43)
    assert f"{444.31 / 44.43:.2f}x" in _render(render_comparison(cmp), 80)


def test_socket_transport_is_not_efa_whatever_the_bandwidth(tmp_path):
    # GIVEN a run over NCCL's socket transport with EFA-class busbw (444 GB/s on 2 x p5)
    p = write(tmp_path, "sock.log", "\n".join(_socket(_lines(S1))))
    code, out, _ = run_command([p], instance_type="p5.48xlarge")
    # THEN it fails as "not EFA", quoting NCCL's lines
    assert code == 1
    assert "verdict: not EFA" in out
    assert "NCCL INFO Using network Socket" in out and "NET/Socket : Using [0]eth0" in out
    v = judge(parse_log(p), "p5.48xlarge")
    assert v.status == "not EFA" and not v.ok
    assert v.reason.endswith(
        "line 23: ip-10-0-1-17:4100:4100 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.17<0>; "
        "line 24: ip-10-0-1-17:4100:4100 [0] NCCL INFO Using network Socket"
    )


def test_single_rank_is_reported_not_judged(tmp_path):
    # GIVEN a 1-rank all_reduce (busbw = algbw x 2(n-1)/n = 0)
    lines = [ln for ln in _lines(S1) if not (ln.startswith("#  Rank") and not ln.startswith("#  Rank  0 "))]
    lines = [ln.replace(ln[72:102], ln[72:102]) for ln in lines]
    rows = [i for i, ln in enumerate(lines) if ln[:12].strip().isdigit()]
    for i in rows:
        t = lines[i].split()
        t[7] = t[11] = "0.00"
        lines[i] = "  ".join(t)
    p = write(tmp_path, "one.log", "\n".join(lines))
    code, out, _ = run_command([p], instance_type="p5.48xlarge", nodes=2)
    assert code == 0
    assert "verdict: single rank" in out
    assert judge(parse_log(p), "p5.48xlarge", 2).status == "single rank"


# --------------------------------------------------------------------------------------------------
# --json: always one object


@pytest.mark.parametrize(
    ("logs", "kw", "code", "fragment"),
    [
        (["missing.log"], {}, 2, "cannot read"),
        ([G4DN], {"instance_type": "p5.48xl"}, 2, "unknown instance type"),
        ([G4DN], {"nodes": 0}, 2, "--nodes"),
        ([G4DN], {"plot": Path("/nonexistent-dir/p.png")}, 2, "cannot write the plot"),
    ],
)
def test_json_errors_are_one_json_object(tmp_path, logs, kw, code, fragment):
    logs = [tmp_path / p if isinstance(p, str) else p for p in logs]
    got, out, err = run_command(logs, json_out=True, **kw)
    doc = json.loads(out)
    assert got == code == doc["exit_code"]
    assert fragment in doc["error"]["message"] and doc["runs"] == []
    assert err == ""


def test_json_error_on_a_bad_row_names_the_layout_line_and_text(tmp_path):
    lines = _lines(I1S1)
    lines[31] = lines[31].replace("  27.33", "  27,33")
    code, out, _ = run_command([write(tmp_path, "bad.log", "\n".join(lines))], json_out=True)
    doc = json.loads(out)
    assert code == 2 == doc["exit_code"]
    e = doc["error"]
    assert e["line"] == 32 and "27,33" in e["text"]
    assert e["message"] == "non-numeric value '27,33' in column 'busbw' (out-of-place)"
    assert e["layout"] == "nccl-tests text output, table header at line 29: 22 columns, with -I per-iteration " \
        "columns and -S timestamp"


# --------------------------------------------------------------------------------------------------
# Never elide a number


def _render(renderable, width: int) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(renderable)
    return buf.getvalue()


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("fixture", [P5, I1S1, N2])
def test_tables_never_elide_a_number(fixture, width):
    run = parse_log(fixture)
    text = _render(render_run(run, judge(run, "p5.48xlarge", 2)), width)
    assert "…" not in text
    assert max(len(ln) for ln in text.splitlines()) <= width
    lines = [ln.strip() for ln in text.splitlines()]
    for r in run.rows:  # every size whole at the start of its row, every busbw whole
        assert any(ln.startswith(human_size(r.size) + " ") and f" {r.out_of_place.busbw:.2f} " in ln for ln in lines)


def test_narrow_tables_say_what_they_left_out():
    run = parse_log(I1S1)
    narrow, wide = _render(render_run(run), 80), _render(render_run(run), 250)
    assert "left out to fit the width" in narrow and "i_min" not in narrow
    assert "left out" not in wide and "i_min" in wide and "2025-06-30 12:00:11" in wide


def test_command_at_80_columns_keeps_every_busbw():
    _, out, _ = run_command([P5, G4DN], width=80)
    assert "…" not in out
    assert "444.31" in out and "3.11" in out


# --------------------------------------------------------------------------------------------------
# Bounded reading


def test_fails_on_a_file_over_the_size_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(parse_mod, "MAX_INPUT_BYTES", 1000)
    code, _, err = run_command([S1])
    assert code == 2 and "reads at most 1000 bytes" in err


def test_a_huge_line_is_skipped_in_bounded_pieces(tmp_path):
    lines = _lines(S1)
    lines.insert(3, "x" * (4 * parse_mod.MAX_LINE_CHARS + 7))
    run = parse_log(write(tmp_path, "long.log", "\n".join(lines)))
    assert len(run.rows) == 12 and run.header_line == parse_log(S1).header_line + 1  # one line, however long


def test_fails_on_more_rows_than_the_cap(monkeypatch):
    monkeypatch.setattr(parse_mod, "MAX_ROWS", 10)
    with pytest.raises(NcclLogError, match="more than 10 data rows"):
        parse_log(S1)


def test_lone_carriage_returns_end_lines_too(tmp_path):
    run = parse_log(write(tmp_path, "cr.log", "\r".join(_lines(S1))))
    assert [r.out_of_place.busbw for r in run.rows] == BUSBW
