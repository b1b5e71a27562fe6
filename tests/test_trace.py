"""Chrome trace export: loads as JSON, one process per rank, one complete slice per action at the
simulator's times, memory as a counter track."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from conftest import gpipe_order

from schedc import cli
from schedc.core.costs import MemoryLimit, Profile, StageCost
from schedc.core.ir import Action, Overlap, Schedule, v_placement
from schedc.core.simulate import simulate
from schedc.errors import SchedcError
from schedc.io import csvio
from schedc.show.trace import trace_events, write_trace


def n_actions_of(schedule: Schedule) -> int:
    return sum(len(schedule.actions(r)) for r in range(schedule.n_ranks))


def gpipe(placement, n_mb, split=True) -> Schedule:
    return gpipe_order(placement, n_mb, split, name="gpipe-v")


def uneven_profile(n_stages: int) -> Profile:
    stages = [StageCost(forward=0.001 * (s + 1), backward_input=0.002, backward_weight=0.0015,
                        activation_bytes=2**20 * (s + 1), weight_grad_bytes=2**19, static_bytes=2**22)
              for s in range(n_stages)]
    return Profile(stages=stages, comm=0.0003)


@pytest.mark.parametrize("split", [True, False])
def test_one_slice_per_action_at_the_simulators_times(tmp_path, split):
    schedule = gpipe(v_placement(8, 4), 4, split=split)
    profile = uneven_profile(8)
    path = tmp_path / "t.json"
    write_trace(schedule, profile, path, MemoryLimit.parse("2p"))
    trace = json.loads(path.read_text())
    res = simulate(schedule, profile)

    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(res.timings)
    seen = set()
    for e in slices:
        a = Action(e["args"]["stage"], e["args"]["kind"], e["args"]["microbatch"])
        seen.add(a)
        t = res.timings[a]
        assert e["name"] == str(a)
        assert e["pid"] == t.rank == schedule.placement[a.stage]
        assert e["ts"] == pytest.approx(t.start * 1e6, abs=1e-3)
        assert e["dur"] == pytest.approx((t.end - t.start) * 1e6, abs=1e-3)
    assert seen == set(res.timings)


def test_one_named_process_per_rank_and_a_memory_counter_per_rank():
    schedule = gpipe(v_placement(8, 4), 3)
    profile = uneven_profile(8)
    trace = trace_events(schedule, profile, MemoryLimit.parse("1p"))
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "rank 0 (stages 0, 7)", 1: "rank 1 (stages 1, 6)",
                     2: "rank 2 (stages 2, 5)", 3: "rank 3 (stages 3, 4)"}

    res = simulate(schedule, profile)
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"memory"}
    for r in range(4):
        mine = [e for e in counters if e["pid"] == r]
        ts = [e["ts"] for e in mine]
        assert ts == sorted(ts) and len(set(ts)) == len(ts)
        at_zero = [held for t, held in res.memory_curve[r] if t == 0][-1]  # static + what F at 0 holds
        assert mine[0]["ts"] == 0 and mine[0]["args"]["held"] == at_zero
        assert max(e["args"]["held"] for e in mine) == pytest.approx(res.peak_memory[r])
        assert mine[-1]["args"]["held"] == pytest.approx(res.memory_curve[r][-1][1])
    meta = trace["otherData"]
    assert meta["ranks"] == 4 and meta["memory_limit"] == "1p"
    assert meta["makespan_s"] == pytest.approx(res.makespan)


def test_overlapped_cells_become_one_slice_per_part():
    # rank 0 runs (0F1;0B0) as one torch OVERLAP_F_B cell.
    rows = [[Action(0, "F", 0), Overlap((Action(0, "F", 1), Action(0, "B", 0))), Action(0, "B", 1)]]
    schedule = Schedule(rows=rows, placement=(0,), n_microbatches=2)
    trace = trace_events(schedule, Profile.uniform(1))
    kinds = Counter(e["args"]["kind"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert kinds == {"F": 2, "B": 2}


def test_cli_trace(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    schedule = gpipe(v_placement(4, 2), 2)
    csvio.write_csv(schedule, csv)
    out = tmp_path / "trace.json"
    assert cli.main(["trace", str(csv), "--costs", "1,2,1", "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == 4 * 2 * 3
    durations = {e["args"]["kind"]: e["dur"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert durations == {"F": 1e6, "I": 2e6, "W": 1e6}
    assert "24 actions on 2 ranks" in capsys.readouterr().out

    assert cli.main(["trace", str(tmp_path / "missing.csv"), "-o", str(tmp_path / "x.json")]) == 2
    assert "missing.csv" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_gz_name_gets_a_gzipped_trace(tmp_path):
    # Perfetto opens a .json.gz as is; an uncompressed file under that name it cannot read
    import gzip

    csv = tmp_path / "s.csv"
    csvio.write_csv(gpipe(v_placement(4, 2), 2), csv)
    assert cli.main(["trace", str(csv), "--costs", "1,2,1", "-o", str(tmp_path / "t.json.gz")]) == 0
    assert cli.main(["trace", str(csv), "--costs", "1,2,1", "-o", str(tmp_path / "t.json")]) == 0
    assert json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes())) == json.loads(
        (tmp_path / "t.json").read_text())


def test_cli_trace_uses_the_costs_beside_the_csv(tmp_path, capsys):
    from schedc.core.baselines import make_baseline

    path = tmp_path / "plan.csv"
    csvio.write_csv(make_baseline("1f1b", 2, 2, n_ranks=2), path)
    Profile.uniform(2, 0.5, 0.5, 0.5).save(tmp_path / "plan.profile.json")  # as `schedc plan` writes it
    out = tmp_path / "t.json"
    assert cli.main(["trace", str(path), "-o", str(out)]) == 0
    assert "with the costs in plan.profile.json" in capsys.readouterr().out
    durations = {e["dur"] for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"}
    assert durations == {0.5e6, 1e6}  # F 0.5 s; stage 0's B runs I and W (torch's runtime), the last stage's too


def test_a_trace_past_the_size_limit_is_refused_in_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    from schedc.core import limits

    csv = tmp_path / "s.csv"
    csvio.write_csv(gpipe(v_placement(4, 2), 2), csv)  # 24 actions
    monkeypatch.setattr(limits, "MAX_TRACE_ACTIONS", 23)
    monkeypatch.setattr("schedc.show.trace.simulate", lambda *a, **k: pytest.fail("simulated a refused trace"))
    out = tmp_path / "trace.json"
    assert cli.main(["trace", str(csv), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{csv}: 24 actions; a trace holds at most 23" in err
    assert not out.exists()
    with pytest.raises(SchedcError, match="24 actions; a trace holds at most 23"):  # the Python API too
        trace_events(csvio.read_csv(csv), Profile.uniform(4))
    # the CLI counts the file's actions before reading the schedule; an overlap's parts count each
    dual = tmp_path / "dual.csv"
    dual.write_text("0F0,(0F1;0B0)OVERLAP_F_B,0B1\n")
    assert csvio.count_actions(dual) == 4 == n_actions_of(csvio.read_csv(dual))
    monkeypatch.undo()  # at the real bound the same schedule is traced
    assert cli.main(["trace", str(csv), "-o", str(out)]) == 0


def test_copy_streams_are_threads_of_their_own_with_bytes_in_args(tmp_path):
    from schedc.core.baselines import make_baseline
    from schedc.core.host_link import HostLink

    schedule = make_baseline("1f1b", n_stages=4, n_microbatches=8)
    profile = Profile.uniform(4)
    actions = [{"stage": s, "microbatch": m, "action": "offload"} for s in (0, 1) for m in (0, 1)]
    link = HostLink(bandwidth=1.5, latency=0.0)  # one byte of activation: 2/3 s a copy
    trace = write_trace(schedule, profile, tmp_path / "t.json", memory_actions=actions, link=link)
    res = simulate(schedule, profile, memory_actions=actions, link=link)
    events = trace["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[(0, 1)].startswith("copy out") and names[(3, 2)].startswith("copy in")
    copies = [e for e in events if e["ph"] == "X" and e.get("cat") == "copy"]
    assert len(copies) == len(res.copies) == 8
    for e, c in zip(copies, res.copies):
        assert (e["pid"], e["tid"]) == (c.rank, 1 if c.direction == "out" else 2)
        assert e["name"] == f"{c.direction} {c.stage}:{c.microbatch}"
        assert e["args"]["bytes"] == c.nbytes == 1.0
        assert e["ts"] == pytest.approx(c.start * 1e6, abs=1e-3)
        assert e["dur"] == pytest.approx((c.end - c.start) * 1e6, abs=1e-3)
    # compute slices stay on thread 0, at the times the simulation with copies gives
    compute = [e for e in events if e["ph"] == "X" and e["tid"] == 0]
    assert len(compute) == len(res.timings)
    host = [e["args"]["pinned"] for e in events if e["name"] == "host memory"]
    assert max(host) == res.host_peak[0] and host[-1] == 0.0
    assert trace["otherData"]["link_busy"][0]["out"] == pytest.approx(res.link_busy(0, "out"))


def test_trace_cli_reads_memory_actions_and_the_link_flags(tmp_path, capsys):
    from schedc.core.baselines import make_baseline

    csv = tmp_path / "s.csv"
    csvio.write_csv(make_baseline("1f1b", n_stages=2, n_microbatches=4), csv)
    actions = tmp_path / "ma.json"
    actions.write_text(json.dumps([{"stage": 0, "microbatch": 0, "action": "offload"}]))
    out = tmp_path / "t.json"
    assert cli.main(["trace", str(csv), "--memory-actions", str(actions), "--host-bandwidth", "2",
                     "--host-latency", "0", "-o", str(out)]) == 0
    assert "2 copies on the copy streams" in capsys.readouterr().out
    copies = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "copy"]
    assert [e["dur"] for e in copies] == [5e5, 5e5]  # 1 byte at 2 B/s
    assert cli.main(["trace", str(csv), "--host-bandwidth", "2", "-o", str(tmp_path / "u.json")]) != 0
    assert "give --memory-actions" in capsys.readouterr().err
    assert not (tmp_path / "u.json").exists()


def test_a_microbatch_moved_after_f_and_again_after_i_has_both_copies_named_apart(tmp_path):
    from schedc.core.baselines import make_baseline
    from schedc.core.host_link import HostLink

    schedule, profile = make_baseline("zb-h2", 4, 8), Profile.uniform(4)
    # rank 1 runs 1F0 .. 1F4 1I0 .. 1I3 1W0: out after 1F0, back for 1I0, out after it, back at 1I3
    actions = [{"stage": 1, "microbatch": 0, "action": "offload", "refetch_at": "1I3"}]
    trace = write_trace(schedule, profile, tmp_path / "t.json", memory_actions=actions,
                        link=HostLink(bandwidth=10.0, latency=0.0))
    copies = [e for e in trace["traceEvents"] if e.get("cat") == "copy"]
    assert sorted(e["name"] for e in copies) == ["in 1:0", "in 1:0 after I", "out 1:0", "out 1:0 after I"]
    assert {e["args"]["after"] for e in copies} == {"F", "I"}
    host = [e["args"]["pinned"] for e in trace["traceEvents"] if e["name"] == "host memory"]
    assert max(host) == 1.0 and host[-1] == 0.0  # one microbatch's byte at a time, none left
