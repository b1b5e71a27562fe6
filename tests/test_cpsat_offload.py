"""Offload inside CP-SAT (schedc.solver.engines.cpsat_offload): the order and the offloads chosen
in one model find a shorter schedule that fits than the choosers on the hand-made orders, its
memory actions run as the CSV says, and ``--offload auto`` uses it on small problems only.

1F1B and the zero-bubble orders on 4 identical stages (F = I = W = 1 s, 1 byte of activation),
8 microbatches, at 0.8p: rank 0 holds 4 microbatches at 1F1B's peak; a copy of one microbatch
takes 2 s.
"""

import math

import pytest

pytest.importorskip("ortools")

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.core.costs import MemoryLimit, Profile  # noqa: E402
from schedc.core.host_link import HostLink  # noqa: E402
from schedc.core.memory_actions import check_memory_actions, to_json  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.solver.deadline import Deadline  # noqa: E402
from schedc.solver.engines.cpsat_offload import offload_cpsat  # noqa: E402
from schedc.solver.offload import CPSAT_SOURCE, best_offload, compile_schedule_offloading, cpsat_offload_runs  # noqa: E402
from schedc.solver.problem import Problem  # noqa: E402

PROFILE = Profile.uniform(4)
MEMORY = MemoryLimit.parse("0.8p")
LINK = HostLink(bandwidth=1 / 2.0, latency=0.0)
PROBLEM = Problem.build(4, 8, profile=PROFILE, memory=MEMORY)


def _choosers():
    found = best_offload([(n, make_baseline(n, 4, 8)) for n in ("1f1b", "zb-h1", "zb-h2")], PROBLEM, LINK)
    assert found is not None
    return found[1]


def test_the_order_and_the_offloads_together_beat_the_choosers_on_hand_made_orders():
    incumbent = _choosers()
    found = offload_cpsat(PROBLEM, LINK, incumbent, Deadline.after(30))
    assert found is not None and found.sim.fits
    assert found.sim.makespan < incumbent.sim.makespan
    assert any(a.action == "offload" for a in found.actions)
    # what the CSV and its memory actions run is what was found
    check_memory_actions(to_json(found.actions), found.schedule)
    again = simulate(found.schedule, PROFILE, MEMORY, memory_actions=to_json(found.actions), link=LINK)
    assert again.fits and again.makespan == found.sim.makespan
    # offload only adds waits: never below the uncapped order's step
    assert found.sim.makespan >= simulate(found.schedule, PROFILE, None).makespan


def test_it_answers_only_when_shorter_than_what_it_is_given():
    incumbent = _choosers()
    found = offload_cpsat(PROBLEM, LINK, incumbent, Deadline.after(30))
    again = offload_cpsat(PROBLEM, LINK, found, Deadline.after(30))
    assert again is None or again.sim.makespan < found.sim.makespan


def test_offload_auto_runs_it_on_small_problems_and_keeps_the_uncapped_bound():
    assert cpsat_offload_runs(PROBLEM)
    assert not cpsat_offload_runs(Problem.build(8, 32, profile=Profile.uniform(8), memory=MEMORY))
    res = compile_schedule_offloading(4, 8, LINK, profile=PROFILE, memory="0.8p", time_limit=10, budget="work")
    assert res.sim.fits and res.value <= _choosers().sim.makespan
    assert res.lower_bound <= res.value
    if res.report["offload"]["from_schedule"] == CPSAT_SOURCE:
        assert res.warm_start_source == CPSAT_SOURCE
        check_memory_actions(res.report["memory_actions"], res.schedule)


# recompute: a link far too slow to move anything (a copy of one microbatch takes 20 s) and a
# cap of half what 1F1B holds; checkpointed, a stage keeps a tenth of its bytes and its backward
# runs the forward again as B (I + W + 0.25 s)
SLOW = HostLink(bandwidth=1 / 20.0, latency=0.0)
HALF = MemoryLimit.parse("0.5p")
TIGHT = Problem.build(4, 8, profile=PROFILE, memory=HALF)


def _checkpointed_raw() -> Profile:
    return PROFILE.model_copy(update={"stages": [
        s.model_copy(update={"backward_input": s.backward_input + 0.25, "activation_bytes": 0.1,
                             "weight_grad_bytes": 0.1}) for s in PROFILE.stages]})


