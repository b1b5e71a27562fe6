"""`schedc compile` takes one profile entry per stage; a per-unit profile (the embedding, each layer,
the head, each naming its modules) is `schedc plan`'s input, which groups units into stages. Given
one, compile says so and what to run, rather than "give --stages N" (one stage per layer)."""

from schedc import cli
from schedc.core.costs import Profile, StageCost

_UNIT = dict(forward=0.01, backward_input=0.01, backward_weight=0.005, activation_bytes=1e6, static_bytes=1e8)
MODULES = [["tok_embeddings"], ["layers.0"], ["layers.1"], ["layers.2"], ["layers.3"], ["norm", "lm_head"]]


def _units(path, modules=MODULES):
    Profile(stages=[StageCost(**_UNIT, modules=m) for m in modules], model="units").save(path)
    return path


def test_a_per_unit_profile_is_pointed_at_schedc_plan(tmp_path, capsys):
    units = _units(tmp_path / "units.json")
    out = tmp_path / "s.csv"
    assert cli.main(["compile", "--stages", "2", "--mb", "8", "--profile", str(units), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and not out.exists()
    err = captured.err
    assert err.startswith(f"schedc compile: error: --profile {units} has 6 entries naming their modules "
                          "(a per-unit profile), but --stages is 2")
    assert f"schedc plan --profile {units} --ranks 2 --mb 8 --memory SIZE" in err
    assert "give --stages 6" not in err
    # with a byte cap and a V placement, the suggestion carries them
    assert cli.main(["compile", "--stages", "4", "--placement", "v", "--mb", "8", "--memory", "40GiB",
                     "--profile", str(units), "-o", str(out)]) == 2
    assert f"schedc plan --profile {units} --ranks 2 --mb 8 --memory 40GiB" in capsys.readouterr().err


def test_a_stage_profile_of_another_count_keeps_its_own_advice(tmp_path, capsys):
    three = tmp_path / "three.json"
    Profile(stages=[StageCost(**_UNIT)] * 3).save(three)  # no modules: another split's stages
    assert cli.main(["compile", "--stages", "2", "--mb", "8", "--profile", str(three), "-o",
                     str(tmp_path / "s.csv")]) == 2
    assert "give --stages 3, or a profile of 2 stages" in capsys.readouterr().err
