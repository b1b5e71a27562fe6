"""A GPU's name as the memory cap (its total as CUDA reports it, not its nominal size), and the
warning a plan gets when it peaks closer to its cap than the stated margin."""

import pytest

from schedc.core.costs import MemoryLimit
from schedc.core.devices import DEVICES, margin_warning, thin_margin
from schedc.errors import SchedcError

GiB = 2**30


@pytest.mark.parametrize("name, total", [("h100", 85_029_158_912), ("H100-80GB", 85_029_158_912),
                                         ("h200", 139.715 * GiB), ("a100-40gb", 39.375 * GiB)])
def test_a_gpus_name_is_its_reported_total(name, total):
    cap = MemoryLimit.parse(name)
    assert cap.kind == "bytes" and cap.value == pytest.approx(total, abs=1)
    assert cap.value < 80 * GiB or name == "h200"  # an "80 GB" H100 gives a process less than 80GiB


def test_every_card_says_where_its_number_comes_from_and_is_below_its_nominal_size():
    # the sizes the cards are sold by, read as GiB: the runtime reports less to a process
    nominal = {"h100-80gb": 80, "h200": 141, "b200": 192, "a100-80gb": 80, "a100-40gb": 40, "mi300x": 192}
    assert set(DEVICES) == set(nominal)
    for name, card in DEVICES.items():
        assert card.source and card.total_bytes == int(card.total_bytes)
        assert 0.9 * nominal[name] * GiB < card.total_bytes < nominal[name] * GiB


def test_an_ambiguous_or_unknown_name_is_one_line_naming_the_flag():
    with pytest.raises(SchedcError, match=r"^--memory: a100 is two cards; give --memory a100-80gb or --memory "
                                          r"a100-40gb$"):
        MemoryLimit.parse("a100")
    with pytest.raises(SchedcError, match=r"a GPU \(h100-80gb, h200, .*got 'rtx9090'"):
        MemoryLimit.parse("rtx9090")


def test_the_margin_is_the_larger_of_512mib_and_one_percent_of_the_cap():
    assert thin_margin(20 * GiB) == 512 * 2**20 and thin_margin(100 * GiB) == pytest.approx(1 * GiB)
    cap = 80 * GiB
    assert margin_warning([cap - 53 * 2**20, cap - 10 * GiB], [cap, cap]).startswith("rank 0 peaks 53.00MiB under")
    assert margin_warning([cap - 1 * GiB], [cap]) is None
    assert margin_warning([cap], [float("inf")]) is None


def test_a_plan_that_peaks_within_the_margin_prints_the_warning(tmp_path, capsys):
    from schedc.cli import toplevel as cli
    from schedc.core.partition import Units, min_cap
    from schedc.model_costs import unit_profile

    profile = unit_profile(layers=4, hidden=512, ffn_hidden=2048, heads=8, vocab=8000, seq=512, reserve_bytes=0)
    profile.save(tmp_path / "units.json")
    need = min_cap(Units.of(profile, 4), "loop", 2)[0]  # every plan's busiest rank needs at least this
    args = ["plan", "--profile", str(tmp_path / "units.json"), "--ranks", "2", "--mb", "4", "--placement", "loop",
            "--time-limit", "3", "--budget", "work", "--quiet", "-o", str(tmp_path / "plan.csv")]
    assert cli.main(args + ["--memory", f"{(need + 100 * 2**20) / GiB:.4f}GiB"]) == 0
    out = capsys.readouterr().out
    assert "warning: rank" in out and "the plan may stop on out-of-memory" in out
    assert cli.main(args + ["--memory", f"{(need + 4 * GiB) / GiB:.4f}GiB"]) == 0
    assert "warning: rank" not in capsys.readouterr().out
