"""The report's figures (routing_grpo.evaluation.plots): written, spanning the caps, routing per level for the router."""

from __future__ import annotations

import json

import pytest

from routing_grpo.evaluation.plots import draw_all
from routing_grpo.evaluation.report import (
    write_report,
)
from tests.helpers import MODE_NAMES as MODES
from tests.helpers import demo_inputs, write_paper_summaries


def test_figures_span_the_caps_and_show_routing_per_level_for_the_router(tmp_path):
    from routing_grpo.core.modes import parse_modes
    from routing_grpo.evaluation import plots

    mini, _, _ = demo_inputs()
    modes = parse_modes(mini["modes"])
    assert plots.surface_span(modes) == 69  # caps and crossovers 20 and 46, not 0-1500
    history = [
        {"routing/batch_step": b, "routing/share/Long": 0.3, "routing/entropy": 1.0,
         **{f"routing/level/{lv}/share/{m}": 1 / 3 for lv in (1, 6) for m in MODES}}
        for b in range(8)
    ]  # fmt: skip
    assert plots.plot_training_levels([history], tmp_path / "levels.png", "Routing per level") is not None
    dynamics = plots.plot_training_dynamics([history], tmp_path / "dynamics.png")
    from PIL import Image

    width, height = Image.open(dynamics).size
    assert width <= 1000 and height > 300  # a grid at page width, not five panels in a row
    points = plots.forced_points(mini)
    assert [p.method for p in points] == MODES
    assert points[1].accuracy == pytest.approx(0.99) and points[2].length == pytest.approx(41.0)
    assert plots.moving_mean([0, 2, 4, 6], 2) == [0, 1, 3, 5]


@pytest.mark.slow
def test_figures_are_written(tmp_path):
    runs = tmp_path / "runs"
    write_paper_summaries(runs)
    # A router run with a per-level split and trainer logs, as eval and training write them.
    level_summary = json.loads((runs / "router-seed0" / "math500" / "summary.json").read_text())
    level_summary["mode_shares"] = {"NoThink": 0.2, "Short": 0.32, "Long": 0.48}
    level_summary["per_level"] = {
        str(lv): {
            "accuracy": 1 - 0.1 * lv,
            "mode_shares": {"NoThink": 0.5 - 0.1 * lv, "Short": 0.3, "Long": 0.2 + 0.1 * lv},
        }
        for lv in range(1, 6)
    }
    (runs / "router-seed0" / "math500" / "summary.json").write_text(json.dumps(level_summary))
    for seed in range(2):
        history = [
            {
                "step": 4 * s,
                "routing/batch_step": s,
                "routing/share/NoThink": 0.1 + 0.01 * s + 0.02 * seed,
                "routing/share/Long": 0.9 - 0.01 * s - 0.02 * seed,
                "routing/entropy": 0.3 + 0.01 * s,
                "routing/accuracy/Long": 0.7,
                "routing/length/Long": 100.0 + s,
            }
            for s in range(10)
        ]
        (runs / f"router-seed{seed}" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    tables = write_report([runs], tmp_path / "out", plots=draw_all)
    names = sorted(p.split("/")[-1] for p in tables["figures"])
    assert names == [
        "levels_math500.png",
        "pareto_aime.png",
        "pareto_aime24.png",
        "pareto_aime25.png",
        "pareto_gsm8k.png",
        "pareto_math500.png",
        "reward_surface.png",
        "training_dynamics.png",
    ]
    for name in names:
        data = (tmp_path / "out" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.fixture
def drawn(monkeypatch):
    """name -> (title, x range, first line's x values) of each figure drawn."""
    from routing_grpo.evaluation import plots

    seen, save = {}, plots._save

    def record(fig, path):
        ax = fig.axes[0]
        seen[path.name] = (ax.get_title(), ax.get_xlim(), list(ax.lines[0].get_xdata()) if ax.lines else [])
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", record)
    return seen


def test_the_reward_surface_has_the_modes_of_the_routed_runs(tmp_path, capsys, drawn):
    """A plain-prompt run's modes are not drawn; routed runs of different modes get a surface each."""
    from routing_grpo.cli import main
    from routing_grpo.core.modes import DEFAULT_MODES

    mini, _, _ = demo_inputs()
    paper = [m.to_dict() for m in DEFAULT_MODES]
    runs = {
        "base": {"no_routing": True, "modes": paper},
        "router": {"no_routing": False, "modes": mini["modes"]},
    }
    for method, config in runs.items():
        (tmp_path / "runs" / method).mkdir(parents=True)
        summary = {
            "benchmark": "mini",
            "method": method,
            "accuracy": 0.5,
            "mean_length": 30,
            "config": config,
        }
        (tmp_path / "runs" / method / "summary.json").write_text(json.dumps(summary))
    argv = ["report", "--runs", str(tmp_path / "runs"), "--output", str(tmp_path / "o")]
    assert main(argv) == 0
    assert drawn["reward_surface.png"][1] == (0, 69)  # the router's caps 20 and 46, not the paper's
    runs["base"]["no_routing"] = False  # routed with the paper's modes: two surfaces, each named
    (tmp_path / "runs" / "base" / "summary.json").write_text(
        json.dumps(
            {
                "benchmark": "mini",
                "method": "base",
                "accuracy": 0.5,
                "mean_length": 30,
                "config": runs["base"],
            }
        )
    )
    drawn.clear()
    assert main(argv) == 0
    assert sorted(
        (name, title.split(" (")[0]) for name, (title, _, _) in drawn.items() if "surface" in name
    ) == [
        ("reward_surface_1.png", "Reward surface of base"),
        ("reward_surface_2.png", "Reward surface of router"),
    ]


def test_figures_count_generation_batches_from_one(tmp_path, drawn):
    from routing_grpo.evaluation import plots

    history = [{"routing/batch_step": b, "routing/share/Long": 0.5, "routing/fanout": 0.1} for b in range(3)]
    plots.plot_training_dynamics([history], tmp_path / "dynamics.png")
    plots.plot_training_levels(
        [[{**row, "routing/level/1/share/Long": 0.5} for row in history]], tmp_path / "levels.png", "levels"
    )
    plots.plot_early_tell({"router": [history]}, tmp_path / "tell.png")
    assert {name: xs for name, (_, _, xs) in drawn.items()} == {
        "dynamics.png": [1, 2, 3], "levels.png": [1, 2, 3], "tell.png": [1, 2, 3]
    }  # fmt: skip
