"""links.csv written in bulk from arrays reads as the row-by-row writer spelled it, and the heatmap's
grid from memory holds the numbers the file holds."""
import io

import numpy as np

from experiment.outputs import links


def _series(seed=0, rows=3000):
    rng = np.random.default_rng(seed)
    names = [(f"a{i}-b{i}", f"a{i}", f"b{i}") for i in range(40)]
    t_s = np.sort(rng.choice([0.001, 0.002, 0.003, 1e-05, 0.1 + 0.2], rows))
    link = rng.integers(0, 40, rows)
    gbps = np.concatenate([rng.random(rows - 4) * 400, [1e-9, 0.0, 400.0, 210.1417295]])
    # 210.1417295 rounds to 210.141729 by Python's round and to 210.14173 by numpy's: the file says Python's
    return names, t_s, link, gbps / 400.0, gbps


def test_bulk_csv_is_the_row_by_row_text():
    names, t_s, link, util, gbps = _series()
    out = io.StringIO()
    links.LinkSeries(names, t_s, link, util, gbps).write_csv(out)
    expected = ",".join(links.COLUMNS) + "\n" + "".join(
        f"{float(t)!r},{names[k][0]},{names[k][1]},{names[k][2]},{round(float(u), 6)!r},{round(float(g), 6)!r}\n"
        for t, k, u, g in zip(t_s, link, util, gbps))
    assert out.getvalue() == expected
    assert expected.splitlines()[-1].endswith(",210.141729")


def test_grid_from_memory_is_the_grid_of_the_file_read_back(tmp_path):
    names, t_s, link, util, gbps = _series(1)
    series = links.LinkSeries(names, t_s, link, util, gbps).head(2500)
    path = tmp_path / "links.csv"
    with open(path, "w") as f:
        series.write_csv(f)
    back = links.LinkGrid.from_rows(links.read_csv(str(path)))
    mem = series.grid()
    assert mem.times == back.times and mem.keys == back.keys
    np.testing.assert_array_equal(mem.util, back.util)  # NaN where a link has no row, in both
    assert np.isnan(mem.util).any()


def test_util_from_link_rates_is_the_text_of_util_given():
    # repeated rates over links of three speeds (each distinct gbps on several kinds of link), times in and out of order
    names, t_s, link, _, gbps = _series(2)
    rng = np.random.default_rng(3)
    gbps = rng.choice(np.append(gbps[:50], [210.1417295, 0.0]), len(gbps))
    link_gbps = rng.choice([400.0, 100.0, 3600.0], len(names))
    for times in (t_s, rng.permutation(t_s)):
        given, derived = io.StringIO(), io.StringIO()
        links.LinkSeries(names, times, link, gbps / link_gbps[link], gbps).write_csv(given)
        series = links.LinkSeries(names, times, link, None, gbps, link_gbps=link_gbps)
        series.write_csv(derived)
        assert derived.getvalue() == given.getvalue()
        assert derived.getvalue().count("\n") == len(gbps) + 1
        mem = series.grid()
        np.testing.assert_array_equal(mem.util, links.LinkSeries(names, times, link, gbps / link_gbps[link],
                                                                 gbps).grid().util)
