"""The schedule library: the committed schedules/ pass the no-solve check, tampering is caught
with a message naming the file, a tiny build is reproducible, names round-trip, and the
transformer-like profile adds up."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from schedc.cli.toplevel import main
from schedc.core.baselines import make_baseline
from schedc.core.costs import Profile
from schedc.errors import SchedcError
from schedc.io import csvio
from schedc.library import (
    DEFAULT_SETUPS,
    INDEX_NAME,
    Setup,
    build_library,
    check_library,
    find_library,
    index_markdown,
    load_entries,
    select,
    time_limit_for,
    transformer_profile,
    write_index,
)

REPO_LIBRARY = Path(__file__).resolve().parent.parent / "schedules"

# solved to proven optimality in well under a second each, so a rebuild reproduces them exactly
TINY = [Setup(2, 4, "1p", "loop", "uniform"), Setup(2, 4, "2p", "v", "uniform"),
        Setup(2, 4, "1p", "loop", "transformer")]


@pytest.fixture(scope="module")
def tiny_library(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("lib")
    build_library(directory, TINY, time_limit=5.0)
    return directory


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------- the committed library


def test_committed_library_is_complete_and_consistent():
    """What CI runs: every committed schedule validates, loads in torch, re-simulates to its
    report, all 64 default set-ups are there, and the index is current. No solving."""
    assert any(REPO_LIBRARY.glob("*.csv")), "schedules/ is empty: run `schedc library build schedules/`"
    problems = check_library(REPO_LIBRARY, torch=None, setups=DEFAULT_SETUPS)
    assert problems == []


def test_committed_library_never_loses_to_a_fitting_baseline():
    entries, problems = load_entries(REPO_LIBRARY)
    assert not problems
    for e in entries:
        mk = e.report["predicted"]["makespan"]
        for name, b in e.report["baselines"].items():
            if b["fits"]:
                assert mk <= b["makespan"] * (1 + 1e-9), (e.setup.name, name)
        assert e.report["lower_bound"] <= mk * (1 + 1e-9)


def test_committed_library_looser_memory_is_never_slower():
    entries, _ = load_entries(REPO_LIBRARY)
    by_group = {}
    for e in entries:
        s = e.setup
        by_group.setdefault((s.costs, s.placement, s.ranks, s.mb), {})[s.memory] = e.report["predicted"]["makespan"]
    for group, mk in by_group.items():
        assert mk["2p"] <= mk["1p"] * (1 + 1e-9), group


def test_better_candidate_seeds_the_warm_start_and_misfits_are_ignored():
    from schedc.library import library_warm_start, setup_problem

    problem = setup_problem(Setup(4, 8, "1p", "loop", "transformer"))
    gpipe = make_baseline("gpipe", 4, 8)  # over the 1p limit
    sched, sim, source = library_warm_start(problem, 1.0, candidates=[("library gpipe", gpipe)])
    assert source != "library gpipe" and sim.fits
    # a candidate equal to the warm start does not replace it (ties keep the reproducible choice)
    _, _, again = library_warm_start(problem, 1.0, candidates=[("library same", sched)])
    assert again == source


# ---------------------------------------------------------------- build + check on a tiny library


def test_tiny_build_writes_pairs_and_index(tiny_library):
    for s in TINY:
        csv_path = tiny_library / f"{s.name}.csv"
        assert csv_path.is_file() and csvio.report_path(csv_path).is_file()
        rep = csvio.read_report(csv_path)
        assert rep["library"]["setup"] == s.name
        assert rep["inputs"]["ranks"] == s.ranks and rep["inputs"]["microbatches"] == s.mb
        assert rep["status"] == "optimal"
    index = (tiny_library / INDEX_NAME).read_text()
    assert index == index_markdown(tiny_library)
    for s in TINY:
        assert f"[{s.name}]({s.name}.csv)" in index
    assert "schedc library build" in index and "solve_time" not in index
    assert check_library(tiny_library, torch=None, setups=TINY) == []


def test_rebuild_reproduces_the_same_files(tiny_library, tmp_path):
    build_library(tmp_path, TINY, time_limit=5.0)
    for s in TINY:
        assert (tmp_path / f"{s.name}.csv").read_text() == (tiny_library / f"{s.name}.csv").read_text()
    assert (tmp_path / INDEX_NAME).read_text() == (tiny_library / INDEX_NAME).read_text()


def test_tampered_csv_cell_is_caught(tiny_library, tmp_path):
    lib = _copy(tiny_library, tmp_path / "lib")
    csv_path = lib / f"{TINY[0].name}.csv"
    rows = [line.split(",") for line in csv_path.read_text().splitlines()]
    first = next(i for i, c in enumerate(rows[0]) if c)
    second = next(i for i, c in enumerate(rows[0]) if c and i > first)
    rows[0][second] = rows[0][first]  # the same action twice, one missing
    csv_path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    problems = check_library(lib, torch=False)
    assert any(str(csv_path) in p and "appears twice" in p for p in problems), problems


def test_reordered_csv_is_caught_by_resimulation(tiny_library, tmp_path):
    lib = _copy(tiny_library, tmp_path / "lib")
    csv_path = lib / f"{TINY[0].name}.csv"
    # a valid but slower schedule for the same set-up: 1F1B instead of the compiled one
    csvio.write_csv(make_baseline("1f1b", 2, 4), csv_path)
    problems = check_library(lib, torch=False)
    assert any("re-simulated makespan 15 differs from the report's 13" in p and csv_path.name in p
               for p in problems), problems


def test_tampered_report_makespan_is_caught(tiny_library, tmp_path):
    lib = _copy(tiny_library, tmp_path / "lib")
    csv_path = lib / f"{TINY[1].name}.csv"
    rep = csvio.read_report(csv_path)
    rep["predicted"]["makespan"] += 1.0
    csvio.write_report(rep, csv_path)
    problems = check_library(lib, torch=False)
    assert any("re-simulated makespan" in p and "differs from the report's" in p and csv_path.name in p
               for p in problems), problems
    # the index was rendered from the old report, so it is stale too
    assert any(INDEX_NAME in p and "out of date" in p for p in problems), problems


def test_tampered_index_row_is_caught(tiny_library, tmp_path):
    lib = _copy(tiny_library, tmp_path / "lib")
    index = lib / INDEX_NAME
    text = index.read_text().replace("| optimal |", "| feasible (gap 1.00%) |", 1)
    index.write_text(text)
    problems = check_library(lib, torch=False)
    assert len(problems) == 1 and "README.md: line" in problems[0] and "--index-only" in problems[0], problems
    write_index(lib)
    assert check_library(lib, torch=False) == []


def test_report_not_matching_its_name_is_caught(tiny_library, tmp_path):
    lib = _copy(tiny_library, tmp_path / "lib")
    src = lib / f"{TINY[0].name}.csv"
    wrong = "r2_mb8_mem1p_loop_uniform"
    src.rename(lib / f"{wrong}.csv")
    csvio.report_path(src).rename(lib / f"{wrong}.json")
    write_index(lib)
    problems = check_library(lib, torch=False)
    assert any("inputs.microbatches is 4" in p and wrong in p for p in problems), problems


def test_changed_costs_and_missing_files_are_caught(tiny_library, tmp_path):
    lib = _copy(tiny_library, tmp_path / "lib")
    csv_path = lib / f"{TINY[2].name}.csv"
    rep = csvio.read_report(csv_path)
    rep["inputs"]["costs"]["stages"][0]["forward"] *= 2
    csvio.write_report(rep, csv_path)
    (lib / f"{TINY[0].name}.csv").unlink()  # leaves an orphan report
    problems = check_library(lib, torch=False, setups=TINY)
    assert any("inputs.costs differ" in p for p in problems), problems
    assert any("a report without its schedule" in p for p in problems), problems
    assert any("missing" in p and TINY[0].name in p for p in problems), problems


def test_torch_check_runs_when_torch_is_installed(tiny_library):
    pytest.importorskip("torch")
    assert check_library(tiny_library, torch=True) == []


# ---------------------------------------------------------------- CLI


def test_cli_list_show_check(tiny_library, tmp_path, capsys):
    assert main(["library", "list", "--dir", str(tiny_library), "--placement", "v"]) == 0
    out = capsys.readouterr().out
    assert TINY[1].name in out and TINY[0].name not in out and "1 of 3 schedules" in out
    assert main(["library", "show", TINY[2].name, "--dir", str(tiny_library)]) == 0
    out = capsys.readouterr().out
    assert str(tiny_library / f"{TINY[2].name}.csv") in out and "makespan" in out and "zb-h1" in out
    prof = tmp_path / "p.json"
    assert main(["library", "show", TINY[2].name, "--dir", str(tiny_library), "--write-profile", str(prof)]) == 0
    assert Profile.load(prof) == TINY[2].profile()
    capsys.readouterr()
    assert main(["library", "show", "r2_mb4_mem1p_loop_unifrom", "--dir", str(tiny_library)]) == 2
    assert "did you mean r2_mb4_mem1p_loop_uniform" in capsys.readouterr().err
    assert main(["library", "check", str(tiny_library), "--no-torch"]) == 0
    lib = _copy(tiny_library, tmp_path / "lib")
    (lib / INDEX_NAME).write_text("stale\n")
    assert main(["library", "check", str(lib), "--no-torch"]) == 1
    assert "README.md: line 1 is out of date" in capsys.readouterr().out


def test_cli_build_only_and_index_only(tmp_path, capsys):
    assert main(["library", "build", str(tmp_path), "--only", "r2_mb4_mem1p_loop_uniform", "--time-limit", "2"]) == 0
    assert [p.name for p in sorted(tmp_path.glob("*.csv"))] == ["r2_mb4_mem1p_loop_uniform.csv"]
    (tmp_path / INDEX_NAME).unlink()
    assert main(["library", "build", str(tmp_path), "--index-only"]) == 0
    assert check_library(tmp_path, torch=False) == []
    assert main(["library", "build", str(tmp_path), "--only", "r3_*"]) == 2
    assert "matches no set-up" in capsys.readouterr().err


def test_find_library_order(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDC_LIBRARY", str(tmp_path))
    assert find_library() == tmp_path
    other = tmp_path / "other"
    other.mkdir()
    assert find_library(other) == other
    with pytest.raises(SchedcError, match="no such"):
        find_library(tmp_path / "missing")
    monkeypatch.delenv("SCHEDC_LIBRARY")
    assert find_library() == REPO_LIBRARY


# ---------------------------------------------------------------- names and set-ups


def test_default_setups_and_names_round_trip():
    names = [s.name for s in DEFAULT_SETUPS]
    assert len(names) == 64 == len(set(names))
    assert "r8_mb16_mem1p_v_uniform" in names and "r16_mb64_mem2p_loop_transformer" in names
    for s in DEFAULT_SETUPS:
        assert Setup.parse(s.name) == s and Setup.parse(s.name + ".csv") == s
    s = Setup.parse("r8_mb16_mem1p_v_uniform")
    assert (s.ranks, s.mb, s.memory, s.placement, s.costs, s.stages) == (8, 16, "1p", "v", "uniform", 16)
    assert Setup(4, 8, "1.5p").name == "r4_mb8_mem1.5p_loop_uniform"
    for bad in ("r8_mb16_mem1p_v", "r8_mb16_1p_v_uniform", "r8_mb16_mem1p_zigzag_uniform", "r08_mb16_mem1p_v_uniform"):
        with pytest.raises(SchedcError):
            Setup.parse(bad)
    with pytest.raises(SchedcError, match="Kp"):
        Setup(4, 8, "40GiB")
    assert [x.name for x in select(DEFAULT_SETUPS, "r2_*_v_uniform")] == [
        "r2_mb4_mem1p_v_uniform", "r2_mb4_mem2p_v_uniform", "r2_mb8_mem1p_v_uniform", "r2_mb8_mem2p_v_uniform"]


def test_time_limits_scale_with_size_within_a_laptop_budget():
    limits = [time_limit_for(s) for s in DEFAULT_SETUPS]
    assert min(limits) >= 2.0 and max(limits) == time_limit_for(Setup(16, 64, "1p", "v", "transformer"))
    assert sum(limits) <= 15 * 60
    assert time_limit_for(Setup(2, 4)) < time_limit_for(Setup(8, 32))


# ---------------------------------------------------------------- the transformer-like profile


def test_transformer_profile_is_sane():
    n = 8
    p = transformer_profile(n)
    Profile.model_validate(p.model_dump())  # a valid schedc.profile/v1
    fw = [c.forward for c in p.stages]
    assert fw[-1] == max(fw) and fw[-1] > 1.3 * fw[1]
    assert all(fw[i] == pytest.approx(fw[1]) for i in range(n - 1))
    mid = p.stages[1]
    assert mid.backward_input == pytest.approx(8 / 7 * mid.forward)  # (24+8)/(24+4) with s = h
    assert mid.backward_weight == pytest.approx(6 / 7 * mid.forward)
    assert mid.weight_grad_bytes == mid.activation_bytes  # torch's split backward holds it all until W
    assert transformer_profile(n, held="paper").stages[1].weight_grad_bytes == pytest.approx(32 / 34 * mid.activation_bytes)
    # totals: 32 layers of 28 s h^2 FLOPs (s = h = 4096) + the LM head 2 s h V, at 400 TFLOP/s
    s = h = 4096
    total = 32 * 28 * s * h * h + 2 * s * h * 128256
    assert sum(fw) == pytest.approx(total / 400e12)
    assert sum(c.activation_bytes for c in p.stages) == pytest.approx(32 * 34 * s * h + 6 * s * 128256 + 4 * s * h)
    params = 32 * 12 * h * h + 2 * 128256 * h
    assert sum(c.static_bytes for c in p.stages) == pytest.approx(18 * params)
    assert p.comm == pytest.approx(2 * s * h / 40e9)
    # uneven splits: the first stages take the extra layers, the last stays heaviest
    q = transformer_profile(5, layers=12)
    assert "layers per stage [3, 3, 2, 2, 2]" in q.model
    with pytest.raises(SchedcError, match="layers"):
        transformer_profile(40)


def test_setup_profiles():
    assert Setup(4, 8, placement="v").profile().n_stages == 8
    u = Setup(4, 8).profile()
    assert u.stages[0].forward == u.stages[0].backward_input == u.stages[0].backward_weight == 1.0
    t = Setup(4, 8, costs="transformer").profile()
    assert t == transformer_profile(4)
