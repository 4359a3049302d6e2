"""The instance library's status table (instances.status): every shipped problem has a current row,
its values agree with a fresh solve, the consistency check catches planted contradictions, the
sweep's reference is checked against it, and the regeneration script resumes."""
from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

from experiments.cli import main
from experiments.sweep.config import ReferenceSpec
from experiments.studies.instance_status import regenerate
from experiments.sweep.measure import ReferenceTask, solve_reference, unsolved_reference
from instances import store
from instances.status import Standing, StatusConflict, StatusTable, problem_key, problems_of, shipped_table
from solvers.brute_force import min_fusion_cost, min_peak
from solvers.order.dp import bounded_order
from stax.errors import InstanceFormatError
from stax.scheduler.problems import FusionProblem
from stax.scheduler.strategies import Status, run_fusion

SMALL = 30  # rows up to this many nodes are solved afresh
BRUTE = 8  # and up to this many by brute force too


def test_every_shipped_problem_has_a_row_of_its_current_content():
    table = shipped_table()
    expected = set()
    for name in store.shipped():
        for kind, problem in problems_of(store.load(name)):
            expected.add((name, kind))
            row = table.row(name, kind)
            assert row is not None, f"{name} ({kind}) has no row: run python -m experiments.studies.instance_status"
            assert row.key == problem_key(problem), f"{name} ({kind}) changed since its row was solved"
            assert (row.nodes, row.buffers) == (len(problem.nodes if kind == "fusion" else problem.tasks),
                                                len(problem.buffers))
    assert {(r.instance, r.problem) for r in table.rows} == expected


def _fresh(problem):
    """(value, bound, optimal) of an exact solve independent of the table's run: undecomposed CP-SAT
    for fusion, the down-set programme for orders, and brute force on the smallest."""
    size = len(problem.nodes) if isinstance(problem, FusionProblem) else len(problem.tasks)
    if size <= BRUTE:
        value = min_fusion_cost(problem)[0] if isinstance(problem, FusionProblem) else min_peak(problem)[0]
        return value, value, True
    if isinstance(problem, FusionProblem):
        result = run_fusion("cpsat", problem, time_limit=5, workers=1)
        return result.cost, result.bound, result.status == Status.OPTIMAL
    result = bounded_order(problem, time_limit=5)
    return result.peak, result.bound, result.status == Status.OPTIMAL


def test_small_rows_agree_with_a_fresh_solve():
    sample = [r for r in shipped_table().rows if r.nodes <= SMALL]
    assert len(sample) >= 8
    proven = 0
    for row in sample:
        problem = dict(problems_of(store.load(row.instance)))[row.problem]
        value, bound, optimal = _fresh(problem)
        assert row.conflicts(value, bound, optimal) == [], row.instance
        if optimal and row.status == Standing.SOLVED:
            assert value == row.value, row.instance
            proven += 1
    assert proven >= 8


@pytest.fixture(scope="module")
def layered():
    """data/layered-12-0's fusion problem and its row in the shipped table."""
    inst = store.load("data/layered-12-0")
    return inst.fusion, shipped_table().row("data/layered-12-0", "fusion")


def test_a_solver_claiming_a_bound_above_a_known_optimum_fails(layered):
    _, row = layered
    assert row.status == Standing.SOLVED
    with pytest.raises(StatusConflict, match=f"lower bound {row.value + 1} above the known value {row.value}"):
        row.check(row.value + 1, row.value + 1, False, "a wrong solver")
    with pytest.raises(StatusConflict, match="optimal, but"):
        row.check(row.value + 4, row.value - 4, True, "a wrong solver")
    row.check(row.value + 4, row.value - 4, False, "a heuristic with a weak bound")  # consistent: no error


def test_the_reference_is_checked_against_planted_wrong_rows(layered):
    problem, row = layered
    task = ReferenceTask.of(problem, ReferenceSpec(time_limit=5))
    # a table whose proven bound is wrong (above the optimum): the fresh optimum lies below it
    wrong_bound = StatusTable((replace(row, value=row.value + 8, bound=row.value + 8),))
    with pytest.raises(StatusConflict, match="below the proven bound"):
        solve_reference(task, wrong_bound)
    # a table with an impossible value (below the optimum): the fresh proof's bound lies above it
    impossible = StatusTable((replace(row, value=row.value - 8, bound=row.value - 16, status="open"),))
    with pytest.raises(StatusConflict, match="above the known value"):
        solve_reference(task, impossible)
    right = solve_reference(task, StatusTable((row,)))
    assert (right["value"], right["bound"], right["status"], right["status_table"]) == (row.value, row.value,
                                                                                         "optimal", "solved")


def test_an_unsolved_reference_takes_the_rows_value_and_bound(layered):
    problem, row = layered
    task = ReferenceTask.of(problem, ReferenceSpec(time_limit=5))
    ref = unsolved_reference(task, "timeout", StatusTable((row,)))
    assert (ref["value"], ref["bound"], ref["status"]) == (row.value, row.value, "optimal")
    assert unsolved_reference(task, "timeout", StatusTable())["value"] is None


def test_regeneration_resumes_and_redoes_on_request(tmp_path):
    path, said = tmp_path / "status.csv", []
    table = regenerate(5, only="layered-12-0", path=path, isolated=False, echo=said.append)
    assert [(r.instance, r.problem) for r in table.rows] == [("data/layered-12-0", "fusion"),
                                                              ("data/layered-12-0", "order")]
    assert StatusTable.load(path) == table
    shipped = shipped_table()
    for row in table.rows:
        assert row.status == Standing.SOLVED and shipped.row(row.instance, row.problem).value == row.value
    regenerate(5, only="layered-12-0", path=path, isolated=False, echo=said.append)
    assert "0 problems to solve" in said[-1]
    regenerate(5, only="example_7_2", path=path, echo=said.append)  # attempts in their own processes
    assert len(StatusTable.load(path).rows) == 4 and "2 problems to solve" in said[-3]


def test_a_malformed_table_is_one_clear_error(layered):
    _, row = layered
    text = StatusTable((row,)).to_csv()
    figures = f",{row.buffers},{row.value},{row.bound},"
    with pytest.raises(InstanceFormatError, match="expected the columns"):
        StatusTable.from_csv(text.replace("bound_by", "proved_by"), "t.csv")
    with pytest.raises(InstanceFormatError, match="t.csv line 2: column 'value': expected a number"):
        StatusTable.from_csv(text.replace(figures, f",{row.buffers},lots,{row.bound},"), "t.csv")
    with pytest.raises(InstanceFormatError, match="status 'solved' but value"):
        StatusTable.from_csv(text.replace(figures, f",{row.buffers},{row.value + 1},{row.bound},"), "t.csv")


def test_the_command_prints_the_table():
    result = CliRunner().invoke(main, ["instances", "status", "--only", "layered-12"], catch_exceptions=False)
    assert result.exit_code == 0
    lines = [line for line in result.output.splitlines() if line.startswith("data/layered-12-0")]
    assert len(lines) == 2 and all("solved" in line for line in lines)
    assert "2 rows: 2 solved, 0 open" in result.output
