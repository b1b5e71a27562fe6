"""The literal ``Kp`` memory limit (one cap for every rank: max over ranks of static + K x 1F1B's
activation peak there) and what reports say about it: the step's limiter, simulate's --check,
the warning for another model's costs, the compile summary's units."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedc import cli
from schedc.core.baselines import make_baseline
from schedc.core.costs import MemoryLimit, Profile, StageCost, one_f_one_b_peaks, p_needed
from schedc.core.diagnose import limiter
from schedc.core.ir import make_placement
from schedc.core.simulate import simulate
from schedc.io import csvio
from schedc.library import transformer_profile
from schedc.solver.compile import compile_schedule


def _merged_by_rank(profile: Profile, placement) -> Profile:
    """One stage per rank holding all that rank's stages (1F1B "runs a rank's stages as one")."""
    ranks = max(placement) + 1
    stages = []
    for r in range(ranks):
        own = [profile.stages[s] for s, rr in enumerate(placement) if rr == r]
        stages.append(StageCost(forward=sum(c.forward for c in own), backward_input=1.0, backward_weight=1.0,
                                activation_bytes=sum(c.activation_bytes for c in own),
                                static_bytes=sum(c.static_bytes for c in own)))
    return Profile(stages=stages)


def _one_f_one_b_as_one(profile: Profile, placement, mb: int):
    """1F1B simulated on the rank-merged profile: its per-rank peak, static included."""
    merged = _merged_by_rank(profile, placement)
    return simulate(make_baseline("1f1b", merged.n_stages, mb), merged).peak_memory


def test_identical_stages_keep_r_microbatches():
    # nothing changes for identical stages: 1F1B's rank 0 holds R microbatches of its stages
    for placement, n, r in (("loop", 8, 8), ("v", 8, 4)):
        prof = Profile.uniform(n)
        caps = MemoryLimit.parse("1p").per_rank(prof, make_placement(placement, n, r))
        assert caps == [r * n / r] * r
        assert MemoryLimit.parse("2p").per_rank(prof, make_placement(placement, n, r)) == [2 * r * n / r] * r


def test_even_activations_keep_the_former_caps():
    # profiles whose stages hold the same activation (uniform, edge-heavy: uneven times only) and no
    # static bytes get the caps they had when Kp meant K x R microbatches of a rank's own stages, so
    # the tables built on them (benchmarks/compile_quality.py) do not change
    for prof, placement, ranks in ((Profile.edge_heavy(8), "loop", 8), (Profile.edge_heavy(8), "v", 4),
                                   (Profile.uniform(16, comm=0.5), "loop", 16)):
        pl = make_placement(placement, prof.n_stages, ranks)
        for k in (0.5, 1.25, 2.0):
            own = [sum(prof.stages[s].activation_bytes for s in range(prof.n_stages) if pl[s] == r) for r in range(ranks)]
            assert MemoryLimit.parse(f"{k}p").per_rank(prof, pl) == pytest.approx([k * ranks * a for a in own])


def test_literal_1p_on_a_transformer_is_1f1b_largest_peak():
    prof = transformer_profile(8)
    placement = make_placement("loop", 8, 8)
    caps = MemoryLimit.parse("1p").per_rank(prof, placement)
    f1b = simulate(make_baseline("1f1b", 8, 16), prof, MemoryLimit.parse("1p"))
    assert len(set(caps)) == 1 and caps[0] == pytest.approx(max(f1b.peak_memory), rel=1e-12)
    statics = [c.static_bytes for c in prof.stages]
    assert caps[0] == pytest.approx(max(st + (8 - r) * c.activation_bytes
                                        for r, (st, c) in enumerate(zip(statics, prof.stages))))
    assert f1b.fits and p_needed(max(f1b.peak_memory), prof, placement) == pytest.approx(1.0)
    # the LM-head rank is no longer allowed R of its own microbatches (the old per-rank meaning)
    last = prof.stages[-1]
    assert caps[-1] < last.static_bytes + 8 * last.activation_bytes
    # ZB-H1 holds more than one LM-head microbatch on the last rank: it needs more than 1p here
    h1 = simulate(make_baseline("zb-h1", 8, 16), prof, MemoryLimit.parse("1p"))
    assert not h1.fits and p_needed(max(h1.peak_memory), prof, placement) > 1.5


def test_the_cap_is_1f1b_steady_state_whatever_the_microbatches():
    # 1F1B needs M >= R; with fewer microbatches Kp keeps its meaning (nothing changes for
    # identical stages, where V-Min's 0.5p stays feasible at M < R)
    prof = transformer_profile(4)
    placement = make_placement("loop", 4, 4)
    assert one_f_one_b_peaks(prof, placement) == [(4 - r) * c.activation_bytes for r, c in enumerate(prof.stages)]
    for mb in (1, 2, 4, 9):
        assert simulate(make_baseline("gpipe", 4, mb), prof, MemoryLimit.parse("1p")).memory_limit == \
            MemoryLimit.parse("1p").per_rank(prof, placement)


