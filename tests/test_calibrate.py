"""Closed loop: measured per-action timelines vs the simulator, and the refined profile."""

import math

import pytest

torch = pytest.importorskip("torch")

from schedc import cli
from schedc.core import baselines
from schedc.core.costs import Profile, StageCost  # noqa: E402
from schedc.core.simulate import simulate  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.io import csvio  # noqa: E402
from schedc.runtime.calibrate import calibrate, compare, format_calibration  # noqa: E402
from schedc.runtime.models import GPTConfig  # noqa: E402
from schedc.runtime.profiling.spans import timed_actions  # noqa: E402

TINY = GPTConfig(vocab_size=32, hidden=16, layers=2, heads=2, seq_len=8)


def _profile(comm=0.002):
    stages = [
        StageCost(forward=0.010, backward_input=0.012, backward_weight=0.008, activation_bytes=100, weight_grad_bytes=50),
        StageCost(forward=0.015, backward_input=0.011, backward_weight=0.009, activation_bytes=100, weight_grad_bytes=50),
    ]
    return Profile(stages=stages, comm=[comm], microbatch_size=2)


def _fake_results(schedule, profile, origin=1000.0):
    """What rank_main would return if the run went exactly as simulated (waits where ranks idle)."""
    sim = simulate(schedule, profile)
    results = []
    for r in range(schedule.n_ranks):
        events, free = [], 0.0
        for a in schedule.actions(r):
            t = sim.timings[a]
            events.append((f"PP:{a}", origin + free, t.start - free, origin + t.end))
            free = t.end
            if a.kind == "F" and a.stage == 0:  # torch's lowering: a SEND after the producer (no work)
                events.append((f"PP:{a.stage}SEND_F{a.microbatch}", origin + free, 0.0, origin + free))
        results.append({"rank": r, "steps": [{"start": origin, "end": origin + free, "events": events}]})
    return sim, results


def test_compare_is_exact_when_the_run_matches_the_simulation():
    schedule = baselines.make_baseline("zb-h1", 2, 4)
    profile = _profile()
    sim, results = _fake_results(schedule, profile)
    cal = compare("zb.csv", schedule, profile, results)
    assert cal.predicted_step == pytest.approx(sim.makespan)
    assert cal.measured_step == pytest.approx(sim.makespan)
    assert abs(cal.step_error) < 1e-9 and cal.start_error < 1e-9
    for r in cal.ranks:
        assert abs(r.finish_error) < 1e-9 and abs(r.busy_error) < 1e-9
    # the refined profile recovers the costs as torch runs them (stage 0: no I, W = I + W), marked
    # so that they are not converted again, and the communication delay of waited-for transfers
    assert cal.refined.runtime == "torch"
    for got, want in zip(cal.refined.stages, profile.executed("torch").stages):
        assert got.forward == pytest.approx(want.forward)
        assert got.backward_input == pytest.approx(want.backward_input, abs=1e-8)
        assert got.backward_weight == pytest.approx(want.backward_weight)
    assert cal.refined.comm == pytest.approx([0.002])
    assert abs(cal.refined_error) < 1e-7  # stage 0's empty I is stored as 1e-9 s (a profile's I is > 0)
    assert "error +0.0%" in format_calibration(cal)


def test_measured_slower_run_shows_a_negative_error_and_a_refined_profile():
    schedule = baselines.make_baseline("1f1b", 2, 4)
    slow = _profile(comm=0.0).model_copy(update={"stages": [
        s.model_copy(update={"forward": 2 * s.forward}) for s in _profile().stages]})
    _, results = _fake_results(schedule, slow)
    cal = compare("1f1b.csv", schedule, _profile(comm=0.0), results)
    assert cal.step_error < -0.1  # the profile underestimates what was measured
    # B actions are split back into I and W in the profile's ratio
    s0 = cal.refined.stages[0]
    assert s0.forward == pytest.approx(0.020)
    assert s0.backward_input + s0.backward_weight == pytest.approx(0.020)
    assert s0.backward_input / s0.backward_weight == pytest.approx(0.012 / 0.008)
    Profile.model_validate(cal.refined.model_dump())


def test_missing_action_timings_are_a_clear_error():
    schedule = baselines.make_baseline("1f1b", 2, 2)
    _, results = _fake_results(schedule, _profile())
    results[1]["steps"][0]["events"] = results[1]["steps"][0]["events"][:-1]
    with pytest.raises(SchedcError, match="no timing for 1 action"):
        compare("x.csv", schedule, _profile(), results)


