"""What the run plots show: titles that tell runs apart, the heatmap's link order and time
resolution, the alpha-beta prediction beside each collective's completion times."""
import pytest

from emulator.run import fidelity, linksampler
from experiment import model, sweep
from experiment.outputs import plots
from experiment.plan import build_plans
from experiment.outputs.links import directed_links
from tests.unit.experiment import fakerun
from topologies import fat_tree, rail_optimized

DEMO = "experiments/demo.yaml"


def _texts(fig) -> str:
    return " | ".join([fig.get_suptitle()] + [ax.get_title() for ax in fig.axes])


def test_every_plot_title_names_the_point_the_engine_and_the_policy(tmp_path, monkeypatch):
    drawn = []

    def keep(fig, path):
        drawn.append(_texts(fig))
        return True

    monkeypatch.setattr(plots, "_save", keep)
    fakerun.make_run(tmp_path, point="size_bytes=1GiB")
    assert len(drawn) == len(plots.FILES)
    for text in drawn:
        assert "fake:" in text and "point size_bytes=1GiB" in text and "emulator" in text and "routing ecmp" in text


def test_the_points_of_the_demo_sweep_get_different_titles():
    points = sweep.expand(model.load(DEMO))
    assert [p.exp.point for p in points] == [p.slug for p in points]
    titles = {plots.run_title({"name": "demo", "routing": p.exp.routing}, "link utilization", p.exp.point,
                              "emulator") for p in points}
    assert len(titles) == 3
    assert "routing coschedule" not in plots.run_title({"name": "d", "routing": "coschedule"}, "x",
                                                        "routing=coschedule")  # said once


def test_heatmap_rows_follow_a_packet_up_and_down_rail_by_rail_nvlink_apart():
    fab = rail_optimized(4, 4, 2)
    tiers, nvlink = plots.heatmap_rows(list(directed_links(fab)), fab)
    assert [t for t, _ in tiers] == ["host \u2192 rail", "rail \u2192 spine", "spine \u2192 rail", "rail \u2192 host"]
    up = tiers[0][1]
    assert up[:4] == [("h0", "rail0"), ("h4", "rail0"), ("h8", "rail0"), ("h12", "rail0")]  # by rail, not as text
    assert [fab.node(b)["rail"] for _, b in up] == sorted(fab.node(b)["rail"] for _, b in up)
    assert tiers[1][1][:2] == [("rail0", "spine0"), ("rail0", "spine1")]
    assert all(fab.graph.edges[k]["kind"] == "nvlink" for k in nvlink) and len(nvlink) == 2 * 16
    assert nvlink[:2] == [("h0", "nvl0"), ("nvl0", "h0")]
    assert not any(fab.graph.edges[k]["kind"] == "nvlink" for _, ks in tiers for k in ks)
    ft = fat_tree(4)
    assert [t for t, _ in plots.heatmap_rows(list(directed_links(ft)), ft)[0]] == \
        ["host \u2192 edge", "edge \u2192 agg", "agg \u2192 core", "core \u2192 agg", "agg \u2192 edge", "edge \u2192 host"]


def _rows(fab, busy, times):
    return [{"t_s": t, "link": f"{a}-{b}", "src": a, "dst": b, "util": 0.5 if (a, b) in busy else 0.0, "gbps": 0}
            for t in times for a, b in directed_links(fab)]


def test_the_heatmap_panels_label_their_rows_in_that_order_and_mark_the_collectives():
    fab = rail_optimized(2, 2, 1)
    busy = {("h3", "rail1"), ("h0", "rail0"), ("rail0", "spine0"), ("h0", "nvl0"), ("spine0", "rail1")}
    phases = {"a": [(10.0, 20.0), (40.0, 50.0)], "b": [(25.0, 35.0)]}
    fig = plots.heatmap_figure(_rows(fab, busy, [0.01, 0.02, 0.03]), "demo: link utilization", fab, phases)
    strip, links_ax, nvl_ax = fig.axes[:3]
    assert [t.get_text() for t in strip.get_yticklabels()] == ["job a", "job b"]
    assert plots.row_labels(links_ax) == \
        ["h0 \u2192 rail0", "h3 \u2192 rail1", "rail0 \u2192 spine0", "spine0 \u2192 rail1"]
    assert plots.row_labels(nvl_ax) == ["h0 \u2192 nvl0"]
    assert "NVLink" in next(a.name for a in nvl_ax.get_children() if hasattr(a, "labels"))
    assert "one column per 10 ms sample" in nvl_ax.get_xlabel()


