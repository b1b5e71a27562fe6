"""The offload heuristic (schedc.solver.engines.offload_heuristic): its schedules and memory actions
are valid and fit the cap; it fits where nothing fits without offload (a V whose lower stage waits
in host memory); ``--offload auto`` keeps its answer only when shorter and ends within its time
limit; ``plan --offload auto`` returns an offload plan where nothing fits without offload.

Uniform stages (F = I = W = 1, one unit of activation per microbatch, ``held_fraction=0``: nothing
held from I to W) on a link that copies a microbatch in 0.01 s, as in tests/test_offload_compile.py,
and the per-unit model of tests/test_plan_offload.py on a V; a Llama-3-8B partition whose head's I
keeps more than its F left (the net safe view, schedc.solver.graph.Graph.safe_net, which the
heuristic builds on), and random stages with rises and transients for that view's soundness.
"""

import time

import pytest
from test_plan_offload import units  # the per-unit model of the plan's offload tests

from schedc.core.costs import MemoryLimit, Profile
from schedc.core.host_link import HostLink
from schedc.core.memory_actions import check_memory_actions
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.solver.compile import compile_schedule
from schedc.solver.deadline import Deadline
from schedc.solver.engines.heuristic import heuristic_schedule
from schedc.solver.engines.offload_heuristic import offload_heuristic
from schedc.solver.offload import choose_offload, compile_schedule_offloading
from schedc.solver.problem import Problem

FAST = HostLink(bandwidth=100.0, latency=0.0)
GiB = 2 ** 30
V_COUNTS = [1, 1, 1, 1, 1, 1, 2, 2]  # the V partition whose rank 1 holds 1 + 2 GiB of one microbatch
V_CAP = "4.25GiB"  # below what one microbatch needs without offload on every partition (4.5GiB)


def _flat(n_stages):
    return Profile.uniform(n_stages, held_fraction=0.0)


def _v_problem(memory=V_CAP):
    from schedc.planning.problem import problem_for

    return problem_for(units(), V_COUNTS, "v", 4, 8, MemoryLimit.parse(memory), "makespan")


LLAMA3_8B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
             "torch_dtype": "bfloat16", "tie_word_embeddings": False}
