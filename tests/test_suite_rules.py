"""The test suite asserts behaviour, never the machine: no test bounds a subprocess or a wait
by a time of its own (CI's job limit is the only one; docs/testing.md), none counts page faults
or asserts a duration. Speed and memory belong to the benchmark (docs/benchmark.md)."""

import ast
import os

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
FILES = sorted(os.path.relpath(os.path.join(d, f), TESTS) for d, _, files in os.walk(TESTS)
               if "fixtures" not in os.path.relpath(d, TESTS).split(os.sep) for f in files if f.endswith(".py"))

# what measures the machine rather than the behaviour
MACHINE_COUNTERS = {"ru_minflt", "ru_majflt", "getrusage"}
CLOCKS = {"monotonic", "perf_counter", "process_time"}


def _violations(source: str):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "timeout":
                    yield f"line {node.lineno}: a call with timeout="
        if isinstance(node, ast.Attribute) and node.attr in MACHINE_COUNTERS | CLOCKS:
            yield f"line {node.lineno}: {node.attr}"


@pytest.mark.parametrize("name", FILES)
def test_no_timeout_or_machine_measurement(name):
    with open(os.path.join(TESTS, name), encoding="utf-8") as f:
        found = list(_violations(f.read()))
    assert not found, f"{name}: " + "; ".join(found)


def test_the_rule_finds_what_it_forbids():
    assert list(_violations("subprocess.run(['x'], timeout=300)")) == ["line 1: a call with timeout="]
    assert len(list(_violations("import resource\nresource.getrusage(resource.RUSAGE_SELF).ru_minflt"))) == 2
    assert list(_violations("t0 = time.monotonic()")) == ["line 1: monotonic"]
    assert list(_violations("subprocess.run(['x'])")) == []
