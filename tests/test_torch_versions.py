"""schedc against the installed torch's own pipelining code: the lowering the runtime runs (with
2.15's send waits and gradient-reduction waits), the hand-off check for torchtitan's training
step, and 2.15's activation-liveness analysis against schedc's memory rule on every library CSV
and hand-made schedule (skipped where torch has no such analysis, e.g. 2.14.1)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ts = pytest.importorskip("torch.distributed.pipelining.schedules")

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.errors import SchedcError  # noqa: E402
from schedc.io.csvio import read_csv  # noqa: E402
from schedc.library.catalog import find_library  # noqa: E402
from schedc.runtime import torch_check  # noqa: E402

HAS_LIVENESS = hasattr(ts, "analyze_pipeline_activation_liveness")
needs_liveness = pytest.mark.skipif(not HAS_LIVENESS, reason=f"torch {torch.__version__} has no liveness analysis")

HAND_MADE = [("gpipe", 4, 6), ("1f1b", 4, 8), ("zb-h1", 4, 8), ("zb-h2", 4, 8), ("interleaved-1f1b", 8, 8),
             ("zb-v", 8, 8), ("looped-bfs", 8, 4), ("interleaved-zb", 8, 8), ("dualpipev", 8, 8),
             ("v-half", 8, 8), ("v-min", 8, 8)]


def _library_csvs():
    root = find_library()
    return sorted(root.glob("*.csv")) if root is not None else []


def test_torchtitan_ready_reads_the_installed_step(monkeypatch):
    import inspect

    has_arg_mbs = "arg_mbs" in inspect.signature(ts._PipelineSchedule.step).parameters
    assert (torch_check.torchtitan_ready() is None) == has_arg_mbs

    def old_step(self, *args, target=None, losses=None, **kwargs):  # torch 2.13's parameters
        raise AssertionError("never called")

    monkeypatch.setattr(ts._PipelineSchedule, "step", old_step)
    why = torch_check.torchtitan_ready()
    assert why is not None and "\n" not in why and "arg_mbs" in why and "torch>=2.14.1" in why
    with pytest.raises(SchedcError, match="^framework=torchtitan: torch .* pip install 'torch>=2.14.1'"):
        torch_check.check_for_launch(make_baseline("1f1b", 2, 4), framework="torchtitan")
    torch_check.check_for_launch(make_baseline("1f1b", 2, 4), framework="nemo")  # NeMo splits the batch itself


def test_lowering_has_a_wait_for_every_send_where_torch_waits():
    sched = make_baseline("zb-v", 4, 6, n_ranks=2)
    lowered = torch_check.check_with_torch(sched)
    names = [p.computation_type.name for acts in lowered.values() for a in acts
             for p in (a.sub_actions or (a,))]
    sends = names.count("SEND_F") + names.count("SEND_B")
    waits = names.count("WAIT_SEND_F") + names.count("WAIT_SEND_B")
    assert sends > 0
    assert waits == (sends if hasattr(ts, "_add_wait_send") else 0)
    if hasattr(ts, "WAIT_REDUCE_GRAD"):  # 2.15 pairs every reduction with its wait
        assert names.count("WAIT_REDUCE_GRAD") == names.count("REDUCE_GRAD") == sched.n_stages


@needs_liveness
@pytest.mark.parametrize("name,stages,mb", HAND_MADE)
def test_torch_liveness_equals_schedc_on_hand_made_schedules(name, stages, mb):
    ranks = stages // 2 if name in ("interleaved-1f1b", "zb-v", "looped-bfs", "interleaved-zb", "dualpipev",
                                    "v-half", "v-min") else stages
    sched = make_baseline(name, stages, mb, n_ranks=ranks)
    slots = torch_check.check_liveness_with_torch(sched, name)
    assert slots == torch_check.schedc_activation_slots(sched) and min(slots) >= 1


@needs_liveness
def test_torch_liveness_equals_schedc_on_every_library_csv():
    csvs = _library_csvs()
    assert len(csvs) >= 64
    for path in csvs:
        assert torch_check.check_liveness_with_torch(read_csv(path), str(path)) is not None


@needs_liveness
def test_b_first_overlap_cell_counts_both_actions_live(tmp_path):
    """An OVERLAP_F_B cell written B-first: torch counts the B's activation and the F's new one
    live at one position; so does schedc's memory rule (all allocations before any free)."""
    csv = tmp_path / "overlap.csv"
    # 2 stages on 2 ranks, 3 microbatches; rank 1 runs (1B0;1F1) and (1B1;1F2) as cells
    csv.write_text("0F0,0F1,0F2,0B0,0B1,0B2\n1F0,(1B0;1F1)OVERLAP_F_B,(1B1;1F2)OVERLAP_F_B,1B2\n")
    sched = read_csv(csv)
    assert torch_check.check_liveness_with_torch(sched, str(csv)) == [3, 2]