def test_timed_actions_restores_torch():
    from torch.distributed.pipelining import schedules

    rf, wait = schedules.record_function, schedules._wait_batch_p2p
    with timed_actions() as rec:
        assert schedules.record_function is rec
        with rec("PP:0F0"):
            pass
        with rec("something else"):  # not ours: torch's own record_function
            pass
    assert schedules.record_function is rf and schedules._wait_batch_p2p is wait
    assert [e[0] for e in rec.events] == ["PP:0F0"]


def test_two_ranks_gloo_closed_loop(tmp_path):
    """A real run: 2 ranks on gloo, 1F1B; numbers are finite (no timing assertions)."""
    csv = tmp_path / "1f1b.csv"
    csvio.write_csv(baselines.make_baseline("1f1b", 2, 4), csv)
    from schedc.runtime.profiling.gpt import profile_gpt

    profile = profile_gpt(TINY, 2, 2, warmup=0, repeats=1)
    cal = calibrate(csv, profile, TINY, 2, steps=1, warmup_steps=1, threads=1, timeout=240, in_situ=True)
    d = cal.to_dict()
    for key in ("predicted_step", "measured_step", "step_error", "refined_step", "in_situ_step"):
        assert math.isfinite(d[key]), key
    assert d["measured_step"] > 0 and len(d["ranks"]) == 2
    assert all(math.isfinite(r["measured_busy"]) and r["measured_busy"] > 0 for r in d["ranks"])
    assert cal.refined.n_stages == 2 and cal.in_situ.n_stages == 2
    out = tmp_path / "refined.json"
    cal.refined.save(out)
    assert Profile.load(out) == cal.refined


