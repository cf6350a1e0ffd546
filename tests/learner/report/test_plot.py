"""ppo-cluster plot: a panel per quantity, return against env steps and wall time, a legend in its
own cell, smoothing and mean +- std bands over runs; drawn from small synthetic metrics.jsonl files."""
import json

import numpy as np
import pytest

from learner.report.plot import LEGEND, PANELS, RETURN_STEPS, RETURN_TIME, Run, draw, load_runs, main, smooth

pytest.importorskip("matplotlib")


def records(n=12, scale=1.0, sps=1000.0):
    out = []
    for i in range(1, n + 1):
        out.append({"update": i, "env_steps": 1024 * i, "elapsed_s": 30.0 * i, "sps": sps + 100 * (i % 2),
                    "episode_return_mean": scale * i, "policy_loss": -0.01 * i, "value_loss": 0.5 * i,
                    "entropy": 1.0 - 0.01 * i, "approx_kl": 0.001 * i, "clip_fraction": 0.01 * i,
                    "explained_variance": 0.05 * i, "learning_rate": 2.5e-4})
    return out


def write_run(path, recs, env_id="ALE/Pong-v5"):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (path / "config.toml").write_text(f'[run]\nseed = 1\n\n[env]\nenv_id = "{env_id}"\n')
    return path


def titles(fig):
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}


def test_every_quantity_has_its_own_panel_and_the_title_names_env_and_run():
    fig = draw([Run("pong-a", records(), "ALE/Pong-v5")])
    panels = titles(fig)
    assert {RETURN_STEPS, RETURN_TIME, LEGEND, *(t for _, t in PANELS)} == set(panels)
    assert panels["policy loss"] is not panels["value loss"]
    assert panels[RETURN_TIME].get_xlabel() == "wall time (minutes)"
    xs = panels[RETURN_TIME].lines[0].get_xdata()
    assert list(xs) == pytest.approx([0.5 * i for i in range(1, 13)])  # elapsed_s 30 s steps, in minutes
    assert list(panels[RETURN_STEPS].lines[0].get_xdata()) == [1024 * i for i in range(1, 13)]
    assert "ALE/Pong-v5" in fig._suptitle.get_text() and "pong-a" in fig._suptitle.get_text()


def test_the_legend_has_its_own_cell_and_covers_no_panel():
    fig = draw([Run(f"run-{i}", records(), "ALE/Pong-v5") for i in range(5)])
    panels = titles(fig)
    legends = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert legends == [panels[LEGEND]]
    assert not panels[LEGEND].lines  # no data under it
    assert [t.get_text() for t in panels[LEGEND].get_legend().get_texts()] == [f"run-{i}" for i in range(5)]


def test_smoothing_is_a_trailing_mean_and_sps_is_always_smoothed():
    assert smooth([1, 2, 3, 4, 5], 2) == [1, 1.5, 2.5, 3.5, 4.5]
    assert smooth([1, 2, 3], 1) == [1, 2, 3]
    recs = records()
    fig = draw([Run("a", recs)], window=3)
    panels = titles(fig)
    ret = [r["episode_return_mean"] for r in recs]
    assert list(panels[RETURN_STEPS].lines[0].get_ydata()) == pytest.approx(
        [np.mean(ret[max(0, i - 2):i + 1]) for i in range(len(ret))])
    sps = [r["sps"] for r in recs]
    assert list(panels["env steps per second (smoothed)"].lines[0].get_ydata()) == pytest.approx(
        [np.mean(sps[max(0, i - 9):i + 1]) for i in range(len(sps))])


def test_a_group_is_drawn_as_mean_and_std_band():
    a, b = Run("s1", records(scale=1.0)), Run("s2", records(scale=3.0))
    fig = draw([], {"lr": [a, b]})
    panel = titles(fig)[RETURN_STEPS]
    mean = panel.lines[0].get_ydata()
    assert list(mean) == pytest.approx([2.0 * i for i in range(1, 13)])  # (i + 3i) / 2
    (fill,) = panel.collections  # the +- std band
    ys = fill.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(1.0 * 1) and ys.max() == pytest.approx(3.0 * 12)  # mean -+ std = i, 3i
    legend = [t.get_text() for t in titles(fig)[LEGEND].get_legend().get_texts()]
    assert legend == ["lr (mean +- std of 2 runs)"]
    assert "lr (2 runs)" in fig._suptitle.get_text()


def test_command_line_writes_a_png_with_groups_and_refuses_bad_input(tmp_path, capsys):
    a = write_run(tmp_path / "a", records())
    b = write_run(tmp_path / "b", records(n=8, scale=2.0))
    out = tmp_path / "g.png"
    assert main(["--group", f"seeds={a},{b}", str(a), "--smooth", "3", "-o", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    assert main([str(a)]) == 0 and (a / "plot.png").exists()
    assert [r.env_id for r in load_runs([a, b])] == ["ALE/Pong-v5", "ALE/Pong-v5"]
    capsys.readouterr()
    for bad, needle in ((["--group", "noequals"], "expected NAME=RUN_DIR"), (["--smooth", "0", str(a)], "--smooth"),
                        ([], "at least one RUN_DIR"), ([str(tmp_path)], "no metrics.jsonl")):
        assert main(bad) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err
