"""schedc.frameworks: what torchtitan 0.3.0 / NeMo AutoModel 0.7.0 build, and `validate --for`.

The rules are checked here against the numbers their sources give by hand; test_frameworks_real.py
checks them against the installed frameworks' own functions and trains through them.
"""

import pytest

from schedc import cli
from schedc.core.baselines import make_baseline
from schedc.errors import SchedcError
from schedc.frameworks import SCHEDULE_NAMES, check_csv_for, nemo_build, parse_spec, schedule_name, torchtitan_build
from schedc.io.csvio import write_csv


@pytest.fixture
def csvs(tmp_path):
    paths = {}
    for key, name, stages in [("v", "zb-v", 4), ("loop", "interleaved-1f1b", 4), ("one", "1f1b", 2)]:
        paths[key] = tmp_path / f"{key}.csv"
        write_csv(make_baseline(name, stages, 4, n_ranks=2), paths[key])
    return paths


def test_names_match_case_insensitively_like_torch():
    assert schedule_name("zbvzerobubble") == "ZBVZeroBubble"
    assert parse_spec("torchtitan:interleaved1f1b") == ("torchtitan", "Interleaved1F1B")
    assert parse_spec("NeMo:1f1b") == ("nemo", "1F1B")
    with pytest.raises(SchedcError, match="unknown schedule name 'interleaved_1f1b'"):
        schedule_name("interleaved_1f1b")  # NeMo's docstring spelling; torch rejects it
    with pytest.raises(SchedcError, match="torchtitan:NAME or nemo:NAME"):
        parse_spec("megatron:1F1B")


def test_default_stage_counts_and_placements():
    assert torchtitan_build("1F1B", 4).n_stages == 4
    b = torchtitan_build("Interleaved1F1B", 4)
    assert (b.n_stages, b.placement, b.stages_per_rank) == (8, "loop", 2)
    assert torchtitan_build("DualPipeV", 2).placement == "v"
    assert nemo_build("DualPipeV", 2).placement == "loop"  # NeMo builds V only for ZBVZeroBubble
    assert nemo_build("ZBVZeroBubble", 2).placement == "v"


def test_layers_per_stage_rules():
    # torchtitan counts embedding and head as first_less/last_less layers: ceil((8 + 1 + 1) / 5) = 2
    assert torchtitan_build("1F1B", 2, layers=8, layers_per_stage=5).n_stages == 2
    assert torchtitan_build("Interleaved1F1B", 2, layers=6, layers_per_stage=2).n_stages == 4
    with pytest.raises(SchedcError, match="not a multiple of the 2 PP ranks"):
        torchtitan_build("Interleaved1F1B", 2, layers=8, layers_per_stage=2)  # 5 stages
    with pytest.raises(SchedcError, match="exactly 1 stage per rank"):
        torchtitan_build("1F1B", 2, layers=6, layers_per_stage=2)
    with pytest.raises(SchedcError, match="at least 2 stages per rank"):
        torchtitan_build("Interleaved1F1B", 2, layers=6, layers_per_stage=4)
    with pytest.raises(SchedcError, match="exactly 2 per rank"):
        torchtitan_build("ZBVZeroBubble", 2, layers=10, layers_per_stage=2)  # 6 stages in a V
    with pytest.raises(SchedcError, match="give layers as well$"):
        torchtitan_build("1F1B", 2, layers_per_stage=2)
    # NeMo: ceil(layers / K), no embedding weight; rounding to a multiple of pp_size when asked
    assert nemo_build("Interleaved1F1B", 2, layers=8, layers_per_stage=2).n_stages == 4
    with pytest.raises(SchedcError, match="3 stages, not a multiple"):
        nemo_build("Interleaved1F1B", 2, layers=8, layers_per_stage=3)
    assert nemo_build("Interleaved1F1B", 2, layers=8, layers_per_stage=3, round_virtual_stages="up").n_stages == 4
    with pytest.raises(SchedcError, match="exceed the model's 3 layers"):
        nemo_build("Interleaved1F1B", 2, layers=3)


def test_microbatch_rules():
    assert torchtitan_build("1F1B", 2, local_batch_size=8, microbatch_size=2).n_microbatches == 4
    with pytest.raises(SchedcError, match="--training.local_batch_size 7 is not divisible"):
        torchtitan_build("1F1B", 2, local_batch_size=7, microbatch_size=2)
    with pytest.raises(SchedcError, match="step_scheduler.local_batch_size 7 is not divisible"):
        nemo_build("1F1B", 2, local_batch_size=7, microbatch_size=2)
    with pytest.raises(SchedcError, match="fewer than pp_size 4"):
        nemo_build("1F1B", 4, local_batch_size=3)


