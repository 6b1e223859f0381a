"""Per-host reading of nccl-tests runs: slow hosts, suspect links, ambiguous sets, hosts on sockets.

The multi-log sets are built in ``tmp_path`` from the nccl-tests 2.19.6 ``-M 1`` fixture
(tests/fixtures/nccl/nccl-tests-2.19.6-M1.log, 16 ranks on ip-10-0-1-17 / ip-10-0-1-42, 444.31 GB/s at
2 GiB): each copy renames the two hosts and may scale the algbw/busbw columns; see tests/fixtures/nccl/SOURCES.md.
"""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

from rich.console import Console

from efa_stack.nccl_report import parse_log
from efa_stack.nccl_report.command import report_command
from efa_stack.nccl_report.hosts import HostRun, find_slow_hosts, runs_from_pairs

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
BASE = (FIXTURES / "nccl-tests-2.19.6-M1.log").read_text()
HOST_A, HOST_B = "ip-10-0-1-17", "ip-10-0-1-42"
# algbw and busbw columns of a data row (words 6-7 out-of-place, 10-11 in-place)
_BW_WORDS = (6, 7, 10, 11)


def _row_scaled(line: str, scale: float) -> str:
    words = line.split()
    if len(words) != 13 or not words[0].isdigit():
        return line
    for i in _BW_WORDS:
        words[i] = f"{float(words[i]) * scale:.2f}"
    return "  ".join(words)


def pair_log(tmp_path: Path, a: str, b: str, *, scale: float = 1.0, socket_host: str | None = None) -> Path:
    """A copy of the fixture run between hosts ``a`` and ``b`` (busbw x ``scale``; ``socket_host`` on sockets)."""
    text = BASE.replace(HOST_A, "\0A").replace(HOST_B, "\0B").replace("\0A", a).replace("\0B", b)
    lines = [_row_scaled(line, scale) for line in text.splitlines()]
    if socket_host is not None:
        # NVIDIA/nccl src/transport/net_socket.cc "NET/Socket : Using ..." and src/init.cc "Using network %s"
        at = next(i for i, line in enumerate(lines) if "NCCL INFO Using network" in line) + 1
        lines[at:at] = [
            f"{socket_host}:4100:4100 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.99<0>",
            f"{socket_host}:4100:4100 [0] NCCL INFO Using network Socket",
        ]
    path = tmp_path / f"{a}--{b}.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_command(logs, **kw):
    out, err = io.StringIO(), io.StringIO()
    code = report_command(
        [Path(p) for p in logs], kw.pop("instance_type", "p5.48xlarge"), kw.pop("nodes", None),
        kw.pop("json_out", False), None, console=Console(file=out, width=250, color_system=None),
        err_console=Console(file=err, width=250, color_system=None),
    )
    return code, out.getvalue(), err.getvalue()


def pairwise(tmp_path: Path, hosts: list[str], slow: set[str]) -> list[Path]:
    return [pair_log(tmp_path, a, b, scale=0.25 if {a, b} & slow else 1.0) for a, b in itertools.combinations(hosts, 2)]


HOSTS = ["node-a", "node-b", "node-c", "node-d"]


# --- parsing ------------------------------------------------------------------------------------------


def test_per_rank_lines_give_the_run_its_hosts_and_the_info_lines_each_hosts_transport(tmp_path):
    run = parse_log(pair_log(tmp_path, "node-a", "node-b", socket_host="node-b"))
    assert run.facts.hostnames == ("node-a", "node-b")
    assert [(d.rank, d.host, d.device) for d in run.facts.devices[7:9]] == [(7, "node-a", 7), (8, "node-b", 0)]
    by_host = {h.host: h for h in run.facts.host_transports}
    assert by_host["node-a"].transport == "efa" and "node-a:4100:4100 [0] NCCL INFO NET/OFI" in by_host["node-a"].evidence
    assert by_host["node-b"].transport == "socket" and "NET/Socket : Using" in by_host["node-b"].evidence


def test_real_launcher_log_names_each_workers_transport():
    # g4dn log: each worker logs its own "NET/OFI ..." lines behind its host:pid:tid prefix
    run = parse_log(FIXTURES / "g4dn.metal-2node-efa-mpijob.log")
    assert [(h.host, h.transport) for h in run.facts.host_transports] == [
        ("test-nccl-efa-worker-0", "efa"), ("test-nccl-efa-worker-1", "efa"),
    ]


# --- the pure logic -----------------------------------------------------------------------------------


def test_one_slow_host_among_pairs_is_named():
    pairs = [((a, b), not ({a, b} & {"c"})) for a, b in itertools.combinations("abcd", 2)]
    analysis = find_slow_hosts(runs_from_pairs(pairs))
    assert analysis.status == "named"
    assert [s.host for s in analysis.slow_hosts] == ["c"] and not analysis.suspect_links
    assert len(analysis.slow_hosts[0].slow_runs) == 3


