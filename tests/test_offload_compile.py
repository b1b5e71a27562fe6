"""The compiler chooses offload: the chooser for a given order (schedc.solver.offload),
``compile --offload auto``, its report, the link flags, and simulate/validate with a report's
memory actions.

The instances are uniform stages (F = I = W = 1, one unit of activation per microbatch); with
``held_fraction=0`` nothing stays held from I to W, so what a rank holds at its peak is
activations between F and I, which offload can move. A link whose bandwidth is ``b`` units per
second copies one microbatch in 1/b.
"""

import json
import math

import pytest
from exhaustive import exact_optimum  # tests/exhaustive.py: the exact search

import schedc
from schedc import cli
from schedc.core.baselines import make_baseline
from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.ir import Action
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.solver.compile import compile_schedule
from schedc.solver.offload import UNCAPPED_SOURCE, choose_offload, compile_schedule_offloading
from schedc.solver.problem import Problem

FAST = HostLink(bandwidth=100.0, latency=0.0)  # a copy of one microbatch: 0.01 s
SLOW = HostLink(bandwidth=0.5, latency=0.0)  # 2 s: longer than any gap a microbatch is held


def _flat(n_stages):
    return Profile.uniform(n_stages, held_fraction=0.0)


@pytest.mark.parametrize("name", ["1f1b", "zb-h1"])
def test_the_chooser_makes_an_over_cap_schedule_fit_and_hides_its_copies(name):
    schedule = make_baseline(name, n_stages=4, n_microbatches=8)
    profile, memory = _flat(4), MemoryLimit.parse("0.75p")
    plain = simulate(schedule, profile, memory)
    assert not plain.fits
    choice = choose_offload(schedule, profile, memory, FAST)
    assert choice.fits and choice.sim.fits and choice.actions
    assert all(p <= c for p, c in zip(choice.sim.peak_memory, choice.sim.memory_limit))
    assert choice.sim.makespan == pytest.approx(plain.makespan)  # every fetch ends before its backward
    # what it chose is what a simulation with those actions gives
    again = simulate(schedule, profile, memory, memory_actions=choice.to_json(), link=FAST)
    assert again.peak_memory == choice.sim.peak_memory and again.makespan == choice.sim.makespan


def test_the_chooser_says_when_offload_cannot_fit():
    schedule = make_baseline("1f1b", n_stages=4, n_microbatches=8)
    profile = _flat(4)
    # 1F1B's rank 0 holds the microbatch whose backward comes next and the one its F makes: a cap
    # of two leaves no microbatch that can leave and come back between them
    tight = choose_offload(schedule, profile, MemoryLimit.parse("0.5p"), FAST)
    assert not tight.fits and "rank(s) 0" in tight.why
    # a link too slow to finish a copy out before the peak moves nothing
    slow = choose_offload(schedule, profile, MemoryLimit.parse("0.75p"), SLOW)
    assert not slow.fits and slow.actions == () and slow.why


def test_the_chooser_respects_the_host_memory_cap():
    schedule = make_baseline("zb-h1", n_stages=4, n_microbatches=8)
    profile, memory = _flat(4), MemoryLimit.parse("0.75p")
    one = HostLink(bandwidth=100.0, latency=0.0, host_memory=1.0)
    choice = choose_offload(schedule, profile, memory, one)
    assert not choice.fits
    assert max(choice.sim.host_peak, default=0.0) <= 1.0


def test_a_fast_link_gives_the_uncapped_step():
    profile = _flat(4)
    uncapped = compile_schedule(4, 8, profile=profile, memory="none", time_limit=3)
    none = compile_schedule(4, 8, profile=profile, memory="0.75p", time_limit=3)
    auto = compile_schedule_offloading(4, 8, profile=profile, memory="0.75p", time_limit=4, link=FAST)
    assert none.value > uncapped.value + 1  # the cap costs time without offload
    assert auto.value == pytest.approx(uncapped.value)
    assert auto.sim.fits and auto.status == "optimal"
    assert auto.report["offload"]["transfers_hide"] and auto.report["memory_actions"]


@pytest.mark.parametrize("memory,link", [("0.75p", SLOW), ("0.75p", FAST), ("1p", FAST), ("0.5p", FAST)])
def test_offload_auto_is_never_worse_than_none(memory, link):
    profile = _flat(4)
    none = compile_schedule(4, 8, profile=profile, memory=memory, time_limit=3)
    auto = compile_schedule_offloading(4, 8, profile=profile, memory=memory, time_limit=4, link=link)
    assert auto.sim.fits
    assert auto.value <= none.value + 1e-9
    summary = auto.report["offload"]
    assert summary["step_with_offload"] <= summary["step_without_offload"] + 1e-9
    if not auto.report["memory_actions"]:  # offload did not help: the capped answer itself
        assert auto.value == pytest.approx(none.value)


