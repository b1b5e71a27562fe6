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
    (dict(scale="0.01"), "^emulate: scale must be a finite number > 0, got '0.01'"),
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


# ----------------------------------------------------------------- --plan: checked first, in full

PARTITION = [["embed", "blocks.0", "blocks.1"], ["blocks.2", "blocks.3", "norm", "head"]]
GPT_MODEL = "gpt(layers=4, hidden=32, heads=2, seq=16, vocab=64)/6 units"
GPT_ASSUMES = {"activation_checkpoint": "none", "seq_len": 16, "microbatch_size": 2, "dtype": "float32"}


def _plan(folder, schedule="1f1b", model=GPT_MODEL, assumes=GPT_ASSUMES, **report):
    """plan.csv and plan.json (with the CSV's hash) as `schedc plan` writes them; 2 ranks x 4."""
    from schedc.io.csvio import write_schedule

    report = {"partition": PARTITION, "assumes": dict(assumes), "profile": {"model": model}} | report
    write_schedule(make_baseline(schedule, 2, 4), report, folder / "plan.csv")
    return folder / "plan.json"


def _hash_edited(path, value):
    import json

    report = json.loads(path.read_text())
    if value is None:
        del report["csv_sha256"]
    else:
        report["csv_sha256"] = value
    path.write_text(json.dumps(report))


def _one_line(capsys, code, needle):
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {needle}"), err


@pytest.mark.parametrize("value, needle", [
    (None, "--plan plan.json: no \"csv_sha256\" (the hash of the CSV the plan wrote), so plan.csv cannot be checked"),
    (123, "--plan plan.json: a non-text \"csv_sha256\""),
    (["abc"], "--plan plan.json: a non-text \"csv_sha256\""),
])
def test_a_plan_without_its_csv_hash_is_refused(train, tmp_path, capsys, value, needle):
    # without the hash any CSV named plan.csv ran as planned
    _hash_edited(_plan(tmp_path), value)
    _one_line(capsys, train.main(["--plan", "plan.json"]), needle)


def test_the_plan_gives_the_model_its_shape(train, tmp_path):
    # it trained at the script's defaults (hidden 128, seq 64) whatever the plan was made for
    _plan(tmp_path)
    args = train.parse_args(["--plan", "plan.json"])
    train._plan_settings(args)
    shape = {k: getattr(args, k) for k in ("hidden", "heads", "seq_len", "vocab", "microbatch_size", "dtype")}
    assert shape == {"hidden": 32, "heads": 2, "seq_len": 16, "vocab": 64, "microbatch_size": 2, "dtype": "float32"}


@pytest.mark.parametrize("argv, needle", [
    (["--hidden", "64"], "--hidden 64: the plan was made for hidden 32; drop --hidden"),
    (["--seq-len", "64"], "--seq-len 64: the plan was made for seq len 16; drop --seq-len"),
    (["--vocab", "512"], "--vocab 512: the plan was made for vocab 64"),
    (["--microbatch-size", "4"], "--microbatch-size 4: the plan was made for microbatch size 2"),
    (["--dtype", "bfloat16"], "--dtype 'bfloat16': the plan was made for dtype 'float32'"),
])
def test_a_flag_that_contradicts_the_plans_model_is_refused(train, tmp_path, capsys, argv, needle):
    _plan(tmp_path)
    _one_line(capsys, train.main(["--plan", "plan.json", *argv]), needle)


@pytest.mark.parametrize("model, assumes, needle", [
    # the same block count, another model: a GPT of another width, a counted Llama-like decoder
    ("gpt(layers=6, hidden=32, heads=2, seq=16, vocab=64)/8 units", GPT_ASSUMES,
     "--plan plan.json: its model has 6 layers but its partition holds 4 blocks"),
    ("decoder: 4 layers, hidden 32, ffn 88 (swiglu), heads 2/2 x 16, vocab 64; seq 16; per unit", {"seq_len": 16},
     "--plan plan.json: it was counted for 'decoder: 4 layers, hidden 32, ffn 88 (swiglu), heads 2/2 x 16, vocab 64; "
     "seq 16; per unit', with an MLP of 88 (this GPT's is 4 x hidden = 128); this script trains schedc's GPT"),
    ("llama (c.json): 4 layers, hidden 32, ffn 128, heads 4/2 x 8, vocab 64", {"seq_len": 16},
     "--plan plan.json: it was counted for 'llama (c.json): 4 layers, hidden 32, ffn 128, heads 4/2 x 8, vocab 64', "
     "with 2 key/value heads for 4 heads (this GPT has as many as heads)"),
    ("decoder: 4 layers, hidden 32, ffn 128 (swiglu), heads 2/2 x 16, vocab 64", {"seq_len": 16},
     "--plan plan.json: it was counted for 'decoder: 4 layers, hidden 32, ffn 128 (swiglu), heads 2/2 x 16, vocab "
     "64', with a swiglu MLP (this GPT's is GELU)"),
])
def test_a_plan_counted_for_another_model_is_refused(train, tmp_path, capsys, model, assumes, needle):
    _plan(tmp_path, model=model, assumes=assumes)
    _one_line(capsys, train.main(["--plan", "plan.json", "--hidden", "32", "--heads", "2", "--vocab", "64"]), needle)


def test_a_counted_plan_of_this_gpts_shape_takes_its_shape(train, tmp_path):
    _plan(tmp_path, model="decoder: 4 layers, hidden 48, ffn 192 (gelu), heads 3/3 x 16, vocab 96",
          assumes={"seq_len": 24, "microbatch_size": 1})
    args = train.parse_args(["--plan", "plan.json"])
    train._plan_settings(args)
    assert (args.hidden, args.heads, args.vocab, args.seq_len, args.microbatch_size) == (48, 3, 96, 24, 1)


