"""Pictures of schedules: Gantt chart with memory curves, stacked comparisons of several schedules.

Problem: show what a schedule does on every rank in real time (from the costs, not slot
indices): which action runs when, where the ranks sit idle, and how much memory each rank holds
against its limit; and put several schedules on one shared time axis so the eye compares them.
It must stay legible from 4 ranks x 8 microbatches up to 32 ranks x 128 microbatches and render
headless.

Method: :func:`schedc.core.simulate.simulate` gives the start and end of every action and each rank's
memory curve. Each schedule becomes one panel: a Gantt axes (one row per rank, rank 0 on top; a
pale band marks the step, so idle time shows as grey inside it) drawn as ONE PolyCollection of
boxes, and beneath it the memory: up to 4 ranks, one axes with a step line per rank (each in its
own colour, marker and dash, named in a legend and, where there is room, beside the line where it
leaves its peak) and one labelled dashed line per distinct memory limit (ranks of equal limits share
it); 5 to 10 ranks, one strip per rank on one scale, each with its limit and peak (eight lines in one
axes hid each other near the limit); more, one axes where the lines form a pale band with the rank
closest to its limit in bold. Colour: one hue per kind (its row of schedc.core.ir.KIND_TABLE: F blue,
I orange, W green, B purple); on ranks holding several stages, each stage slot of the rank (1st, 2nd,
...) takes its own shade of that hue, so V and interleaved schedules stay readable; in a run of
touching boxes of one colour every other box is tinted lighter. The microbatch number is written in
a box only when it fits at the figure's scale with room to spare on both sides (so neighbouring
numbers never read as one): the font shrinks from 7 to 4.5 pt to fit each box, so labels drop
out on their own only for large schedules, and the figure grows with the number of actions per
rank (up to a cap). With memory actions (schedc.core.memory_actions) each rank's row holds its
compute boxes on top and, beneath them, its two copy streams as thin rows (device to host, host
to device; one box per copy, labelled ``stage:microbatch`` where it fits), recomputed
microbatches' compute boxes are hatched, and the memory curves are the simulator's with the
copies (bytes off the device from a copy out's end to its fetch's start). We use
``matplotlib.figure.Figure`` with the Agg canvas directly, never pyplot, so rendering is headless
and does not touch a notebook's backend.

Cost: one simulation per schedule, then O(actions) polygons; 32 ranks x 128 microbatches with
split backward (about 12k boxes) renders in a few seconds.
"""

from __future__ import annotations

import functools
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Optional, Sequence, Union

from schedc.core.costs import MemoryLimit, Profile, format_duration
from schedc.core.formatting import format_memory
from schedc.core.host_link import HostLink
from schedc.core.ir import KIND_TABLE, Schedule, kinds
from schedc.core.memory_actions import check_memory_actions
from schedc.core.simulate import SimResult, simulate
from schedc.core.tolerances import REL
from schedc.errors import SchedcError
from schedc.io.fileio import atomic_write_bytes
from schedc.show.trace import merge_instants

# matplotlib loads when a picture is drawn, not when schedc is imported (about a second)
if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("png", "svg", "pdf")


# Figure geometry, in inches: chosen by looking at 4x8, 8x16 (V) and 32x128 renderings.
_MIN_WIDTH, _MAX_WIDTH = 8.0, 30.0
_INCH_PER_ACTION = 0.24
_ROW_INCH, _MIN_GANTT, _MAX_GANTT = 0.3, 1.1, 8.0
_LEFT_MARGIN_INCH = 1.2
_BYTE_UNITS = (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10))


def kind_color(kind: str, slot: int = 0, n_slots: int = 1, alternate: bool = False) -> tuple:
    """RGBA of a box: the kind's hue (its ``plot_colormap`` in schedc.core.ir.KIND_TABLE), shaded
    by the stage slot on its rank (darker = later). ``alternate``: a box that directly follows
    one of the same colour on its rank takes a lighter tint of it (every other one), so a run of
    such boxes still reads as separate actions."""
    return _shade(KIND_TABLE[kind].plot_colormap, slot, n_slots, alternate)