def test_collective_phases_span_first_start_to_last_end_in_real_time():
    phases = plots.collective_phases(fakerun.events(), fakerun.T0, 40.0)
    assert list(phases) == ["a"]
    (s0, e0), (s1, _) = phases["a"]
    assert s0 == pytest.approx(1.0 / 40 * 1e3) and e0 == pytest.approx(3.03 / 40 * 1e3)
    assert s1 == pytest.approx(5.0 / 40 * 1e3)


def test_links_are_sampled_finely_enough_to_see_each_demo_collective():
    """One links.csv column spans less real time than one all-reduce of the demo, alone."""
    exp = model.load(DEMO)
    jobs = build_plans(exp, exp.fabric())
    cct_s = min(t for j in jobs for ts in j.predicted_s.values() for t in ts)
    assert linksampler.INTERVAL_S == fidelity.LINK_SAMPLE_S
    assert linksampler.INTERVAL_S / exp.scale.dilation < cct_s


def test_each_collective_box_has_its_alpha_beta_prediction_beside_it(tmp_path):
    summary = fakerun.make_run(tmp_path)
    groups = plots.cct_groups(summary)
    preds = [c["predicted_cct_s"] * 1e3 for j in summary["jobs"] for c in j["collectives"]]
    assert [g[2] for g in groups] == pytest.approx(preds) and groups[0][0].startswith("a: all_reduce ring")
    fig = plots.cct_figure(summary)
    (ax,) = fig.axes
    lines = [seg for coll in ax.collections if hasattr(coll, "get_segments") for seg in coll.get_segments()]
    assert sorted(round(seg[0][1], 9) for seg in lines) == sorted(round(p, 9) for p in preds)
    assert all(seg[0][1] == seg[1][1] for seg in lines)  # level lines, across their box
    assert any("alpha-beta" in t.get_text() for t in ax.get_legend().get_texts())


def test_each_row_label_is_drawn_on_its_row_right_aligned_inside_the_figure(monkeypatch):
    from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg

    fab = fat_tree(4)
    busy = set(directed_links(fab))  # 96 rows: the small font
    fig = plots.heatmap_figure(_rows(fab, busy, [0.01, 0.02]), "demo: link utilization", fab)
    ax = fig.axes[0]
    labels = plots.row_labels(ax)
    assert len(labels) == len(busy)
    drawn = []
    real = RendererAgg.draw_text

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        w, h, d = self.get_text_width_height_descent(s, prop, ismath=False)
        drawn.append((s, x, x + w, self.height - y + (h - d) / 2, angle))  # y up, at the ink's middle
        return real(self, gc, x, y, s, prop, angle, ismath, mtext)

    monkeypatch.setattr(RendererAgg, "draw_text", draw_text)
    FigureCanvasAgg(fig).draw()
    rows = [t for t in drawn if t[0] in labels and t[4] == 0]
    assert [t[0] for t in rows] == labels  # every label once, top row first
    for i, (s, left, right, middle, _) in enumerate(rows):
        _, centre = ax.transData.transform((0, i + 0.5))
        assert abs(middle - centre) < 0.5, (s, middle, centre)
        assert 0 <= left and abs(right - (ax.bbox.x0 - 4)) < 1e-6  # right-aligned, not cut off
    name = [t for t in drawn if t[0] == "fabric links"]
    assert len(name) == 1 and name[0][4] == 90  # the panel's name, upright
    assert 0 < name[0][1] < min(t[1] for t in rows)  # left of the labels, inside the figure
