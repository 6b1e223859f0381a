"""efa_stack.console: the one error printer (every command and the CDK entry point) and the one status colour table."""

from __future__ import annotations

import ast
import io
import json
import re
import typing
from pathlib import Path

import pytest
from rich.console import Console

from efa_stack import contract
from efa_stack.acceptance.model import EvidenceStatus, NodeStatus
from efa_stack.console import STATUS_STYLE, print_error, spec_error_document, styled
from efa_stack.errors import UserError
from efa_stack.nccl_report.hosts import AnalysisStatus
from efa_stack.nccl_report.model import VerdictStatus
from efa_stack.spec.errors import MISSING, Problem, SpecError
from tests.support import source_tree

ROOT = Path(__file__).resolve().parent.parent
SPEC_ERROR = SpecError("bad.yaml", [
    Problem("managedNodeGroups[0].instanceType", "p5.48xlarg", "unknown instance type", "did you mean p5.48xlarge?"),
    Problem("metadata.region", MISSING, "is required", "set metadata.region, e.g. us-west-2"),
])


def plain_console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, color_system=None, width=40), buf


def test_a_user_error_is_one_line_and_its_fix_with_its_exit_code() -> None:
    console, buf = plain_console()
    code = print_error(UserError("boom", "do this", exit_code=1), json_out=False, console=console)
    assert code == 1
    assert buf.getvalue() == "error: boom\nFix: do this\n"


def test_a_user_error_with_json_is_its_document_after_the_context() -> None:
    out: list[str] = []
    err = UserError("boom", "do this", exit_code=2)
    assert print_error(err, json_out=True, console=None, echo=out.append, context={"cluster": "c"}) == 2
    assert out == ['{\n  "cluster": "c",\n  "ok": false,\n  "error": "boom",\n  "fix": "do this"\n}']


def test_a_command_of_its_own_shape_prints_its_document() -> None:
    console, buf = plain_console()
    code = print_error(UserError("boom", exit_code=2), json_out=True, console=console, document={"runs": [], "x": 1})
    assert code == 2 and json.loads(buf.getvalue()) == {"runs": [], "x": 1}


def test_a_bad_spec_keeps_its_own_text_unwrapped_and_is_bad_input() -> None:
    # GIVEN a console narrower than a problem's line WHEN the spec error is printed
    console, buf = plain_console()
    code = print_error(SPEC_ERROR, json_out=False, console=console)
    # THEN exit 2 and the spec's own lines, each whole (the terminal wraps, not the printer), no "error:" prefix
    assert code == 2
    assert buf.getvalue() == SPEC_ERROR.render() + "\n"
    assert buf.getvalue().splitlines()[1] == (
        "  - managedNodeGroups[0].instanceType: unknown instance type (got 'p5.48xlarg'). "
        "Fix: did you mean p5.48xlarge?"
    )


def test_a_bad_spec_with_json_lists_every_problem() -> None:
    out: list[str] = []
    assert print_error(SPEC_ERROR, json_out=True, console=None, echo=out.append, context={"cluster": "c"}) == 2
    doc = json.loads(out[0])
    assert doc == {"cluster": "c", **spec_error_document(SPEC_ERROR)}
    assert doc["error"] == "bad.yaml: 2 problems in the cluster spec"
    assert doc["fix"] == "did you mean p5.48xlarge?; set metadata.region, e.g. us-west-2"
    assert doc["problems"][1] == {"field": "metadata.region", "message": "is required",
                                  "fix": "set metadata.region, e.g. us-west-2", "value": "nothing"}


def test_the_cli_and_the_cdk_entry_point_print_a_bad_spec_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from typer.testing import CliRunner

    import app as entry
    from efa_stack.tools.cli import app
    from tests.specs import cluster_spec

    # GIVEN a spec with two problems
    spec = tmp_path / "bad.yaml"
    spec.write_text(cluster_spec("bad", instance_type="p5.48xlarg", min_size=2, desired=3, max_size=2).lstrip("\n"))
    # WHEN a command and `cdk synth`'s entry point read it
    result = CliRunner().invoke(app, ["preflight", "--spec", str(spec)])
    monkeypatch.setenv("CDK_CONTEXT_JSON", json.dumps({"spec": str(spec)}))
    with pytest.raises(SystemExit) as info:
        entry.main()
    # THEN both exit 2 with the same text
    assert result.exit_code == info.value.code == 2
    assert "problems in the cluster spec" in result.stderr
    assert capsys.readouterr().err == result.stderr


# --- the colour table ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vocabulary", [contract.CheckStatus, NodeStatus, EvidenceStatus, VerdictStatus,
                                        AnalysisStatus])
def test_every_status_of_every_command_has_its_colour(vocabulary: object) -> None:
    assert [s for s in typing.get_args(vocabulary) if s not in STATUS_STYLE] == []


def test_styled_prints_a_status_in_its_colour_and_escapes_the_text() -> None:
    assert styled("fail") == "[bold red]FAIL[/]"
    assert styled("pass", "OK") == "[green]OK[/]"
    assert styled("warn", "[x]") == "[yellow]\\[x][/]"
    assert styled("no data") == "NO DATA"  # no colour: plain text


COLOUR = re.compile(r"\b(red|green|yellow|magenta|blue|cyan)\b")


@pytest.mark.xdist_group("sources")  # the worker that parses the project's modules (tests.support.source_tree)
def test_no_module_but_the_table_names_a_colour() -> None:
    # every string literal of the command code (markup, styles) outside efa_stack/console.py
    files = [p for p in (ROOT / "efa_stack").rglob("*.py") if p.name != "console.py" or p.parent.name != "efa_stack"]
    found = [
        f"{p.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for p in [*files, ROOT / "app.py"]
        for node in ast.walk(source_tree(p))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and COLOUR.search(node.value)
    ]
    assert len(files) > 50
    assert found == []