@functools.lru_cache(maxsize=None)  # colormap lookups copy the map: far too slow per box
def _shade(colormap: str, slot: int, n_slots: int, alternate: bool) -> tuple:
    from matplotlib import colormaps

    if n_slots <= 1:
        x = 0.62
    else:
        x = 0.4 + 0.5 * slot / (n_slots - 1)
    rgba = colormaps[colormap](x)
    if not alternate:
        return rgba
    return tuple(c + 0.22 * (1.0 - c) for c in rgba[:3]) + (rgba[3],)


def output_format(path: Union[str, Path]) -> str:
    """'png', 'svg' or 'pdf' from the file name; anything else is a user error."""
    ext = Path(path).suffix.lower().lstrip(".")
    if Path(path).is_dir():  # said before its extension: 'out' names a directory, not a format
        raise SchedcError(f"{path}: is a directory; give a file name such as {Path(path) / 'plot.png'}")
    if ext not in FORMATS:
        raise SchedcError(f"{path}: unknown picture format {ext or '(none)'!r}; use a .png, .svg or .pdf file name")
    return ext


def plot_schedules(
    schedules: Sequence[Schedule],
    profile: Union[Profile, Sequence[Profile]],
    memory: Optional[MemoryLimit] = None,
    titles: Optional[Sequence[str]] = None,
    path: Union[str, Path, None] = None,
    *,
    memory_actions=None,
    link: Optional[HostLink] = None,
    recompute: Optional[Profile] = None,
) -> Figure:
    """One panel per schedule (Gantt + memory curves), stacked on a shared time axis.

    ``profile`` is one profile for all schedules or one per schedule; ``memory`` (default: no
    limit) is drawn as a dashed line and judged in the title. ``memory_actions``, ``link`` and
    ``recompute`` (as :func:`schedc.core.simulate.simulate` takes them, the same for every
    schedule) add each rank's copy streams under its row and hatch recomputed microbatches.
    Saves to ``path`` (png/svg/pdf by extension, written atomically) when given, and returns the
    Figure either way.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    schedules = list(schedules)
    if not schedules:
        raise SchedcError("plot: give at least one schedule")
    fmt = output_format(path) if path is not None else None
    profiles = [profile] * len(schedules) if isinstance(profile, Profile) else list(profile)
    if len(profiles) != len(schedules):
        raise SchedcError(f"plot: {len(schedules)} schedules but {len(profiles)} profiles; give one, or one per schedule")
    if titles is not None and len(titles) != len(schedules):
        raise SchedcError(f"plot: {len(schedules)} schedules but {len(titles)} titles")
    results = [simulate(s, p, memory, memory_actions=memory_actions or None, link=link, recompute=recompute)
               for s, p in zip(schedules, profiles)]
    recomputed = [{key for key, ma in check_memory_actions(memory_actions, s).items() if ma.action == "recompute"}
                  if memory_actions else set() for s in schedules]
    streams = bool(memory_actions)
    names = list(titles) if titles is not None else [s.name or f"schedule {i + 1}" for i, s in enumerate(schedules)]

    t_max = max(r.makespan for r in results) or 1.0
    # Width follows the densest rank of the longest schedule; shorter ones are drawn to scale.
    density = max(max((len(row) for row in r.order), default=0) * r.makespan / t_max for r in results)
    width = min(_MAX_WIDTH, max(_MIN_WIDTH, 3.0 + _INCH_PER_ACTION * density))
    row_inch = _ROW_INCH * (_STREAM_ROW_SCALE if streams else 1.0)
    gantt_h = [min(_MAX_GANTT, max(_MIN_GANTT, row_inch * s.n_ranks)) for s in schedules]
    mem_h = [_STRIP_INCH * s.n_ranks if _strips(s.n_ranks) else min(2.4, max(1.3, 0.6 * g))
             for s, g in zip(schedules, gantt_h)]
    height = sum(gantt_h) + sum(mem_h) + 0.75 * len(schedules) + 0.9

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    ratios = [h for pair in zip(gantt_h, mem_h) for h in pair]
    grid = fig.add_gridspec(2 * len(schedules), 1, height_ratios=ratios)
    axes_width_pt = (width - _LEFT_MARGIN_INCH - 0.4) * 72
    pt_per_time = axes_width_pt / t_max

    first = None
    legend_keys: dict[tuple[str, int, int], None] = {}
    for i, (schedule, prof, res, name) in enumerate(zip(schedules, profiles, results, names)):
        ax = fig.add_subplot(grid[2 * i], sharex=first)
        first = first or ax
        row_pt = gantt_h[i] * 72 / schedule.n_ranks
        _draw_gantt(ax, schedule, res, pt_per_time, row_pt, legend_keys, streams, recomputed[i])
        if _strips(schedule.n_ranks):
            cells = grid[2 * i + 1].subgridspec(schedule.n_ranks, 1, hspace=0.0)
            strips = [fig.add_subplot(cells[0], sharex=first)]
            strips += [fig.add_subplot(cells[r], sharex=first, sharey=strips[0]) for r in range(1, schedule.n_ranks)]
            _draw_memory_strips(strips, schedule, res, prof, memory)
        else:
            strips = [fig.add_subplot(grid[2 * i + 1], sharex=first)]
            _draw_memory(strips[0], schedule, res, prof, memory, pt_per_time)
        ax.set_title(_title_line(name, schedule, res, memory, prof), loc="left", fontsize=9)
        ax.tick_params(labelbottom=False)
        for k, mem_ax in enumerate(strips):
            mem_ax.tick_params(labelbottom=(i == len(schedules) - 1 and k == len(strips) - 1))
    assert first is not None, "there is a schedule, so its panel was drawn"
    first.set_xlim(0, t_max * 1.005)
    unitless = all(p.model == "uniform" for p in profiles)
    fig.axes[-1].set_xlabel("time (cost units)" if unitless else "time (s)", fontsize=8)
    _add_legend(fig, legend_keys, streams, any(recomputed))
    if path is not None:
        save_figure(fig, path, fmt)
    return fig


plot_compare = plot_schedules


def plot_schedule(
    schedule: Schedule,
    profile: Profile,
    memory: Optional[MemoryLimit] = None,
    title: Optional[str] = None,
    path: Union[str, Path, None] = None,
) -> Figure:
    """One schedule's Gantt chart and memory curves (see :func:`plot_schedules`)."""
    return plot_schedules([schedule], profile, memory, titles=None if title is None else [title], path=path)


