"""Hostile or malformed spec files end in one clear SpecError, quickly and in little memory.

Bounds are measured by counting (tracemalloc's peak), never by wall-clock assertions.
"""

from __future__ import annotations

import os
import tracemalloc

import pytest
from yaml.error import Mark
from yaml.scanner import ScannerError

from efa_stack.planning.plan import plan_from_file
from efa_stack.spec import loader
from efa_stack.spec.errors import SpecError
from efa_stack.spec.loader import MAX_SPEC_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES, load_spec, parse_spec
from tests.support import BASE, problems_of, structural_problems

# "Billion laughs": nine levels of nine aliases each, 9**9 leaves from under 1 KB of text.
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)
PEAK_LIMIT = 8 * 1024 * 1024
"""Reading any rejected file below allocates less than this (the bomb took 3 GB before the limits)."""


def _reject(text: str, tmp_path) -> tuple[SpecError, int]:
    f = tmp_path / "spec.yaml"
    f.write_text(text, encoding="utf-8")
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as info:
            plan_from_file(f)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return info.value, peak


def test_fails_alias_bomb_quickly_in_little_memory(tmp_path):
    # GIVEN a 1 KB YAML file whose aliases expand to 387 million nodes
    assert len(BOMB) < 1024
    # WHEN it is loaded
    err, peak = _reject(BOMB, tmp_path)
    # THEN it is refused from the document's structure, before anything is expanded
    (p,) = err.problems
    assert p.field == "file"
    assert f"aliases expand the document to more than {MAX_YAML_NODES} YAML nodes" in p.message
    assert p.value.startswith("line ")
    assert peak < PEAK_LIMIT


def test_fails_bomb_under_a_valid_spec(tmp_path):
    # GIVEN a valid spec with a bomb hidden in its tags
    text = BASE.replace("metadata: {name: t, region: us-west-2, version: \"1.34\"}",
                        "metadata: {name: t, region: us-west-2, version: \"1.34\", tags: *i}")
    err, peak = _reject(BOMB + text, tmp_path)
    assert "aliases expand" in err.problems[0].message
    assert peak < PEAK_LIMIT


def test_small_aliases_and_merge_keys_are_read():
    # GIVEN labels shared through an anchor and a merge key (ordinary YAML that eksctl reads too)
    text = BASE.replace("    efaEnabled: true\n", "    efaEnabled: true\n    labels: &l {team: ml}\n    tags:\n      <<: *l\n      owner: me\n")
    spec = parse_spec(text)
    assert spec.managed_node_groups[0].labels == {"team": "ml"}
    assert spec.managed_node_groups[0].tags == {"team": "ml", "owner": "me"}


def test_fails_recursive_alias(tmp_path):
    err, _ = _reject("a: &x [1, *x]\n", tmp_path)
    assert "alias refers to a node that contains it" in err.problems[0].message


@pytest.mark.parametrize("opener", ["[", "{a: "])
def test_fails_deep_nesting_without_recursion_error(tmp_path, opener):
    # GIVEN flow collections nested 10,000 deep (RecursionError traceback before the limit)
    closer = "]" if opener == "[" else "}"
    text = "metadata: " + opener * 10000 + closer * 10000 + "\n"
    assert len(text) < MAX_SPEC_BYTES
    err, peak = _reject(text, tmp_path)
    # THEN efa-stack's own refusal, whichever stops first: its depth count or libyaml's (PyYAML >= 6.0.4's libyaml
    # refuses '[' nested 1000 deep while reading ahead)
    (p,) = err.problems
    assert p.field == "file"
    assert p.message == f"the document nests deeper than {MAX_YAML_DEPTH} levels"
    assert "flatten the structure" in p.fix
    assert p.value.startswith("line 1, column ")
    assert peak < PEAK_LIMIT


def test_fails_libyaml_nesting_limit_in_own_words(monkeypatch):
    # GIVEN a libyaml that stops at its own nesting limit before the loader counts levels (whatever PyYAML is here)
    mark = Mark("<spec>", 1009, 0, 1009, None, None)

    def libyaml_refuses(self):
        raise ScannerError("while increasing flow level", mark, "exceeded maximum nesting depth", mark)

    monkeypatch.setattr(loader._SpecLoader, "get_single_node", libyaml_refuses)
    with pytest.raises(SpecError) as info:
        parse_spec("metadata: [[[]]]\n")
    # THEN the error is efa-stack's depth refusal at libyaml's position, not a YAML syntax error
    (p,) = info.value.problems
    assert (p.field, p.value) == ("file", "line 1, column 1010")
    assert p.message == f"the document nests deeper than {MAX_YAML_DEPTH} levels"
    assert "flatten the structure" in p.fix


def test_fails_deep_block_nesting(tmp_path):
    text = "metadata:\n" + "".join(" " * i + "x:\n" for i in range(1, 60))
    err, _ = _reject(text, tmp_path)
    assert "nests deeper" in err.problems[0].message
    assert err.problems[0].value == f"line {MAX_YAML_DEPTH}, column {MAX_YAML_DEPTH}"