def test_the_report_says_what_moves_and_what_the_bound_assumes():
    link = HostLink(bandwidth=100.0, latency=1e-3, shared_by=2, host_memory=64.0)
    res = compile_schedule_offloading(4, 8, profile=_flat(4), memory="0.75p", time_limit=4, link=link)
    rep = res.report
    actions = rep["memory_actions"]
    assert actions and all(a["action"] == "offload" and "fetch_at" in a for a in actions)
    summary = rep["offload"]
    moved = {s["stage"]: s for s in summary["stages"]}
    assert sum(len(s["microbatches"]) for s in moved.values()) == len(actions)
    assert all(s["bytes"] == s["bytes_each"] * len(s["microbatches"]) for s in moved.values())
    assert len(summary["link_busy"]) == 4 and all(0 <= e["out"] <= 1 and 0 <= e["in"] <= 1
                                                  for e in summary["link_busy"])
    assert summary["link_busy"][0]["out"] > 0
    assert summary["step_with_offload"] == rep["predicted"]["makespan"]
    assert summary["step_without_offload"] is not None
    assert rep["assumes"]["host_bandwidth"] == 100.0 and rep["assumes"]["host_link_shared_by"] == 2
    assert rep["assumes"]["host_memory"] == 64.0 and rep["assumes"]["host_latency"] == 1e-3
    assert rep["lower_bound_source"] == UNCAPPED_SOURCE
    json.dumps(rep, allow_nan=False)  # the report is strict JSON


def test_offload_none_reports_no_offload_fields():
    rep = compile_schedule(4, 8, profile=_flat(4), memory="0.75p", time_limit=2).report
    assert not {"memory_actions", "offload", "assumes"} & set(rep)


@pytest.mark.parametrize("n_stages,n_mb", [(2, 3), (3, 3), (2, 4)])
@pytest.mark.parametrize("memory", ["0.5p", "0.75p"])
def test_the_uncapped_bound_never_exceeds_an_offload_step(n_stages, n_mb, memory):
    # under offload the capped bound is not valid; the uncapped one is: it is below the exact
    # uncapped optimum, which is below any schedule's step with offload
    profile = _flat(n_stages)
    uncapped = Problem.build(n_stages, n_mb, profile=profile, memory="none")
    optimum, _ = exact_optimum(uncapped, use_bounds=False)
    res = compile_schedule_offloading(n_stages, n_mb, profile=profile, memory=memory, time_limit=3, link=FAST)
    assert res.lower_bound <= optimum + 1e-9 <= res.value + 2e-9
    assert res.sim.fits


def test_a_cap_below_one_microbatch_per_stage_is_still_refused_when_offload_cannot_help():
    with pytest.raises(SchedcError, match="smallest limit that works"):
        compile_schedule_offloading(2, 4, profile=_flat(2), memory="0.1p", time_limit=2, link=FAST)


def test_offload_must_be_none_or_auto():
    with pytest.raises(SchedcError, match="offload"):
        schedc.compile(stages=2, microbatches=4, time_limit=2, offload="yes")


