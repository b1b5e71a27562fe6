"""When no partition fits the cap, the error says why (the static bytes no schedule or checkpointing
changes, the share FSDP2 holds unsharded under torch's pipelining) and what would fit, with numbers
that hold when tried."""

import re

import pytest

from schedc.core.cost_model import fits
from schedc.core.partition import Units, min_cap, why_nothing_fits
from schedc.errors import SchedcError
from schedc.model_costs import unit_profile

GiB = 2**30
SHAPE = dict(layers=8, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=4, vocab=4000, reserve_bytes=2**28)


def _profile(**run):
    return unit_profile(**SHAPE, seq=1024, **run)


def _bytes(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(GiB|MiB)", text).groups()
    return float(value) * (GiB if unit == "GiB" else 2**20)


def test_the_error_names_the_static_part_the_fsdp_share_and_remedies_that_fit():
    from schedc.planning.planner import plan

    p = _profile(dp_shard=4)
    need = min_cap(Units.of(p, 8), "loop", 2)[0]
    cap = 0.6 * need
    with pytest.raises(SchedcError) as err:
        plan(profile=p, ranks=2, microbatches=8, memory=f"{cap / GiB:.3f}GiB", placement="loop", time_limit=5)
    text = str(err.value)
    assert "smallest cap that does is" in text and "before any activation" in text
    assert "a larger dp_shard divides only the other" in text and "holds unsharded under torch's pipelining with FSDP2 at dp_shard 4" in text
    tp = int(re.search(r"(?:--tp |tp=)(\d+) \(about [\d.]+[GM]iB\)", text).group(1))
    ranks = int(re.search(r"(?:--ranks |ranks=)(\d+) \(loop, needs", text).group(1))
    # the suggested tensor-parallel degree, counted again, fits; so does the suggested pipeline degree
    assert fits(min_cap(Units.of(_profile(dp_shard=4, tp=tp), 8), "loop", 2)[0], cap)
    assert fits(min_cap(Units.of(p, 8), "loop", ranks)[0], cap)
    assert not fits(min_cap(Units.of(p, 8), "loop", ranks - 1)[0], cap)


def test_checkpointing_is_offered_only_when_the_static_part_fits():
    p = _profile()
    u = Units.of(p, 8)
    need, counts = min_cap(u, "loop", 2)
    static = max(u.seg(u.static, 0, counts[0]), u.seg(u.static, counts[0], u.n)) + u.reserve
    just_over_static = why_nothing_fits(p, u, "loop", 2, (static + need) / 2)
    assert "{name:ac}full" in just_over_static and "cannot help" not in just_over_static
    under_static = why_nothing_fits(p, u, "loop", 2, 0.9 * static)
    assert "{name:ac}" not in under_static and "activation checkpointing cannot help" in under_static
    # the static part it names is the fullest rank's static bytes and reserve
    held = re.search(r"holds ([\d.]+[GM]iB) on its fullest rank", under_static).group(1)
    assert _bytes(held) == pytest.approx(static, rel=0.01)