def test_fails_duplicate_key_in_node_group(tmp_path):
    # GIVEN a node group that says maxSize twice (PyYAML alone keeps the last one silently)
    text = BASE.replace("    maxSize: 3\n", "    maxSize: 3\n    maxSize: 30\n")
    err, _ = _reject(text, tmp_path)
    (p,) = err.problems
    assert p.field == "file"
    assert p.value == "line 12, column 5"
    assert "key 'maxSize' is given twice in the same mapping (first at line 11, column 5)" in p.message
    assert "keep one" in p.fix


def test_fails_duplicate_managed_node_groups(tmp_path):
    # GIVEN two managedNodeGroups lists (the second would silently replace the first)
    text = BASE + "managedNodeGroups:\n  - {name: cpu, instanceType: m7i.large}\n"
    err, _ = _reject(text, tmp_path)
    (p,) = err.problems
    assert "key 'managedNodeGroups' is given twice" in p.message
    assert p.value == "line 15, column 1"


def test_same_key_in_different_mappings_is_fine():
    text = BASE.replace("    efaEnabled: true\n", "    efaEnabled: true\n    labels: {name: a}\n    tags: {name: a}\n")
    assert parse_spec(text).managed_node_groups[0].tags == {"name": "a"}


def test_fails_multi_document_file(tmp_path):
    err, _ = _reject(BASE + "---\n" + BASE, tmp_path)
    (p,) = err.problems
    assert "more than one YAML document" in p.message
    assert p.value == "line 15, column 1"
    assert "one ClusterConfig per file" in p.fix


def test_leading_document_marker_is_fine():
    # eksctl's examples start with '---'
    assert parse_spec("---\n" + BASE).metadata.name == "t"


def test_fails_huge_file_without_reading_it_all(tmp_path):
    # GIVEN a 64 MiB file (sparse: nothing is written but its size)
    f = tmp_path / "huge.yaml"
    with f.open("wb") as fh:
        fh.write(BASE.encode())
        fh.truncate(64 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as info:
            load_spec(f)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (p,) = info.value.problems
    assert f"larger than {MAX_SPEC_BYTES // 1024} KiB" in p.message
    assert peak < PEAK_LIMIT


def test_fails_too_many_nodes(tmp_path):
    # GIVEN a list of 30,000 numbers, within the size limit
    text = "metadata: [" + "1," * 30000 + "1]\n"
    assert len(text) <= MAX_SPEC_BYTES
    err, _ = _reject(text, tmp_path)
    assert f"more than {MAX_YAML_NODES} YAML nodes" in err.problems[0].message


def test_fails_huge_integer_literal(tmp_path):
    # GIVEN a 5000-digit number (Python's int() refuses over 4300 digits with a ValueError)
    err, _ = _reject(BASE.replace("maxSize: 3", "maxSize: " + "9" * 5000), tmp_path)
    (p,) = err.problems
    assert p.field == "managedNodeGroups[0].maxSize"  # the field is named, not only the position
    assert p.message == "a number of 5000 digits"


def test_fails_non_utf8_bytes_naming_the_line(tmp_path):
    f = tmp_path / "latin1.yaml"
    f.write_bytes(BASE.replace("name: gpu", "name: gpü").encode("latin-1"))
    with pytest.raises(SpecError) as info:
        load_spec(f)
    (p,) = info.value.problems
    assert "not UTF-8 text (byte 0xfc at line 7" in p.message
    assert p.value == "line 7"
    assert "UTF-8" in p.fix


def test_fails_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError) as info:
        load_spec(fifo)
    assert "not a regular file" in info.value.problems[0].message


def test_fails_directory(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert "not a regular file" in info.value.problems[0].message


@pytest.mark.parametrize(("text", "shown"), [("- a\n- b\n", "list"), ("just text\n", "str"), ("42\n", "int"), ("", "an empty document")])
def test_fails_top_level_that_is_not_a_mapping(tmp_path, text, shown):
    err, _ = _reject(text, tmp_path)
    (p,) = err.problems
    assert p.value == shown
    assert "must be a YAML mapping" in p.message


def test_fails_many_problems_are_capped():
    # GIVEN 200 unknown fields: the error lists 50 and counts the rest
    text = BASE + "".join(f"bogus{i}: 1\n" for i in range(200))
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    problems = info.value.problems
    assert len(problems) == 51
    assert problems[-1].message == "150 further problems not listed"


def test_fails_tab_in_indentation_says_tab():
    text = BASE.replace("    instanceType: p5.48xlarge", "\tinstanceType: p5.48xlarge")
    (p,) = structural_problems(text)
    assert "tab" in p.message and p.value.startswith("line ")
    assert "spaces" in p.fix


def test_fails_every_duplicated_key_named():
    text = BASE.replace("    minSize: 1\n", "    minSize: 1\n    minSize: 2\n").replace(
        "    maxSize: 3\n", "    maxSize: 3\n    maxSize: 4\n")
    problems = structural_problems(text)
    assert [p.message.split("'")[1] for p in problems if "given twice" in p.message] == ["minSize", "maxSize"]


def test_fails_unknown_instance_type_suggests_the_nearest_known():
    (p,) = problems_of(BASE.replace("p5.48xlarge", "p5e.96xlarge"))
    assert p.field == "managedNodeGroups[0].instanceType"
    assert "the nearest known types are p5e.48xlarge" in p.fix