def save_figure(fig: Figure, path: Union[str, Path], fmt: Optional[str] = None) -> None:
    """Render to bytes, then write atomically (no partial file on failure)."""
    atomic_write_bytes(path, render_figure(fig, fmt or output_format(path)))


def render_figure(fig: Figure, fmt: str) -> bytes:
    """The picture as bytes in `fmt` (png, svg, pdf). Deterministic output: no dates in SVG/PDF
    metadata and a fixed SVG id salt."""
    from matplotlib import rc_context

    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    dpi = 110 if fig.get_figwidth() > 16 else 130
    buf = io.BytesIO()
    with rc_context({"svg.hashsalt": "schedc", "svg.fonttype": "none"}):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata=metadata)
    return buf.getvalue()


# ---------------------------------------------------------------------------- drawing


# With copy streams a rank's row is split: compute on top, then the two streams as thin rows.
_STREAM_ROW_SCALE = 1.7  # the row grows so the compute boxes keep most of their height
_COMPUTE_BAND = (-0.45, 0.06)  # offsets from the rank's y of its compute boxes
_STREAM_BANDS = {"out": (0.09, 0.27), "in": (0.28, 0.46)}
# greys, so no copy reads as one of the kinds' hues: device to host dark, host to device light
_STREAM_COLORS = {"out": "#4f4f4f", "in": "#a3a3a3"}
_STREAM_NAMES = {"out": "copy out (device to host)", "in": "copy in (host to device)"}