def test_recompute_chosen_with_the_order_beats_offload_alone_and_the_choosers_mix():
    from schedc.planning.ac import checkpointed_form
    from schedc.solver.compile import compile_schedule

    checkpointed = checkpointed_form(_checkpointed_raw(), PROFILE)
    capped = compile_schedule(4, 8, profile=PROFILE, memory=HALF, time_limit=10, budget="work").value
    mix = best_offload([(n, make_baseline(n, 4, 8)) for n in ("1f1b", "zb-h1", "zb-h2")], TIGHT, SLOW,
                       checkpointed=checkpointed)
    alone = offload_cpsat(TIGHT, SLOW, None, Deadline.after(10))  # the link moves nothing in time
    found = offload_cpsat(TIGHT, SLOW, None, Deadline.after(30), checkpointed=checkpointed)
    assert found is not None and found.sim.fits
    assert found.sim.makespan < min(capped, mix[1].sim.makespan, math.inf if alone is None else alone.sim.makespan)
    redone = {(a.stage, a.microbatch) for a in found.actions if a.action == "recompute"}
    assert redone
    # a recomputed backward runs whole: B where it was I, no W
    runs = {(a.stage, a.kind, a.microbatch) for r in range(4) for a in found.schedule.actions(r)}
    assert all((s, "B", m) in runs and (s, "W", m) not in runs for s, m in redone)
    check_memory_actions(to_json(found.actions), found.schedule)
    again = simulate(found.schedule, PROFILE, HALF, memory_actions=to_json(found.actions), link=SLOW,
                     recompute=checkpointed)
    assert again.fits and again.makespan == found.sim.makespan
    # recompute adds work: never below the uncapped step
    assert found.sim.makespan >= compile_schedule(4, 8, profile=PROFILE, memory="none", time_limit=5,
                                                  budget="work").lower_bound


def test_compile_takes_a_checkpointed_profile_and_reports_the_recomputes(tmp_path, capsys):
    import json

    import schedc
    from schedc import cli
    from schedc.errors import SchedcError

    plain = schedc.compile(stages=4, microbatches=8, memory="0.5p", offload="auto", host_link=SLOW,
                           time_limit=10, budget="work")
    res = schedc.compile(stages=4, microbatches=8, memory="0.5p", offload="auto", host_link=SLOW,
                         recompute_profile=_checkpointed_raw(), time_limit=10, budget="work")
    assert res.simulation.fits and res.simulation.makespan < plain.simulation.makespan
    offload = res.report.to_dict()["offload"]
    assert offload["recomputed"] and offload["recompute_profile"]["stages"][1]["backward_weight"] == 0
    with pytest.raises(SchedcError, match="recompute_profile.*give offload="):
        schedc.compile(stages=4, microbatches=8, recompute_profile=_checkpointed_raw())
    # the command line: the plan's recorded costs come back with the report, so simulate re-times it
    ck = tmp_path / "full.json"
    _checkpointed_raw().save(ck)
    csv = tmp_path / "s.csv"
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--memory", "0.5p", "--offload", "auto",
                     "--host-bandwidth", "0.05", "--recompute-profile", str(ck), "--time-limit", "10",
                     "--budget", "work", "--quiet", "-o", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "recomputed (their backward runs as B)" in out
    report = json.loads((tmp_path / "s.json").read_text())
    # the work the summary states is all the command spent, the choosers' and CP-SAT's included
    assert report["work_spent"] > 0 and f"work {report['work_spent']:.2f} units (reproducible)" in out
    assert cli.main(["simulate", str(csv), "--memory", "0.5p", "--memory-actions", str(tmp_path / "s.json"),
                     "--host-bandwidth", "0.05", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["makespan"] == report["predicted"]["makespan"] and row["fits_memory"]
    # the report itself gives the costs back: it records them
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--memory", "0.5p", "--offload", "auto",
                     "--host-bandwidth", "0.05", "--recompute-profile", str(tmp_path / "s.json"), "--time-limit",
                     "10", "--budget", "work", "--quiet", "-o", str(tmp_path / "again.csv")]) == 0
    capsys.readouterr()
    again = json.loads((tmp_path / "again.json").read_text())["offload"]
    assert again["recomputed"] and again["recompute_profile"] == report["offload"]["recompute_profile"]
    three = tmp_path / "three.json"
    Profile.uniform(3).save(three)
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--offload", "auto", "--recompute-profile",
                     str(three), "-o", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--recompute-profile describes 3 stages" in err
    # a device node is refused, not read until memory runs out
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--offload", "auto", "--recompute-profile",
                     "/dev/zero", "-o", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "/dev/zero" in err
    assert not (tmp_path / "t.csv").exists()
