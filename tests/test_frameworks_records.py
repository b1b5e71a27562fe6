"""A framework is one record plus one registration: plan, validate --for and the CLI offer it.

The toy framework below is all a new framework brings (its module names, what it builds, its
settings and how they print); nothing else in schedc is edited, and it is registered for one test
and removed after. The torchtitan release tests pin which flag names the hand-off prints.
"""

from __future__ import annotations

import json

import pytest

from schedc import api
from schedc.cli import main
from schedc.core.baselines import make_baseline
from schedc.errors import SchedcError
from schedc.frameworks import REGISTRY, Build, Framework, Handoff, register, unregister
from schedc.frameworks.torchtitan import flag_release, installed_version
from schedc.io.csvio import write_csv
from schedc.model_costs import UNIT_NAMES

SHAPE = {"layers": 4, "hidden": 64, "vocab": 100, "heads": 4}


def _toy_build(schedule: str, n_ranks: int, local_batch_size=None, microbatch_size: int = 1, partition=None) -> Build:
    """The toy builds one stage per rank in a loop, whatever the name."""
    n_microbatches = None if local_batch_size is None else local_batch_size // microbatch_size
    return Build("toy", schedule, n_ranks, partition or n_ranks, "loop", n_microbatches)


def _toy_settings(h: Handoff) -> dict:
    return {"stages": h.partition, "microbatches": h.n_microbatches, "csv": h.csv, "warnings": []}


TOY = Framework(name="toy", label="Toy 1.0", v_names=(), plan_names={"loop": "1F1B", "v": "ZBVZeroBubble"},
                fields={"schedule": "toy.schedule", "local_batch_size": "toy.batch", "microbatch_size": "toy.mbs",
                        "ranks": "toy.ranks", "partition": "toy.stages", "layers_per_stage": "toy.lps"},
                vocabulary="toy", names=("emb", "blocks.{}", ("final_norm", "out")), implementation="torchtitan",
                build=_toy_build, settings=_toy_settings,
                render=lambda s: "Toy 1.0:\n  stages: " + json.dumps(s["stages"]), fsdp=None)


@pytest.fixture
def toy():
    register(TOY)
    try:
        yield TOY
    finally:
        unregister("toy")
    assert "toy" not in REGISTRY and "toy" not in UNIT_NAMES