def _draw_gantt(ax, schedule: Schedule, res: SimResult, pt_per_time: float, row_pt: float, legend_keys,
                streams: bool = False, recomputed: AbstractSet[tuple[int, int]] = frozenset()) -> None:
    from matplotlib.collections import PolyCollection

    n_ranks = schedule.n_ranks
    box_h = 0.8
    top, bottom = _COMPUTE_BAND if streams else (-box_h / 2, box_h / 2)
    slots = {}
    for r in range(n_ranks):
        stages = schedule.stages_of(r)
        for k, s in enumerate(stages):
            slots[s] = (k, len(stages))

    # The step on each rank: a pale band from 0 to the makespan, so idle time reads as grey.
    band = [[(0, r + top), (res.makespan, r + top), (res.makespan, r + bottom), (0, r + bottom)]
            for r in range(n_ranks)]
    ax.add_collection(PolyCollection(band, facecolors="#e6e6e6", edgecolors="none", gid="idle", zorder=1))

    verts, colors, labels, hatched = [], [], [], []
    widths = sorted((res.timings[a].end - res.timings[a].start) * pt_per_time for row in res.order for a in row)
    typical = widths[len(widths) // 2] if widths else 0.0
    digits = len(str(max(schedule.n_microbatches - 1, 0)))
    for r, row in enumerate(res.order):
        previous = None
        for a in row:
            t = res.timings[a]
            y0, y1 = r + top, r + bottom
            verts.append([(t.start, y0), (t.end, y0), (t.end, y1), (t.start, y1)])
            if (a.stage, a.microbatch) in recomputed:
                hatched.append(verts[-1])
            slot, n_slots = slots[a.stage]
            key = (a.kind, slot, n_slots)
            # the second, fourth, ... of a run of same-coloured neighbours is tinted
            alternate = previous is not None and previous[0] == key and not previous[1] \
                and t.start - previous[2] <= REL * max(1.0, abs(t.start))
            previous = (key, alternate, t.end)
            colors.append(kind_color(a.kind, slot, n_slots, alternate))
            legend_keys[key] = None
            # Judged against the widest number, so boxes of one size are all labelled or none.
            font = _label_font(row_pt * (bottom - top), (t.end - t.start) * pt_per_time, digits)
            if font:
                labels.append(((t.start + t.end) / 2, r + (top + bottom) / 2, str(a.microbatch), colors[-1], font))
    # Thin white edges separate neighbouring boxes, but only where boxes are wide enough that
    # the edges do not eat them.
    edge = 0.5 if typical >= 7 else 0.3 if typical >= 3 else 0.0
    boxes = PolyCollection(verts, facecolors=colors, edgecolors="white" if edge else "none",
                           linewidths=edge, gid="actions", zorder=2)
    ax.add_collection(boxes)
    if hatched:  # the forward runs again in the backward: its boxes, F and backward, hatched
        ax.add_collection(PolyCollection(hatched, facecolors="none", edgecolors=(0, 0, 0, 0.55), hatch="////",
                                         linewidths=0.0, gid="recomputed", zorder=2.5))
    if streams:
        labels += _draw_streams(ax, res, n_ranks, pt_per_time, row_pt)
    if len(labels) <= 4000:  # past that the text is unreadable anyway and slows rendering
        for x, y, text, color, font in labels:
            ax.text(x, y, text, ha="center", va="center", fontsize=font, color=_ink(color),
                    clip_on=True, zorder=3, gid="label")
    ax.axvline(res.makespan, color="#555555", lw=0.8, ls=":", zorder=4)

    ax.set_ylim(n_ranks - 0.5, -0.5)  # rank 0 on top
    ax.set_yticks([r + (top + bottom) / 2 for r in range(n_ranks)])
    ax.set_yticklabels([f"rank {r}" for r in range(n_ranks)], fontsize=min(8.0, max(4.0, row_pt * 0.4 if streams
                                                                                   else row_pt * 0.7)))
    if streams:
        ax.set_yticks([r + sum(_STREAM_BANDS[d]) / 2 for r in range(n_ranks) for d in ("out", "in")], minor=True)
        ax.set_yticklabels(["out", "in"] * n_ranks, minor=True, fontsize=min(5.0, max(3.5, row_pt * 0.12)),
                           color="#666666")
        ax.tick_params(axis="y", which="minor", length=0, pad=2)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=7)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


