"""`schedc plan --offload auto`: offload to host memory chosen with the partition, the placement
and --ac (schedc.planning.offload), never worse than --offload none, its memory actions valid
for the plan's CSV, its four rows, and the hand-off line for the frameworks that cannot run it.

The model is tiny and per-unit: an embedding, eight layers of F = I = W = 1 s holding 1 GiB per
microbatch (and 0.05 GiB from I to W), a head; 4 ranks, 8 microbatches. Under 9 GiB per rank the
first stages hold fewer microbatches than the zero-bubble order wants, and a 50 GB/s link moves a
stage's 2 GiB in 0.04 s, far inside the seconds each microbatch waits for its backward.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

from schedc.core.costs import MemoryLimit, Profile, StageCost
from schedc.core.host_link import HostLink

GiB = 2**30
RANKS, M = 4, 8
BINDS = "9GiB"  # the cap where offload shortens the plan


def units(n_layers: int = 8) -> Profile:
    stages = [StageCost(forward=0.05, backward_input=0.0, backward_weight=0.05, activation_bytes=0.1 * GiB,
                        weight_grad_bytes=0.01 * GiB, static_bytes=1 * GiB, modules=["tok_embeddings"])]
    stages += [StageCost(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=1 * GiB,
                         weight_grad_bytes=0.05 * GiB, static_bytes=0.5 * GiB, modules=[f"layers.{k}"])
               for k in range(n_layers)]
    stages.append(StageCost(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=0.5 * GiB,
                            weight_grad_bytes=0.05 * GiB, static_bytes=1 * GiB, modules=["norm", "lm_head"]))
    return Profile(stages=stages, comm=0.05, model="tiny per-unit")


def _schedc(*args, cwd):
    return subprocess.run([sys.executable, "-m", "schedc.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def _plan(tmp_path, *extra, memory=BINDS):
    units().save(tmp_path / "units.json")
    return _schedc("plan", "--profile", "units.json", "--ranks", str(RANKS), "--mb", str(M), "--memory", memory,
                   "--placement", "loop", "--time-limit", "6", "--budget", "work", "--quiet", "-o", "plan.csv",
                   *extra, cwd=tmp_path)


@pytest.mark.parametrize("memory", ["7GiB", BINDS, "none"])
@pytest.mark.parametrize("bandwidth", [0.5e9, 50e9])
def test_offload_auto_is_never_worse_than_the_plan_without_it(memory, bandwidth):
    from schedc.planning.ac import plan_mode
    from schedc.planning.offload import plan_offload
    from schedc.solver.deadline import counting_work

    without = plan_mode(units(), None, None, ranks=RANKS, microbatches=M, memory=memory, placement="loop",
                        time_limit=3, budget="work")
    with counting_work(3):
        res = plan_offload(without, HostLink(bandwidth=bandwidth), 3, {"offload only": without.units})
    assert res.value <= without.value * (1 + 1e-9)
    assert res.offload["step_without_offload"] == without.value
    rows = {r["row"]: r for r in res.offload["rows"]}
    assert list(rows) == ["nothing", "checkpointing only", "offload only", "both"]
    assert rows["nothing"]["step"] == without.value and not rows["checkpointing only"]["fits"]
    if not res.offload["chosen"] and "row" not in res.offload:  # nothing shorter: the plan itself
        assert res.schedule == without.schedule and res.report["memory_actions"] == []
    # the bound allows offload (schedc.core.offload_bound), never above the plan's step
    assert res.bound <= res.value
    assert res.report["plan"]["bound_assumes"].startswith("over every partition, schedule, offload over the link")


def test_offload_auto_starts_from_the_plan_offload_none_makes_with_the_same_time_limit():
    from schedc.planning.ac import plan_mode
    from schedc.planning.offload import plan_with_offload

    kw = dict(ranks=RANKS, microbatches=M, memory="7GiB", placement="loop", budget="work", time_limit=3)
    res = plan_with_offload({None: units()}, HostLink(), **kw)
    without = plan_mode(units(), None, None, **kw)
    if not (res.cut_by_wall or without.cut_by_wall):  # a busy machine's wall clock cut a work budget
        assert res.offload["step_without_offload"] == without.value
    assert res.value <= res.offload["step_without_offload"] and res.budget == "work"


def test_where_the_cap_binds_offload_shortens_the_plan_and_its_actions_fit_the_csv(tmp_path):
    from schedc.core.memory_actions import check_memory_actions
    from schedc.core.simulate import simulate
    from schedc.io.csvio import read_csv

    out = _plan(tmp_path, "--offload", "auto")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "plan.json").read_text())
    summary, actions = report["offload"], report["memory_actions"]
    assert summary["chosen"] and actions and summary["memory_actions"] == len(actions)
    assert report["plan"]["step"] < summary["step_without_offload"]
    assert report["assumes"]["host_bandwidth"] == 50e9 and report["assumes"]["offload"] == "auto"
    schedule = read_csv(tmp_path / "plan.csv")
    checked = check_memory_actions(actions, schedule, "plan.json")
    assert len(checked) == len(actions)
    # what plan.json promises is what the simulator gives with those actions on that link
    profile = Profile.load(tmp_path / "plan.profile.json")
    sim = simulate(schedule, profile, MemoryLimit.parse(BINDS), memory_actions=list(checked.values()),
                   link=HostLink())
    assert sim.fits and sim.makespan == pytest.approx(report["plan"]["step"])
    assert not simulate(schedule, profile, MemoryLimit.parse(BINDS)).fits  # without them the CSV is over the cap
    # the printout: two or three lines of offload, the rows side by side, the frameworks' line
    assert "offload (50 GB/s per direction): " in out.stdout and "rows: nothing " in out.stdout
    assert "bound over every partition, schedule, offload over the link and checkpointing per microbatch" in out.stdout
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("torchtitan and NeMo AutoModel cannot launch"))
    assert 'the best plan they can launch is "nothing"' in line and "--ac none --offload none writes it" in line
    launch = summary["frameworks_launch"]
    assert launch["row"] == "nothing" and launch["longer_by"] == pytest.approx(launch["step"] - report["plan"]["step"])
    assert launch["longer_by"] > 0
    assert "plan_settings('plan.json')" in out.stdout
    # schedc validate takes the plan's actions with its CSV
    valid = _schedc("validate", "plan.csv", "--memory-actions", "plan.json", cwd=tmp_path)
    assert valid.returncode == 0 and "memory action(s) match the CSV and it fits" in valid.stdout


def test_offload_none_is_the_plan_without_offload_fields(tmp_path):
    out = _plan(tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "plan.json").read_text())
    assert "offload" not in report and "memory_actions" not in report and "host_bandwidth" not in report["assumes"]
    assert "cannot launch" not in out.stdout


@pytest.mark.parametrize("value", ["0", "nan", "fast", "-5GB/s", "inf"])
def test_a_bad_host_bandwidth_is_one_line_naming_the_flag(tmp_path, value):
    out = _plan(tmp_path, "--offload", "auto", f"--host-bandwidth={value}")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--host-bandwidth" in lines[0], out.stderr
    assert not (tmp_path / "plan.csv").exists()


def test_link_flags_without_offload_auto_are_refused(tmp_path):
    out = _plan(tmp_path, "--host-bandwidth", "100GB/s")
    assert out.returncode != 0 and "give --offload auto" in out.stderr and "Traceback" not in out.stderr


def test_with_ac_auto_the_rows_hold_checkpointing_and_the_plan_is_the_shortest_that_fits():
    from test_plan import _modes  # noqa: E402  (per-mode profiles of the same units)

    from schedc.planning.offload import plan_with_offload

    res = plan_with_offload(_modes(units()), HostLink(), ranks=RANKS, microbatches=M, memory="7GiB",
                            placement="loop", budget="work", time_limit=8)
    rows = {r["row"]: r for r in res.offload["rows"]}
    assert rows["checkpointing only"]["fits"] and res.ac is not None
    fitting = [r["step"] for r in rows.values() if r["fits"]]
    assert res.value == pytest.approx(min(fitting))
    assert res.value <= res.offload["step_without_offload"] * (1 + 1e-9)


def test_cli_ac_auto_with_offload_prints_the_four_rows_and_records_them(tmp_path):
    from test_plan import _modes  # noqa: E402

    for mode, profile in _modes(units()).items():
        profile.save(tmp_path / f"{mode}.json")
    out = _schedc("plan", "--profile", "none=none.json", "--profile", "selective=selective.json", "--profile",
                  "full=full.json", "--ac", "auto", "--offload", "auto", "--host-bandwidth", "25GB/s", "--ranks",
                  str(RANKS), "--mb", str(M), "--memory", "7GiB", "--placement", "loop", "--time-limit", "8",
                  "--budget", "work", "--quiet", "-o", "plan.csv", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "plan.json").read_text())
    rows = {r["row"]: r for r in report["offload"]["rows"]}
    assert list(rows) == ["nothing", "checkpointing only", "offload only", "both"]
    # 7 GiB: checkpointing fits a shorter step than none; the plan is the shortest row that fits
    assert rows["checkpointing only"]["fits"] and rows["checkpointing only"]["step"] < rows["nothing"]["step"]
    assert report["plan"]["step"] == pytest.approx(min(r["step"] for r in rows.values() if r["fits"]))
    assert report["assumes"]["host_bandwidth"] == 25e9
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("  rows: "))
    assert all(name in line for name in rows) and "offload (25 GB/s per direction)" in out.stdout


def _recomputing_plans():
    """(the plan without offload, with offload alone, with recompute per microbatch allowed) at
    7 GiB over a 0.05 GB/s link: a stage's 2 GiB take 43 s to move, so offload alone cannot make
    the short orders fit; recomputing some microbatches (at --ac full's costs: the forward again,
    0.1 GiB kept) can."""
    from schedc.planning.ac import checkpointed_form, plan_mode
    from schedc.planning.offload import plan_offload
    from schedc.solver.deadline import counting_work

    u = units()
    full = u.model_copy(update={"stages": [s.model_copy(update={
        "activation_bytes": min(s.activation_bytes, 0.1 * GiB), "backward_input": s.backward_input + s.forward})
        for s in u.stages]})
    without = plan_mode(u, None, None, ranks=RANKS, microbatches=M, memory="7GiB", placement="loop",
                        time_limit=3, budget="work")
    link = HostLink(bandwidth=0.05e9)
    with counting_work(3):
        alone = plan_offload(without, link, 3, {"offload only": without.units})
    with counting_work(3):
        res = plan_offload(without, link, 3, {"offload only": without.units},
                           recompute_units=checkpointed_form(full, u))
    return without, alone, res


def test_where_the_link_is_too_slow_the_plan_recomputes_single_microbatches():
    from schedc.core.memory_actions import check_memory_actions

    without, alone, res = _recomputing_plans()
    assert res.value < min(without.value, alone.value) * (1 - 1e-9)
    actions = res.report["memory_actions"]
    redone = [a for a in actions if a["action"] == "recompute"]
    assert redone and res.offload["row"] == "both"
    assert sum(len(e["microbatches"]) for e in res.offload["recomputed"]) == len(redone)
    rows = {r["row"]: r for r in res.offload["rows"]}
    assert f"{len(redone)} recomputed" in rows["both"]["what"]
    # the CSV runs every recomputed backward as B, as the runtime needs
    check_memory_actions(actions, res.schedule)


def test_a_plan_that_recomputes_is_simulated_and_validated_from_its_files(tmp_path):
    # plan.json records the checkpointed costs its recomputes run at: simulate and validate
    # time them from the file alone, and get the plan's own step
    from schedc.io import csvio
    from schedc.planning import build_plan_report

    _, _, res = _recomputing_plans()
    csvio.write_schedule(res.schedule, build_plan_report(res, csv="plan.csv"), tmp_path / "plan.csv")
    res.profile.save(tmp_path / "stages.json")
    out = _schedc("simulate", "plan.csv", "--profile", "stages.json", "--memory", "7GiB",
                  "--memory-actions", "plan.json", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)[0]
    assert abs(got["makespan"] - res.value) <= 1e-9 * res.value and got["fits_memory"]
    out = _schedc("validate", "plan.csv", "--memory-actions", "plan.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "match the CSV" in out.stdout
    # without the recorded costs the recomputes cannot be timed: one line that says what to give
    plan = json.loads((tmp_path / "plan.json").read_text())
    del plan["offload"]["recompute_profile"]
    (tmp_path / "bare.json").write_text(json.dumps(plan))
    out = _schedc("simulate", "plan.csv", "--profile", "stages.json", "--memory", "7GiB", "--memory-actions",
                  "bare.json", cwd=tmp_path)
    assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1
    assert "no costs of the stages checkpointed" in out.stderr


def test_stages_sized_for_offload_fit_the_cap_with_their_offloads():
    # at 6 GiB 1F1B's four microbatches in flight on the first stage need checkpointing; sized
    # to hold three on the device, the rest offloaded, the stages checkpoint less, and the
    # sized path (the heuristic first, 1F1B's warm-up first) makes them fit: whole backwards on
    # every stage but the last, each fetch at an action of the CSV
    from test_plan import _modes  # noqa: E402

    from schedc.core.memory_actions import check_memory_actions
    from schedc.planning.ac import mode_forms
    from schedc.planning.offload import offload_partition, offload_sized_candidates
    from schedc.planning.problem import problem_for
    from schedc.solver.deadline import counting_work

    forms = mode_forms(_modes(units()))
    found = offload_sized_candidates(forms, RANKS, M, 6 * GiB)
    assert found and {pl for *_, pl in found} == {"loop"}  # interleaved only when asked
    form, counts, modes, _ = found[0]
    problem = problem_for(form, counts, "loop", RANKS, M, MemoryLimit.parse("6GiB"), "makespan")
    with counting_work(4):
        res = offload_partition(problem, HostLink(), 4, sized=True)
    assert res is not None and res.sim.fits and res.report["memory_actions"]
    check_memory_actions(res.report["memory_actions"], res.schedule)
    split = {a.stage for _, a in res.schedule.all_actions() if a.kind in ("I", "W")}
    assert split <= {0, len(counts) - 1}  # torch's stage 0 runs I and W under checkpointing too
    assert len(modes) == len(counts)


def test_a_plan_sized_for_offload_records_the_checkpointing_the_runtime_applies(tmp_path):
    # at 4 GiB the per-unit model's plan with offload is a partition sized for offload: its own
    # checkpointing per stage, not --ac auto's, is what plan.json gives schedc's runtime
    from test_plan import _modes  # noqa: E402

    from schedc.planning import build_plan_report
    from schedc.planning.offload import plan_with_offload

    res = plan_with_offload(_modes(units()), HostLink(), ranks=RANKS, microbatches=M, memory="4GiB",
                            placement="loop", budget="work", time_limit=4)
    won = res.candidates[-1]
    assert won.get("sized_for_offload") and res.value < res.offload["step_without_offload"]
    assert res.assumes["activation_checkpoint"] == res.ac.chosen == won["modes"]
    assert res.report["memory_actions"]
    pytest.importorskip("torch")
    from schedc.runtime.checkpointing import plan_settings

    (tmp_path / "plan.json").write_text(json.dumps(build_plan_report(res, csv="plan.csv")))
    got = plan_settings(tmp_path / "plan.json")
    assert got["activation_checkpoint"] == won["modes"]
    bounds = [sum(won["units_per_stage"][:k]) for k in range(len(won["units_per_stage"]) + 1)]
    layers = [sum(u.modules[0].startswith("layers.") for u in units().stages[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert got["layers_per_stage"] == layers


@functools.lru_cache(maxsize=None)  # two tests read the same offloads
def _sized_offloads(cap: str, interleaved: bool):
    """(placement, counts, result) of offloading each candidate sized for offload at `cap`."""
    from test_plan import _modes  # noqa: E402

    from schedc.planning.ac import mode_forms
    from schedc.planning.offload import offload_partition, offload_sized_candidates
    from schedc.planning.problem import problem_for
    from schedc.solver.deadline import counting_work

    out = []
    limit = MemoryLimit.parse(cap)
    for form, counts, _, pl in offload_sized_candidates(mode_forms(_modes(units())), RANKS, M, limit.value,
                                                        interleaved=interleaved):
        problem = problem_for(form, counts, pl, RANKS, M, limit, "makespan")
        with counting_work(4):
            out.append((pl, counts, offload_partition(problem, HostLink(), 4, sized=True)))
    return out


def test_stages_sized_for_offload_two_a_rank_interleaved_fit_the_rank_cap_and_beat_the_loops():
    # sized for offload, the stages but the last run whole backwards: on a loop that keeps 1F1B's
    # bubble, two stages a rank interleaved halve it. Both stages of a rank fit its one cap with
    # their offloads, every fetch at an action of the CSV, and the step is shorter than every
    # loop sized for offload at the same cap
    from schedc.core.memory_actions import check_memory_actions

    found = _sized_offloads("6GiB", interleaved=True)
    loops = [res.value for pl, _, res in found if pl == "loop" and res is not None]
    inter = [(counts, res) for pl, counts, res in found if pl == "interleaved"]
    assert loops and inter
    for counts, res in inter:
        assert len(counts) == 2 * RANKS and res is not None and res.sim.fits
        assert res.schedule.placement == tuple(s % RANKS for s in range(2 * RANKS))
        assert max(res.sim.peak_memory) <= 6 * GiB
        check_memory_actions(res.report["memory_actions"], res.schedule)
        split = {a.stage for _, a in res.schedule.all_actions() if a.kind in ("I", "W")}
        assert split <= {0, 2 * RANKS - 1}
    assert min(res.value for _, res in inter) < min(loops) * 0.95


def test_the_bound_with_offload_covers_the_interleaved_plans_it_may_choose():
    # once an interleaved candidate is in the search the bound is over the interleaved loop too:
    # at or below every interleaved answer, and never below the busiest rank's work
    from types import SimpleNamespace

    from test_plan import _modes  # noqa: E402

    from schedc.core.partition import Units
    from schedc.planning.offload import checkpointing_modes, offload_bound
    from schedc.planning.search import busiest_rank_work_bound

    found = _sized_offloads("6GiB", interleaved=True)
    res = min((r for pl, _, r in found if pl == "interleaved"), key=lambda r: r.value)
    plan = SimpleNamespace(compiled=SimpleNamespace(problem=res.problem))
    modes = checkpointing_modes(_modes(units()))
    bound = offload_bound(units(), plan, ["interleaved"], HostLink(), 6 * GiB, modes)
    assert busiest_rank_work_bound(Units.of(units(), M), RANKS, M) <= bound <= res.value
    assert offload_bound(units(), plan, ["loop", "interleaved"], HostLink(), 6 * GiB, modes) <= bound


def test_plan_with_offload_tries_the_interleaved_loop_only_under_placement_auto():
    # auto: the interleaved candidate sized for offload is offloaded (here shorter than the loop's
    # plan, though a V wins) and the bound covers it; --placement loop keeps to the loop
    import re

    from test_plan import _modes  # noqa: E402

    from schedc.planning.offload import plan_with_offload

    kw = dict(ranks=RANKS, microbatches=M, memory="6GiB", budget="work", time_limit=4)
    said: list = []
    auto = plan_with_offload(_modes(units()), HostLink(), placement="auto", progress=said.append, **kw)
    loop = plan_with_offload(_modes(units()), HostLink(), placement="loop", progress=said.append, **kw)
    found = [re.search(r"offload, both: interleaved .*: ([\d.]+) \(", line) for line in said]
    inter = [float(m.group(1)) for m in found if m]
    assert inter and min(inter) < loop.value
    assert "interleaved" in auto.bounds and auto.bound <= auto.value <= min(inter)
    assert loop.placement == "loop" and set(loop.bounds) == {"loop"}
