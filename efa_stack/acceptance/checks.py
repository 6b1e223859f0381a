"""Read back the check script's sections (``check.sh``) and judge each check of one node.

One ``judge_*`` function per section (GPU count, DCGM diagnostic, EFA devices, fi_pingpong, Lustre over EFA); the single-node
NCCL run is judged in :mod:`efa_stack.acceptance.judge`. The output formats each parser follows, with their
upstream sources, are in docs/design/commands.md ("Acceptance check formats").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from efa_stack import contract
from efa_stack.acceptance.model import Evidence
from efa_stack.planning import lustre_efa
from efa_stack.planning.node_software import known_bad_for

BEGIN = re.compile(r"^=== efa-stack-check BEGIN (\S+) ===$")
END = re.compile(r"^=== efa-stack-check END (\S+) rc=(\d+|skipped) ===$")
MAX_SECTION_CHARS = 4 << 20


@dataclass(frozen=True)
class Section:
    name: str
    text: str
    rc: int | None
    """The tool's exit code; None when the section was skipped or its END line is missing."""
    skipped: bool = False
    complete: bool = True


def parse_sections(log: str) -> dict[str, Section]:
    """The sections of a check pod's log by name (an unfinished last section is kept, marked incomplete)."""
    out: dict[str, Section] = {}
    name: str | None = None
    lines: list[str] = []
    size = 0
    for raw in log.splitlines():
        line = raw.rstrip("\r")
        if name is None:
            m = BEGIN.match(line)
            if m:
                name, lines, size = m.group(1), [], 0
            continue
        m = END.match(line)
        if m and m.group(1) == name:
            rc = m.group(2)
            skipped = rc == "skipped"
            out[name] = Section(name, "\n".join(lines), None if skipped else int(rc), skipped=skipped)
            name = None
            continue
        if size < MAX_SECTION_CHARS:
            lines.append(line)
            size += len(line) + 1
    if name is not None:
        out[name] = Section(name, "\n".join(lines), None, complete=False)
    return out


def _tail(text: str, n: int = 3) -> str:
    return " | ".join(x.strip() for x in text.strip().splitlines()[-n:] if x.strip())


def finished(check: contract.AcceptanceCheck, section: Section | None, expected: str) -> Section | Evidence:
    """The section when it ran to its end; else the evidence for a missing, skipped or cut-off section."""
    if section is None:
        return Evidence(check, "failed", "no output", expected, "the check did not run (the pod log has no such section)")
    if section.skipped:
        return Evidence(check, "skipped", section.text.strip() or "skipped", expected)
    if not section.complete:
        return Evidence(check, "failed", "cut off", expected, f"the check did not finish: {_tail(section.text)}")
    return section


# --- GPU count ----------------------------------------------------------------------------------

GPU_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?$")


def judge_gpu_count(section: Section | None, expected: int) -> Evidence:
    want = f"{expected} GPUs (nvidia-smi -L)"
    got = finished("gpu-count", section, want)
    if isinstance(got, Evidence):
        return got
    section = got
    gpus = [m.group(2) for m in (GPU_LINE.match(x.strip()) for x in section.text.splitlines()) if m]
    if section.rc != 0 and not gpus:
        return Evidence("gpu-count", "failed", f"nvidia-smi exit {section.rc}", want, _tail(section.text))
    names = ", ".join(f"{n} x {g}" for g, n in _counts(gpus).items())
    if len(gpus) != expected:
        return Evidence("gpu-count", "failed", f"{len(gpus)} GPUs ({names or 'none'})", want,
                        "a GPU fell off the bus or is not visible: look for Xid errors (dmesg) and replace the node")
    return Evidence("gpu-count", "pass", f"{len(gpus)} GPUs ({names})", want)