def test_fitting_csvs_say_so_and_how_to_set_the_batch(csvs):
    r = check_csv_for(csvs["v"], "torchtitan:ZBVZeroBubble")
    assert r.ok and "fits torchtitan:ZBVZeroBubble" in r.message and "local_batch_size to 4" in r.message
    assert check_csv_for(csvs["v"], "torchtitan:DualPipeV", local_batch_size=8, microbatch_size=2).ok
    assert check_csv_for(csvs["loop"], "nemo:interleaved1f1b", layers=8, layers_per_stage=2).ok
    assert check_csv_for(csvs["one"], "nemo:1F1B", local_batch_size=4).ok


def test_mismatches_name_what_would_fit(csvs):
    r = check_csv_for(csvs["v"], "torchtitan:Interleaved1F1B")
    assert not r.ok and "in a V" in r.message and "ZBVZeroBubble or DualPipeV" in r.message
    r = check_csv_for(csvs["v"], "nemo:DualPipeV")
    assert not r.ok and "use distributed.pipeline.pp_schedule ZBVZeroBubble" in r.message
    r = check_csv_for(csvs["one"], "torchtitan:Interleaved1F1B")
    assert not r.ok and "1F1B or GPipe" in r.message
    r = check_csv_for(csvs["one"], "torchtitan:1F1B", local_batch_size=16, microbatch_size=2)
    assert not r.ok and "microbatch_size give 8" in r.message and "--training.local_batch_size to 8" in r.message
    r = check_csv_for(csvs["loop"], "torchtitan:Interleaved1F1B", layers=6, layers_per_stage=4)
    assert not r.ok and "does not start" in r.message and "layers_per_stage 2" in r.message
    r = check_csv_for(csvs["one"], "torchtitan:1F1B", ranks=4)
    assert not r.ok and "pipeline_parallel_degree to 2" in r.message
    assert "no setting first_less" in check_csv_for(csvs["one"], "nemo:1F1B", first_less=2).message


def test_files_torch_would_misread_do_not_fit(tmp_path, csvs):
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + csvs["one"].read_bytes())
    r = check_csv_for(bom, "torchtitan:1F1B")
    assert not r.ok and "byte-order mark" in r.message
    typo = tmp_path / "typo.csv"
    typo.write_text(csvs["one"].read_text().replace("0F1", "0F1x", 1))  # torch would run it as 0F1
    assert not check_csv_for(typo, "torchtitan:1F1B").ok


def test_every_torch_name_is_known():
    pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

    for name, single in SCHEDULE_NAMES.items():
        assert issubclass(get_schedule_class(name), PipelineScheduleSingle) == single, name