def test_cli_calibrate_checks_before_launching(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    csvio.write_csv(baselines.make_baseline("1f1b", 2, 4), csv)
    prof = tmp_path / "p.json"
    Profile.uniform(4, 1, 1, 1).model_copy(update={"microbatch_size": 2}).save(prof)
    assert cli.main(["calibrate", str(csv), "--profile", str(prof)]) == 2
    assert "the schedule has 2 stages but the profile describes 4" in capsys.readouterr().err
    Profile.uniform(2, 1, 1, 1).save(prof)
    assert cli.main(["calibrate", str(csv), "--profile", str(prof)]) == 2
    assert "give --mbs" in capsys.readouterr().err
    from schedc.runtime.profiling.gpt import gpt_label

    Profile.uniform(2, 1, 1, 1).model_copy(update={"microbatch_size": 2, "model": gpt_label(TINY, 2)}).save(prof)
    assert cli.main(["calibrate", str(csv), "--profile", str(prof), "--hidden", "64"]) == 2
    assert "pass the --layers/--hidden" in capsys.readouterr().err


def test_a_bad_run_setting_is_named_as_each_door_takes_it(tmp_path, monkeypatch, capsys):
    from schedc.runtime import launch as launcher

    csvio.write_csv(baselines.make_baseline("1f1b", 2, 4), tmp_path / "s.csv")
    prof = Profile.uniform(2, 1, 1, 1).model_copy(update={"microbatch_size": 2})
    prof.save(tmp_path / "p.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("ranks were started"))
    for kwargs, argv, python, command in (
            ({"steps": 0}, ["--steps", "0"], "calibrate: need steps >= 1, got 0", "error: --steps must be between 1 and"),
            ({"n_ranks": 3}, ["--nproc", "3"], "s.csv: the CSV has 2 rows (ranks); n_ranks is 3", "; --nproc is 3"),
            ({"device": "tpu9"}, ["--device", "tpu9"], "device: 'tpu9' is not a device torch knows",
             "--device: 'tpu9' is not a device torch knows")):
        with pytest.raises(SchedcError) as e:
            calibrate("s.csv", prof, TINY, 2, **kwargs)
        assert str(e.value).startswith(python) and "--" not in str(e.value)
        assert cli.main(["calibrate", "s.csv", "--profile", "p.json", *argv]) == 2
        assert command in capsys.readouterr().err


def test_an_overlap_cell_is_timed_once_and_shared_among_its_parts():
    # torch's runtime labels an OVERLAP_F_B cell once ("PP:(1F1;0B0)OVERLAP_F_B") and runs its parts
    # back to back; each part gets its share of the cell's interval, in cell order
    from schedc.core.ir import Action
    from schedc.io.csvio import parse_csv_text
    from schedc.runtime.calibrate import parse_steps

    schedule = parse_csv_text("0F0,0F1,0B1,0B0\n1F0,(1F1;1B0)OVERLAP_F_B,1B1\n", "overlap.csv")
    events = {0: [("PP:0F0", 0.0, 0.0, 1.0), ("PP:0F1", 1.0, 0.0, 2.0), ("PP:0B1", 5.0, 0.0, 7.0),
                  ("PP:0B0", 7.0, 0.0, 9.0)],
              1: [("PP:1F0", 1.0, 0.0, 2.0), ("PP:(1F1;1B0)OVERLAP_F_B", 2.0, 0.5, 5.5), ("PP:1B1", 5.5, 0.0, 7.5)]}
    results = [{"rank": r, "steps": [{"start": 0.0, "end": 9.0, "events": ev}]} for r, ev in events.items()]
    measured, = parse_steps(results, schedule, weight=lambda a: 1.0 if a.kind == "F" else 2.0)
    assert measured.actions[Action(1, "F", 1)] == (1, 2.5, 3.5, 0.5, 1.0)  # a third of the 3 s the cell ran
    assert measured.actions[Action(1, "B", 0)] == (1, 3.5, 5.5, 0.0, 2.0)
    evenly, = parse_steps(results, schedule)
    assert evenly.actions[Action(1, "F", 1)][4] == evenly.actions[Action(1, "B", 0)][4] == 1.5


def test_torch_215_wait_actions_count_as_waiting_not_compute():
    # torch 2.15 lowers WAIT_SEND_F / WAIT_SEND_B / WAIT_REDUCE_GRAD into actions of their own:
    # their time is the rank waiting; the compute actions' work and the refined profile ignore it
    from schedc.core.ir import Action
    from schedc.io.csvio import parse_csv_text
    from schedc.runtime.calibrate import parse_steps

    schedule = parse_csv_text("0F0,0B0\n1F0,1B0\n", "w.csv")
    events = {0: [("PP:0F0", 0.0, 0.0, 1.0), ("PP:0SEND_F0", 1.0, 0.0, 1.0), ("PP:0WAIT_SEND_F0", 1.0, 0.0, 3.0),
                  ("PP:0B0", 4.0, 0.0, 6.0), ("PP:0WAIT_REDUCE_GRAD", 6.0, 0.0, 6.5)],
              1: [("PP:1F0", 1.0, 0.0, 2.0), ("PP:1B0", 2.0, 0.0, 4.0), ("PP:1WAIT_SEND_B0", 4.0, 0.0, 4.25)]}
    results = [{"rank": r, "steps": [{"start": 0.0, "end": 6.5, "events": ev}]} for r, ev in events.items()]
    measured, = parse_steps(results, schedule)
    assert measured.waiting == [2.5, 0.25]
    assert measured.actions[Action(0, "F", 0)][4] == 1.0 and measured.actions[Action(0, "B", 0)][4] == 2.0
    profile = Profile.uniform(2, 1, 1, 1)
    cal = compare("w.csv", schedule, profile, results)
    assert [r.measured_waiting for r in cal.ranks] == [2.5, 0.25]
    assert [r.measured_busy for r in cal.ranks] == [3.0, 3.0]
    assert "WAIT_REDUCE_GRAD actions (not compute): rank 0 2500.0ms, rank 1 250.0ms" in format_calibration(cal)


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 1e308, 0, -1.0, "60", True])
def test_calibrate_names_a_timeout_that_is_no_deadline_before_any_rank(tmp_path, monkeypatch, timeout):
    # 1e308 overflowed the ranks' timers ("Python int too large to convert to C int")
    from schedc.runtime import calibrate as runtime_calibrate

    monkeypatch.setattr(runtime_calibrate, "launch", lambda *a, **k: pytest.fail("ranks were started"))
    csvio.write_csv(baselines.make_baseline("1f1b", 2, 4), tmp_path / "s.csv")
    with pytest.raises(SchedcError, match=r"^calibrate: timeout must be a finite number of seconds > 0 and at most "
                                          r"604800 \(a week\), got "):
        calibrate(tmp_path / "s.csv", Profile.uniform(2), GPTConfig(), 2, timeout=timeout)