def test_a_plan_that_records_no_shape_needs_the_flags(train, tmp_path, capsys):
    _plan(tmp_path, model="mymodel/6 units", assumes={"activation_checkpoint": "none", "seq_len": 16})
    _one_line(capsys, train.main(["--plan", "plan.json", "--heads", "2"]),
              "--plan plan.json: the plan does not record its model's hidden, vocab (its profile's model is "
              "'mymodel/6 units'); pass --hidden, --vocab of the model it was made for")
    # given, they are the model (no default stands in for the plan's)
    assert train.main(["--plan", "plan.json", "--heads", "2", "--hidden", "32", "--vocab", "64"]) == 2
    assert "RANK is not set" in capsys.readouterr().err


@pytest.mark.parametrize("assumes, needle", [
    ({**GPT_ASSUMES, "seq_len": "16"}, "--plan plan.json: \"assumes\".seq_len: '16' is not an integer >= 1"),
    ({**GPT_ASSUMES, "microbatch_size": 0}, "--plan plan.json: \"assumes\".microbatch_size: '0' is not an integer"),
    ({**GPT_ASSUMES, "dtype": 32}, "--plan plan.json: \"assumes\".dtype: '32' is not a dtype"),
])
def test_a_plan_with_a_shape_of_the_wrong_type_is_refused(train, tmp_path, capsys, assumes, needle):
    _plan(tmp_path, assumes=assumes)
    _one_line(capsys, train.main(["--plan", "plan.json"]), needle)


def test_a_plans_checkpointing_the_csv_cannot_run_is_refused_before_the_group(train, tmp_path, capsys):
    # zb-h1 runs stage 1 as I and W: a per-op mode there was refused by load_pipeline on every rank
    _plan(tmp_path, schedule="zb-h1", assumes={**GPT_ASSUMES, "activation_checkpoint": ["none", "selective"]})
    _one_line(capsys, train.main(["--plan", "plan.json"]),
              "--plan plan.json: its activation checkpointing with plan.csv: stage 1 runs I and W apart")


def test_a_bad_plan_is_refused_under_torchrun_before_the_group_starts(train, tmp_path, capsys, monkeypatch):
    # under torchrun (RANK and the rendezvous set) the plan is still checked first, in one line
    for var, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")):
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(train, "init_group", lambda *a, **k: pytest.fail("the process group started"))
    _hash_edited(_plan(tmp_path), None)
    _one_line(capsys, train.main(["--plan", "plan.json"]), "--plan plan.json: no \"csv_sha256\"")
    _plan(tmp_path, model="gpt(layers=4, hidden=64, heads=2, seq=16, vocab=64)/6 units")
    _one_line(capsys, train.main(["--plan", "plan.json", "--hidden", "32"]), "--hidden 32: the plan was made for hidden 64")


# ----------------------------------------------------------------- --plan: its memory actions

OFFLOAD_1 = {"stage": 0, "microbatch": 1, "action": "offload", "fetch_at": "0F2"}  # 1F1B rank 0: 0F1 0B0 0F2 0B1
RECOMPUTE_0 = {"stage": 1, "microbatch": 0, "action": "recompute"}  # 1B0: a whole backward


class _Reached(Exception):
    pass


def test_a_plans_memory_actions_reach_the_pipeline(train, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from schedc.core.memory_actions import MemoryAction

    _plan(tmp_path, memory_actions=[OFFLOAD_1, RECOMPUTE_0])
    args = train.parse_args(["--plan", "plan.json"])
    planned = train._plan_settings(args)
    for var, value in (("RANK", "0"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")):
        monkeypatch.setenv(var, value)
    train._check_launch(args, planned)  # a fetch and a recompute the CSV can run pass the launch check
    got = {}

    def load_pipeline(schedule, model, loss_fn, device, **kwargs):
        got.update(kwargs)
        raise _Reached

    monkeypatch.setattr(train, "load_pipeline", load_pipeline)
    monkeypatch.setattr(train, "dist", SimpleNamespace(get_rank=lambda: 0, get_world_size=lambda: 2))
    with pytest.raises(_Reached):
        train.train(args, "cpu", planned)
    from schedc.core.ir import Action

    assert list(got["memory_actions"]) == [MemoryAction(0, 1, "offload", Action(0, "F", 2)),
                                           MemoryAction(1, 0, "recompute")]
    assert got["memory_actions"].source == "plan.json"  # load_pipeline's refusals name the plan


@pytest.mark.parametrize("entry, needle", [
    ({"stage": 0, "microbatch": 0, "action": "offload", "fetch_at": "0F2"},
     "--plan plan.json (against plan.csv): memory_actions[0] (stage 0, microbatch 0): \"fetch_at\" '0F2' runs at "
     "or after 0B0 on rank 0; name an action between 0F0 and 0B0"),
    ({"stage": 0, "microbatch": 4, "action": "recompute"},
     "--plan plan.json (against plan.csv): memory_actions[0] (stage 0, microbatch 4): the CSV runs microbatches 0..3"),
    ({"stage": 0, "microbatch": 0, "action": "move"},
     "--plan plan.json: memory_actions[0] (stage 0, microbatch 0): \"action\" 'move' is not one of keep, offload"),
])
def test_a_memory_action_the_plans_csv_cannot_run_is_one_line_before_torchrun(train, tmp_path, capsys, entry,
                                                                               needle):
    # torchrun's environment is unset (the fixture): the plan is refused before it is read
    _plan(tmp_path, memory_actions=[entry])
    _one_line(capsys, train.main(["--plan", "plan.json"]), needle)
