"""examples/train.py's stage counts that contradict each other: one line naming the flag before any
process group starts (after it, they named load_pipeline's parameters on every rank, or --stages
was silently not what torch's class built)."""

import importlib.util

import pytest

pytest.importorskip("torch")

from schedc.core.baselines import make_baseline  # noqa: E402
from schedc.io.csvio import write_csv  # noqa: E402
from schedc.runtime.launch import ROOT  # noqa: E402


@pytest.fixture
def train(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("_train_example", ROOT / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for var in ("RANK", "MASTER_ADDR", "MASTER_PORT"):  # not under torchrun: nothing can start
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.chdir(tmp_path)
    write_csv(make_baseline("1f1b", 2, 4), tmp_path / "s.csv")
    return module


@pytest.mark.parametrize("argv, needle", [
    (["--schedule", "s.csv", "--layers-per-stage", "1,1"], "--layers-per-stage 1,1: 2 blocks but the model has 8"),
    (["--schedule", "s.csv", "--layers", "4", "--layers-per-stage", "1,1,2"],
     "--layers-per-stage 1,1,2: 3 counts for the 2 stages of s.csv"),
    (["--torch-schedule", "Interleaved1F1B", "--stages", "3"], "--stages 3: torch's Interleaved1F1B runs as many"),
    (["--torch-schedule", "1F1B", "--stages", "4"], "--stages 4: torch's 1F1B runs one stage per rank (2)"),
])
def test_contradicting_stage_counts_are_one_line_before_the_group(train, capsys, argv, needle):
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {needle}"), err


@pytest.fixture(scope="module")
def group():
    """A one-rank gloo group in this process: the runtime's checks run as on every rank."""
    import torch.distributed as dist

    from _dist import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _gpt(layers=2):
    from schedc.runtime import GPT, GPTConfig

    return GPT(GPTConfig(vocab_size=16, hidden=8, layers=layers, heads=2, seq_len=4))


def test_load_torch_pipeline_refuses_stages_per_rank_a_single_stage_class_cannot_build(group):
    from schedc.errors import SchedcError
    from schedc.runtime import lm_loss, load_torch_pipeline

    with pytest.raises(SchedcError, match=r"^stages_per_rank: ScheduleGPipe runs one stage per rank, got 2"):
        load_torch_pipeline("GPipe", _gpt(), lm_loss, 2, stages_per_rank=2)


@pytest.mark.parametrize("kwargs, message", [
    (dict(csv=None), "^csv: expected the path of a CSV schedule or a schedc.Schedule, got NoneType"),
    (dict(model=None), r"^model: expected an nn.Module \(embedding \+ blocks \+ head\), got NoneType"),
    (dict(n_microbatches="4"), r"^n_microbatches: must be an integer \(the CSV's 4\) or None, got '4'"),
    (dict(layers_per_stage="2"), "^layers_per_stage must be a list of block counts \\(integers\\), one per stage"),
    (dict(layers_per_stage=[1.5]), "^layers_per_stage must be a list of block counts"),
    (dict(device="tpu"), "^device: 'tpu' is not a torch device"),
])
def test_load_pipeline_names_a_wrong_argument(group, tmp_path, kwargs, message):
    from schedc.errors import SchedcError
    from schedc.runtime import lm_loss, load_pipeline

    write_csv(make_baseline("1f1b", 1, 4), tmp_path / "one.csv")
    args = dict(csv=tmp_path / "one.csv", model=_gpt(), loss_fn=lm_loss) | kwargs
    with pytest.raises(SchedcError, match=message):
        load_pipeline(**args)


def test_a_middle_stage_without_blocks_is_refused_on_the_rank_that_does_not_hold_it():
    # a V of 4 stages on 2 ranks: rank 0 holds stages 0 and 3, and must refuse too, or it waits in recv
    from schedc.errors import SchedcError
    from schedc.runtime.split import split_gpt

    with pytest.raises(SchedcError, match=r"^stage 2 would hold no blocks \(2 blocks over 4 stages\)"):
        split_gpt(_gpt(layers=2), [0, 3], 4)


def test_a_batch_the_microbatches_do_not_divide_is_refused_before_the_step(group, tmp_path):
    from schedc.errors import SchedcError
    from schedc.runtime import lm_loss, load_pipeline, make_batch

    write_csv(make_baseline("1f1b", 1, 4), tmp_path / "one.csv")
    model = _gpt()
    pipe = load_pipeline(tmp_path / "one.csv", model, lm_loss)
    tokens, targets = make_batch(model.config, 6)
    with pytest.raises(SchedcError, match=r"^step: inputs\[0\] has 6 rows \(dimension 0\) but the schedule runs 4 "
                                          r"microbatches; give a batch that is a multiple of 4"):
        pipe.step(tokens, target=targets, losses=[])
    tokens, targets = make_batch(model.config, 8)
    losses = []
    pipe.step(tokens, target=targets, losses=losses)
    assert len(losses) == 4


@pytest.mark.parametrize("rank, n_ranks, message", [
    ("0", None, r"^rank: must be an integer \(e.g. int\(os.environ\['RANK'\]\)\), got '0'"),
    (0, "2", r"^n_ranks: must be an integer .*got '2'"),
    (0.0, None, r"^rank: must be an integer .*got 0.0"),
])
def test_stages_for_rank_names_a_rank_given_as_text(tmp_path, rank, n_ranks, message):
    # os.environ gives text: '0' was a TypeError, n_ranks='2' read "2 rows but the group has 2 ranks"
    from schedc.errors import SchedcError
    from schedc.runtime import stages_for_rank

    write_csv(make_baseline("1f1b", 2, 4), tmp_path / "s.csv")
    with pytest.raises(SchedcError, match=message):
        stages_for_rank(tmp_path / "s.csv", rank, n_ranks=n_ranks)


def test_build_schedule_names_a_microbatch_count_given_as_text(group, tmp_path):
    # it read "the CSV runs 4 microbatches but the schedule was asked for 4"
    from torch.distributed.pipelining import PipelineStage

    from schedc.errors import SchedcError
    from schedc.runtime import build_schedule, lm_loss
    from schedc.runtime.split import split_gpt

    write_csv(make_baseline("1f1b", 1, 4), tmp_path / "one.csv")
    stage = PipelineStage(split_gpt(_gpt(), [0], 1)[0], 0, 1, "cpu")
    with pytest.raises(SchedcError, match=r"^n_microbatches: must be an integer \(the CSV's 4\) or None, got '4'"):
        build_schedule(tmp_path / "one.csv", [stage], "4", lm_loss)


@pytest.mark.parametrize("spec, settings, message", [
    (None, {}, "^spec: expected torchtitan:NAME or nemo:NAME, got NoneType"),
    ("torchtitan:ZBVZeroBubble", dict(ranks="2"), "^ranks: must be an integer, got '2'"),
    ("torchtitan:ZBVZeroBubble", dict(local_batch_size="4"), "^local_batch_size: must be an integer, got '4'"),
])
def test_check_csv_for_names_a_setting_read_as_text(tmp_path, spec, settings, message):
    # ranks="2" read "the CSV has 2 ranks, the framework runs 2"; the others were TypeError/AttributeError
    from schedc.errors import SchedcError
    from schedc.frameworks import check_csv_for

    write_csv(make_baseline("zb-v", 4, 4), tmp_path / "v.csv")
    with pytest.raises(SchedcError, match=message):
        check_csv_for(tmp_path / "v.csv", spec, **settings)


@pytest.mark.parametrize("kwargs, message", [
    (dict(scale="0.01"), "^emulate: scale must be > 0, got '0.01'"),
    (dict(steps="2"), "^emulate: need steps >= 1, got '2'"),
    (dict(profile="prof.json"), r"^emulate: profile must be a schedc.Profile \(schedc.Profile.load\(PATH\)\) or one per CSV"),
])
def test_emulate_names_a_setting_of_the_wrong_type_before_any_rank(tmp_path, monkeypatch, kwargs, message):
    # profile="prof.json" read "1 CSVs but 9 profiles"; the others were a comparison's TypeError
    from schedc.core.costs import Profile
    from schedc.errors import SchedcError
    from schedc.runtime import launch as launcher
    from schedc.runtime.emulate import emulate

    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("ranks were started"))
    write_csv(make_baseline("1f1b", 2, 4), tmp_path / "s.csv")
    args = dict(csv_paths=[tmp_path / "s.csv"], profile=Profile.uniform(2)) | kwargs
    with pytest.raises(SchedcError, match=message):
        emulate(**args)


@pytest.mark.parametrize("args, kwargs, message", [
    ((None, 2, 2), {}, "^config must be a schedc.runtime.GPTConfig, got NoneType"),
    (("cfg", "2", 2), {}, "^n_stages must be an integer, got '2'"),
    (("cfg", 2, "2"), {}, "^microbatch_size must be an integer, got '2'"),
    (("cfg", 2, 2), dict(repeats="3"), r"^profile: need warmup >= 0 and repeats >= 1 \(integers\), got 2 and '3'"),
])
def test_profile_gpt_names_an_argument_of_the_wrong_type(args, kwargs, message):
    # they were a comparison's TypeError, or None's AttributeError
    from schedc.errors import SchedcError
    from schedc.runtime import GPTConfig
    from schedc.runtime.profiling.gpt import profile_gpt

    cfg = GPTConfig(vocab_size=16, hidden=8, layers=2, heads=2, seq_len=4)
    with pytest.raises(SchedcError, match=message):
        profile_gpt(*[cfg if a == "cfg" else a for a in args], **kwargs)
