"""Gantt + memory pictures: every kind of schedule renders headless to PNG/SVG/PDF, and the Figure
holds what a reader relies on (one row per rank, one box per action, one memory line per rank
plus the limit, panels on a shared time axis)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import gpipe_order

from schedc import cli
from schedc.core.baselines import make_baseline
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.ir import Action, Schedule, loop_placement, v_placement
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.io import csvio
from schedc.show.plot import kind_color, plot_schedules

# ----------------------------------------------------------------- hand-made schedules


def gpipe(placement, n_mb, split=True, name="gpipe") -> Schedule:
    return gpipe_order(placement, n_mb, split, name)


def one_f_one_b(n_ranks, n_mb, split=False, name="1f1b") -> Schedule:
    """1F1B, one stage per rank; with split=True each B becomes I then W (ZB-H1-like memory)."""
    rows = []
    for r in range(n_ranks):
        warm = min(n_ranks - 1 - r, n_mb)
        row: list = [Action(r, "F", m) for m in range(warm)]
        for m in range(n_mb):
            if warm + m < n_mb:
                row.append(Action(r, "F", warm + m))
            row += [Action(r, "I", m), Action(r, "W", m)] if split else [Action(r, "B", m)]
        rows.append(row)
    return Schedule(rows=rows, placement=loop_placement(n_ranks, n_ranks), n_microbatches=n_mb, name=name)


CASES = {
    "1f1b": lambda: one_f_one_b(4, 8),
    "1f1b-split": lambda: one_f_one_b(4, 8, split=True),
    "loop-interleaved": lambda: gpipe(loop_placement(8, 4), 6),
    "loop-interleaved-B": lambda: gpipe(loop_placement(8, 4), 6, split=False),
    "v": lambda: gpipe(v_placement(8, 4), 6),
    "v-B": lambda: gpipe(v_placement(8, 4), 6, split=False),
}


def n_actions(schedule: Schedule) -> int:
    return sum(len(schedule.actions(r)) for r in range(schedule.n_ranks))


def gantt_axes(fig):
    return [ax for ax in fig.axes if any(c.get_gid() == "actions" for c in ax.collections)]


def memory_axes(fig):
    return [ax for ax in fig.axes if any((line.get_gid() or "").startswith("memory-rank-") for line in ax.lines)]


def boxes(ax):
    (coll,) = [c for c in ax.collections if c.get_gid() == "actions"]
    return coll


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# ----------------------------------------------------------------- rendering


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_kind_renders_png_and_svg_with_one_row_per_rank_and_one_box_per_action(case, tmp_path):
    schedule = CASES[case]()
    profile = Profile.uniform(schedule.n_stages, 1.0, 1.2, 0.8, comm=0.05)
    png, svg = tmp_path / "s.png", tmp_path / "s.svg"
    fig = plot_schedules([schedule], profile, MemoryLimit.parse("2p"), path=png)
    plot_schedules([schedule], profile, MemoryLimit.parse("2p"), path=svg)

    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    text = svg.read_bytes()
    assert b"<svg" in text[:1000] and len(text) > 5000
    assert not list(tmp_path.glob(".*.tmp")), "temporary files left behind"

    (ax,) = gantt_axes(fig)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [f"rank {r}" for r in range(schedule.n_ranks)]
    assert len(boxes(ax).get_paths()) == n_actions(schedule)

    (mem,) = memory_axes(fig)
    rank_lines = [line for line in mem.lines if (line.get_gid() or "").startswith("memory-rank-")]
    assert len(rank_lines) == schedule.n_ranks
    assert [line.get_gid() for line in mem.lines].count("memory-limit") == 1


def test_boxes_sit_where_the_simulator_puts_them_and_colours_follow_kind_and_stage_slot():
    from schedc.core.simulate import simulate

    schedule = gpipe(v_placement(8, 4), 3)
    profile = Profile.uniform(8, 1.0, 2.0, 0.5)
    fig = plot_schedules([schedule], profile)
    coll = boxes(gantt_axes(fig)[0])
    res = simulate(schedule, profile)
    expected = sorted((t.start, t.end, t.rank) for t in res.timings.values())
    got = sorted((p.vertices[0][0], p.vertices[1][0], round(p.vertices[0][1] + 0.4)) for p in coll.get_paths())
    assert len(got) == len(expected)
    for (g_start, g_end, g_rank), (e_start, e_end, e_rank) in zip(got, expected):
        assert g_rank == e_rank and g_start == pytest.approx(e_start) and g_end == pytest.approx(e_end)
    # Rank 0 holds stages 0 and 7 in V placement: two shades of the forward colour.
    colors = {tuple(c) for c in coll.get_facecolors()}
    assert tuple(kind_color("F", 0, 2)) in colors and tuple(kind_color("F", 1, 2)) in colors
    assert kind_color("F", 0, 2) != kind_color("F", 1, 2)
    assert len({kind_color(k) for k in "FIWB"}) == 4


def test_several_schedules_share_one_time_axis_and_each_panel_has_its_boxes(tmp_path):
    schedules = [one_f_one_b(4, 8), one_f_one_b(4, 8, split=True, name="zb-ish"), gpipe(loop_placement(4, 4), 8)]
    profile = Profile.uniform(4)
    fig = plot_schedules(schedules, profile, MemoryLimit.parse("1p"), titles=["A", "B", "C"],
                         path=tmp_path / "cmp.pdf")
    assert (tmp_path / "cmp.pdf").read_bytes().startswith(b"%PDF")
    gantts, mems = gantt_axes(fig), memory_axes(fig)
    assert len(gantts) == len(mems) == 3
    for ax in gantts[1:] + mems:
        assert ax.get_shared_x_axes().joined(gantts[0], ax)
    for ax, schedule in zip(gantts, schedules):
        assert len(boxes(ax).get_paths()) == n_actions(schedule)
    titles = [ax.get_title(loc="left") for ax in gantts]
    assert [t.split()[0] for t in titles] == ["A", "B", "C"]
    assert all("makespan" in t and "bubble" in t and "peak memory" in t for t in titles)
    assert "EXCEEDED" in titles[2] and "fits" in titles[0]  # GPipe holds 8 microbatches > 1p = 4


def test_microbatch_numbers_show_when_they_fit_and_drop_out_for_32_ranks_128_microbatches():
    small = plot_schedules([one_f_one_b(4, 8)], Profile.uniform(4))
    labels = [t for t in gantt_axes(small)[0].texts if t.get_gid() == "label"]
    assert len(labels) == n_actions(one_f_one_b(4, 8))
    assert {t.get_text() for t in labels} == {str(m) for m in range(8)}

    big_schedule = one_f_one_b(32, 128, split=True)
    big = plot_schedules([big_schedule], Profile.uniform(32))
    ax = gantt_axes(big)[0]
    assert not [t for t in ax.texts if t.get_gid() == "label"]
    assert len(ax.get_yticklabels()) == 32
    assert len(boxes(ax).get_paths()) == n_actions(big_schedule)
    assert big.get_figwidth() > small.get_figwidth()
    assert big.get_figheight() > small.get_figheight()
    assert big.get_figwidth() <= 30 and big.get_figheight() <= 14


def test_saving_is_deterministic(tmp_path):
    schedule, profile = one_f_one_b(4, 4), Profile.uniform(4)
    for ext in ("png", "svg"):
        a, b = tmp_path / f"a.{ext}", tmp_path / f"b.{ext}"
        plot_schedules([schedule], profile, path=a)
        plot_schedules([schedule], profile, path=b)
        assert a.read_bytes() == b.read_bytes(), ext


def test_bad_requests_are_one_line_errors_and_write_nothing(tmp_path):
    schedule, profile = one_f_one_b(4, 4), Profile.uniform(4)
    with pytest.raises(SchedcError, match=r"unknown picture format 'jpg'.*\.png, \.svg or \.pdf"):
        plot_schedules([schedule], profile, path=tmp_path / "x.jpg")
    with pytest.raises(SchedcError, match="2 titles"):
        plot_schedules([schedule], profile, titles=["a", "b"])
    with pytest.raises(SchedcError, match="profile describes 8 stages"):
        plot_schedules([schedule], Profile.uniform(8), path=tmp_path / "y.png")
    assert list(tmp_path.iterdir()) == []


def test_plot_module_is_headless_and_never_imports_pyplot_or_torch():
    code = ("import sys; import schedc.show.plot, schedc.show.trace; "
            "print('matplotlib.pyplot' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "", "PYTHONPATH": ":".join(sys.path)})
    assert out.stdout.split() == ["False", "False"]


# ----------------------------------------------------------------- command line


def test_cli_plot_writes_one_panel_per_file(tmp_path, capsys):
    a, b = tmp_path / "1f1b.csv", tmp_path / "zb.csv"
    csvio.write_csv(one_f_one_b(4, 8), a)
    csvio.write_csv(one_f_one_b(4, 8, split=True), b)
    out = tmp_path / "cmp.svg"
    assert cli.main(["plot", str(a), str(b), "--costs", "1,1,1", "--comm", "0.1", "--memory", "1p", "-o", str(out)]) == 0
    assert b"<svg" in out.read_bytes()[:1000]
    assert "2 panels" in capsys.readouterr().out


def test_cli_plot_errors(tmp_path, capsys):
    a = tmp_path / "s.csv"
    csvio.write_csv(one_f_one_b(2, 2), a)
    assert cli.main(["plot", str(a), "-o", str(tmp_path / "s.gif")]) == 2
    assert "unknown picture format 'gif'" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0B0\n1F0\n")  # rank 1 never runs 1B0, so 0B0 can never start
    assert cli.main(["plot", str(bad), "-o", str(tmp_path / "bad.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedc plot: error: ") and str(bad) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad.png").exists()


def test_measured_profiles_are_drawn_in_seconds_and_binary_byte_units():
    from schedc.core.costs import StageCost

    gib = 2.0**30
    stages = [StageCost(forward=0.01, backward_input=0.012, backward_weight=0.009, activation_bytes=3 * gib,
                        weight_grad_bytes=gib, static_bytes=8 * gib) for _ in range(8)]
    profile = Profile(stages=stages, comm=0.001)
    fig = plot_schedules([gpipe(v_placement(8, 4), 2)], profile, MemoryLimit.parse("40GiB"))
    (mem,) = memory_axes(fig)
    assert mem.get_ylabel() == "memory (GiB)"
    (limit,) = [line for line in mem.lines if line.get_gid() == "memory-limit"]
    assert limit.get_ydata()[0] == pytest.approx(40)
    rank0 = [line for line in mem.lines if line.get_gid() == "memory-rank-0"][0]
    assert max(rank0.get_ydata()) == pytest.approx(16 + 2 * 2 * 3)  # static + 2 stages x 2 mb x 3 GiB
    assert fig.axes[-1].get_xlabel() == "time (s)"
    title = gantt_axes(fig)[0].get_title(loc="left")
    assert "s   bubble" in title and "of limit 40.00GiB" in title


@pytest.mark.parametrize("name, n_stages, n_mb, n_ranks", [
    ("gpipe", 4, 4, None), ("1f1b", 4, 8, None), ("zb-h1", 4, 8, None), ("zb-h2", 4, 8, None),
    ("interleaved-1f1b", 8, 8, 4), ("interleaved-zb", 8, 8, 4), ("looped-bfs", 8, 4, 4),
    ("zb-v", 8, 8, 4), ("dualpipev", 8, 8, 4),
])
def test_every_hand_made_schedule_draws_one_box_per_action(name, n_stages, n_mb, n_ranks):
    from schedc.core.baselines import make_baseline

    schedule = make_baseline(name, n_stages, n_mb, n_ranks=n_ranks)
    fig = plot_schedules([schedule], Profile.uniform(n_stages, comm=0.1), MemoryLimit.parse("1p"))
    (ax,) = gantt_axes(fig)
    assert len(ax.get_yticklabels()) == schedule.n_ranks
    assert len(boxes(ax).get_paths()) == n_actions(schedule)  # OVERLAP_F_B cells count each part


def test_cli_plot_names_the_file_whose_stages_the_profile_does_not_match(tmp_path, capsys):
    a = tmp_path / "s.csv"
    csvio.write_csv(one_f_one_b(4, 4), a)
    prof = tmp_path / "p.json"
    Profile.uniform(8).save(prof)
    assert cli.main(["plot", str(a), "--profile", str(prof), "-o", str(tmp_path / "s.png")]) == 2
    err = capsys.readouterr().err
    assert f"{a}: the schedule has 4 stages but {prof} describes 8" in err
    assert not (tmp_path / "s.png").exists()


def test_one_labelled_limit_line_per_distinct_limit_and_curves_told_apart_by_colour_and_marker():
    from schedc.core.costs import StageCost

    def stage(static):
        return StageCost(forward=1, backward_input=1, backward_weight=1, activation_bytes=2**30,
                         weight_grad_bytes=2**29, static_bytes=static)

    # rank 0 carries more static bytes (embedding); 1p is one cap for every rank, 1F1B's need on
    # its most loaded rank: rank 0's 8 + 4 x 1 GiB
    profile = Profile(stages=[stage(8 * 2**30)] + [stage(2**30)] * 3, comm=0.0)
    fig = plot_schedules([one_f_one_b(4, 8)], profile, MemoryLimit.parse("1p"))
    (mem,) = memory_axes(fig)
    limits = [line for line in mem.lines if line.get_gid() == "memory-limit"]
    assert [line.get_ydata()[0] for line in limits] == pytest.approx([12])
    labels = sorted(t.get_text() for t in mem.texts if t.get_gid() == "memory-limit-label")
    assert labels == ["limit 12.00GiB (1p)"]
    curves = [line for line in mem.lines if (line.get_gid() or "").startswith("memory-rank-")]
    assert len({line.get_color() for line in curves}) == 4 and len({line.get_marker() for line in curves}) == 4

    uniform = plot_schedules([one_f_one_b(4, 8)] * 2, Profile.uniform(4), MemoryLimit.parse("1p"))
    for mem in memory_axes(uniform):
        assert [line.get_gid() for line in mem.lines].count("memory-limit") == 1
        assert [t.get_text() for t in mem.texts if t.get_gid() == "memory-limit-label"] == ["limit 4 (1p)"]


def test_neighbouring_microbatch_numbers_keep_a_gap():
    fig = plot_schedules([one_f_one_b(8, 32, split=True)], Profile.uniform(8, 1, 1.1, 0.9, comm=0.1))
    ax = gantt_axes(fig)[0]
    renderer = fig.canvas.get_renderer()
    by_row: dict[float, list] = {}
    for t in ax.texts:
        if t.get_gid() == "label":
            by_row.setdefault(t.get_position()[1], []).append(t.get_window_extent(renderer))
    assert by_row, "the 8x32 rows are wide enough for numbers"
    for extents in by_row.values():
        extents.sort(key=lambda e: e.x0)
        gaps = [b.x0 - a.x1 for a, b in zip(extents, extents[1:])]
        assert min(gaps) >= 3.0  # pixels at 100 dpi (> 2 pt): two numbers never read as one


# ----------------------------------------------------------------- 8 ranks x 32 microbatches


def test_at_8_ranks_32_microbatches_every_rank_shows_numbers_and_same_coloured_neighbours_differ():
    from schedc.core.baselines import make_baseline

    for schedule, profile in [(make_baseline("zb-v", 16, 32, n_ranks=8), Profile.uniform(16)),
                              (one_f_one_b(8, 32), Profile.uniform(8))]:
        ax = gantt_axes(plot_schedules([schedule], profile))[0]
        rows = {round(t.get_position()[1]) for t in ax.texts if t.get_gid() == "label"}
        assert rows == set(range(8)), schedule.name
        # boxes that touch on one rank and share kind and stage slot never share a colour
        coll = boxes(ax)
        cells = sorted((round(p.vertices[0][1] + 0.4), p.vertices[0][0], p.vertices[1][0], tuple(c))
                       for p, c in zip(coll.get_paths(), coll.get_facecolors()))
        base = {kind_color(k, s, n) for k in "FIWB" for n in (1, 2) for s in range(n)}
        tinted = {kind_color(k, s, n, True) for k in "FIWB" for n in (1, 2) for s in range(n)}
        runs = 0
        for (r1, _, end1, c1), (r2, start2, _, c2) in zip(cells, cells[1:]):
            if r1 == r2 and start2 == pytest.approx(end1) and c1 in base | tinted and c2 in base | tinted:
                shade = {kind_color(k, s, n, t): (k, s, n) for k in "FIWB" for n in (1, 2) for s in range(n)
                         for t in (False, True)}
                if shade[c1] == shade[c2]:
                    runs += 1
                    assert c1 != c2
        assert runs > 0


def test_four_memory_lines_differ_in_colour_and_dash_and_are_labelled():
    fig = plot_schedules([one_f_one_b(4, 16)], Profile.uniform(4))
    (mem,) = memory_axes(fig)
    curves = [line for line in mem.lines if (line.get_gid() or "").startswith("memory-rank-")]
    assert len(curves) == 4
    assert len({line.get_color() for line in curves}) == 4
    assert len({line.get_marker() for line in curves}) == 4 and len({line.get_linestyle() for line in curves}) == 4
    assert sorted(line.get_label() for line in mem.get_legend().get_lines()) == [f"rank {r}" for r in range(4)]
    labels = [t.get_text() for t in mem.texts if t.get_gid() == "memory-rank-label"]
    assert len(labels) == 4  # 1F1B's ranks peak at 4 different levels: each line named where it is


def test_at_8_ranks_each_rank_has_its_own_memory_strip_on_one_scale():
    # eight lines in one axes sat on top of each other near the limit (issue 52): one strip a rank
    schedule = one_f_one_b(8, 32)
    fig = plot_schedules([schedule], Profile.uniform(8), MemoryLimit.parse("1p"))
    strips = memory_axes(fig)
    assert len(strips) == 8
    assert [[line.get_gid() for line in ax.lines if (line.get_gid() or "").startswith("memory-rank-")]
            for ax in strips] == [[f"memory-rank-{r}"] for r in range(8)]
    assert [ax.get_ylabel() for ax in strips] == [f"rank {r}" for r in range(8)]
    assert len({ax.get_ylim() for ax in strips}) == 1 and strips[0].get_ylim()[1] >= 8  # 1p: rank 0 holds 8
    # top to bottom as the Gantt rows, each with its limit; the value is written once
    assert [ax.get_position().y0 for ax in strips] == sorted((ax.get_position().y0 for ax in strips), reverse=True)
    assert all([line.get_gid() for line in ax.lines].count("memory-limit") == 1 for ax in strips)
    assert [t.get_text() for ax in strips for t in ax.texts if t.get_gid() == "memory-limit-label"] == ["limit 8 (1p)"]
    peaks = [t.get_text() for ax in strips for t in ax.texts if t.get_gid() == "memory-rank-label"]
    assert peaks == [f"peak {8 - r}" for r in range(8)]
    # the curve is the simulator's, in the rank's own strip
    res = simulate(schedule, Profile.uniform(8))
    (rank3,) = [line for line in strips[3].lines if line.get_gid() == "memory-rank-3"]
    assert max(rank3.get_ydata()) == pytest.approx(res.peak_memory[3])


# ----------------------------------------------------------------- a profile per CSV


def test_cli_plot_draws_each_csv_with_the_costs_beside_it(tmp_path, capsys, monkeypatch):
    import importlib

    plot_module = importlib.import_module("schedc.show.plot")  # the attribute schedc.plot is the API's function
    drawn = []
    real = plot_module.plot_schedules
    monkeypatch.setattr(plot_module, "plot_schedules", lambda s, p, *a, **k: drawn.append(p) or real(s, p, *a, **k))
    fast, slow = Profile.uniform(4, 1.0, 1.5, 1.0), Profile.uniform(4, 3.0, 3.0, 3.0)  # neither the default costs
    a, b = tmp_path / "plan.csv", tmp_path / "other.csv"
    csvio.write_csv(one_f_one_b(4, 8), a)
    fast.save(tmp_path / "plan.profile.json")  # as `schedc plan` writes it
    csvio.write_schedule(one_f_one_b(4, 8), {"inputs": {"costs": slow.model_dump(mode="json")}}, b)  # a compile report
    out = tmp_path / "both.png"
    assert cli.main(["plot", str(a), str(b), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "costs from plan.profile.json for plan.csv, other.json for other.csv" in captured.out
    assert captured.err == ""  # each drawn with its own costs: nothing to warn about
    assert out.read_bytes().startswith(PNG_MAGIC)
    assert drawn[-1] == [fast.executed(), slow.executed()]

    # one --profile still serves every file
    assert cli.main(["plot", str(a), str(b), "--costs", "1,1,1", "-o", str(out)]) == 0
    assert "costs from" not in capsys.readouterr().out
    # a file without costs beside one that has them: one line naming both
    bare = tmp_path / "bare.csv"
    csvio.write_csv(one_f_one_b(4, 8), bare)
    assert cli.main(["plot", str(a), str(bare), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bare.csv has none" in err and "bare.profile.json" in err
    assert not (tmp_path / "x.png").exists()


def test_cli_plot_ignores_a_stale_report_and_says_so(tmp_path, capsys):
    path = tmp_path / "s.csv"
    csvio.write_schedule(one_f_one_b(4, 8), {"inputs": {"costs": Profile.uniform(4, 3, 3, 3).model_dump(mode="json")}},
                         path)
    csvio.write_csv(one_f_one_b(4, 4), path)  # the CSV rewritten after its report
    assert cli.main(["plot", str(path), "-o", str(tmp_path / "s.png")]) == 0
    captured = capsys.readouterr()
    assert "ignoring the report beside" in captured.err and "costs from" not in captured.out


def test_memory_actions_draw_two_copy_rows_per_rank_and_hatch_recomputed_microbatches(tmp_path):
    from schedc.core.host_link import HostLink

    schedule = make_baseline("1f1b", n_stages=4, n_microbatches=8)
    profile = Profile.uniform(4)
    offloads = [{"stage": s, "microbatch": m, "action": "offload"} for s in (0, 1) for m in (0, 1)]
    actions = offloads + [{"stage": 0, "microbatch": 5, "action": "recompute"}]
    link = HostLink(bandwidth=0.5, latency=0.0)  # one byte of activation: 2 s a copy, wide enough to label
    fig = plot_schedules([schedule], profile, memory_actions=actions, link=link, recompute=profile,
                         path=tmp_path / "o.png")
    (ax,) = gantt_axes(fig)
    res = simulate(schedule, profile, memory_actions=actions, link=link, recompute=profile)
    for direction in ("out", "in"):
        (coll,) = [c for c in ax.collections if c.get_gid() == f"copies-{direction}"]
        assert len(coll.get_paths()) == 4
        (idle,) = [c for c in ax.collections if c.get_gid() == f"stream-{direction}-idle"]
        assert len(idle.get_paths()) == schedule.n_ranks  # a thin row per rank, copies or not
        starts = sorted(float(p.vertices[:, 0].min()) for p in coll.get_paths())
        assert starts == sorted(c.start for c in res.copies if c.direction == direction)
    texts = {t.get_text() for t in ax.texts if t.get_gid() == "label"}
    assert {"0:0", "0:1", "1:0", "1:1"} <= texts
    (hatched,) = [c for c in ax.collections if c.get_gid() == "recomputed"]
    assert len(hatched.get_paths()) == 2  # 0F5 and 0B5
    assert [t.get_text() for t in ax.get_yticklabels(minor=True)] == ["out", "in"] * 4
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"copy out (device to host)", "copy in (host to device)", "recomputed microbatch"} <= legend
    # the memory curves are the simulator's with the copies
    (mem_ax,) = memory_axes(fig)
    from schedc.show.trace import merge_instants

    line = next(ln for ln in mem_ax.lines if ln.get_gid() == "memory-rank-0")
    with_copies = [m for _, m in merge_instants(res.memory_curve[0])]
    assert list(line.get_ydata()[:-1]) == with_copies
    assert with_copies != [m for _, m in merge_instants(simulate(schedule, profile).memory_curve[0])]


def test_cli_plot_reads_memory_actions_and_refuses_link_flags_alone(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    csvio.write_csv(make_baseline("1f1b", n_stages=2, n_microbatches=4), csv)
    actions = tmp_path / "ma.json"
    actions.write_text(json.dumps({"memory_actions": [{"stage": 0, "microbatch": 0, "action": "offload"}]}))
    out = tmp_path / "o.svg"
    assert cli.main(["plot", str(csv), "--memory-actions", str(actions), "--host-bandwidth", "2", "-o", str(out)]) == 0
    assert 'id="copies-out"' in out.read_text()
    assert cli.main(["plot", str(csv), "--host-latency", "1us", "-o", str(tmp_path / "u.png")]) != 0
    assert "give --memory-actions" in capsys.readouterr().err
    assert not (tmp_path / "u.png").exists()


def test_the_title_counts_offloaded_microbatches_once_and_says_which_moved_after_i():
    from schedc.core.host_link import HostLink
    from schedc.core.ir import Action

    schedule, profile = make_baseline("zb-h2", 4, 8), Profile.uniform(4)
    row = schedule.actions(3)
    # rank 3 defers every W: microbatches 0-2 move after their I; stage 1's microbatch 0 after its
    # F and again after its I (two copies each way, one microbatch)
    actions = [{"stage": 3, "microbatch": m, "action": "offload", "after": "I",
                "fetch_at": str(row[row.index(Action(3, "W", m)) - 1])} for m in range(3)]
    actions.append({"stage": 1, "microbatch": 0, "action": "offload", "refetch_at": "1I3"})
    fig = plot_schedules([schedule], profile, memory_actions=actions, link=HostLink(bandwidth=10.0, latency=0.0))
    title = gantt_axes(fig)[0].get_title(loc="left")
    assert "\n4 microbatches offloaded (4 moved after their I for a deferred W), link busy up to" in title
