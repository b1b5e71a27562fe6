"""A new user's walk through the light checkpointing mode: `schedc plan` with a light profile,
what it prints beside plan.json, `schedc validate --partition`, and the launch on schedc's
runtime (torchrun, gloo, 2 ranks, a tiny model)."""

from __future__ import annotations

import json
import re

import pytest
from test_plan import _modes, _schedc, tiny_units  # noqa: E402  (the per-unit profiles the plan tests share)
from test_plan_ac import TIGHT, _with_light, train_plan  # noqa: E402

M = 4


def _profiles(tmp, framework=None) -> dict:
    """The tiny model's per-unit profile per mode, each recording the mode it was counted with."""
    out = {}
    for mode, units in _with_light(_modes(tiny_units(n_layers=6, head=1.0))).items():
        assumes = {"activation_checkpoint": mode, **({"framework": framework} if framework else {})}
        out[mode] = units.model_copy(update={"assumes": assumes})
        out[mode].save(tmp / f"{mode}.json")
    return out


def _plan(tmp, *args):
    out = _schedc("plan", *args, "--ranks", "2", "--mb", str(M), "--memory", TIGHT, "--placement", "loop",
                  "--time-limit", "4", "--budget", "work", "--quiet", cwd=tmp)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_per_stage_plan_with_light_prints_what_plan_json_records_and_launches_on_gloo(tmp_path):

    _profiles(tmp_path)
    stdout = _plan(tmp_path, *[a for m in ("none", "light", "selective", "full")
                               for a in ("--profile", f"{m}={m}.json")], "--ac", "auto")
    modes = json.loads((tmp_path / "plan.json").read_text())["assumes"]["activation_checkpoint"]
    assert isinstance(modes, list) and "light" in json.dumps(modes), modes
    # light is listed with the whole-model modes, but torchtitan and NeMo do not launch it
    whole = next(line for line in stdout.splitlines() if "for the whole model (what torchtitan and NeMo" in line)
    assert whole.endswith("(light: schedc's runtime only)"), whole
    assert f"chosen: {json.dumps(modes)}" in stdout
    # the best whole-model mode here is light: torchtitan's classes were compared under it, which it cannot run
    classes = [line for line in stdout.splitlines() if ": torchtitan class " in line]
    assert classes and all(re.match(r"  torchtitan default, (light|selective) AC split", c) for c in classes), classes
    assert "schedc's runtime (per-stage activation checkpointing;" in stdout
    assert "torchrun --nproc-per-node 2 examples/train.py --plan plan.json" in stdout
    out = _schedc("validate", "plan.csv", "--partition", "plan.json", cwd=tmp_path)
    assert out.returncode == 0 and "launched on the partition of plan.json" in out.stdout, out.stderr
    out = _schedc("validate", "plan.csv", "--for", "torchtitan:1F1B", "--partition", "plan.json", cwd=tmp_path)
    assert out.returncode == 0 and "which torchtitan 0.3.0 cannot apply (one mode per run)" in out.stdout, out
    train_plan(tmp_path)


def test_a_light_plan_for_the_whole_model_says_how_schedc_runs_it_and_that_frameworks_cannot(tmp_path):
    _profiles(tmp_path)
    stdout = _plan(tmp_path, "--profile", "light.json", "--ac", "light")
    assert json.loads((tmp_path / "plan.json").read_text())["assumes"]["activation_checkpoint"] == "light"
    # torchtitan's block sets no mode and says why; schedc's runtime is shown instead
    assert "activation_checkpoint:" not in stdout
    assert "the plan checkpoints every layer with 'light', a mode only schedc's runtime applies" in stdout
    assert "schedc's runtime (light activation checkpointing, a mode torchtitan and NeMo do not have):" in stdout
    assert "pipe = load_pipeline('plan.csv', model, loss_fn, device, **plan_settings('plan.json'))" in stdout
    classes = [line for line in stdout.splitlines() if ": torchtitan class " in line]
    assert classes and all(c.startswith("  torchtitan default, light AC split") for c in classes), classes
    out = _schedc("validate", "plan.csv", "--for", "torchtitan:1F1B", "--partition", "plan.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "but the plan checkpoints every layer with 'light', a mode torchtitan 0.3.0 does not have" in out.stdout
    # one of their modes: nothing to say
    (tmp_path / "plan.csv").unlink()
    _plan(tmp_path, "--profile", "selective.json", "--ac", "selective")
    out = _schedc("validate", "plan.csv", "--for", "torchtitan:1F1B", "--partition", "plan.json", cwd=tmp_path)
    assert out.returncode == 0 and "checkpoints" not in out.stdout, out.stdout


def test_auto_for_a_framework_says_the_light_profile_given_was_not_planned_for_the_whole_model(tmp_path):
    from schedc.planning import plan_ac

    profiles = _profiles(tmp_path, framework="torchtitan")
    res = plan_ac({m: profiles[m] for m in ("none", "light")}, ranks=2, microbatches=M, memory="80GiB",
                  placement="loop", time_limit=2, budget="work")
    assert list(res.ac.global_steps) == ["none"]
    assert "activation checkpointing light: not planned for the whole model, torchtitan has no such mode " \
           "(only schedc's runtime)" in res.notes


@pytest.mark.parametrize("given", [("none=light.json", "light=light.json"), ("none=none.json", "light=none.json")])
def test_auto_refuses_a_profile_named_for_a_mode_it_was_not_counted_with(tmp_path, given):
    _profiles(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = _schedc("plan", "--profile", given[0], "--profile", given[1], "--ac", "auto", "--ranks", "2", "--mb",
                  str(M), "--memory", TIGHT, "--time-limit", "2", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "was counted with activation checkpointing" in out.stderr and out.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before