def test_a_registered_framework_is_counted_planned_and_handed_off(toy, tmp_path):
    profile = api.count_profile(SHAPE, seq=16, framework="toy")
    assert profile.assumes["framework"] == "toy"
    assert [u.modules for u in profile.stages][:2] == [["emb"], ["blocks.0"]]  # in the toy's own names
    out = tmp_path / "plan.csv"
    units = tmp_path / "units.json"
    profile.save(units)
    assert main(["plan", "--profile", str(units), "--for", "toy", "--ranks", "2", "--mb", "4", "--memory", "none",
                 "--placement", "loop", "--time-limit", "2", "-o", str(out), "--quiet"]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    toy_block = report["frameworks"]["toy"]
    assert toy_block["microbatches"] == 4 and sum(map(len, toy_block["stages"])) == 7  # emb, 4 blocks, norm, out
    assert [n for stage in toy_block["stages"] for n in stage][0] == "emb"
    # the other frameworks get the toy's partition translated into their names
    assert report["frameworks"]["torchtitan"]["config"]["parallelism.module_fqns_per_model_part"][0][0] == \
        "tok_embeddings"


def test_validate_for_and_the_cli_help_offer_a_registered_framework(toy, tmp_path, capsys):
    csv = tmp_path / "s.csv"
    write_csv(make_baseline("1f1b", 2, 4), csv)
    assert main(["validate", str(csv), "--for", "toy:1F1B", "--local-batch-size", "4"]) == 0
    assert "fits toy:1F1B" in capsys.readouterr().out
    for command in (["plan", "--help"], ["validate", "--help"], ["profile", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
        assert "toy" in " ".join(capsys.readouterr().out.split())


def test_an_unregistered_framework_is_refused_by_name():
    with pytest.raises(SchedcError, match="--for: 'toy' is not a framework schedc counts for; give one of schedc, "
                                          "torchtitan, nemo"):
        api._check_framework("toy")
    with pytest.raises(SchedcError, match="framework: 'toy' is not a framework"):
        api.count_profile(SHAPE, seq=16, framework="toy")


def test_a_framework_name_is_registered_once(toy):
    with pytest.raises(SchedcError, match="a framework name must be a new lower-case word"):
        register(TOY)


# ---------------------------------------------------------------- torchtitan releases

ASSUMES = {"seq_len": 4096, "microbatch_size": 2, "activation_checkpoint": "full"}


def _titan(**assumes) -> dict:
    h = Handoff(partition=[["tok_embeddings", "layers.0"], ["layers.1", "norm", "lm_head"]], placement="loop",
                n_ranks=2, n_microbatches=8, assumes={**ASSUMES, **assumes})
    return REGISTRY["torchtitan"].settings(h)


def test_the_flags_follow_the_installed_torchtitan():
    s = _titan()
    expected = flag_release(installed_version())
    assert s["release"] == expected
    if expected == "0.3.0":  # what tests/test_handoff_parsers.py parses with 0.3.0's ConfigManager
        assert (s["config"]["parallelism.pipeline_parallel_microbatch_size"], s["config"]["training.local_batch_size"],
                s["config"]["training.seq_len"]) == (2, 16, 4096)


def test_main_counts_a_microbatch_in_tokens():
    # pytorch/torchtitan#4121: a count of microbatches and the token slots of one, not sequences
    s = _titan(framework="torchtitan", framework_version="main")
    c = s["config"]
    assert s["release"] == "main"
    assert (c["parallelism.num_pp_microbatches"], c["training.num_tokens_per_microbatch_per_dp_rank"],
            c["training.max_context_length"]) == (8, 2 * 4096, 4096)
    assert not {"parallelism.pipeline_parallel_microbatch_size", "training.local_batch_size",
                "training.seq_len"} & set(c)
    assert "--parallelism.num_pp_microbatches" in s["command_line"]
    assert "pytorch/torchtitan#4121" in REGISTRY["torchtitan"].render(s).splitlines()[0]
    unknown = _titan(framework="torchtitan", framework_version="main", seq_len=None)
    assert "training.num_tokens_per_microbatch_per_dp_rank" not in unknown["config"]
    assert any("--training.max_context_length" in w for w in unknown["warnings"])


@pytest.mark.parametrize("version, release", [("0.3.0", "0.3.0"), ("0.2.1", "0.3.0"), ("0.3.5rc1", "0.3.0"),
                                              ("0.4.0", "main"), ("1.0", "main"), ("main", "main")])
def test_a_release_number_picks_its_flags(version, release):
    assert flag_release(version) == release


def test_for_names_a_release_through_the_api():
    p = api.count_profile(SHAPE, seq=16, framework="torchtitan==main")
    assert (p.assumes["framework"], p.assumes["framework_version"]) == ("torchtitan", "main")
    assert "framework_version" not in api.with_framework(p, "torchtitan").assumes
    with pytest.raises(SchedcError, match="nemo takes no version"):
        api.count_profile(SHAPE, seq=16, framework="nemo==0.7.0")
    with pytest.raises(SchedcError, match="expected a release number"):
        api.count_profile(SHAPE, seq=16, framework="torchtitan==latest!")


# ---------------------------------------------------------------- what the warnings tell a user to do

def _fsdp_warnings(framework: str, target: str, **assumes) -> list[str]:
    h = Handoff(partition=[["model.embed_tokens", "model.layers.0"], ["model.layers.1", "model.norm", "lm_head"]],
                placement="loop", n_ranks=2, n_microbatches=4,
                assumes={"seq_len": 64, "activation_dtype": "bfloat16", "param_dtype": "bfloat16", "framework": target,
                         **assumes})
    return [w for w in REGISTRY[framework].settings(h)["warnings"] if "wraps every block in FSDP2" in w]


@pytest.mark.parametrize("framework", ["torchtitan", "nemo"])
def test_the_fsdp2_warning_does_not_ask_for_the_flag_the_user_gave(framework):
    other = "nemo" if framework == "torchtitan" else "torchtitan"
    (elsewhere,) = _fsdp_warnings(framework, other)  # planned for another target: plan for this one
    assert f"schedc plan --for {framework};" in elsewhere
    (measured,) = _fsdp_warnings(framework, framework)  # --for given, on a measured profile
    assert f"schedc plan --for {framework};" not in measured
    assert f"--for {framework} only names the target of a measured profile" in measured
    assert f"--config config.json --for {framework}" in measured
    # counted for it, with a gradient dtype it does not reduce in (torchtitan: float32 only)
    if framework == "torchtitan":
        (dtypes,) = _fsdp_warnings(framework, framework, fsdp="counted", fsdp_unsharded_bytes_per_param=4)
        assert "counted for torchtitan with other dtypes" in dtypes and "--grad-dtype" in dtypes


# ---------------------------------------------------------------- a plan a framework cannot launch as planned

def test_a_per_stage_plan_names_the_mode_each_framework_runs_and_the_best_it_can_launch():
    from test_plan import _modes, tiny_units

    from schedc.planning import plan_ac

    res = plan_ac(_modes(tiny_units(n_layers=6, head=1.0)), ranks=2, microbatches=4, memory="11GiB",
                  placement="loop", time_limit=4, budget="work")
    assert isinstance(res.ac.chosen, list)  # per stage: neither framework applies it
    for name, runs in (("torchtitan", "its registered config's own (llama3_8b: selective"), ("nemo", "runs none")):
        f = REGISTRY[name]
        steps = {m: v for m, v in res.ac.global_steps.items() if m in f.ac_modes and v is not None}
        best = min(steps, key=steps.get)
        (warning,) = [w for w in res.report["frameworks"][name]["warnings"] if "differently per stage" in w]
        assert runs in warning, warning
        assert f"the best plan {f.label.split(' 0.')[0]} can launch checkpoints every layer with {best}, step " \
               f"{steps[best]:.6g} s, +{100 * (steps[best] - res.value) / res.value:.1f}% against this plan's" in warning
        assert f"(schedc plan --ac {best})" in warning
