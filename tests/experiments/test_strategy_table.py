"""The strategy table (experiments.studies.strategy_table) on the smallest shipped whole-model
graph with a short limit: a row per strategy of each kind, honest statuses, values that are the
problem's own pricing of the answer."""
from experiments.studies import strategy_table
from experiments.studies.strategy_table import FUSION_STRATEGIES, ORDER_STRATEGIES, strategy_rows, whole_model_graphs


def test_rows_for_every_strategy_on_a_small_graph():
    graphs = whole_model_graphs(("resnet-8-forward",))
    assert [(g.name, g.kind) for g in graphs] == [("data/models/resnet-8-forward.fusion", "fusion"),
                                                  ("data/models/resnet-8-forward.fusion", "order")]
    rows = strategy_rows(graphs, time_limit=2.0, workers=1)
    assert [(r["problem"], r["strategy"]) for r in rows] == (
        [("fusion", s) for s in FUSION_STRATEGIES] + [("order", s) for s in ORDER_STRATEGIES])
    fusion, order = graphs[0].problem, graphs[1].problem
    for row in rows:
        assert row["status"] in ("optimal", "feasible", "heuristic"), row
        if row["bound"] is not None:
            assert row["bound"] <= row["value"], row
        if row["status"] == "optimal":
            assert row["bound"] == row["value"] and row["gap"] == 0.0, row
        ceiling = fusion.unfused_cost() if row["problem"] == "fusion" else sum(b.size for b in order.buffers)
        assert 0 < row["value"] <= ceiling, row
    exact = {(r["problem"], r["strategy"]): r for r in rows}
    assert exact["fusion", "cpsat"]["value"] <= exact["fusion", "greedy"]["value"]
    assert exact["order", "cpsat"]["value"] <= exact["order", "dp"]["value"]


def test_the_zoo_adds_its_fusion_and_order_files():
    graphs = whole_model_graphs(("zoo/lenet_train",), zoo=True)
    assert [(g.name, g.kind) for g in graphs] == [("data/torch/zoo/lenet_train.fusion", "fusion"),
                                                  ("data/torch/zoo/lenet_train.order", "order")]
    assert not whole_model_graphs(("zoo/lenet_train",))


def test_main_prints_the_table(capsys):
    strategy_table.main(["--time-limit", "1", "--workers", "1", "--graphs", "resnet-8-forward", "--fusion", "greedy",
                         "--order", "dp"])
    out = capsys.readouterr().out
    assert "resnet-8-forward" in out and "greedy" in out and " dp " in out
    assert out.count("data/models/resnet-8-forward.fusion") == 4  # two rows as measured, two in the table
