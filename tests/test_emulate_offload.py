"""schedc emulate with memory actions: each rank's copy streams sleep their transfers on threads
of their own beside torch's runtime, so a slow link lengthens the emulated step by about what the
simulator predicts; a plan the emulation cannot run is refused before any rank starts."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from schedc import cli  # noqa: E402
from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.core.costs import Profile  # noqa: E402
from schedc.core.host_link import HostLink  # noqa: E402
from schedc.core.ir import Action  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.runtime.emulate import emulate  # noqa: E402

SCALE = 0.02  # 20 ms per profile unit
# a uniform stage holds one byte per microbatch: at 1/3 B/s a copy takes 3 units (60 ms), longer
# than the two actions between stage 0's F1 and B1, so the fetches show in the step
SLOW = HostLink(bandwidth=1 / 3, latency=0.0)
OFFLOADS = [{"stage": 0, "microbatch": m, "action": "offload"} for m in (0, 1)]


def test_a_slow_link_lengthens_the_emulated_step_by_about_what_simulate_says(tmp_path):
    path = tmp_path / "1f1b.csv"
    write_csv(make_baseline("1f1b", 2, 4), path)
    profile = Profile.uniform(2)
    kept, = emulate([path], profile, scale=SCALE, steps=3, timeout=240)
    moved, = emulate([path], profile, scale=SCALE, steps=3, timeout=240, memory_actions=OFFLOADS, link=SLOW)
    assert len(moved.prediction.copies) == 4 and not kept.prediction.copies
    predicted = moved.predicted_step - kept.predicted_step
    assert predicted > 4 * SCALE  # the copies do not hide: the step is longer by more than 4 units
    measured = moved.measured_step - kept.measured_step
    # a loaded host wakes sleepers late in both runs; what the copies add stays near the prediction
    assert 0.6 * predicted <= measured <= 1.6 * predicted
    assert moved.measured_step >= 0.98 * moved.plain_prediction.makespan  # nothing ends before its sleeps


def test_copies_that_hide_cost_the_step_nothing(tmp_path):
    path = tmp_path / "1f1b.csv"
    write_csv(make_baseline("1f1b", 2, 4), path)
    hidden = HostLink(bandwidth=1.0, latency=0.0)  # 1 unit a copy: each ends before its backward is due
    run, = emulate([path], Profile.uniform(2), scale=SCALE, steps=3, timeout=240, memory_actions=OFFLOADS,
                   link=hidden)
    plain, = emulate([path], Profile.uniform(2), scale=SCALE, steps=3, timeout=240)
    # the simulator on the profile's own costs (the predicted step adds each run's measured
    # overhead, which a loaded host moves from run to run): the copies hide
    assert run.plain_prediction.makespan == pytest.approx(plain.plain_prediction.makespan, rel=1e-9)
    assert run.predicted_step == pytest.approx(plain.predicted_step, rel=0.05)
    # copies slept on the compute thread would add their 4 units; on their own threads they add none
    assert run.measured_step - plain.measured_step < 2 * SCALE


def test_a_plan_the_emulation_cannot_run_is_refused_before_any_rank_starts(tmp_path):
    path = tmp_path / "1f1b.csv"
    write_csv(make_baseline("1f1b", 2, 4), path)
    with pytest.raises(SchedcError, match="recomputed; the emulation"):
        emulate([path], Profile.uniform(2), scale=SCALE, timeout=30,
                memory_actions=[{"stage": 1, "microbatch": 0, "action": "recompute"}])
    with pytest.raises(SchedcError, match=r"fetch_at.*runs on rank 1"):
        emulate([path], Profile.uniform(2), scale=SCALE, timeout=30,
                memory_actions=[{"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "1F0"}])
    with pytest.raises(SchedcError, match="link must be"):
        emulate([path], Profile.uniform(2), scale=SCALE, timeout=30, memory_actions=OFFLOADS, link="50GB/s")


def test_cli_refuses_link_flags_without_memory_actions_and_names_the_file(tmp_path, capsys):
    path = tmp_path / "1f1b.csv"
    write_csv(make_baseline("1f1b", 2, 4), path)
    assert cli.main(["emulate", str(path), "--host-bandwidth", "1GB/s"]) != 0
    assert "give --memory-actions" in capsys.readouterr().err
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"memory_actions": [{"stage": 5, "microbatch": 0, "action": "offload"}]}))
    assert cli.main(["emulate", str(path), "--memory-actions", str(bad)]) != 0
    err = capsys.readouterr().err
    assert "plan.json (against" in err and "stages 0..1" in err and len(err.strip().splitlines()) == 1


def test_a_forward_waits_for_the_copy_its_room_for_names_and_a_fraction_copies_its_share(tmp_path):
    # half of microbatch 0 moves at 1/3 B/s: 1.5 units; 0F1 waits for that copy out (from 1 to
    # 2.5), which the emulated rank sleeps as the simulator predicts it
    path = tmp_path / "1f1b.csv"
    write_csv(make_baseline("1f1b", 2, 4), path)
    actions = [{"stage": 0, "microbatch": 0, "action": "offload", "fraction": 0.5, "room_for": "0F1"}]
    run, = emulate([path], Profile.uniform(2), scale=SCALE, steps=3, timeout=240, memory_actions=actions, link=SLOW)
    out = next(c for c in run.prediction.copies if c.direction == "out")
    assert out.nbytes == 0.5 and out.end - out.start == pytest.approx(1.5 * SCALE)
    assert run.prediction.timings[Action(0, "F", 1)].start == pytest.approx(out.end)
    assert run.predicted_step > run.plain_prediction.makespan
    # the emulated rank sleeps the wait too: the step is no shorter than the prediction (a loaded
    # host wakes sleepers late, so only an upper margin)
    assert 0.97 * run.predicted_step <= run.measured_step <= 1.5 * run.predicted_step


def test_moves_after_i_sleep_between_the_i_and_the_w_that_waits_for_them(tmp_path):
    # ZB-H1's rank 1 runs 1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 ...: stage 1's microbatches 0 and 1 move
    # out after their I and come back for their W, which waits for 3-unit fetches
    path = tmp_path / "zb-h1.csv"
    write_csv(make_baseline("zb-h1", 2, 4), path)
    profile = Profile.uniform(2)
    after_i = [{"stage": 1, "microbatch": m, "action": "offload", "after": "I"} for m in (0, 1)]
    kept, = emulate([path], profile, scale=SCALE, steps=3, timeout=240)
    moved, = emulate([path], profile, scale=SCALE, steps=3, timeout=240, memory_actions=after_i, link=SLOW)
    copies = moved.prediction.copies
    assert len(copies) == 4 and all(c.after == "I" for c in copies)
    predicted = moved.predicted_step - kept.predicted_step
    assert predicted > 2 * SCALE  # the W's wait for their fetches
    measured = moved.measured_step - kept.measured_step
    assert 0.6 * predicted <= measured <= 1.6 * predicted