def _counts(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


# --- DCGM ---------------------------------------------------------------------------------------

DCGM_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 3.x


def _dcgm_json(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _dcgm_version(doc: dict[str, Any], body: dict[str, Any]) -> str | None:
    """4.x ``metadata.version``; 3.x top-level ``version``; a 4.x runtime error's ``version`` in the body."""
    meta = doc.get("metadata")
    for v in ((meta.get("version") if isinstance(meta, dict) else None), doc.get("version"), body.get("version")):
        if isinstance(v, str) and v:
            return v
    return None


def _test_status(test: dict[str, Any]) -> str:
    summary = test.get("test_summary")
    if isinstance(summary, dict) and isinstance(summary.get("status"), str):
        return summary["status"]
    states = [str(r.get("status")) for r in test.get("results") or [] if isinstance(r, dict)]
    for s in ("Fail", "Warn", "Pass", "Skip", "Not Run"):
        if s in states:
            return s
    return "unknown"


def judge_dcgm(section: Section | None, level: int) -> Evidence:
    want = f"every test of dcgmi diag -r {level} Pass (Skip allowed)"
    got = finished("dcgm", section, want)
    if isinstance(got, Evidence):
        return got
    section = got
    doc = _dcgm_json(section.text)
    body = next((doc[k] for k in DCGM_KEYS if doc is not None and isinstance(doc.get(k), dict)), None)
    if body is None:
        return Evidence("dcgm", "failed", f"no diag JSON (dcgmi exit {section.rc})", want, _tail(section.text))
    if body.get("runtime_error"):
        ver = f"DCGM {version}: " if (version := _dcgm_version(doc or {}, body)) else ""
        return Evidence("dcgm", "failed", f"{ver}runtime error", want, str(body["runtime_error"]))
    failed: list[str] = []
    warned: list[str] = []
    ran = 0
    for cat in body.get("test_categories") or []:
        for test in (cat.get("tests") or []) if isinstance(cat, dict) else []:
            if not isinstance(test, dict):
                continue
            status, name = _test_status(test), str(test.get("name", "?"))
            ran += status in ("Pass", "Warn", "Fail")
            if status == "Fail":
                msgs = [
                    f"GPU {r.get('entity_id', r.get('gpu_id', '?'))}: {w.get('warning')}"
                    for r in test.get("results") or [] if isinstance(r, dict) and r.get("status") == "Fail"
                    for w in r.get("warnings") or [] if isinstance(w, dict) and w.get("warning")
                ]
                failed.append(name + (f" ({'; '.join(msgs)})" if msgs else ""))
            elif status == "Warn":
                warned.append(name)
    ver = f"DCGM {version}: " if (version := _dcgm_version(doc or {}, body)) else ""
    if failed:
        return Evidence("dcgm", "failed", f"{ver}{len(failed)} test(s) failed: {'; '.join(failed)}", want,
                        "a GPU failed NVIDIA's diagnostic: replace the node (terminate the instance)")
    if ran == 0:
        return Evidence("dcgm", "failed", f"{ver}no test ran", want, "every test was skipped or not run")
    note = f"warnings from {', '.join(warned)}" if warned else ""
    return Evidence("dcgm", "pass", f"{ver}{ran} test(s) passed", want, note)


# --- EFA devices ----------------------------------------------------------------------------------

DOMAIN = re.compile(r"^\s*domain:\s*(\S+)\s*$", re.MULTILINE)
PROVIDER = re.compile(r"^\s*provider:\s*(\S+)\s*$", re.MULTILINE)


def judge_efa_devices(section: Section | None, expected: int) -> Evidence:
    want = f"{expected} EFA RDM domains (fi_info -p efa -t FI_EP_RDM)"
    got = finished("efa-devices", section, want)
    if isinstance(got, Evidence):
        return got
    section = got
    domains = sorted(set(DOMAIN.findall(section.text)))
    if not domains:
        return Evidence("efa-devices", "failed", f"no EFA domain (fi_info exit {section.rc})", want,
                        f"{_tail(section.text)}; check the EFA device plugin and the node's EFA interfaces")
    if len(domains) < expected:
        return Evidence("efa-devices", "failed", f"{len(domains)} EFA RDM domains", want,
                        "an EFA device is missing: check the launch template's EFA interfaces and the EFA device "
                        "plugin on this node; a device that stays missing means replacing the node")
    return Evidence("efa-devices", "pass", f"{len(domains)} EFA RDM domains", want)


# --- fi_pingpong ----------------------------------------------------------------------------------

PINGPONG_HEADER = re.compile(r"^\s*bytes\s+#sent\s+#ack\s+total\s+time\s+MB/sec\s+usec/xfer\s+Mxfers/sec\s*$")
PINGPONG_ROW = re.compile(r"^\s*(\S+)\s+(\d+)\s+=?(\d+)\s+(\S+)\s+([\d.]+)s\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def judge_pingpong(section: Section | None) -> Evidence:
    want = "fi_pingpong -p efa -e rdm client and server on the node complete (exit 0)"
    got = finished("efa-pingpong", section, want)
    if isinstance(got, Evidence):
        return got
    section = got
    rows: list[tuple[str, float, float]] = []
    in_table = False
    for line in section.text.splitlines():
        if PINGPONG_HEADER.match(line):
            in_table = True
            rows = []  # the client's table comes first; the server's after "server:"
            continue
        m = PINGPONG_ROW.match(line) if in_table else None
        if m:
            rows.append((m.group(1), float(m.group(6)), float(m.group(7))))
        elif in_table:
            break
    if section.rc != 0 or not rows:
        return Evidence("efa-pingpong", "failed", f"exit {section.rc}, {len(rows)} result rows", want,
                        _tail(section.text))
    first, last = rows[0], rows[-1]
    return Evidence("efa-pingpong", "pass",
                    f"{first[2]:g} usec/xfer at {first[0]}, {last[1]:g} MB/sec at {last[0]}", want)


# --- the software the node runs --------------------------------------------------------------------------

NVIDIA_DRIVER_LINE = re.compile(r"^\s*(\d+\.\d+(?:\.\d+)?)\s*$")
EFA_MODULE_VERSION = re.compile(r"^\s*(\d+\.\d+\.\d+)[a-z]*\s*$")
LIBFABRIC_LINE = re.compile(r"^libfabric:\s*(\S+)\s*$")


def _read(section: Section | None, pattern: re.Pattern[str]) -> str | None:
    """The first line of a finished section that ``pattern`` matches (its first group), or None."""
    if section is None or section.skipped or not section.complete or section.rc != 0:
        return None
    return next((m.group(1) for m in map(pattern.match, section.text.splitlines()) if m), None)


def node_software(sections: dict[str, Section]) -> dict[str, str | None]:
    """The node facts the table's known-bad rows are written in (``nvidiaDriver``, ``efaDriver``, ``libfabric``) from
    the ``nvidia-driver`` (``nvidia-smi --query-gpu=driver_version``), ``efa-driver`` (``/sys/module/efa/version``)
    and ``libfabric`` (``fi_info --version``: the ``libfabric:`` line is the loaded library's version) sections;
    None for what could not be read."""
    return {
        "nvidiaDriver": _read(sections.get("nvidia-driver"), NVIDIA_DRIVER_LINE),
        "efaDriver": _read(sections.get("efa-driver"), EFA_MODULE_VERSION),
        "libfabric": _read(sections.get("libfabric"), LIBFABRIC_LINE),
    }


def judge_software(sections: dict[str, Section], instance_type: str) -> Evidence:
    """The node's NVIDIA driver, EFA driver and libfabric against the known-bad rows of the table of EFA software
    (efa_stack/planning/data/efa_software.json) for ``instance_type``: failed on a row it hits, with the row's fix and
    source; skipped when nothing could be read."""
    facts = node_software(sections)
    names = {"nvidiaDriver": "NVIDIA driver", "efaDriver": "EFA driver", "libfabric": "libfabric"}
    measured = ", ".join(f"{names[k]} {v or 'not read'}" for k, v in facts.items())
    want = f"no known-bad combination of efa_software.json on {instance_type}"
    if not any(facts.values()):
        return Evidence("software", "skipped", measured, want, "the node's versions could not be read")
    bads = known_bad_for(facts, instance_type)
    if bads:
        detail = "; ".join(f"{b.id}: {b.problem}; fix: {b.fix} [source: {b.source}]" for b in bads)
        return Evidence("software", "failed", measured, want, detail)
    return Evidence("software", "pass", measured, want)


# --- NVIDIA module options and driver branch (UltraServer nodes) ----------------------------------------------------

PARAM_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9]*): (.*)$")
DMA_BUF_ERROR = "NVRM: dma-buf attach failed: topology not supported for mapping type FORCE_PCIE"
"""The kernel's message when EFA cannot attach GPU memory on NVIDIA Grace Blackwell (NVIDIA/aicr#2383; aicr's NVreg
preflight quotes it, validators/performance/nccl_preflight_nvreg.go)."""


def parse_params(text: str) -> dict[str, str]:
    """``/proc/driver/nvidia/params``: one ``Name: value`` line per module parameter (the ``NVreg_`` prefix dropped), as
    NVIDIA/aicr's preflight reads it (pattern ``^GrdmaPciTopoCheckOverride: 1$``); other lines are ignored."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = PARAM_LINE.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def judge_nvreg(section: Section | None, options: tuple[tuple[str, str], ...], driver_branch: str,
                driver: str | None) -> Evidence:
    """An UltraServer node runs the NVIDIA module with the options efa-stack's user data sets (``options``:
    ``GrdmaPciTopoCheckOverride`` ``1`` on EFA groups) and a driver of ``driver_branch`` (``driver``: the version
    ``nvidia-smi`` printed, None when not read). Without the option "NCCL silently falls back to Socket"
    (NVIDIA/aicr@0747914 recipes/overlays/gb300-eks-training.yaml); R595 and later drop it (NVIDIA/aicr#2383)."""
    shown = ", ".join(f"{k}: {v}" for k, v in options)
    want = (f"{shown} in /proc/driver/nvidia/params and " if options else "") + f"an R{driver_branch} NVIDIA driver"
    got = finished("nvreg", section, want)
    if isinstance(got, Evidence):
        return got
    section = got
    params = parse_params(section.text)
    if section.rc != 0 or not params:
        return Evidence("nvreg", "failed", f"no module parameters (cat exit {section.rc})", want,
                        f"{_tail(section.text)}; the NVIDIA driver is not loaded, or /proc/driver/nvidia is not the "
                        "host's")
    problems: list[str] = []
    wrong = [f"{k}: {params.get(k, 'absent')}" for k, v in options if params.get(k) != v]
    if wrong:
        problems.append(
            f"without {shown} the kernel refuses EFA's dma-buf attach of GPU memory ('{DMA_BUF_ERROR}') and NCCL "
            "falls back to sockets: the user data writes /etc/modprobe.d/90-efa-stack-nvidia.conf and reloads the "
            "module before the kubelet starts; on the node check that file and `journalctl -u cloud-final`, then "
            "reboot the node (modprobe reads the option when it loads the module)")
    branch = driver.split(".")[0] if driver else None
    if branch is not None and branch != driver_branch:
        problems.append(
            f"driver {driver} is not of the R{driver_branch} branch: R595 and later drop "
            "NVreg_GrdmaPciTopoCheckOverride and break EFA on these nodes (NVIDIA/aicr#2383); pin the node group's "
            f"releaseVersion to an AMI release that gives the R{driver_branch} driver")
    measured = ", ".join(wrong) if wrong else shown or "module parameters read"
    measured += f", driver {driver}" if driver else ", driver not read"
    if problems:
        return Evidence("nvreg", "failed", measured, want, "; ".join(problems))
    return Evidence("nvreg", "pass", measured, want)


# --- Lustre over EFA (an EFA-enabled FSx file system) ---------------------------------------------------------

LUSTRE_SECTIONS = ("lnet-before", "lnet-unit", "lustre-write", "lnet-after")
TCP_NET = re.compile(r"^tcp\d*$")


@dataclass(frozen=True)
class LnetInterface:
    """One local network interface of ``lnetctl net show -v``: its net type (``tcp``, ``efa``, ``lo``), NID, status
    and LNet message counters (None when the output has no statistics)."""

    net: str
    nid: str
    status: str | None
    send_count: int | None
    recv_count: int | None


def parse_lnet(text: str) -> list[LnetInterface] | None:
    """The interfaces of ``lnetctl net show [-v]``'s YAML (a top-level ``net`` list of ``net type`` and ``local
    NI(s)``; the shape aws/aws-parallelcluster-cookbook's pcluster-diag parses, util/lustre.py
    ``parse_lnet_net_show``, and the recordings in tests/fixtures/lnet/); None when it is not that YAML."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("net"), list):
        return None
    out: list[LnetInterface] = []
    for net in doc["net"]:
        if not isinstance(net, dict) or not net.get("net type"):
            continue
        for ni in net.get("local NI(s)") or []:
            if not isinstance(ni, dict):
                continue
            raw = ni.get("statistics")
            stats: dict[str, Any] = raw if isinstance(raw, dict) else {}
            out.append(LnetInterface(
                str(net["net type"]), str(ni.get("nid", "")), str(ni["status"]) if "status" in ni else None,
                _count(stats.get("send_count")), _count(stats.get("recv_count")),
            ))
    return out


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sends(interfaces: list[LnetInterface], wanted: Callable[[str], object]) -> int | None:
    """The summed ``send_count`` of the interfaces of the nets ``wanted`` accepts; None when one has none."""
    counts = [i.send_count for i in interfaces if wanted(i.net)]
    return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)


def _growth(before: list[LnetInterface], after: list[LnetInterface]) -> tuple[int, int] | None:
    """How much the efa net's and the tcp nets' ``send_count`` grew; None when a count is missing."""
    counts = [_sends(side, wanted) for wanted in (lambda n: n == "efa", TCP_NET.match) for side in (before, after)]
    if any(c is None for c in counts):
        return None
    efa_before, efa_after, tcp_before, tcp_after = (c or 0 for c in counts)
    return efa_after - efa_before, tcp_after - tcp_before


def judge_lustre_efa(sections: dict[str, Section], expected_interfaces: int | None, write_mib: int, unit: str) -> Evidence:
    """Lustre rides EFA on this node: ``lnetctl net show -v`` lists ``@efa`` interfaces that are up, as many as the
    instance type binds (``expected_interfaces``; None: at least one), the EFA client's systemd ``unit`` is active,
    and a direct write of ``write_mib`` MiB raises the efa net's ``send_count`` by at least half the bulk RPCs it takes
    and by more than the tcp nets' (metadata RPCs and pings ride tcp by design, aws/aws-parallelcluster#7572: an
    ordering, never "no tcp at all")."""
    rpcs = write_mib // lustre_efa.RPC_MIB
    floor = -(-rpcs // 2)
    want = (f"{expected_interfaces or 'at least 1'} @efa LNet interfaces up, {unit} active, and after a {write_mib} MiB "
            f"direct write the efa send_count up by >= {floor} and by more than tcp's")
    got = [finished("lustre-efa", sections.get(name), want) for name in LUSTRE_SECTIONS]
    missing = next((g for g in got if isinstance(g, Evidence)), None)
    if missing is not None:  # a skipped section means the probe never ran: that proves nothing
        return Evidence("lustre-efa", "failed", missing.measured, want, missing.detail or "the LNet check did not run")
    before_s, unit_s, write_s, after_s = (g for g in got if isinstance(g, Section))
    before, after = parse_lnet(before_s.text), parse_lnet(after_s.text)
    if before_s.rc != 0 or after_s.rc != 0 or before is None or after is None:
        return Evidence("lustre-efa", "failed", "lnetctl net show -v gave no LNet configuration", want,
                        f"{_tail(before_s.text)}; the Lustre client (and lnetctl) is installed by the node's user data")
    problems: list[str] = []
    efa = [i for i in before if i.net == "efa" and i.status == "up"]
    nets = ", ".join(sorted({i.net for i in before}))
    if not efa:
        problems.append(f"no @efa interface is up (nets: {nets or 'none'}): LNet was not configured for EFA and Lustre "
                        f"uses TCP; on the node: journalctl -u {unit}")
    elif expected_interfaces is not None and len(efa) < expected_interfaces:
        problems.append(f"only {len(efa)} of the {expected_interfaces} @efa interfaces AWS's setup binds on this "
                        f"instance type: Lustre does not use every EFA device; on the node: journalctl -u {unit}")
    state = unit_s.text.strip().splitlines()[-1] if unit_s.text.strip() else "unknown"
    if state != "active":
        problems.append(f"{unit} is {state}: it configures LNet on every boot; journalctl -u {unit} says why")
    if write_s.rc != 0:
        problems.append(f"the direct write to the file system failed (exit {write_s.rc}): {_tail(write_s.text)}")
    deltas = _growth(before, after)
    if deltas is None:
        problems.append("lnetctl net show -v printed no send_count for every interface: the traffic cannot be judged")
        growth = "send counts not read"
    else:
        d_efa, d_tcp = deltas
        growth = f"efa send_count +{d_efa}, tcp +{d_tcp}"
        if write_s.rc == 0 and (d_efa < floor or d_efa <= d_tcp):
            problems.append(f"{growth} for {rpcs} bulk RPCs: Lustre's data is not riding EFA (the file system "
                            "EFA-enabled and in this node's zone? LNet peers reached over @efa?)")
    measured = f"{len(efa)} @efa interfaces up, {unit.split('.')[0]} {state}, {growth} after {write_mib} MiB"
    if problems:
        return Evidence("lustre-efa", "failed", measured, want, "; ".join(problems))
    return Evidence("lustre-efa", "pass", measured, want)