def _draw_streams(ax, res: SimResult, n_ranks: int, pt_per_time: float, row_pt: float) -> list:
    """Each rank's copy streams as thin rows under its compute boxes (one PolyCollection per
    direction, a pale band for the step so an idle stream shows); returns the labels
    ``stage:microbatch`` of the copies wide enough for one, for :func:`_draw_gantt` to write."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgba

    labels = []
    for direction, (y0, y1) in _STREAM_BANDS.items():
        band = [[(0, r + y0), (res.makespan, r + y0), (res.makespan, r + y1), (0, r + y1)] for r in range(n_ranks)]
        ax.add_collection(PolyCollection(band, facecolors="#f2f2f2", edgecolors="none", gid=f"stream-{direction}-idle",
                                         zorder=1))
        copies = [c for c in res.copies if c.direction == direction]
        verts = [[(c.start, c.rank + y0), (c.end, c.rank + y0), (c.end, c.rank + y1), (c.start, c.rank + y1)]
                 for c in copies]
        color = _STREAM_COLORS[direction]
        ax.add_collection(PolyCollection(verts, facecolors=color, edgecolors="white", linewidths=0.3,
                                         gid=f"copies-{direction}", zorder=2))
        for c in copies:
            text = f"{c.stage}:{c.microbatch}"
            font = _label_font(row_pt * (y1 - y0), (c.end - c.start) * pt_per_time, len(text), low=4.0)
            if font:
                labels.append(((c.start + c.end) / 2, c.rank + (y0 + y1) / 2, text, to_rgba(color), font))
    return labels


_MIN_FONT, _MAX_FONT = 4.5, 7.0


def _label_font(row_height_pt: float, width_pt: float, digits: int, low: float = _MIN_FONT) -> float:
    """The largest font (`low`, 4.5 by default, to 7 pt) under which a box's number fits the row's
    height and the box's width; 0 when none does."""
    # DejaVu Sans digits are 0.64 em wide; 1.25 pt a side keep neighbouring numbers apart
    font = min(_MAX_FONT, row_height_pt * 0.62, (width_pt - 2.5) / (0.64 * max(digits, 1)))
    return font if font >= low else 0.0


_MARKERS = "osD^vP<X>*"  # one per rank up to 10, with tab10's colours
# From 5 ranks up to one per marker, each rank's memory gets its own strip: at 8 ranks x 32
# microbatches eight lines in one axes sat on top of each other near the limit. Past that the
# lines are drawn as one band (a strip each would be too thin to read).
_STRIPS_FROM = 5
_STRIP_INCH = 0.34


def _strips(n_ranks: int) -> bool:
    return _STRIPS_FROM <= n_ranks <= len(_MARKERS)
_DASHES = ("-", "--", "-.", ":")  # cycled with the markers, so lines differ in three ways