_stage = st.builds(
    lambda f, act, static: StageCost(forward=f, backward_input=f, backward_weight=f, activation_bytes=act,
                                     static_bytes=static),
    st.sampled_from([0.5, 1.0, 2.0]), st.floats(1.0, 1000.0), st.sampled_from([0.0, 10.0, 5000.0]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ranks=st.integers(2, 5), v=st.booleans(), extra_mb=st.integers(0, 4), data=st.data())
def test_1f1b_fits_at_1p_on_uneven_stages(ranks, v, extra_mb, data):
    n = 2 * ranks if v else ranks
    prof = Profile(stages=data.draw(st.lists(_stage, min_size=n, max_size=n)))
    placement = make_placement("v" if v else "loop", n, ranks)
    mb = ranks + extra_mb
    cap = MemoryLimit.parse("1p").per_rank(prof, placement)
    # the cap is 1F1B's largest peak when it runs each rank's stages as one
    assert cap == [pytest.approx(max(_one_f_one_b_as_one(prof, placement, mb)), rel=1e-9)] * ranks
    if not v:  # and the real 1F1B fits it, on every rank
        sim = simulate(make_baseline("1f1b", n, mb), prof, MemoryLimit.parse("1p"))
        assert sim.fits and max(sim.peak_memory) == pytest.approx(cap[0], rel=1e-9)


@pytest.mark.parametrize("placement,n,r", [("loop", 4, 4), ("v", 8, 4)])
def test_compiled_1p_schedule_never_needs_more_than_1f1b(placement, n, r):
    prof = transformer_profile(n)
    res = compile_schedule(n, 8, n_ranks=r, placement=placement, profile=prof, memory="1p", time_limit=3)
    largest_1f1b = max(_one_f_one_b_as_one(prof, make_placement(placement, n, r), 8))
    assert res.sim.fits and max(res.sim.peak_memory) <= largest_1f1b * (1 + 1e-9)


def test_limiter_names_the_lm_head_rank():
    prof = transformer_profile(4, layers=8, vocab=512000)  # a huge vocabulary: the head dominates
    sim = simulate(make_baseline("1f1b", 4, 8), prof)
    lim = limiter(sim, prof)
    assert lim.kind == "rank" and lim.rank == 3 and lim.stages == (3,)
    assert "LM head" in lim.message and "rank 3" in lim.message and "schedc plan" in lim.message
    assert lim.busy_fraction > 0.9 and lim.imbalance > 1.5
    # module names, when the profile has them, say what the stage holds
    named = prof.model_copy(update={"stages": [c.model_copy(update={"modules": [f"layers.{s}"]}) for s, c in
                                               enumerate(prof.stages[:-1])]
                                    + [prof.stages[-1].model_copy(update={"modules": ["norm", "lm_head"]})]})
    assert "the LM head (norm, lm_head)" in limiter(sim, named).message
    # balanced ranks: the critical path, not one rank
    uni = Profile.uniform(4)
    assert limiter(simulate(make_baseline("zb-h1", 4, 8), uni), uni).kind == "critical-path"


def test_compile_reports_the_limiter_units_and_the_hand_made_twin(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--quiet", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "the compiled schedule is zb-h1 itself" in text
    assert "units: times are in the unit of --costs" in text
    assert "memory 1p = 4 on every rank" in text and "limits the step:" in text
    report = json.loads(csvio.report_path(out).read_text())
    assert report["same_as_baseline"] == "zb-h1" and report["limiter"]["kind"] == "critical-path"


def test_simulate_check_fails_when_over_the_limit_and_warns_on_other_costs(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert cli.main(["compile", "--stages", "4", "--mb", "8", "--costs", "1,2,1", "--quiet", "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["simulate", str(out), "--costs", "1,2,1", "--check"]) == 0  # fits its own 1p
    assert cli.main(["simulate", str(out), "--costs", "1,2,1", "--memory", "0.5p"]) == 0  # no --check: report only
    assert cli.main(["simulate", str(out), "--costs", "1,2,1", "--memory", "0.5p", "--check"]) == 1
    err = capsys.readouterr().err
    assert "exceeds the memory limit 0.5p on rank(s) 0" in err
    assert cli.main(["simulate", str(out), "--json"]) == 0  # judged by the costs its report records: no warning
    assert capsys.readouterr().err == ""
    assert cli.main(["simulate", str(out), "--costs", "1,1,1", "--json"]) == 0  # judged with other costs: warned
    captured = capsys.readouterr()
    assert "compiled for the costs of --costs 1,2,1" in captured.err and "--costs 1,1,1 judged here" in captured.err
    assert json.loads(captured.out)[0]["limiter"]["kind"] in ("rank", "critical-path")


def test_library_list_prints_uniform_makespans_per_rank(capsys):
    # a V rank holds two stages of F = I = W = 1: its report's makespan is twice the rank-F shown
    assert cli.main(["library", "list", "--ranks", "2", "--mb", "4", "--memory", "1p", "--costs", "uniform"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("r2_")}
    from schedc.library import find_entry

    for name, per_rank in (("r2_mb4_mem1p_loop_uniform", 1), ("r2_mb4_mem1p_v_uniform", 2)):
        makespan = find_entry(name).report["predicted"]["makespan"]
        assert f"{makespan / per_rank:.4g} rank-F" in rows[name]
    assert "rank-F: uniform makespans in units of one rank's forward" in out