def test_cli_validate_for(csvs, capsys):
    assert cli.main(["validate", str(csvs["v"]), "--for", "torchtitan:ZBVZeroBubble", "--local-batch-size", "4"]) == 0
    assert "fits torchtitan:ZBVZeroBubble" in capsys.readouterr().out
    assert cli.main(["validate", str(csvs["v"]), "--for", "torchtitan:Interleaved1F1B"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit" in err and "ZBVZeroBubble" in err
    assert cli.main(["validate", str(csvs["v"]), "--for", "nemo:ZBVZeroBubble", "--mb", "4"]) == 2
    assert "drop --mb" in capsys.readouterr().err


# ---------------------------------------------------------------- the plan's partition

PLANNED = [["tok_embeddings", "layers.0", "layers.1", "layers.2"], ["layers.3", "norm", "lm_head"]]


@pytest.fixture
def planned(tmp_path):
    """A CSV with a plan report beside it naming its partition (as `schedc plan` writes them)."""
    from schedc.io.csvio import write_schedule

    path = tmp_path / "plan.csv"
    write_schedule(make_baseline("1f1b", 2, 4, n_ranks=2), {"partition": PLANNED}, path)
    return path


def _validate(capsys, *args):
    code = cli.main(["validate", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_validate_partition_fails_when_the_csv_was_planned_for_another(planned, tmp_path, capsys):
    import json

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"partition": [PLANNED[0][:-1], ["layers.2"] + PLANNED[1]]}))
    code, text = _validate(capsys, planned, "--partition", other)
    assert code == 2 and "was made for the partition in" in text
    assert f"--partition {planned.with_suffix('.json')}" in text
    three = tmp_path / "three.json"
    three.write_text(json.dumps([["tok_embeddings"], ["layers.0"], ["norm", "lm_head"]]))
    code, text = _validate(capsys, planned, "--partition", three)
    assert code == 2 and "3 stages, but" in text
    code, text = _validate(capsys, planned, "--partition", planned.with_suffix(".json"))
    assert code == 0 and "launched on the partition of" in text and "[4, 3] modules per stage" in text


def test_validate_partition_reads_the_split_a_csv_was_made_for_from_the_costs_beside_it(planned, tmp_path, capsys):
    from schedc.core.costs import Profile, StageCost

    # a hand-made CSV on torchtitan's split, its costs (merged per stage, with module names) beside it
    other = tmp_path / "titan.csv"
    write_csv(make_baseline("zb-h1", 2, 4, n_ranks=2), other)
    cost = dict(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=1.0, weight_grad_bytes=0.5)
    Profile(stages=[StageCost(**cost, modules=["tok_embeddings", "layers.0", "layers.1"]),
                    StageCost(**cost, modules=["layers.2", "layers.3", "norm", "lm_head"])]).save(
        tmp_path / "titan.profile.json")
    code, text = _validate(capsys, other, "--partition", planned.with_suffix(".json"))
    assert code == 2 and "titan.csv was made for the partition in" in text and "titan.profile.json ([3, 4]" in text
    code, text = _validate(capsys, other, "--for", "torchtitan:1F1B")
    assert code == 0 and "torchtitan 0.3.0's own split" in text  # [3, 4] is what torchtitan builds for 4 layers


def test_validate_for_with_a_plan_beside_the_csv_says_to_pass_its_partition(planned, capsys):
    code, text = _validate(capsys, planned, "--for", "torchtitan:1F1B", "--local-batch-size", "4")
    assert code == 2 and text.count("\n") == 1
    assert f"pass --partition {planned.with_suffix('.json')}" in text and "module_fqns_per_model_part" in text
    code, text = _validate(capsys, planned, "--for", "nemo:1F1B", "--partition", planned.with_suffix(".json"),
                           "--local-batch-size", "4")
    assert code == 0 and "fits nemo:1F1B" in text and "launched on the partition" in text


def test_validate_for_accepts_a_plan_whose_partition_is_torchtitans_own_split(tmp_path, capsys):
    from schedc.frameworks.torchtitan import default_partition
    from schedc.io.csvio import write_schedule

    path = tmp_path / "p.csv"
    write_schedule(make_baseline("1f1b", 2, 4, n_ranks=2), {"partition": default_partition(2, 4)}, path)
    code, text = _validate(capsys, path, "--for", "torchtitan:1F1B")
    assert code == 0 and "torchtitan 0.3.0's own split" in text


def test_torchtitans_default_split_is_restated_exactly():
    pp = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
    from schedc.frameworks.torchtitan import default_partition

    for stages, layers in [(1, 3), (2, 4), (4, 6), (8, 28), (16, 32), (8, 32), (3, 7)]:
        theirs = pp._generate_llm_fqn_per_model_part(stages, layers)
        assert default_partition(stages, layers) == theirs, (stages, layers)


def test_plan_refuses_module_names_torchtitan_would_misread_before_searching(tmp_path, capsys):
    from schedc.core.costs import Profile, StageCost

    unit = dict(forward=1.0, backward_input=1.0, backward_weight=1.0, activation_bytes=1.0, weight_grad_bytes=0.5)
    names = [["tok_embeddings"], ["layers.0,layers.1"], ["layers.2"], ["norm", "lm_head"]]
    path = tmp_path / "units.json"
    Profile(stages=[StageCost(**unit, modules=m) for m in names]).save(path)
    out = tmp_path / "plan.csv"
    code = cli.main(["plan", "--profile", str(path), "--ranks", "2", "--mb", "2", "--memory", "none",
                     "--time-limit", "30", "-o", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "stages[1].modules: 'layers.0,layers.1' contains a comma" in err and "two modules" in err
    assert not out.exists()


@pytest.mark.parametrize("content, fragment", [
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ("{\"partition\": 3}", "expected a plan report"),
    ("not json", "not valid JSON"),
])
def test_a_bad_partition_file_is_one_line_naming_the_flag(planned, tmp_path, capsys, content, fragment):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, text = _validate(capsys, planned, "--partition", bad)
    assert code == 2 and text.count("\n") == 1 and text.startswith("schedc validate: error: --partition")
    assert fragment in text and len(text) < 400