@pytest.mark.parametrize("value", ["0", "nan", "fast", "-5GB/s", "inf", "1e999"])
def test_a_hostile_host_bandwidth_is_one_line_naming_the_flag(tmp_path, capsys, value):
    code = cli.main(["compile", "--stages", "2", "--mb", "4", "--offload", "auto", "--host-bandwidth", value,
                     "--time-limit", "2", "-o", str(tmp_path / "s.csv")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "--host-bandwidth" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag", ["--host-bandwidth", "--comm-bandwidth"])
def test_a_rate_in_bits_is_refused_with_the_same_rate_in_bytes(flag):
    # 50Gb/s was read as 50 GB/s: a link quoted in bits priced 8x faster than it is
    from schedc.cli.common import rate

    with pytest.raises(SchedcError, match=rf"^{flag}: '50Gb/s' reads as bits per second .* e.g. 6.25GB/s$"):
        rate("50Gb/s", flag)
    assert rate("50GB/s", flag) == rate("50gb/s", flag) == rate("5e10", flag) == 50e9
    assert rate("46.6GiB/s", flag) == pytest.approx(46.6 * 2**30)


def test_a_report_that_recomputes_nothing_is_refused_as_a_recompute_profile(tmp_path, capsys):
    # a compile report with offload but no recompute records no checkpointed costs: the refusal
    # says so, not that the file is not a profile
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--memory", "0.8p", "--offload", "auto",
                     "--host-bandwidth", "10", "--host-latency", "0", "--time-limit", "2", "--budget", "work",
                     "-o", str(tmp_path / "off.csv")]) == 0
    capsys.readouterr()
    code = cli.main(["compile", "--stages", "4", "--mb", "8", "--memory", "0.5p", "--offload", "auto",
                     "--recompute-profile", str(tmp_path / "off.json"), "--time-limit", "2",
                     "-o", str(tmp_path / "again.csv")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err
    assert "--recompute-profile" in err and "compile report that records no checkpointed costs" in err
    assert not (tmp_path / "again.csv").exists()


@pytest.mark.parametrize("flag,value", [("--host-latency", "-1"), ("--host-latency", "soon"),
                                        ("--host-memory", "lots"), ("--link-shared-by", "0")])
def test_other_hostile_link_flags_name_themselves(tmp_path, capsys, flag, value):
    code = cli.main(["compile", "--stages", "2", "--mb", "4", "--offload", "auto", flag, value,
                     "--time-limit", "2", "-o", str(tmp_path / "s.csv")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and flag in err


def test_link_flags_without_offload_auto_are_refused(tmp_path, capsys):
    assert cli.main(["compile", "--stages", "2", "--mb", "4", "--host-bandwidth", "50GB/s",
                     "-o", str(tmp_path / "s.csv")]) == 2
    assert "--offload auto" in capsys.readouterr().err


def test_the_bandwidth_takes_the_byte_sizes_of_memory(tmp_path):
    from types import SimpleNamespace

    from schedc.cli.offload_flags import link_from_args

    def link(rate):
        return link_from_args(SimpleNamespace(host_bandwidth=rate, host_latency="10us", host_memory="1TiB",
                                              link_shared_by="2"))

    assert link("50GB/s").bandwidth == 50e9
    assert link("50G/s").bandwidth == 50 * 2**30
    assert link("5e10").bandwidth == 5e10
    assert link("50GB/s").latency == pytest.approx(1e-5) and link("1").host_memory == 2**40
    assert link("1").shared_by == 2


def test_simulate_and_validate_reproduce_the_report(tmp_path, capsys):
    prof = tmp_path / "p.json"
    _flat(4).save(prof)
    csv = tmp_path / "s.csv"
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--profile", str(prof), "--memory", "0.75p",
                     "--time-limit", "4", "--offload", "auto", "--host-bandwidth", "100", "--host-latency", "0",
                     "--quiet", "-o", str(csv)]) == 0
    assert "offload:" in capsys.readouterr().out
    report = json.loads((tmp_path / "s.json").read_text())
    assert report["memory_actions"]
    # the link comes from the report's "assumes"
    assert cli.main(["simulate", str(csv), "--memory", "0.75p", "--memory-actions", str(tmp_path / "s.json"),
                     "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["makespan"] == report["predicted"]["makespan"] and row["fits_memory"]
    assert row["peak_memory"] == report["predicted"]["peak_memory_per_rank"]
    # without the actions the same CSV is over the cap
    assert cli.main(["simulate", str(csv), "--memory", "0.75p", "--check"]) == 1
    capsys.readouterr()
    assert cli.main(["validate", str(csv), "--memory-actions", str(tmp_path / "s.json")]) == 0
    assert "fits --memory 0.75p" in capsys.readouterr().out
    # a bare list works too, and a link too slow to hide the copies makes the CSV exceed its cap
    bare = tmp_path / "actions.json"
    bare.write_text(json.dumps(report["memory_actions"]))
    assert cli.main(["simulate", str(csv), "--memory", "0.75p", "--memory-actions", str(bare)]) == 0
    capsys.readouterr()
    assert cli.main(["validate", str(csv), "--memory-actions", str(tmp_path / "s.json"),
                     "--host-bandwidth", "0.01"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "exceeds --memory 0.75p" in err


def test_memory_actions_that_do_not_match_the_csv_are_refused_naming_the_file(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    assert cli.main(["baseline", "1f1b", "--stages", "4", "--mb", "8", "-o", str(csv)]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "3F1"}]))
    capsys.readouterr()
    for command in ("simulate", "validate"):
        assert cli.main([command, str(csv), "--memory-actions", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "bad.json" in err and "fetch_at" in err
    (tmp_path / "obj.json").write_text("{}")
    assert cli.main(["simulate", str(csv), "--memory-actions", str(tmp_path / "obj.json")]) == 2
    assert "no \"memory_actions\"" in capsys.readouterr().err
    assert cli.main(["simulate", str(csv), "--host-memory", "1TiB"]) == 2
    assert "--memory-actions" in capsys.readouterr().err


def test_the_api_returns_the_memory_actions_and_simulates_them():
    import schedc

    res = schedc.compile(stages=4, microbatches=8, memory="0.75p", profile=_flat(4), time_limit=4, offload="auto",
                         host_link=FAST)
    assert res.memory_actions and res.simulation.fits and res.simulation.link_busy
    sim = schedc.simulate(res.schedule, profile=res.profile, memory="0.75p", memory_actions=list(res.memory_actions),
                          host_link=FAST)
    assert sim.makespan == res.simulation.makespan and sim.fits
    assert not schedc.simulate(res.schedule, profile=res.profile, memory="0.75p").fits
    with pytest.raises(SchedcError, match="host_link"):
        schedc.compile(stages=2, microbatches=4, offload="auto", host_link=50e9, time_limit=2)
    assert math.isfinite(res.lower_bound)


def test_moves_after_i_free_what_a_deferred_w_holds_at_the_same_step():
    # ZB-H2 on 4 identical stages: rank 3 runs all its F and I first and every W last, holding
    # what each I keeps for its W (8 at its peak); moved out after each I and back for the W
    from schedc.core.memory_actions import MemoryAction

    schedule, profile, memory = make_baseline("zb-h2", 4, 8), Profile.uniform(4), MemoryLimit.parse("1p")
    row = schedule.actions(3)
    moves = [MemoryAction(3, m, "offload", row[row.index(Action(3, "W", m)) - 1], 1.0, None, "I") for m in range(7)]
    plain = simulate(schedule, profile, memory)
    moved = simulate(schedule, profile, memory, memory_actions=moves, link=FAST)
    assert plain.peak_memory[3] == 8 and moved.peak_memory[3] < 4
    assert moved.makespan == plain.makespan and all(c.after == "I" for c in moved.copies)
    # over a slow link each W waits for its fetch
    slow = simulate(schedule, profile, None, memory_actions=moves, link=SLOW)
    fetched = {c.microbatch: c.end for c in slow.copies if c.direction == "in"}
    assert all(slow.timings[Action(3, "W", m)].start >= fetched[m] for m in range(7))
    assert slow.makespan > plain.makespan


def test_the_choosers_move_bytes_after_i_where_moves_after_f_alone_cannot_fit():
    from schedc.core.memory_actions import check_memory_actions, to_json
    from schedc.solver.offload import best_offload
    from schedc.solver.offload_fractions import choose_fractions

    profile, memory = Profile.uniform(4), MemoryLimit.parse("0.8p")
    problem = Problem.build(4, 8, profile=profile, memory=memory)
    link = HostLink(bandwidth=10.0, latency=0.0)
    zb = make_baseline("zb-h1", 4, 8)
    assert not choose_fractions(zb, profile, memory, link).sim.fits  # its late ranks hold bytes for W
    name, found = best_offload([(n, make_baseline(n, 4, 8)) for n in ("1f1b", "zb-h1", "zb-h2")], problem, link)
    assert found.sim.fits and found.sim.makespan == simulate(zb, profile, None).makespan == 27
    assert any(a.after == "I" or a.refetch_at is not None for a in found.actions)
    entries = to_json(found.actions)
    check_memory_actions(entries, found.schedule)
    again = simulate(found.schedule, profile, memory, memory_actions=entries, link=link)
    assert again.fits and again.makespan == found.sim.makespan


@pytest.mark.parametrize("entry,says", [
    ({"after": "W"}, "\"after\" must be \"F\""),
    ({"after": "I", "room_for": "3F5"}, "\"room_for\" is for an offload after F"),
    ({"after": "I", "refetch_at": "3F5"}, "\"refetch_at\" is for an offload after F"),
    ({"after": "I", "fetch_at": "3F0"}, "must be an action of rank 3 between 3I0 and 3W0"),
    ({"stage": 1, "refetch_at": "1W1"}, "\"refetch_at\" '1W1' must be an action of rank 1 between 1I0 and 1W0"),
])
def test_a_bad_move_after_i_is_one_line_naming_the_entry(entry, says):
    from schedc.core.memory_actions import check_memory_actions

    with pytest.raises(SchedcError) as e:
        check_memory_actions([dict({"stage": 3, "microbatch": 0, "action": "offload"}, **entry)],
                             make_baseline("zb-h2", 4, 8), where="s.csv")
    assert says in str(e.value) and "\n" not in str(e.value) and "memory_actions[0]" in str(e.value)