QWEN25_7B = {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
             "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
             "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def _counted_forms(tmp_path, config: dict, seq: int = 4096) -> dict:
    """--ac auto's per-mode forms (schedc.planning.ac.mode_forms) of a Hugging Face config,
    counted per unit (schedc.model_costs.unit_profile; nothing downloaded)."""
    import json

    from schedc.core.costs import AC_MODES
    from schedc.model_costs import unit_profile
    from schedc.planning.ac import mode_forms

    path = tmp_path / f"{config['model_type']}.json"
    path.write_text(json.dumps(config))
    return mode_forms({m: unit_profile(path, seq=seq, activation_checkpoint=m) for m in AC_MODES})


@pytest.mark.parametrize("n_stages,n_mb,memory", [(4, 8, "0.75p"), (4, 12, "0.75p"), (6, 12, "0.6p")])
def test_its_schedules_and_memory_actions_are_valid_and_fit_the_cap(n_stages, n_mb, memory):
    problem = Problem.build(n_stages, n_mb, profile=_flat(n_stages), memory=memory)
    built = offload_heuristic(problem, FAST)
    assert built is not None and built.actions
    checked = check_memory_actions(list(built.actions), built.schedule)  # fetch points on the CSV's ranks
    assert len(checked) == len(built.actions)
    sim = simulate(built.schedule, problem.profile, problem.memory, memory_actions=built.actions, link=FAST)
    assert sim.fits and all(p <= c * (1 + 1e-9) for p, c in zip(sim.peak_memory, sim.memory_limit))
    assert sim.makespan == pytest.approx(built.sim.makespan)
    assert not simulate(built.schedule, problem.profile, problem.memory).fits  # the offloads are what fit it
    # shorter than the list heuristic's own schedule under the cap: offload bought time
    plain = heuristic_schedule(problem, time_budget=0.5)
    assert built.sim.makespan < simulate(plain, problem.profile, problem.memory).makespan - 1e-9


def test_schedc_validate_takes_its_csv_and_memory_actions(tmp_path, capsys):
    import json

    from schedc import cli
    from schedc.io.csvio import write_csv

    problem = Problem.build(4, 8, profile=_flat(4), memory="0.75p")
    built = offload_heuristic(problem, FAST)
    assert built is not None
    write_csv(built.schedule, tmp_path / "s.csv")
    (tmp_path / "a.json").write_text(json.dumps([a.to_json() for a in built.actions]))
    assert cli.main(["validate", str(tmp_path / "s.csv"), "--stages", "4", "--mb", "8", "--memory-actions",
                     str(tmp_path / "a.json"), "--host-bandwidth", "100", "--host-latency", "0"]) == 0
    assert f"{len(built.actions)} memory action(s) match the CSV" in capsys.readouterr().out


def test_a_link_too_slow_for_any_copy_gives_nothing():
    problem = Problem.build(4, 8, profile=_flat(4), memory="0.75p")
    assert offload_heuristic(problem, HostLink(bandwidth=0.01, latency=0.0)) is None


def test_on_a_v_it_fits_where_one_microbatch_does_not_fit_without_offload():
    from schedc.planning.problem import holds_one_microbatch

    problem = _v_problem()
    assert not holds_one_microbatch(problem)
    with pytest.raises(SchedcError, match="smallest"):
        compile_schedule(problem.n_stages, problem.n_microbatches, profile=problem.given_profile,
                         n_ranks=4, placement=problem.placement, memory=V_CAP, time_limit=2)
    built = offload_heuristic(problem, HostLink())
    assert built is not None and built.sim.fits
    again = simulate(built.schedule, problem.profile, problem.memory, memory_actions=list(built.actions),
                     link=HostLink())
    assert again.fits and again.makespan == pytest.approx(built.sim.makespan)


@pytest.mark.parametrize("n_stages,n_mb,copy", [(4, 8, 1.0), (4, 8, 2.0), (4, 16, 2.0), (8, 16, 1.0)])
def test_where_copies_are_slower_than_forwards_a_forward_waits_for_one_and_reaches_the_uncapped_step(
        n_stages, n_mb, copy):
    # a copy out takes one or two forwards: a rank's warm-up forwards cannot wait for room
    # without waiting for copies (room_for); without that wait nothing fitted on 4 stages, or 32
    # of 27 at 8 microbatches; on 8 a copy that ended as its F started was counted after the F's
    # rise by the simulator, one microbatch over the cap, and nothing fitted
    problem = Problem.build(n_stages, n_mb, profile=_flat(n_stages), memory="0.75p")
    link = HostLink(bandwidth=problem.profile.stages[0].activation_bytes / copy, latency=0.0)
    built = offload_heuristic(problem, link)
    assert built is not None and built.sim.fits
    assert any(a.room_for is not None for a in built.actions)
    again = simulate(built.schedule, problem.profile, problem.memory, memory_actions=list(built.actions), link=link)
    assert again.fits and again.makespan == pytest.approx(built.sim.makespan)
    uncapped = compile_schedule(n_stages, n_mb, profile=_flat(n_stages), memory="none", time_limit=5)
    assert uncapped.status.value == "optimal"
    assert built.sim.makespan == pytest.approx(uncapped.value)


def test_on_a_llama_partition_whose_head_rises_at_i_it_fits_where_the_safe_view_has_no_room(tmp_path):
    from schedc.planning.ac import spec_units
    from schedc.planning.problem import problem_for
    from schedc.solver.graph import graph_of

    # Llama-3-8B at seq 4096 on 8 ranks x 32 microbatches under 28 GiB, the partition --ac
    # auto's per-stage program gives when each stage holds at most 3 microbatches (offload
    # moving the rest): its last stage (two layers, the head, the loss) keeps 2.0 GiB after F
    # and 3.25 from its I on; safe() counts that rise twice and leaves 3.17 GiB, no room for one
    forms = _counted_forms(tmp_path, LLAMA3_8B)
    counts = (4, 4, 4, 5, 4, 4, 5, 4)
    specs = (("light", 3), ("light", 1), ("light", 1), ("selective+full", 1), ("light", 1), ("light", 1),
             ("light+selective", 2), ("none", 0))
    problem = problem_for(spec_units(forms, counts, specs), list(counts), "loop", 8, 32, MemoryLimit.parse("28GiB"),
                          "makespan")
    g = graph_of(problem)
    assert g.safe().room[7] < g.safe().act[7] <= g.safe_net().room[7]
    link = HostLink(bandwidth=50e9)
    built = offload_heuristic(problem, link)
    assert built is not None and built.sim.fits and built.actions
    # its checkpointed stages (1 to 6) run B, as torch runs them; every fetch names a CSV action
    assert {a.kind for _, a in built.schedule.all_actions() if 0 < a.stage < 7} == {"F", "B"}
    assert len(check_memory_actions(list(built.actions), built.schedule)) == len(built.actions)
    again = simulate(built.schedule, problem.profile, problem.memory, memory_actions=list(built.actions), link=link)
    assert again.fits and again.makespan == pytest.approx(built.sim.makespan)


@pytest.mark.parametrize("seed", range(6))
def test_every_list_schedule_built_on_the_net_safe_view_fits_under_the_simulator(seed):
    import random

    from schedc.core.costs import StageCost
    from schedc.solver.engines.heuristic import ListScheduler, list_rules, to_schedule
    from schedc.solver.graph import graph_of

    # the view's accounting checks F's only; every construction on it must fit under the simulator's
    # exact rule (rises at I, transients while actions run), or the heuristic would build orders
    # it then throws away
    rng = random.Random(seed)
    stages = [StageCost(forward=rng.uniform(0.5, 1.5), backward_input=rng.uniform(0.5, 1.5),
                        backward_weight=rng.uniform(0.0, 1.5), activation_bytes=(act := rng.uniform(0.5, 1.5)) * GiB,
                        weight_grad_bytes=act * rng.uniform(0.2, 2.0) * GiB, static_bytes=rng.uniform(0.5, 1.5) * GiB,
                        transient_bytes={k: rng.uniform(0.0, 0.6) * GiB for k in ("F", "I", "W", "B")})
              for _ in range(4)]
    problem = Problem.build(4, 8, profile=Profile(stages=stages, comm=0.05), memory="6GiB")
    view = graph_of(problem).safe_net()
    built = 0
    for rule in list_rules(view, "makespan"):
        sched = ListScheduler(view, rule)
        orders = sched.run()
        if orders is None:
            continue
        built += 1
        sim = simulate(to_schedule(view, orders, "net", {}), problem.profile, problem.memory)
        assert sim.fits, (rule.describe(), [p / GiB for p in sim.peak_memory])
    assert built > 0


def test_on_checkpointed_stages_it_runs_whole_backwards_and_its_fetches_name_actions_of_the_csv():
    from schedc.planning.ac import checkpointed_form

    # every stage checkpointed (W costs nothing, the bytes held for it are its F's): torch runs
    # one B, so no I or W of them may reach the CSV, nor a fetch point name one (the list
    # scheduler runs them as I and a W that costs nothing)
    problem = Problem.build(4, 8, profile=checkpointed_form(_flat(4)), memory="0.75p")
    link = HostLink(bandwidth=problem.profile.stages[0].activation_bytes / 2.0, latency=0.0)
    built = offload_heuristic(problem, link)
    assert built is not None and built.sim.fits and built.actions
    # stage 0 is torch's exception: its I runs nothing and its W the whole backward
    kinds = {a.kind for _, a in built.schedule.all_actions() if a.stage > 0}
    assert kinds == {"F", "B"}
    checked = check_memory_actions(list(built.actions), built.schedule)
    assert len(checked) == len(built.actions)


def test_it_stops_at_its_deadline():
    problem = Problem.build(8, 32, profile=_flat(8), memory="0.6p")
    assert offload_heuristic(problem, FAST, Deadline.after(0.0)) is None


def test_offload_auto_takes_the_heuristic_only_when_shorter_and_never_exceeds_none():
    for memory in ("0.6p",):
        none = compile_schedule(6, 12, profile=_flat(6), memory=memory, time_limit=2)
        auto = compile_schedule_offloading(6, 12, profile=_flat(6), memory=memory, time_limit=3, link=FAST)
        assert auto.sim.fits and auto.value <= none.value + 1e-9
        again = simulate(auto.schedule, auto.problem.profile, auto.problem.memory,
                         memory_actions=auto.report["memory_actions"], link=FAST)
        assert again.fits and again.makespan == pytest.approx(auto.value)


def test_the_chooser_stops_at_its_deadline():
    from schedc.core.baselines import make_baseline

    schedule = make_baseline("zb-h1", n_stages=8, n_microbatches=32)
    t0 = time.monotonic()
    choice = choose_offload(schedule, _flat(8), MemoryLimit.parse("0.6p"), FAST, deadline=Deadline.after(0.0))
    assert time.monotonic() - t0 < 5.0
    assert not choice.fits and "time limit" in choice.why and choice.actions == ()


@pytest.mark.parametrize("budget", ["time", "work"])
def test_compile_offload_auto_ends_within_its_time_limit(budget):
    # 8 stages x 32 microbatches: the chooser alone, with no deadline, runs for many seconds here
    limit = 3.0
    t0 = time.monotonic()
    res = compile_schedule_offloading(8, 32, profile=_flat(8), memory="0.6p", time_limit=limit, link=FAST,
                                      budget=budget)
    took = time.monotonic() - t0
    assert res.sim.fits
    if budget == "time":
        assert took < 2 * limit + 5  # a busy 2-core machine: generous
    else:
        assert res.report["work_spent"] <= limit * 1.05 or res.report["cut_by_wall_clock"]


def test_plan_offload_auto_returns_an_offload_plan_where_nothing_fits_without_it():
    from schedc.planning.ac import plan_mode
    from schedc.planning.offload import plan_with_offload

    kw = dict(ranks=4, microbatches=8, memory=V_CAP, placement="v", time_limit=3, budget="work")
    with pytest.raises(SchedcError, match="memory"):
        plan_mode(units(), None, None, **kw)
    res = plan_with_offload({None: units()}, HostLink(), **kw)
    summary = res.offload
    assert summary["chosen"] and summary["row"] == "offload only" and summary["step_without_offload"] is None
    rows = {r["row"]: r for r in summary["rows"]}
    assert not rows["nothing"]["fits"] and rows["offload only"]["step"] == pytest.approx(res.value)
    actions = res.report["memory_actions"]
    assert actions and len(check_memory_actions(actions, res.schedule)) == len(actions)
    sim = simulate(res.schedule, res.profile, MemoryLimit.parse(V_CAP), memory_actions=actions, link=HostLink())
    assert sim.fits and sim.makespan == pytest.approx(res.value)
    assert res.bound <= res.value


def test_plan_offload_auto_still_refuses_a_cap_that_offload_cannot_fit():
    from schedc.planning.offload import plan_with_offload

    with pytest.raises(SchedcError, match="memory"):
        plan_with_offload({None: units()}, HostLink(), ranks=4, microbatches=8, memory="3GiB", placement="v",
                          time_limit=2, budget="work")


def test_for_stages_sized_for_offload_the_rules_with_1f1bs_warmup_come_first():
    # stages sized to hold fewer microbatches than 1F1B's (the rest offloaded) are built best by
    # 1F1B's own warm-up, which the usual order, for stages sized without offload, tries last
    from schedc.solver.engines.heuristic import one_f_one_b_warmup
    from schedc.solver.engines.offload_heuristic import offload_rules
    from schedc.solver.graph import graph_of

    g = graph_of(Problem(_flat(4), (0, 1, 2, 3), 8, MemoryLimit.parse("0.75p")))
    usual, sized = offload_rules(g, "makespan"), offload_rules(g, "makespan", one_f_one_b_first=True)
    assert sorted(map(repr, usual)) == sorted(map(repr, sized))  # the same rules, in another order
    base = one_f_one_b_warmup(g)
    at_1f1b = [list(r.warmup) == base for r in sized]
    assert at_1f1b[0] and not all(at_1f1b) and at_1f1b == sorted(at_1f1b, reverse=True)
    assert list(usual[0].warmup) != base


def test_on_qwen_stages_sized_for_offload_it_beats_the_same_program_sized_for_1f1b(tmp_path):
    from schedc.planning.ac import heuristic_step, stage_candidates
    from schedc.planning.offload import offload_sized_candidates
    from schedc.planning.problem import problem_for
    from schedc.solver.deadline import counting_work

    # Qwen2.5-7B at seq 4096 on 8 ranks x 32 microbatches under 28 GiB, where --ac auto's
    # program sizes each stage for 1F1B's microbatches in flight and checkpoints the early stages
    # most; sized to hold three on the device, the rest offloaded over 50 GB/s, the heuristic
    # (1F1B's warm-up first) gives a shorter step than the list heuristic on the 1F1B sizing
    forms = _counted_forms(tmp_path, QWEN25_7B)
    cap = MemoryLimit.parse("28GiB")
    [(_, counts, specs)] = stage_candidates(forms, "loop", 8, 32, cap.value, depths=(1.0,))
    with counting_work(30):
        sized_for_1f1b = heuristic_step(forms, counts, specs, "loop", 8, 32, cap, "makespan")[0]
    form, counts, modes, _ = offload_sized_candidates(forms, 8, 32, cap.value)[0]
    problem = problem_for(form, counts, "loop", 8, 32, cap, "makespan")
    link = HostLink(bandwidth=50e9)
    with counting_work(30):
        built = offload_heuristic(problem, link, Deadline.after(3), one_f_one_b_first=True)
    assert built is not None and built.sim.fits and built.actions
    assert built.sim.makespan < 0.97 * sized_for_1f1b
    assert len(check_memory_actions(list(built.actions), built.schedule)) == len(built.actions)