def test_liveness_is_none_without_the_analysis(monkeypatch):
    monkeypatch.delattr(ts, "analyze_pipeline_activation_liveness", raising=False)
    sched = make_baseline("1f1b", 2, 4)
    assert torch_check.check_liveness_with_torch(sched) is None
    assert torch_check.check_for_launch(sched) == ""


def test_validate_refuses_a_torchtitan_handoff_on_a_torch_without_arg_mbs(tmp_path, monkeypatch, capsys):
    from schedc import cli
    from schedc.io.csvio import write_csv

    csv = tmp_path / "s.csv"
    write_csv(make_baseline("1f1b", 2, 4), csv)
    assert cli.main(["validate", str(csv), "--for", "torchtitan:1F1B", "--local-batch-size", "4"]) == 0
    assert "fits torchtitan:1F1B" in capsys.readouterr().out

    def old_step(self, *args, target=None, losses=None, **kwargs):  # torch 2.13's parameters
        raise AssertionError("never called")

    monkeypatch.setattr(ts._PipelineSchedule, "step", old_step)
    assert cli.main(["validate", str(csv), "--for", "torchtitan:1F1B", "--local-batch-size", "4"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "pip install 'torch>=2.14.1'" in out.err
    assert cli.main(["validate", str(csv), "--for", "nemo:1F1B", "--local-batch-size", "4"]) == 0


@pytest.mark.parametrize("release,held", [("2.14", 2 + 4 + 2), ("2.14.1", 2 + 4 + 2), ("2.15", 2 + 4),
                                          ("2.15.0+cu132", 2 + 4), ("3.0", 2 + 4)])
def test_fsdp_count_follows_the_torch_release_the_run_uses(release, held):
    """Before 2.15 a split W's bf16 gradient is held beside the fp32 accumulator; from 2.15 on the
    unsharded parameter's grad_dtype makes W produce it in fp32 at once (fsdp_held's sources)."""
    from schedc.model_costs import fsdp_held, unit_profile

    p = unit_profile(layers=2, hidden=64, vocab=100, seq=8, dtype="bfloat16", dp_shard=2, torch=release)
    assert p.assumes["fsdp_unsharded_bytes_per_param"] == held and p.assumes["torch"] == release
    assert ("a split W leaves" in p.assumes["fsdp"]) == (held == 8)
    assert fsdp_held("bfloat16", "float32", 4, release) == held
    # a reduce dtype equal to the compute dtype has no second copy on either release
    assert fsdp_held("bfloat16", "bfloat16", 2, release) == 2 + 2
    plain = unit_profile(layers=2, hidden=64, vocab=100, seq=8, dtype="bfloat16", dp_shard=1, torch=release)
    params = plain.stages[1].static_bytes / (2 + 4 + 4 + 8)  # bf16 weight, fp32 grad, master, two moments
    assert p.stages[1].static_bytes == pytest.approx(params * ((2 + 4 + 4 + 8) / 2 + held))


def test_fsdp_count_defaults_to_the_release_the_counts_follow():
    from schedc.core.settings import COUNTED_FOR_TORCH
    from schedc.model_costs import unit_profile

    given = unit_profile(layers=2, hidden=64, vocab=100, seq=8, dtype="bfloat16", dp_shard=2, torch=COUNTED_FOR_TORCH)
    default = unit_profile(layers=2, hidden=64, vocab=100, seq=8, dtype="bfloat16", dp_shard=2)
    assert default.assumes == given.assumes and [u.static_bytes for u in default.stages] == \
        [u.static_bytes for u in given.stages]


def test_fsdp_reduce_scatter_and_added_gradients_follow_the_torch_release():
    """From 2.15 a later W adds its fp32 gradient into the held one, and a group's reduce-scatter
    (its fp32 input, its bf16 weights resharded) rises above the static bytes: both are the
    transients of the unit's W and B; before 2.15 the held bf16 slot covers the reduce-scatter."""
    from schedc.model_costs import unit_profile
    from schedc.model_costs.profile import fsdp_transients

    assert fsdp_transients("bfloat16", "float32", 4, "2.14.1") == (0.0, 0.0)
    assert fsdp_transients("bfloat16", "float32", 4, "2.15.0") == (4.0, 2.0)
    assert fsdp_transients("bfloat16", "bfloat16", 2, "2.15.0") == (2.0, 0.0)
    shape = dict(layers=2, hidden=64, vocab=100, seq=8, dtype="bfloat16", impl="torchtitan", dp_shard=2)
    old, new = unit_profile(**shape, torch="2.14"), unit_profile(**shape, torch="2.15")
    params = new.stages[1].static_bytes / ((2 + 4 + 4 + 8) / 2 + 2 + 4)
    layer_old, layer_new = old.stages[1], new.stages[1]
    assert layer_old.transient("W") == 0.0
    assert layer_new.transient("W") >= 2 * params and layer_new.transient("B") >= 2 * params
    assert layer_new.transient("I") == layer_old.transient("I")  # I adds no gradient to a parameter