def _draw_memory(ax, schedule: Schedule, res: SimResult, profile: Profile, memory: Optional[MemoryLimit],
                 pt_per_time: float) -> None:
    from matplotlib import colormaps
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    n_ranks = schedule.n_ranks
    many = n_ranks > len(_MARKERS)
    cmap = colormaps["viridis"] if many else colormaps["tab10"]
    # With many ranks the lines merge into a band; the rank closest to its limit stays bold.
    tightest = max(range(n_ranks), key=lambda r: (res.peak_memory[r] / res.memory_limit[r]
                                                  if math.isfinite(res.memory_limit[r]) and res.memory_limit[r] > 0
                                                  else res.peak_memory[r], -r))
    curves, limits, top, unit_name, unit = _memory_unit(res, profile)
    for r, curve in enumerate(curves):
        xs = [t for t, _ in curve] + [res.makespan]
        ys = [m / unit for _, m in curve] + [curve[-1][1] / unit]
        bold = many and r == tightest
        style = dict(lw=1.3 if bold else 0.5, alpha=1.0 if bold else 0.45, color=cmap(0.85 * r / max(1, n_ranks - 1))) \
            if many else dict(lw=1.1, color=cmap(r), marker=_MARKERS[r], markersize=3, ls=_DASHES[r % len(_DASHES)],
                              markevery=(r % 7, max(1, len(xs) // 9)))  # staggered: markers do not pile up
        ax.step(xs, ys, where="post", zorder=3 if bold else 2, label=f"rank {r}", gid=f"memory-rank-{r}", **style)
    if not many:
        _label_peaks(ax, curves, unit, top, pt_per_time, cmap)
    _draw_limits(ax, res.memory_limit, unit, top, memory)
    ax.set_ylim(0, top / unit * 1.12 if top > 0 else 1)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=3, steps=[1, 2, 2.5, 5, 10]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(f"memory ({unit_name.replace(' ', chr(10))})", fontsize=7)
    ax.tick_params(labelsize=7)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(axis="y", color="#eeeeee", lw=0.6)
    if n_ranks <= 8:
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, handlelength=1.2)
    else:
        lines = {line.get_gid(): line for line in ax.lines}
        handles = [
            Line2D([], [], color=cmap(0.0), lw=0.8, label="rank 0"),
            Line2D([], [], color=cmap(0.85), lw=0.8, label=f"rank {n_ranks - 1}"),
            Line2D([], [], color=lines[f"memory-rank-{tightest}"].get_color(), lw=1.3,
                   label=f"rank {tightest} (closest\nto its limit)"),
        ]
        if limits:
            handles.append(lines["memory-limit"])
        ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False,
                  handlelength=1.2)


def _memory_unit(res: SimResult, profile: Profile) -> tuple[list, list[float], float, str, float]:
    """(curves, finite limits, top, unit name, unit size) of a panel's memory: bytes are drawn in
    the largest binary unit below the top, so the ticks are round numbers."""
    # merge_instants: a release and an allocation at one instant would draw a zero-width notch;
    # one value per instant (the last) is what the rank holds from then on
    curves = [merge_instants(curve) for curve in res.memory_curve]
    limits = sorted({lim for lim in res.memory_limit if math.isfinite(lim)})
    top = max([m for curve in curves for _, m in curve] + limits + [0.0])
    unit_name, unit = next(((n, size) for n, size in _BYTE_UNITS if top >= size), ("", 1.0))
    if not unit_name:
        unit_name = "stage activations" if profile.model == "uniform" else "bytes"
    return curves, limits, top, unit_name, unit


def _draw_memory_strips(axes, schedule: Schedule, res: SimResult, profile: Profile,
                        memory: Optional[MemoryLimit]) -> None:
    """One strip per rank (rank 0 on top, as in the Gantt chart), all on one y scale from 0 to the
    highest peak or limit, each with its rank's curve and its limit; the top strip names the unit
    and carries the limit's label. Cost: O(memory steps)."""
    from matplotlib import colormaps
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    cmap = colormaps["tab10"]
    curves, _, top, unit_name, unit = _memory_unit(res, profile)
    for r, (ax, curve) in enumerate(zip(axes, curves)):
        xs = [t for t, _ in curve] + [res.makespan]
        ys = [m / unit for _, m in curve] + [curve[-1][1] / unit]
        ax.step(xs, ys, where="post", lw=1.0, color=cmap(r), zorder=3, label=f"rank {r}", gid=f"memory-rank-{r}")
        ax.fill_between(xs, ys, step="post", color=cmap(r), alpha=0.15, lw=0, zorder=2)
        cap = res.memory_limit[r]
        if math.isfinite(cap):
            ax.axhline(cap / unit, color="#c0392b", ls="--", lw=0.8, gid="memory-limit")
        peak = res.peak_memory[r]
        ax.text(1.002, 0.5, f"peak {format_memory(peak)}" if unit_name != "stage activations" else f"peak {peak:.4g}",
                transform=ax.transAxes, ha="left", va="center", fontsize=5.5, color=cmap(r), gid="memory-rank-label")
        ax.set_ylabel(f"rank {r}", fontsize=6, rotation=0, ha="right", va="center")
        ax.tick_params(labelsize=5.5, length=2)
        ax.yaxis.set_major_locator(MaxNLocator(nbins=2, steps=[1, 2, 2.5, 5, 10]))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if r < len(axes) - 1:
            ax.tick_params(labelbottom=False)
    axes[0].set_ylim(0, top / unit * 1.12 if top > 0 else 1)
    _draw_limit_labels(axes[0], res.memory_limit, unit, top, memory)
    axes[0].set_title(f"memory ({unit_name}), one strip per rank", loc="left", fontsize=7, pad=2)


def _label_peaks(ax, curves, unit: float, top: float, pt_per_time: float, cmap) -> None:
    """'r3' in the rank's colour where its curve leaves its peak for the last time (ranks leave
    their peaks at different times even where they reach the same one); a label that would overlap
    an earlier one is left out, the legend names it."""
    placed: list[tuple[float, float]] = []
    for r, curve in enumerate(curves):
        peak = max(m for _, m in curve)
        at_peak = [k for k, (_, m) in enumerate(curve) if m == peak]
        t = curve[min(at_peak[-1] + 1, len(curve) - 1)][0]
        if any(abs(t - x) * pt_per_time < 14 and abs(peak - y) < 0.12 * top for x, y in placed):
            continue
        placed.append((t, peak))
        ax.text(t, peak / unit, f"r{r}", color=cmap(r), fontsize=6, ha="left", va="bottom", gid="memory-rank-label",
                zorder=4, clip_on=True)


def _draw_limits(ax, caps: Sequence[float], unit: float, top: float, memory: Optional[MemoryLimit]) -> None:
    """One dashed line per distinct limit, labelled with its value and, when ranks differ (caps
    given per rank; ``--memory`` gives every rank the same), which ranks it caps. Limits closer
    than a label's height share one label ('limits 136.00MiB-148.00MiB, ranks 0-3'), so labels
    never overlap."""
    groups, clusters, spec = _limit_groups(caps, top, memory)
    shown = sorted(groups.items())
    for k, (cap, _) in enumerate(shown):
        ax.axhline(cap / unit, color="#c0392b", ls="--", lw=1.0, gid="memory-limit",
                   label="memory limit" if k == 0 else None)
    _label_clusters(ax, clusters, len(groups), unit, spec)


def _limit_groups(caps: Sequence[float], top: float, memory: Optional[MemoryLimit]):
    """(limit -> the ranks it caps, limits clustered closer than a label's height, the spec shown
    after a relative limit's value)."""
    groups: dict[float, list[int]] = {}
    for r, cap in enumerate(caps):
        if math.isfinite(cap):
            key = next((k for k in groups if abs(k - cap) <= REL * max(1.0, abs(k))), cap)
            groups.setdefault(key, []).append(r)
    spec = f" ({memory})" if memory is not None and memory.kind == "relative" else ""
    shown = sorted(groups.items())
    clusters: list[list[tuple[float, list[int]]]] = []
    for cap, ranks in shown:
        if clusters and top > 0 and cap - clusters[-1][-1][0] < 0.1 * top:
            clusters[-1].append((cap, ranks))
        else:
            clusters.append([(cap, ranks)])
    return groups, clusters, spec


def _draw_limit_labels(ax, caps: Sequence[float], unit: float, top: float, memory: Optional[MemoryLimit]) -> None:
    """:func:`_draw_limits`' labels without its lines (the strips draw each rank's own line)."""
    groups, clusters, spec = _limit_groups(caps, top, memory)
    _label_clusters(ax, clusters, len(groups), unit, spec)


def _label_clusters(ax, clusters, n_groups: int, unit: float, spec: str) -> None:
    for cluster in clusters:
        lo, hi = cluster[0][0], cluster[-1][0]
        ranks = sorted(r for _, rs in cluster for r in rs)
        who = "" if n_groups == 1 else f", {_rank_list(ranks)}"
        value = f" {format_memory(lo)}" if len(cluster) == 1 else f"s {format_memory(lo)}-{format_memory(hi)}"
        ax.text(0.995, hi / unit, f"limit{value}{spec}{who}",
                transform=ax.get_yaxis_transform(), ha="right", va="bottom",
                fontsize=6, color="#c0392b", gid="memory-limit-label", zorder=4,
                bbox=dict(facecolor="white", edgecolor="none", alpha=0.7, pad=0.5))


def _rank_list(ranks: Sequence[int]) -> str:
    """'rank 3', 'ranks 1-7', 'ranks 0, 2, 5'."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _title_line(name: str, schedule: Schedule, res: SimResult, memory: Optional[MemoryLimit], profile: Profile) -> str:
    mb = schedule.n_microbatches
    shape = f"{schedule.n_stages} stages on {schedule.n_ranks} ranks, {mb} microbatch{'' if mb == 1 else 'es'}"
    finite = [(p / lim, r) for r, (p, lim) in enumerate(zip(res.peak_memory, res.memory_limit)) if math.isfinite(lim) and lim > 0]
    peak = max(res.peak_memory) if res.peak_memory else 0.0
    if finite:
        ratio, r = max(finite)
        mem = (f"peak memory {format_memory(res.peak_memory[r])} of limit {format_memory(res.memory_limit[r])}"
               f"{f' ({memory})' if memory is not None and memory.kind == 'relative' else ''}"
               f" on rank {r}: {'fits' if res.fits else 'EXCEEDED'}")
    else:
        mem = f"peak memory {format_memory(peak)}, no limit"
    moved = ""
    if res.copies:
        # the report's rule (its busier direction), so the title and the compile summary name one rank
        busiest = max(range(res.n_ranks), key=lambda r: max(res.link_busy(r, "out"), res.link_busy(r, "in")))
        outs = [c for c in res.copies if c.direction == "out"]
        offloaded = len({(c.stage, c.microbatch) for c in outs})
        after_i = sum(1 for c in outs if c.after == "I")
        # a line of its own: beside the memory it ran past the figure's edge
        moved = (f"\n{offloaded} microbatch{'' if offloaded == 1 else 'es'} offloaded"
                 f"{f' ({after_i} moved after their I for a deferred W)' if after_i else ''}, link busy up to "
                 f"{100 * res.link_busy(busiest, 'out'):.0f}% out / {100 * res.link_busy(busiest, 'in'):.0f}% in "
                 f"(rank {busiest})")
    return (f"{name}   ({shape})\nmakespan {format_duration(res.makespan, profile)}   bubble {100 * res.bubble:.1f}%   "
            f"{mem}{moved}")


def _add_legend(fig: Figure, keys, streams: bool = False, recomputed: bool = False) -> None:
    from matplotlib.patches import Patch

    handles = []
    ordinal = {0: "1st", 1: "2nd", 2: "3rd"}
    order = kinds()
    for kind, slot, n_slots in sorted(keys, key=lambda k: (order.index(k[0]), k[2], k[1])):
        label = f"{kind} {KIND_TABLE[kind].plot_label}"
        if n_slots > 1:
            label += f", rank's {ordinal.get(slot, f'{slot + 1}th')} stage"
        handles.append(Patch(facecolor=kind_color(kind, slot, n_slots), label=label))
    handles.append(Patch(facecolor="#e6e6e6", label="idle"))
    if streams:
        handles += [Patch(facecolor=_STREAM_COLORS[d], label=_STREAM_NAMES[d]) for d in ("out", "in")]
    if recomputed:
        handles.append(Patch(facecolor="white", edgecolor="#555555", hatch="////", label="recomputed microbatch"))
    ncol = min(len(handles), 5)
    try:
        fig.legend(handles=handles, loc="outside upper center", ncol=ncol, fontsize=7, frameon=False)
    except ValueError:  # matplotlib < 3.7 has no 'outside' legends
        fig.legend(handles=handles, loc="upper center", ncol=ncol, fontsize=7, frameon=False)


def _ink(rgba) -> str:
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"