def test_two_slow_hosts_are_both_named():
    pairs = [((a, b), not ({a, b} & {"a", "b"})) for a, b in itertools.combinations("abcd", 2)]
    analysis = find_slow_hosts(runs_from_pairs(pairs))
    assert [s.host for s in analysis.slow_hosts] == ["a", "b"]


def test_only_one_slow_pair_is_a_suspect_link_not_a_host():
    pairs = [(("a", "b"), False), (("a", "c"), True), (("b", "c"), True)]
    analysis = find_slow_hosts(runs_from_pairs(pairs))
    assert analysis.status == "named" and not analysis.slow_hosts
    assert [lk.hosts for lk in analysis.suspect_links] == [("a", "b")]
    assert len(analysis.suspect_links[0].passing_runs) == 2


def test_fails_to_name_a_host_from_a_single_slow_run():
    analysis = find_slow_hosts([HostRun(hosts=("a", "b"), ok=False, busbw=111.0, label="x.log")])
    assert analysis.status == "ambiguous" and not analysis.slow_hosts and not analysis.suspect_links
    assert "only one run" in analysis.reason and "x.log: a + b slow, 111 GB/s" in analysis.reason


def test_fails_to_name_a_host_when_every_run_is_slow():
    analysis = find_slow_hosts(runs_from_pairs([(p, False) for p in itertools.combinations("abc", 2)]))
    assert analysis.status == "ambiguous" and not analysis.slow_hosts
    assert "all 3 runs are slow" in analysis.reason


def test_fails_to_tell_apart_two_hosts_only_measured_together():
    analysis = find_slow_hosts(runs_from_pairs([(("a", "b"), False), (("c", "d"), True)]))
    assert analysis.status == "ambiguous" and not analysis.slow_hosts and not analysis.suspect_links
    assert analysis.unexplained == ("a + b slow",)


def test_runs_not_judged_or_on_one_host_say_nothing():
    analysis = find_slow_hosts([HostRun(hosts=("a", "b"), ok=None), HostRun(hosts=("a",), ok=False)])
    assert analysis.status == "no data" and analysis.runs == ()


def test_all_passing_runs_name_nothing():
    analysis = find_slow_hosts(runs_from_pairs([(("a", "b"), True), (("b", "c"), True)]))
    assert analysis.status == "all pass" and not analysis.slow_hosts


# --- the command on constructed sets ------------------------------------------------------------------


def test_command_names_the_one_slow_host_of_pairwise_runs(tmp_path):
    logs = pairwise(tmp_path, HOSTS, slow={"node-c"})
    code, out, _ = run_command(logs, json_out=True)
    doc = json.loads(out)
    assert code == 1  # the three runs with node-c are below the pass mark
    hosts = doc["hosts"]["analysis"]
    assert hosts["status"] == "named" and [s["host"] for s in hosts["slow_hosts"]] == ["node-c"]
    assert hosts["suspect_links"] == [] and hosts["unexplained"] == []
    assert any("111.08 GB/s" in r for r in hosts["slow_hosts"][0]["slow_runs"])

    code, text, _ = run_command(logs)
    assert "hosts: named: slow host node-c: every run with it is slow, the runs without it pass" in text
    assert "slow host node-c: node-a--node-c.log: node-a + node-c slow, 111.08 GB/s" in text


def test_command_says_ambiguous_and_names_no_host_when_every_run_is_slow(tmp_path):
    logs = [pair_log(tmp_path, "node-a", "node-b", scale=0.25), pair_log(tmp_path, "node-b", "node-c", scale=0.25)]
    code, out, _ = run_command(logs, json_out=True)
    hosts = json.loads(out)["hosts"]["analysis"]
    assert code == 1
    assert hosts["status"] == "ambiguous" and hosts["slow_hosts"] == [] and hosts["suspect_links"] == []
    _, text, _ = run_command(logs)
    assert "hosts: ambiguous: all 2 runs are slow" in text and "no host named" in text


def test_command_names_a_host_that_used_sockets(tmp_path):
    log = pair_log(tmp_path, "node-a", "node-b", socket_host="node-b")
    code, out, _ = run_command([log], json_out=True)
    doc = json.loads(out)
    assert code == 1 and doc["runs"][0]["verdict"]["status"] == "not EFA"
    assert [(s["host"], s["run"]) for s in doc["hosts"]["socket_hosts"]] == [("node-b", "node-a--node-b.log")]
    _, text, _ = run_command([log])
    assert "sockets, not EFA: node-b in node-a--node-b.log" in text


def test_single_passing_run_adds_no_host_section(tmp_path):
    code, out, _ = run_command([pair_log(tmp_path, "node-a", "node-b")], json_out=True)
    assert code == 0 and json.loads(out)["hosts"] is None
